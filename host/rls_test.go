package host_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/coordhost/coordhost/host"
	"github.com/coordhost/coordhost/internal/redistest"
)

const rlsExtra = `
envoy_rate_limit "edge" {
  descriptor {
    entries    = [{ key = "remote_address" }]
    rate_limit = "x"
  }
  descriptor {
    entries    = [{ key = "generic_key", value = "login" }]
    rate_limit = "login"
  }
}
`

func desc(kv ...string) *rlcommon.RateLimitDescriptor {
	d := &rlcommon.RateLimitDescriptor{}
	for i := 0; i < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// The Envoy rate-limit service answers go-control-plane's grpc-go client,
// a Connect JSON POST and grpc's health client on one h2c port.
func TestRLS(t *testing.T) {
	s := redistest.Start(t)
	h := newHost(t, rateLimitConfig(t, s.Addr, 3, rlsExtra))
	srv := httptest.NewUnstartedServer(h.Handler())
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	defer srv.Close()
	conn, err := grpc.NewClient(strings.TrimPrefix(srv.URL, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := rlsv3.NewRateLimitServiceClient(conn)

	hr, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: host.RLSService})
	if err != nil || hr.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", hr, err)
	}

	// Bad requests write nothing.
	for _, bad := range []struct {
		req  *rlsv3.RateLimitRequest
		frag string
	}{
		{&rlsv3.RateLimitRequest{Descriptors: []*rlcommon.RateLimitDescriptor{desc("remote_address", "a")}}, "domain"},
		{&rlsv3.RateLimitRequest{Domain: "edge"}, "descriptors"},
		{&rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{desc("remote_address", "a"), {}}}, "descriptors[1].entries"},
		{&rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{desc("remote_address", "a"), desc("", "v")}}, "descriptors[1].entries[0].key"},
		{&rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: desc("remote_address", "a").Entries, HitsAddend: wrapperspb.UInt64(1 << 62)}}}, "descriptors[0].hits_addend"},
		{&rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: desc("remote_address", "a").Entries, IsNegativeHits: true}}}, "is_negative_hits"},
		{&rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{desc("remote_address", strings.Repeat("v", 2000))}}, "partition key"},
	} {
		_, err := c.ShouldRateLimit(ctx, bad.req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), bad.frag) {
			t.Errorf("%v: %v, want InvalidArgument naming %s", bad.req, err, bad.frag)
		}
	}
	if n := s.MustCmd(t, "DBSIZE"); n != "0" {
		t.Fatalf("DBSIZE %s after bad requests", n)
	}

	ip := desc("remote_address", "10.0.0.1")
	r, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{ip, desc("path", "/")}})
	if err != nil {
		t.Fatal(err)
	}
	st := r.Statuses[0]
	if r.OverallCode != rlsv3.RateLimitResponse_OK || len(r.Statuses) != 2 || st.Code != rlsv3.RateLimitResponse_OK ||
		st.CurrentLimit.RequestsPerUnit != 1 || st.CurrentLimit.Unit != rlsv3.RateLimitResponse_RateLimit_HOUR || st.CurrentLimit.UnitMultiplier != nil ||
		st.LimitRemaining != 0 || st.DurationUntilReset.AsDuration() <= 0 || st.DurationUntilReset.AsDuration() > time.Hour+time.Second ||
		r.Statuses[1].Code != rlsv3.RateLimitResponse_OK || r.Statuses[1].CurrentLimit != nil {
		t.Fatalf("first: %v", r)
	}
	// The key: the Envoy key space, the algorithm, name "/" partition key.
	if n := s.MustCmd(t, "EXISTS", "m:coordhost:ratelimit:envoy:fixed_window:x/edge/remote_address=10.0.0.1"); n != "1" {
		t.Fatalf("key missing: %s", s.MustCmd(t, "KEYS", "*"))
	}
	// x is over for this address; another address is a partition of its own,
	// and one over makes the whole answer OVER_LIMIT.
	r, err = c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{desc("remote_address", "10.0.0.2"), ip}})
	if err != nil {
		t.Fatal(err)
	}
	if r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || r.Statuses[0].Code != rlsv3.RateLimitResponse_OK || r.Statuses[1].Code != rlsv3.RateLimitResponse_OVER_LIMIT ||
		r.Statuses[1].DurationUntilReset.AsDuration() <= 0 {
		t.Fatalf("second: %v", r)
	}
	// hits_addend: login allows 3 per hour; 2 then 2 is over.
	login := desc("generic_key", "login")
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		r, err = c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 2, Descriptors: []*rlcommon.RateLimitDescriptor{login}})
		if err != nil || r.OverallCode != want || r.Statuses[0].LimitRemaining != 1 {
			t.Fatalf("login %d: %v %v", i, r, err)
		}
	}
	// Connect JSON over HTTP/1.1.
	resp, err := http.Post(srv.URL+host.RLSProcedure, "application/json",
		strings.NewReader(`{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"10.0.0.3"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	var body bytes.Buffer
	_, _ = body.ReadFrom(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(body.String(), `"overallCode":"OK"`) || !strings.Contains(body.String(), `"unit":"HOUR"`) {
		t.Fatalf("Connect JSON: %d %s", resp.StatusCode, body.String())
	}
	// Unknown domain: allowed, counted.
	r, err = c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "nope", Descriptors: []*rlcommon.RateLimitDescriptor{ip}})
	if err != nil || r.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("unknown domain: %v %v", r, err)
	}
	mresp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var metrics bytes.Buffer
	_, _ = metrics.ReadFrom(mresp.Body)
	mresp.Body.Close()
	for _, line := range []string{
		`coordhost_rls_unknown_descriptors_total{domain="edge"} 1`,
		`coordhost_rls_unknown_descriptors_total{domain=""} 1`,
		`coordhost_rls_decisions_total{domain="edge",outcome="invalid"} 6`,
		`coordhost_rls_decisions_total{domain="",outcome="invalid"} 1`,
		`coordhost_rls_decisions_total{domain="edge",outcome="over_limit"} 2`,
		`coordhost_rls_decisions_total{domain="edge",outcome="ok"} 3`,
	} {
		if !strings.Contains(metrics.String(), line) {
			t.Errorf("metrics lack %s", line)
		}
	}
}
