package host_test

// Hostile tests of the Envoy rate-limit service (host/rls.go); the bugs
// they found (FINDING n below) are fixed.

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/coordhost/coordhost/host"
	"github.com/coordhost/coordhost/internal/redistest"
)

const rlsHostileExtra = `
rate_limit "f90" {
  algorithm = "fixed_window"
  limit     = 2
  window    = "90s"
}
rate_limit "f1500" {
  algorithm = "fixed_window"
  limit     = 2
  window    = "1500ms"
}
rate_limit "big" {
  algorithm = "fixed_window"
  limit     = 1000000
  window    = "1h"
}
envoy_rate_limit "edge" {
  descriptor {
    entries    = [{ key = "remote_address" }]
    rate_limit = "x"
  }
  descriptor {
    entries    = [{ key = "generic_key", value = "login" }]
    rate_limit = "login"
  }
  descriptor {
    entries    = [{ key = "a" }, { key = "b" }]
    rate_limit = "big"
  }
  descriptor {
    entries    = [{ key = "sliding" }]
    rate_limit = "api"
  }
  descriptor {
    entries    = [{ key = "bucket" }]
    rate_limit = "burst"
  }
  descriptor {
    entries    = [{ key = "f90" }]
    rate_limit = "f90"
  }
  descriptor {
    entries    = [{ key = "f1500" }]
    rate_limit = "f1500"
  }
}
envoy_rate_limit "odd" {
  domain = "e dge&a=b/c%2F"
  descriptor {
    entries    = [{ key = "a" }, { key = "b" }]
    rate_limit = "big"
  }
}
envoy_rate_limit "odd2" {
  domain = "e+dge"
  descriptor {
    entries    = [{ key = "a" }, { key = "b" }]
    rate_limit = "big"
  }
}
`

type rlsRig struct {
	s    *redistest.Server
	h    *host.Host
	srv  *httptest.Server
	c    rlsv3.RateLimitServiceClient
	conn *grpc.ClientConn
	path string
}

func startRLSRig(t *testing.T) *rlsRig {
	t.Helper()
	s := redistest.Start(t)
	path := rateLimitConfig(t, s.Addr, 3, rlsHostileExtra)
	h := newHost(t, path)
	srv := httptest.NewUnstartedServer(h.Handler())
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	conn, err := grpc.NewClient(strings.TrimPrefix(srv.URL, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &rlsRig{s: s, h: h, srv: srv, c: rlsv3.NewRateLimitServiceClient(conn), conn: conn, path: path}
}

func (r *rlsRig) dbsize(t *testing.T) string { t.Helper(); return r.s.MustCmd(t, "DBSIZE") }

func rlsReq(domain string, ds ...*rlcommon.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds}
}

func withHits(d *rlcommon.RateLimitDescriptor, n uint64) *rlcommon.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Requests refused as a whole write nothing, whatever their size or shape.
func TestRLSHostileBadRequestsWriteNothing(t *testing.T) {
	r := startRLSRig(t)
	ctx := testCtx(t)
	many := make([]*rlcommon.RateLimitDescriptor, host.MaxRLSDescriptors+1)
	for i := range many {
		many[i] = desc("remote_address", fmt.Sprint(i))
	}
	longKey := desc("remote_address", "ok")
	longKey.Entries = append(longKey.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: strings.Repeat("k", 40000), Value: "v"})
	for _, bad := range []struct {
		name string
		req  *rlsv3.RateLimitRequest
		code codes.Code
	}{
		{"65 descriptors", rlsReq("edge", many...), codes.InvalidArgument},
		{"negative hits after a good one", rlsReq("edge", desc("remote_address", "a"), &rlcommon.RateLimitDescriptor{Entries: desc("remote_address", "b").Entries, IsNegativeHits: true}), codes.InvalidArgument},
		{"hits MaxUint64", rlsReq("edge", desc("remote_address", "a"), withHits(desc("remote_address", "b"), ^uint64(0))), codes.InvalidArgument},
		{"hits MaxRateLimit+1", rlsReq("edge", withHits(desc("remote_address", "b"), 1_000_000_000_000_001)), codes.InvalidArgument},
		// hits_addend on an unknown descriptor is still checked.
		{"hits huge on unknown", rlsReq("edge", desc("remote_address", "a"), withHits(desc("nope", "b"), ^uint64(0))), codes.InvalidArgument},
		{"empty key on unknown domain", rlsReq("nope", desc("", "b")), codes.InvalidArgument},
		{"over 64KiB", rlsReq("edge", desc("remote_address", strings.Repeat("v", 70<<10))), codes.ResourceExhausted},
		{"partition key too long", rlsReq("edge", desc("remote_address", "ok"), desc("a", strings.Repeat("x", 600), "b", strings.Repeat("y", 600))), codes.InvalidArgument},
	} {
		_, err := r.c.ShouldRateLimit(ctx, bad.req)
		if status.Code(err) != bad.code {
			t.Errorf("%s: %v, want %v", bad.name, err, bad.code)
		}
	}
	// A descriptor of 2 entries, the first 40000 bytes: no block has such
	// a key, so it is unknown (allowed) and the other descriptor decides.
	if res, err := r.c.ShouldRateLimit(ctx, rlsReq("edge", longKey)); err != nil || res.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Errorf("long unknown key: %v %v", res, err)
	}
	if n := r.dbsize(t); n != "0" {
		t.Fatalf("DBSIZE %s after bad requests: %s", n, r.s.MustCmd(t, "KEYS", "*"))
	}
}

