package host_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	coordhostv1 "github.com/coordhost/coordhost/gen/coordhost/v1"
	"github.com/coordhost/coordhost/gen/coordhost/v1/coordhostv1connect"
	"github.com/coordhost/coordhost/host"
	"github.com/coordhost/coordhost/internal/redistest"
)

// apiServer serves h's Handler over HTTP/1.1 and h2c, and returns its URL
// and an HTTP client that speaks h2c (gRPC needs HTTP/2).
func apiServer(t *testing.T, h *host.Host) (string, *http.Client) {
	t.Helper()
	srv := httptest.NewUnstartedServer(h.Handler())
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	t.Cleanup(tr.CloseIdleConnections)
	return srv.URL, &http.Client{Transport: tr}
}

// errDetail returns the ErrorDetail of a coordhost.v1 error, or nil.
func errDetail(t *testing.T, err error) *coordhostv1.ErrorDetail {
	t.Helper()
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return nil
	}
	for _, d := range ce.Details() {
		v, derr := d.Value()
		if derr != nil {
			t.Fatal(derr)
		}
		if ed, ok := v.(*coordhostv1.ErrorDetail); ok {
			return ed
		}
	}
	return nil
}

// RateLimitService.Check over gRPC and Connect JSON (generated client) and
// a plain JSON POST: grants, refusals with retry_after, partitions, the
// documented statuses, and bad input that writes nothing.
func TestAPIRateLimitCheck(t *testing.T) {
	s := redistest.Start(t)
	h := newHost(t, rateLimitConfig(t, s.Addr, 3, ""))
	url, hc := apiServer(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	for _, mode := range []struct {
		name string
		opts []connect.ClientOption
	}{{"grpc", []connect.ClientOption{connect.WithGRPC()}}, {"connect-json", []connect.ClientOption{connect.WithProtoJSON()}}} {
		t.Run(mode.name, func(t *testing.T) {
			s.MustCmd(t, "FLUSHALL")
			c := coordhostv1connect.NewRateLimitServiceClient(hc, url, mode.opts...)
			check := func(name string, attrs map[string]string, cost int64) (*coordhostv1.CheckRateLimitResponse, error) {
				r, err := c.Check(ctx, connect.NewRequest(&coordhostv1.CheckRateLimitRequest{Name: name, Attributes: attrs, Cost: cost}))
				if err != nil {
					return nil, err
				}
				return r.Msg, nil
			}

			// Bad input: InvalidArgument naming the field, nothing written.
			for _, bad := range []struct {
				req   *coordhostv1.CheckRateLimitRequest
				field string
			}{
				{&coordhostv1.CheckRateLimitRequest{}, "name"},
				{&coordhostv1.CheckRateLimitRequest{Name: strings.Repeat("n", host.MaxAPINameBytes+1)}, "name"},
				{&coordhostv1.CheckRateLimitRequest{Name: "x", Cost: -1}, "cost"},
				{&coordhostv1.CheckRateLimitRequest{Name: "x", Cost: 1 << 62}, "cost"},
				{&coordhostv1.CheckRateLimitRequest{Name: "x", Wait: durationpb.New(-time.Second)}, "wait"},
				{&coordhostv1.CheckRateLimitRequest{Name: "x", Wait: durationpb.New(2 * host.MaxCheckWait)}, "wait"},
				{&coordhostv1.CheckRateLimitRequest{Name: "x", Attributes: manyAttrs(host.MaxAPIAttributes + 1)}, "attributes"},
				{&coordhostv1.CheckRateLimitRequest{Name: "x", Attributes: map[string]string{"": "v"}}, "attributes"},
				{&coordhostv1.CheckRateLimitRequest{Name: "x", Attributes: map[string]string{strings.Repeat("k", host.MaxAPIAttributeKeyBytes+1): "v"}}, "attributes"},
				{&coordhostv1.CheckRateLimitRequest{Name: "x", Attributes: map[string]string{"k": strings.Repeat("v", host.MaxAPIAttributeValueBytes+1)}}, "attributes"},
				// The partition policy finds no tenant: it fails closed.
				{&coordhostv1.CheckRateLimitRequest{Name: "api"}, "attributes"},
				{&coordhostv1.CheckRateLimitRequest{Name: "api", Attributes: map[string]string{"other": "a"}}, "attributes"},
			} {
				_, err := c.Check(ctx, connect.NewRequest(bad.req))
				d := errDetail(t, err)
				if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), bad.field) ||
					d == nil || d.Field != bad.field || d.Reason != coordhostv1.Reason_REASON_INVALID_FIELD {
					t.Errorf("%v: %v (detail %v), want InvalidArgument naming %s", bad.req, err, d, bad.field)
				}
			}
			if n := s.MustCmd(t, "DBSIZE"); n != "0" {
				t.Fatalf("DBSIZE %s after bad requests: %s", n, s.MustCmd(t, "KEYS", "*"))
			}

			// Not configured.
			_, err := check("nope", nil, 1)
			if d := errDetail(t, err); connect.CodeOf(err) != connect.CodeNotFound || d == nil ||
				d.Reason != coordhostv1.Reason_REASON_NAME_NOT_CONFIGURED || d.Name != "nope" {
				t.Fatalf("unconfigured: %v %v", err, d)
			}

			// x allows 1 per hour: granted, then refused with retry_after.
			r, err := check("x", nil, 0) // 0 means 1
			if err != nil || !r.Allowed || r.Limit != 1 || r.Remaining != 0 || r.RetryAfter != nil ||
				r.ResetAfter.AsDuration() <= 0 || r.ResetAfter.AsDuration() > time.Hour+time.Second {
				t.Fatalf("first: %v %v", r, err)
			}
			r, err = check("x", nil, 1)
			if err != nil || r.Allowed || r.Remaining != 0 || r.RetryAfter.AsDuration() <= 0 || r.RetryAfter.AsDuration() > time.Hour+time.Second {
				t.Fatalf("second: %v %v", r, err)
			}
			// More than the limit can never be granted: no retry_after.
			r, err = check("login", nil, 4)
			if err != nil || r.Allowed || r.RetryAfter != nil || r.Limit != 3 {
				t.Fatalf("cost above limit: %v %v", r, err)
			}

			// api: 3 per hour per tenant.
			for i, want := range []bool{true, false} {
				r, err = check("api", map[string]string{"tenant": "acme"}, 2)
				if err != nil || r.Allowed != want || r.Limit != 3 {
					t.Fatalf("acme %d: %v %v", i, r, err)
				}
			}
			r, err = check("api", map[string]string{"tenant": "globex"}, 3)
			if err != nil || !r.Allowed || r.Remaining != 0 {
				t.Fatalf("globex: %v %v", r, err)
			}
			for _, k := range []string{"m:coordhost:ratelimit:sliding_window:api/tenant:acme", "m:coordhost:ratelimit:sliding_window:api/tenant:globex"} {
				if n := s.MustCmd(t, "EXISTS", k); n != "1" {
					t.Fatalf("%s missing: %s", k, s.MustCmd(t, "KEYS", "*"))
				}
			}

			// A wait decides at once without a queue block (x); with one
			// (login), permits that return only after the wait are
			// refused with retry_after, not an error. login's wait is
			// seconds (its permits return in an hour): a wait shorter
			// than the Redis call would end in the call, a refusal
			// without retry_after.
			wr, err := c.Check(ctx, connect.NewRequest(&coordhostv1.CheckRateLimitRequest{Name: "x", Wait: durationpb.New(10 * time.Millisecond)}))
			if err != nil || wr.Msg.Allowed {
				t.Fatalf("wait x: %v %v", wr, err)
			}
			if r, err = check("login", nil, 3); err != nil || !r.Allowed {
				t.Fatalf("login: %v %v", r, err)
			}
			wr, err = c.Check(ctx, connect.NewRequest(&coordhostv1.CheckRateLimitRequest{Name: "login", Wait: durationpb.New(2 * time.Second)}))
			if err != nil || wr.Msg.Allowed || wr.Msg.RetryAfter.AsDuration() <= 0 {
				t.Fatalf("wait login: %v %v", wr, err)
			}
		})
	}

	// A plain JSON POST, as curl sends it.
	s.MustCmd(t, "FLUSHALL")
	resp, err := http.Post(url+coordhostv1connect.RateLimitServiceCheckProcedure, "application/json",
		strings.NewReader(`{"name":"api","attributes":{"tenant":"acme"},"cost":"2"}`))
	if err != nil {
		t.Fatal(err)
	}
	var body bytes.Buffer
	_, _ = body.ReadFrom(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(body.String(), `"allowed":true`) || !strings.Contains(body.String(), `"remaining":"1"`) {
		t.Fatalf("JSON POST: %d %s", resp.StatusCode, body.String())
	}
	resp, err = http.Post(url+coordhostv1connect.RateLimitServiceCheckProcedure, "application/json", strings.NewReader(`{"name":"x","cost":"-1"}`))
	if err != nil {
		t.Fatal(err)
	}
	body.Reset()
	_, _ = body.ReadFrom(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(body.String(), `"code":"invalid_argument"`) || !strings.Contains(body.String(), "cost") {
		t.Fatalf("JSON POST, bad cost: %d %s", resp.StatusCode, body.String())
	}
}

func manyAttrs(n int) map[string]string {
	m := map[string]string{}
	for i := range n {
		m[strings.Repeat("k", i+1)] = "v"
	}
	return m
}

// AdminService: sorted lists, Validate with diagnostics, Reload applying a
// changed limit and reporting a broken file without applying it.
func TestAPIAdmin(t *testing.T) {
	s := redistest.Start(t)
	path := rateLimitConfig(t, s.Addr, 3, `
lock "b" {
  ttl       = "10s"
  fencing   = true
  partition = policy.partition.tenant
}
lock "a" {
  ttl = "5s"
}
semaphore "pool" {
  capacity = 4
  ttl      = "none"
}
lease "jobs" {
  ttl       = "30s"
  max_ttl   = "5m"
  partition = policy.partition.tenant
}
`)
	h := newHost(t, path)
	url, hc := apiServer(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := coordhostv1connect.NewAdminServiceClient(hc, url, connect.WithGRPC())
	rl := coordhostv1connect.NewRateLimitServiceClient(hc, url)

	lp, err := c.ListPrimitives(ctx, connect.NewRequest(&coordhostv1.ListPrimitivesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range lp.Msg.Primitives {
		got = append(got, p.Kind.String()+" "+p.Name)
	}
	want := []string{"PRIMITIVE_KIND_LOCK a", "PRIMITIVE_KIND_LOCK b", "PRIMITIVE_KIND_LEASE jobs", "PRIMITIVE_KIND_SEMAPHORE pool",
		"PRIMITIVE_KIND_RATE_LIMIT api", "PRIMITIVE_KIND_RATE_LIMIT burst", "PRIMITIVE_KIND_RATE_LIMIT login", "PRIMITIVE_KIND_RATE_LIMIT x"}
	if strings.Join(got, ",") != strings.Join(want, ",") || lp.Msg.Generation != 1 {
		t.Fatalf("ListPrimitives: %v gen %d, want %v", got, lp.Msg.Generation, want)
	}
	b, jobs, pool, api, burst := lp.Msg.Primitives[1], lp.Msg.Primitives[2], lp.Msg.Primitives[3], lp.Msg.Primitives[4], lp.Msg.Primitives[5]
	if !b.Fencing || b.Ttl.AsDuration() != 10*time.Second || b.Policies["partition"] != "tenant" ||
		jobs.Ttl.AsDuration() != 30*time.Second || jobs.Fencing || jobs.Policies["partition"] != "tenant" || len(jobs.Policies) != 1 ||
		pool.Limit != 4 || pool.Ttl != nil ||
		api.Limit != 3 || api.Window.AsDuration() != time.Hour || api.Algorithm != "sliding_window" || api.Ttl != nil ||
		burst.Algorithm != "token_bucket" || burst.Window.AsDuration() != time.Hour {
		t.Fatalf("ListPrimitives fields: %v", lp.Msg.Primitives)
	}
	lk, err := c.ListPrimitives(ctx, connect.NewRequest(&coordhostv1.ListPrimitivesRequest{Kind: coordhostv1.PrimitiveKind_PRIMITIVE_KIND_LOCK}))
	if err != nil || len(lk.Msg.Primitives) != 2 {
		t.Fatalf("ListPrimitives(lock): %v %v", lk, err)
	}
	ls, err := c.ListPrimitives(ctx, connect.NewRequest(&coordhostv1.ListPrimitivesRequest{Kind: coordhostv1.PrimitiveKind_PRIMITIVE_KIND_LEASE}))
	if err != nil || len(ls.Msg.Primitives) != 1 || ls.Msg.Primitives[0].Name != "jobs" {
		t.Fatalf("ListPrimitives(lease): %v %v", ls, err)
	}
	_, err = c.ListPrimitives(ctx, connect.NewRequest(&coordhostv1.ListPrimitivesRequest{Kind: 99}))
	if d := errDetail(t, err); connect.CodeOf(err) != connect.CodeInvalidArgument || d == nil || d.Field != "kind" {
		t.Fatalf("ListPrimitives(99): %v", err)
	}

	pl, err := c.ListPolicies(ctx, connect.NewRequest(&coordhostv1.ListPoliciesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if len(pl.Msg.Policies) != 2 || pl.Msg.Policies[0].Name != "raw" || pl.Msg.Policies[1].Name != "tenant" ||
		pl.Msg.Policies[1].Role != "partition" || pl.Msg.Policies[1].Driver != "builtin" ||
		strings.Join(pl.Msg.Policies[1].UsedBy, ",") != "lease.jobs,lock.b,rate_limit.api" || strings.Join(pl.Msg.Policies[0].UsedBy, ",") != "rate_limit.burst" {
		t.Fatalf("ListPolicies: %v", pl.Msg.Policies)
	}

	// Validate: the file on disk, then a broken source.
	v, err := c.Validate(ctx, connect.NewRequest(&coordhostv1.ValidateRequest{}))
	if err != nil || !v.Msg.Valid || len(v.Msg.Diagnostics) != 0 {
		t.Fatalf("Validate(disk): %v %v", v, err)
	}
	v, err = c.Validate(ctx, connect.NewRequest(&coordhostv1.ValidateRequest{Source: []byte("lock \"a\" {\n  ttl = \"soon\"\n}\n"), Filename: "new.hcl"}))
	if err != nil || v.Msg.Valid || len(v.Msg.Diagnostics) == 0 {
		t.Fatalf("Validate(broken): %v %v", v, err)
	}
	if d := v.Msg.Diagnostics[0]; d.Severity != coordhostv1.Severity_SEVERITY_ERROR || !strings.HasSuffix(d.Subject, "new.hcl:2:9") {
		t.Fatalf("Validate(broken) diagnostic: %v", d)
	}
	if n := s.MustCmd(t, "DBSIZE"); n != "0" {
		t.Fatalf("DBSIZE %s after admin reads", n)
	}

	// Reload: x goes from 1 to 2 per hour.
	if r, err := rl.Check(ctx, connect.NewRequest(&coordhostv1.CheckRateLimitRequest{Name: "x"})); err != nil || !r.Msg.Allowed || r.Msg.Limit != 1 {
		t.Fatalf("x before reload: %v %v", r, err)
	}
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	changed := strings.Replace(string(src), "rate_limit \"x\" {\n  algorithm = \"fixed_window\"\n  limit     = 1", "rate_limit \"x\" {\n  algorithm = \"fixed_window\"\n  limit     = 2", 1)
	if changed == string(src) {
		t.Fatal("test config changed shape")
	}
	if err := os.WriteFile(path, []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	rr, err := c.Reload(ctx, connect.NewRequest(&coordhostv1.ReloadRequest{}))
	if err != nil || !rr.Msg.Applied || rr.Msg.Generation != 2 {
		t.Fatalf("Reload: %v %v", rr, err)
	}
	if r, err := rl.Check(ctx, connect.NewRequest(&coordhostv1.CheckRateLimitRequest{Name: "x"})); err != nil || !r.Msg.Allowed || r.Msg.Limit != 2 {
		t.Fatalf("x after reload: %v %v", r, err)
	}
	// A broken file: not applied, diagnostics with a line, generation 2
	// keeps serving.
	if err := os.WriteFile(path, []byte(changed+"\nlock \"c\" {\n  ttl = 5\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rr, err = c.Reload(ctx, connect.NewRequest(&coordhostv1.ReloadRequest{}))
	if err != nil || rr.Msg.Applied || rr.Msg.Generation != 2 || len(rr.Msg.Diagnostics) == 0 || !strings.Contains(rr.Msg.Diagnostics[0].Subject, ".hcl:") {
		t.Fatalf("Reload(broken): %v %v", rr, err)
	}
}