// A gzip bomb (small on the wire, far over MaxRLSRequestBytes inflated)
// is refused before it is decoded, and writes nothing.
func TestRLSHostileGzipBomb(t *testing.T) {
	r := startRLSRig(t)
	msg, _ := proto.Marshal(rlsReq("edge", desc("remote_address", strings.Repeat("v", 8<<20))))
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	_, _ = zw.Write(msg)
	_ = zw.Close()
	req, _ := http.NewRequest("POST", r.srv.URL+host.RLSProcedure, bytes.NewReader(z.Bytes()))
	req.Header.Set("Content-Type", "application/proto")
	req.Header.Set("Content-Encoding", "gzip")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode == 200 || !strings.Contains(string(body), "resource_exhausted") {
		t.Fatalf("gzip bomb: %d %s", resp.StatusCode, body)
	}
	if n := r.dbsize(t); n != "0" {
		t.Fatalf("DBSIZE %s", n)
	}
}

// Invalid UTF-8 in a string field (proto3 strings must be UTF-8), sent as
// raw Connect protobuf since grpc-go refuses to marshal it: refused as
// invalid, nothing written.
func TestRLSHostileInvalidUTF8(t *testing.T) {
	r := startRLSRig(t)
	var entry, d, m []byte
	entry = protowire.AppendTag(entry, 1, protowire.BytesType)
	entry = protowire.AppendString(entry, "remote_address")
	entry = protowire.AppendTag(entry, 2, protowire.BytesType)
	entry = protowire.AppendBytes(entry, []byte{0xff, 0xfe, 'a'})
	d = protowire.AppendTag(d, 1, protowire.BytesType)
	d = protowire.AppendBytes(d, entry)
	m = protowire.AppendTag(m, 1, protowire.BytesType)
	m = protowire.AppendString(m, "edge")
	m = protowire.AppendTag(m, 2, protowire.BytesType)
	m = protowire.AppendBytes(m, d)
	resp, err := http.Post(r.srv.URL+host.RLSProcedure, "application/proto", bytes.NewReader(m))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(body), "invalid_argument") {
		t.Fatalf("invalid UTF-8: %d %s", resp.StatusCode, body)
	}
	if n := r.dbsize(t); n != "0" {
		t.Fatalf("DBSIZE %s", n)
	}
}

// Wrong content types, GET, and gRPC over HTTP/1.1 are refused without a
// write.
func TestRLSHostileTransport(t *testing.T) {
	r := startRLSRig(t)
	body := `{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"1"}]}]}`
	for _, c := range []struct {
		method, ctype, body string
	}{
		{"POST", "text/plain", body},
		{"POST", "application/x-www-form-urlencoded", body},
		{"POST", "application/json; charset=latin1", body},
		{"POST", "application/json", `{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":1}]}]}`},
		{"POST", "application/json", `{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"1"}],"hitsAddend":"-1"}]}`},
		{"POST", "application/json", `{"domain":"edge","hitsAddend":4294967296,"descriptors":[{"entries":[{"key":"remote_address","value":"1"}]}]}`},
		{"GET", "", ""},
		// gRPC framing over HTTP/1.1: the gRPC protocol needs HTTP/2.
		{"POST", "application/grpc", "\x00\x00\x00\x00\x00"},
		{"POST", "application/grpc+proto", "\x00\x00\x00\x00\x00"},
	} {
		req, _ := http.NewRequest(c.method, r.srv.URL+host.RLSProcedure, strings.NewReader(c.body))
		if c.ctype != "" {
			req.Header.Set("Content-Type", c.ctype)
		}
		req.Header.Set("TE", "trailers")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%v: %v", c, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		ok := resp.StatusCode != 200 || (resp.Trailer.Get("Grpc-Status") != "" && resp.Trailer.Get("Grpc-Status") != "0") ||
			(resp.Header.Get("Grpc-Status") != "" && resp.Header.Get("Grpc-Status") != "0")
		if !ok {
			t.Errorf("%s %s %q: %d %s (accepted)", c.method, c.ctype, c.body, resp.StatusCode, b)
		}
	}
	if n := r.dbsize(t); n != "0" {
		t.Fatalf("DBSIZE %s: %s", n, r.s.MustCmd(t, "KEYS", "*"))
	}
}

// Values chosen to collide if escaping were lax ('&', '=', '/', '%',
// '+', space, empty, binary-ish UTF-8) each get a Redis key of their own,
// and the odd domains keep their partitions apart from edge's.
func TestRLSHostilePartitionInjection(t *testing.T) {
	r := startRLSRig(t)
	ctx := testCtx(t)
	pairs := [][2]string{
		{"x&b=y", "z"}, {"x", "y&b=z"}, {"x&b", "y"}, {"x", "b=y"},
		{"x=", "y"}, {"x", "=y"}, {"x/", "y"}, {"x", "/y"},
		{"x y", "z"}, {"x+y", "z"}, {"x%20y", "z"}, {"x%2By", "z"},
		{"", ""}, {"", "&"}, {"&", ""}, {"\x00", "\x01"}, {"é", "\u202e"},
		{"x%26b%3Dy", "z"},
	}
	domains := []string{"edge", "e dge&a=b/c%2F", "e+dge"}
	for _, dom := range domains {
		for _, p := range pairs {
			res, err := r.c.ShouldRateLimit(ctx, rlsReq(dom, desc("a", p[0], "b", p[1])))
			if err != nil || res.OverallCode != rlsv3.RateLimitResponse_OK || res.Statuses[0].LimitRemaining != 999999 {
				t.Fatalf("%q %q: %v %v (a shared partition?)", dom, p, res, err)
			}
		}
	}
	if n, want := r.dbsize(t), fmt.Sprint(len(pairs)*len(domains)); n != want {
		t.Fatalf("DBSIZE %s, want %s: %s", n, want, r.s.MustCmd(t, "KEYS", "*"))
	}
	// A request for edge can never reach the "e dge&a=b/c%2F" key space:
	// the same entries decide again in their own partition.
	res, err := r.c.ShouldRateLimit(ctx, rlsReq("edge", desc("a", "x&b=y", "b", "z")))
	if err != nil || res.Statuses[0].LimitRemaining != 999998 {
		t.Fatalf("repeat: %v %v", res, err)
	}
}

// Domains and keys chosen by clients create no metric series: a thousand
// unknown domains share domain="".
func TestRLSHostileMetricCardinality(t *testing.T) {
	r := startRLSRig(t)
	ctx := testCtx(t)
	for i := 0; i < 300; i++ {
		_, _ = r.c.ShouldRateLimit(ctx, rlsReq(fmt.Sprintf("dom%d", i), desc(fmt.Sprintf("k%d", i), "v")))
		_, _ = r.c.ShouldRateLimit(ctx, rlsReq(fmt.Sprintf("dom%d", i)))
		_, _ = r.c.ShouldRateLimit(ctx, rlsReq("edge", desc(fmt.Sprintf("k%d", i), "v")))
	}
	resp, err := http.Get(r.srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	series := 0
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "coordhost_rls_") {
			series++
			if strings.Contains(l, `="dom`) || strings.Contains(l, `="k`) {
				t.Errorf("client-made label: %s", l)
			}
		}
	}
	if series > 8 {
		t.Fatalf("%d coordhost_rls_ series", series)
	}
	if n := r.dbsize(t); n != "0" {
		t.Fatalf("DBSIZE %s", n)
	}
}

// Concurrent requests for one partition grant exactly the limit, under
// -race.
func TestRLSHostileConcurrent(t *testing.T) {
	r := startRLSRig(t)
	ctx := testCtx(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, over := 0, 0
	for i := 0; i < 24; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := r.c.ShouldRateLimit(ctx, rlsReq("edge", desc("generic_key", "login"), desc("remote_address", fmt.Sprint(i))))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Error(err)
				return
			}
			if res.Statuses[0].Code == rlsv3.RateLimitResponse_OK {
				ok++
			} else {
				over++
			}
			if res.Statuses[1].Code != rlsv3.RateLimitResponse_OK {
				t.Errorf("own address over: %v", res)
			}
		}()
	}
	wg.Wait()
	if ok != 3 || over != 21 {
		t.Fatalf("ok %d over %d, want 3 and 21", ok, over)
	}
}

// Redis down: Unavailable (Envoy then fails open or closed as it is
// told), health NOT_SERVING; a client deadline while Redis hangs ends the
// call without leaking goroutines (goleak in TestMain).
func TestRLSHostileRedisDown(t *testing.T) {
	r := startRLSRig(t)
	ctx := testCtx(t)
	r.s.Pause()
	dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := r.c.ShouldRateLimit(dctx, rlsReq("edge", desc("remote_address", "1")))
	cancel()
	if c := status.Code(err); c != codes.DeadlineExceeded && c != codes.Unavailable && c != codes.Canceled {
		t.Errorf("paused: %v", err)
	}
	r.s.Resume()
	r.s.Stop()
	_, err = r.c.ShouldRateLimit(ctx, rlsReq("edge", desc("remote_address", "1")))
	if status.Code(err) != codes.Unavailable {
		t.Errorf("stopped: %v, want Unavailable", err)
	}
	// Unknown descriptors need no Redis: still answered.
	res, err := r.c.ShouldRateLimit(ctx, rlsReq("edge", desc("nope", "1")))
	if err != nil || res.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Errorf("unknown while down: %v %v", res, err)
	}
	hr, err := healthpb.NewHealthClient(r.conn).Check(ctx, &healthpb.HealthCheckRequest{Service: host.RLSService})
	if err != nil || hr.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health while down: %v %v", hr, err)
	}
	if _, err := healthpb.NewHealthClient(r.conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "nope"}); status.Code(err) != codes.NotFound {
		t.Errorf("health of unknown service: %v", err)
	}
}

// current_limit and duration_until_reset for each algorithm and for
// windows that are not one unit.
func TestRLSHostileLimitsAndResets(t *testing.T) {
	r := startRLSRig(t)
	ctx := testCtx(t)
	ask := func(d *rlcommon.RateLimitDescriptor) *rlsv3.RateLimitResponse_DescriptorStatus {
		t.Helper()
		res, err := r.c.ShouldRateLimit(ctx, rlsReq("edge", d))
		if err != nil {
			t.Fatal(err)
		}
		return res.Statuses[0]
	}
	type want struct {
		rpu  uint32
		unit rlsv3.RateLimitResponse_RateLimit_Unit
		mult uint32
		max  time.Duration
	}
	check := func(name string, st *rlsv3.RateLimitResponse_DescriptorStatus, w want, code rlsv3.RateLimitResponse_Code) {
		t.Helper()
		cl := st.CurrentLimit
		mult := uint32(1)
		if cl.GetUnitMultiplier() != nil {
			mult = cl.GetUnitMultiplier().GetValue()
		}
		d := st.DurationUntilReset.AsDuration()
		if st.Code != code || cl.GetRequestsPerUnit() != w.rpu || cl.GetUnit() != w.unit || mult != w.mult || d <= 0 || d > w.max {
			t.Errorf("%s: %v; want %v %v rpu %d unit %v x%d reset in (0, %v]", name, st, code, code, w.rpu, w.unit, w.mult, w.max)
		}
	}
	// Resets may be a millisecond past the window (the server rounds PTTL
	// up).
	f90 := want{2, rlsv3.RateLimitResponse_RateLimit_SECOND, 90, 90*time.Second + 2*time.Millisecond}
	check("f90 1", ask(desc("f90", "a")), f90, rlsv3.RateLimitResponse_OK)
	check("f90 2", ask(desc("f90", "a")), f90, rlsv3.RateLimitResponse_OK)
	check("f90 3", ask(desc("f90", "a")), f90, rlsv3.RateLimitResponse_OVER_LIMIT)
	// 1500ms is reported as 2 per 2s (rounded up, never a higher rate).
	f15 := want{2, rlsv3.RateLimitResponse_RateLimit_SECOND, 2, 1502 * time.Millisecond}
	check("f1500", ask(desc("f1500", "a")), f15, rlsv3.RateLimitResponse_OK)
	// api: sliding window, 3 per hour. A hit counts until its whole
	// segment has left the window, so the reset is up to an hour and a
	// segment away.
	sw := want{3, rlsv3.RateLimitResponse_RateLimit_HOUR, 1, time.Hour + time.Hour}
	for i := 0; i < 3; i++ {
		check("sliding", ask(desc("sliding", "a")), sw, rlsv3.RateLimitResponse_OK)
	}
	check("sliding over", ask(desc("sliding", "a")), sw, rlsv3.RateLimitResponse_OVER_LIMIT)
	// burst: token bucket of 2, 1 per hour: 2 per 2h.
	tb := want{2, rlsv3.RateLimitResponse_RateLimit_HOUR, 2, time.Hour}
	check("bucket 1", ask(desc("bucket", "a")), tb, rlsv3.RateLimitResponse_OK)
	check("bucket 2", ask(desc("bucket", "a")), tb, rlsv3.RateLimitResponse_OK)
	check("bucket over", ask(desc("bucket", "a")), tb, rlsv3.RateLimitResponse_OVER_LIMIT)
}

// More hits than the limit can ever grant: OVER_LIMIT, not an error, and
// nothing consumed.
func TestRLSHostileHitsAboveLimit(t *testing.T) {
	r := startRLSRig(t)
	ctx := testCtx(t)
	res, err := r.c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: ^uint32(0), Descriptors: []*rlcommon.RateLimitDescriptor{desc("generic_key", "login")}})
	if err != nil || res.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("MaxUint32 hits: %v %v", res, err)
	}
	res, err = r.c.ShouldRateLimit(ctx, rlsReq("edge", desc("generic_key", "login")))
	if err != nil || res.OverallCode != rlsv3.RateLimitResponse_OK || res.Statuses[0].LimitRemaining != 2 {
		t.Fatalf("after: %v %v", res, err)
	}
	// A descriptor's hits_addend overrides the request's.
	res, err = r.c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 100, Descriptors: []*rlcommon.RateLimitDescriptor{withHits(desc("generic_key", "login"), 2)}})
	if err != nil || res.OverallCode != rlsv3.RateLimitResponse_OK || res.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("descriptor override: %v %v", res, err)
	}
}

// FINDING 1: rlsPlan checks len(partition key) against MaxPartitionKey,
// but the Partitioned limiter is given name + "/" + key, which is longer.
// A key within len(name)+1 bytes of the bound passes validation, then
// fails in TryAcquire: the client gets Unavailable (so Envoy fails open)
// instead of InvalidArgument, and the descriptors before it have already
// consumed permits.
func TestRLSHostilePartitionKeyBoundary(t *testing.T) {
	r := startRLSRig(t)
	ctx := testCtx(t)
	// "edge/remote_address=" is 20 bytes: the key is exactly 1024.
	v := strings.Repeat("v", 1024-len("edge/remote_address="))
	_, err := r.c.ShouldRateLimit(ctx, rlsReq("edge", desc("generic_key", "login"), desc("remote_address", v)))
	if err != nil && status.Code(err) != codes.InvalidArgument {
		t.Errorf("key of 1024 bytes: %v, want OK or InvalidArgument", err)
	}
	if err != nil && r.dbsize(t) != "0" {
		t.Errorf("refused request wrote %s", r.s.MustCmd(t, "KEYS", "*"))
	}
}

// FINDING 2: a descriptor's hits_addend set to 0 is read as 1. The proto
// says a descriptor's hits_addend, when set, overrides the request's;
// envoyproxy/ratelimit (utils.GetHitsAddends) keeps an explicit 0, which
// checks a limit without counting a hit. coordhost consumes a permit.
func TestRLSHostileDescriptorHitsZero(t *testing.T) {
	r := startRLSRig(t)
	ctx := testCtx(t)
	for i := 0; i < 3; i++ {
		res, err := r.c.ShouldRateLimit(ctx, rlsReq("edge", withHits(desc("remote_address", "1"), 0)))
		if err != nil || res.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("peek %d: %v %v", i, res, err)
		}
	}
	res, err := r.c.ShouldRateLimit(ctx, rlsReq("edge", desc("remote_address", "1")))
	if err != nil || res.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("first real hit after peeks: %v %v", res, err)
	}
}

// A reload that changes the mapping while requests run: every answer is
// a decision under the old or the new mapping, never an error.
func TestRLSHostileReloadDuringRequests(t *testing.T) {
	r := startRLSRig(t)
	ctx := testCtx(t)
	orig, err := os.ReadFile(r.path)
	if err != nil {
		t.Fatal(err)
	}
	// The other mapping: remote_address decides through big, and the
	// login descriptor is gone (unknown).
	alt := strings.Replace(string(orig), "entries    = [{ key = \"remote_address\" }]\n    rate_limit = \"x\"", "entries    = [{ key = \"remote_address\" }]\n    rate_limit = \"big\"", 1)
	alt = strings.Replace(alt, `value = "login"`, `value = "logout"`, 1)
	if alt == string(orig) {
		t.Fatal("replacement failed")
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				_, err := r.c.ShouldRateLimit(ctx, rlsReq("edge", desc("remote_address", fmt.Sprint(g, "-", i%5)), desc("generic_key", "login")))
				if err != nil {
					t.Errorf("during reload: %v", err)
					return
				}
			}
		}()
	}
	for i := 0; i < 6; i++ {
		src := alt
		if i%2 == 1 {
			src = string(orig)
		}
		if err := os.WriteFile(r.path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := r.h.Reload(ctx); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
}

// FINDING 5: after Shutdown, a matched descriptor fails in rlsPlan
// (h.RateLimit returns ErrClosed) and is reported as InvalidArgument,
// counted "invalid"; a closing server is Unavailable, not the client's
// fault.
func TestRLSHostileClosedHost(t *testing.T) {
	r := startRLSRig(t)
	ctx := testCtx(t)
	if err := r.h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	_, err := r.c.ShouldRateLimit(ctx, rlsReq("edge", desc("remote_address", "1")))
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("closed host: %v, want Unavailable", err)
	}
}
