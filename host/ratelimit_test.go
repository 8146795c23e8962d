package host_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/config"
	"github.com/coordhost/coordhost/host"
	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/policies"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/ratelimit"
)

// rateLimitConfig declares "api" (a sliding window of 3 per hour per
// tenant), "burst" (a token bucket of 2, refilled 1 per hour), "login" (a
// fixed window of LOGIN per hour, queueing up to 1 permit) and "x" (a
// fixed window without partitions), plus extra.
func rateLimitConfig(t *testing.T, addr string, login int, extra string) string {
	t.Helper()
	src := fmt.Sprintf(`
redis {
  addresses  = [%q]
  key_prefix = "m:"
}

policy "partition" "tenant" {
  driver   = "builtin"
  template = "tenant:$${tenant}"
}
policy "partition" "raw" {
  driver   = "builtin"
  template = "$${tenant}"
}

rate_limit "api" {
  algorithm = "sliding_window"
  limit     = 3
  window    = "1h"
  partition = policy.partition.tenant
}
rate_limit "burst" {
  algorithm         = "token_bucket"
  limit             = 2
  tokens_per_period = 1
  period            = "1h"
  partition         = policy.partition.raw
}
rate_limit "login" {
  algorithm = "fixed_window"
  limit     = %d
  window    = "1h"
  queue {
    limit = 1
  }
}
rate_limit "x" {
  algorithm = "fixed_window"
  limit     = 1
  window    = "1h"
}
%s`, addr, login, extra)
	path := filepath.Join(t.TempDir(), "coordhost.hcl")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func mustRateLimit(t *testing.T, h *host.Host, name string) *host.RateLimit {
	t.Helper()
	r, err := h.RateLimit(name)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A named rate limit grants up to its limit per partition key, under its
// prefix and algorithm, refuses beyond it with a RetryAfter, and counts
// its decisions by name only.
func TestRateLimit(t *testing.T) {
	s := redistest.Start(t)
	h := newHost(t, rateLimitConfig(t, s.Addr, 1, ""))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := h.RateLimit("nope"); !errors.Is(err, host.ErrNoRateLimit) {
		t.Fatalf("unknown rate limit: %v", err)
	}
	if _, err := h.Lock("api"); !errors.Is(err, host.ErrNoLock) {
		t.Fatalf("a rate limit served as a lock: %v", err)
	}
	api, burst, x := mustRateLimit(t, h, "api"), mustRateLimit(t, h, "burst"), mustRateLimit(t, h, "x")
	if p := api.Policy(); api.Name() != "api" || p.Algorithm != ratelimit.SlidingWindowAlgorithm || p.Limit != 3 || p.Window != time.Hour || p.Segments != 10 {
		t.Fatalf("api: %s %+v", api.Name(), p)
	}
	if p := burst.Policy(); p.Algorithm != ratelimit.TokenBucketAlgorithm || p.Limit != 2 || p.TokensPerPeriod != 1 || p.Period != time.Hour || p.Window != 2*time.Hour {
		t.Fatalf("burst: %+v", p)
	}
	acme, other := map[string]string{"tenant": "acme"}, map[string]string{"tenant": "other"}
	if k, err := api.Key(ctx, acme); k != "api/tenant:acme" || err != nil {
		t.Fatal(k, err)
	}

	// Every series exists from the start; no fixed window has decided yet.
	m := scrape(t, h)
	for _, series := range []string{
		`coordhost_ratelimit_decisions_total{outcome="granted",rate_limit="api"} 0`,
		`coordhost_ratelimit_decisions_total{outcome="rejected",rate_limit="burst"} 0`,
		`coordhost_ratelimit_decisions_total{outcome="error",rate_limit="login"} 0`,
		`coordhost_ratelimit_partitions{rate_limit="api"} 0`,
		`coordhost_ratelimit_queued_permits{rate_limit="login"} 0`,
		`coordhost_ratelimit_fast_path{state="unknown"} 1`,
		`coordhost_ratelimit_fast_path{state="lua"} 0`,
		`coordhost_ratelimit_fast_path{state="increx"} 0`,
	} {
		if !strings.Contains(m, series+"\n") {
			t.Errorf("missing %s", series)
		}
	}

	// "api": 3 per tenant; 2 and 1 granted, the next refused with a
	// RetryAfter; another tenant has its own 3.
	for i, n := range []int64{2, 1} {
		res, err := api.TryAcquire(ctx, acme, n)
		if err != nil || !res.Acquired || res.Remaining != 1-int64(i) || res.Limit != 3 || res.Window != time.Hour {
			t.Fatalf("grant %d: %+v, %v", i, res, err)
		}
	}
	res, err := api.TryAcquire(ctx, acme, 1)
	if err != nil || res.Acquired || res.RetryAfter <= 0 || res.RetryAfter > time.Hour+6*time.Minute || res.ResetAfter <= 0 {
		t.Fatalf("over the limit: %+v, %v", res, err)
	}
	if res, err := api.TryAcquire(ctx, other, 3); err != nil || !res.Acquired || res.Remaining != 0 {
		t.Fatalf("another tenant: %+v, %v", res, err)
	}
	// More than the limit can never be granted: refused without RetryAfter.
	if res, err := api.TryAcquire(ctx, acme, 4); err != nil || res.Acquired || res.RetryAfter != 0 {
		t.Fatalf("more than the limit: %+v, %v", res, err)
	}
	// n = 0 consumes nothing.
	if res, err := api.TryAcquire(ctx, map[string]string{"tenant": "third"}, 0); err != nil || !res.Acquired || res.Remaining != 3 {
		t.Fatalf("n = 0: %+v, %v", res, err)
	}
	if _, err := api.TryAcquire(ctx, nil, 1); !errors.Is(err, policies.ErrPartition) {
		t.Fatalf("without the partition attribute: %v", err)
	}

	// "burst": a bucket of 2; "x": one per hour, unpartitioned.
	for i := 0; i < 2; i++ {
		if res, err := burst.TryAcquire(ctx, acme, 1); err != nil || !res.Acquired {
			t.Fatalf("burst %d: %+v, %v", i, res, err)
		}
	}
	if res, err := burst.Acquire(ctx, acme, 1); err != nil || res.Acquired || res.RetryAfter <= 0 {
		t.Fatalf("an empty bucket without a queue: %+v, %v", res, err)
	}
	if res, err := x.TryAcquire(ctx, nil, 1); err != nil || !res.Acquired {
		t.Fatalf("x: %+v, %v", res, err)
	}

	// The keys: prefix, algorithm, name and partition key, nothing else.
	keys := strings.Fields(s.MustCmd(t, "KEYS", "*"))
	want := map[string]bool{
		"m:coordhost:ratelimit:sliding_window:api/tenant:acme":  true,
		"m:coordhost:ratelimit:sliding_window:api/tenant:other": true,
		"m:coordhost:ratelimit:token_bucket:burst/acme":         true,
		"m:coordhost:ratelimit:fixed_window:x":                  true,
	}
	for _, k := range keys {
		if !want[k] {
			t.Errorf("unexpected key %q", k)
		}
		delete(want, k)
	}
	if len(want) > 0 {
		t.Errorf("missing keys %v (have %v)", want, keys)
	}

	m = scrape(t, h)
	for series, want := range map[string]float64{
		`coordhost_ratelimit_decisions_total{outcome="granted",rate_limit="api"}`:    4,
		`coordhost_ratelimit_decisions_total{outcome="rejected",rate_limit="api"}`:   2,
		`coordhost_ratelimit_decisions_total{outcome="error",rate_limit="api"}`:      1,
		`coordhost_ratelimit_decisions_total{outcome="granted",rate_limit="burst"}`:  2,
		`coordhost_ratelimit_decisions_total{outcome="rejected",rate_limit="burst"}`: 1,
		`coordhost_ratelimit_decisions_total{outcome="granted",rate_limit="x"}`:      1,
		`coordhost_ratelimit_partitions{rate_limit="api"}`:                           3,
		`coordhost_ratelimit_partitions{rate_limit="burst"}`:                         1,
		`coordhost_ratelimit_partitions{rate_limit="x"}`:                             1,
		`coordhost_ratelimit_partitions{rate_limit="login"}`:                         0,
		`coordhost_ratelimit_fast_path{state="unknown"}`:                             0,
	} {
		if got := metricValue(m, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	// The fixed window of "x" found out whether the server has INCREX.
	if metricValue(m, `coordhost_ratelimit_fast_path{state="increx"}`)+metricValue(m, `coordhost_ratelimit_fast_path{state="lua"}`) != 1 {
		t.Errorf("fast path:\n%s", grep(m, "fast_path"))
	}
	if st := api.Statistics(); st.Granted != 4 || st.Rejected != 2 {
		t.Errorf("api statistics %+v", st)
	}
	if strings.Contains(m, "acme") {
		t.Errorf("a partition key leaked into a label:\n%s", grep(m, "acme"))
	}
	if t.Failed() {
		t.Logf("scrape:\n%s", grep(m, "coordhost_ratelimit_"))
	}
}

// No partition key reaches another rate limit's keys or another
// partition's: a tenant spelled like a name, with "/", or like another
// partition's whole key gets keys of its own.
func TestRateLimitKeysDoNotCollide(t *testing.T) {
	s := redistest.Start(t)
	h := newHost(t, rateLimitConfig(t, s.Addr, 1, `
rate_limit "y" {
  algorithm = "token_bucket"
  limit     = 2
  tokens_per_period = 1
  period    = "1h"
  partition = policy.partition.raw
}
rate_limit "y2" {
  algorithm = "token_bucket"
  limit     = 2
  tokens_per_period = 1
  period    = "1h"
}
`))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	burst, y, y2 := mustRateLimit(t, h, "burst"), mustRateLimit(t, h, "y"), mustRateLimit(t, h, "y2")
	// burst and y share algorithm and partition policy; y2 is y's name
	// with a suffix. Each call takes the whole bucket of its key, so a
	// shared key would refuse the second caller.
	seen := map[string]bool{}
	for _, c := range []struct {
		r      *host.RateLimit
		tenant string
	}{
		{burst, "y"}, {burst, "y2"}, {burst, "../y"}, {burst, "y/a"}, {burst, "a"}, {y, "a"}, {y, "2"}, {y, "burst/y"}, {y, "y"}, {y2, ""},
	} {
		var attrs map[string]string
		if c.tenant != "" {
			attrs = map[string]string{"tenant": c.tenant}
		}
		k, err := c.r.Key(ctx, attrs)
		if err != nil {
			t.Fatal(err)
		}
		if seen[k] {
			t.Fatalf("key %q twice", k)
		}
		seen[k] = true
		if res, err := c.r.TryAcquire(ctx, attrs, 2); err != nil || !res.Acquired {
			t.Errorf("%s tenant %q (key %q) found its bucket used: %+v, %v", c.r.Name(), c.tenant, k, res, err)
		}
	}
	if n := s.MustCmd(t, "DBSIZE"); n != "10" {
		t.Errorf("DBSIZE %s, want 10 buckets", n)
	}
}

// A reload that changes a limit applies to the next decision; a call
// queued in Acquire when the reload happens queues again in the new
// generation and is granted there; a reload that removes the rate limit
// makes the name unknown.
func TestRateLimitReload(t *testing.T) {
	s := redistest.Start(t)
	path := rateLimitConfig(t, s.Addr, 1, "")
	h := newHost(t, path)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	login := mustRateLimit(t, h, "login")
	if res, err := login.TryAcquire(ctx, nil, 1); err != nil || !res.Acquired {
		t.Fatalf("first login: %+v, %v", res, err)
	}
	// Queued calls need a context without a deadline: one that ends before
	// the permits are back (a minute) is refused at once, not queued.
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	type result struct {
		res ratelimit.Result
		err error
	}
	queued := make(chan result, 1)
	go func() {
		res, err := login.Acquire(ctx, nil, 1)
		queued <- result{res, err}
	}()
	xtest.Eventually(t, 10*time.Second, "the Acquire call is queued", func() bool {
		return metricValue(scrape(t, h), `coordhost_ratelimit_queued_permits{rate_limit="login"}`) == 1
	})
	// A second queued call finds the queue (of 1 permit) full.
	if res, err := login.Acquire(ctx, nil, 1); err != nil || res.Acquired || res.RetryAfter <= 0 {
		t.Fatalf("Acquire with a full queue: %+v, %v", res, err)
	}

	// Limit 1 -> 3: the window's count (1) carries over.
	if err := os.WriteFile(path, []byte(strings.Replace(readFile(t, path), "limit     = 1\n  window    = \"1h\"\n  queue", "limit     = 3\n  window    = \"1h\"\n  queue", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := h.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if p := login.Policy(); p.Limit != 3 {
		t.Fatalf("policy after the reload: %+v", p)
	}
	select {
	case r := <-queued:
		if r.err != nil || !r.res.Acquired || r.res.Limit != 3 || r.res.Remaining != 1 {
			t.Fatalf("the queued call after the reload: %+v, %v", r.res, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the queued call did not move to the new generation")
	}
	if res, err := login.TryAcquire(ctx, nil, 1); err != nil || !res.Acquired || res.Remaining != 0 {
		t.Fatalf("the third login under limit 3: %+v, %v", res, err)
	}
	if res, err := login.TryAcquire(ctx, nil, 1); err != nil || res.Acquired {
		t.Fatalf("the fourth login under limit 3: %+v, %v", res, err)
	}
	m := scrape(t, h)
	if got := metricValue(m, `coordhost_ratelimit_decisions_total{outcome="granted",rate_limit="login"}`); got != 3 {
		t.Errorf("granted %v, want 3 (the queued call once)", got)
	}
	if got := metricValue(m, `coordhost_ratelimit_decisions_total{outcome="error",rate_limit="login"}`); got != 0 {
		t.Errorf("errors %v: the call moved across the reload must not count as one", got)
	}

	// The algorithm changes: new keys, a full limit.
	if err := os.WriteFile(path, []byte(strings.Replace(readFile(t, path), "rate_limit \"login\" {\n  algorithm = \"fixed_window\"", "rate_limit \"login\" {\n  algorithm = \"sliding_window\"", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := h.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if res, err := login.TryAcquire(ctx, nil, 3); err != nil || !res.Acquired {
		t.Fatalf("after the algorithm changed: %+v, %v", res, err)
	}

	src := readFile(t, path)
	i := strings.Index(src, `rate_limit "login"`)
	j := strings.Index(src, `rate_limit "x"`)
	if err := os.WriteFile(path, []byte(src[:i]+src[j:]), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := h.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := login.TryAcquire(ctx, nil, 1); !errors.Is(err, host.ErrNoRateLimit) {
		t.Fatalf("after the rate limit was removed: %v", err)
	}
	if p := login.Policy(); p != (ratelimit.Policy{}) || login.Statistics() != (ratelimit.Statistics{}) {
		t.Fatalf("policy %+v of a removed rate limit", p)
	}
	if _, err := h.RateLimit("login"); !errors.Is(err, host.ErrNoRateLimit) {
		t.Fatalf("RateLimit(login) after the removal: %v", err)
	}
	if strings.Contains(scrape(t, h), `coordhost_ratelimit_partitions{rate_limit="login"}`) {
		t.Error("the gauges still show a removed rate limit")
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Bad input to a rate limit fails clearly, before the partition policy,
// and writes nothing.
func TestRateLimitBadInputs(t *testing.T) {
	s := redistest.Start(t)
	cfg, diags := config.Load(rateLimitConfig(t, s.Addr, 1, ""), config.LoadOptions{})
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := host.New(ctx, cfg, host.Options{Logger: quietLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if _, err := h.RateLimit(""); !errors.Is(err, host.ErrNoRateLimit) {
		t.Fatalf(`RateLimit(""): %v`, err)
	}
	api := mustRateLimit(t, h, "api")
	acme := map[string]string{"tenant": "acme"}
	cancelled, stop := context.WithCancel(ctx)
	stop()
	for _, c := range []struct {
		name  string
		ctx   context.Context
		attrs map[string]string
		n     int64
		want  error
	}{
		{"negative n", ctx, acme, -1, ratelimit.ErrInvalidPermits},
		{"negative n without attributes", ctx, nil, -5, ratelimit.ErrInvalidPermits},
		{"nil ctx", nil, acme, 1, primitives.ErrInvalidOptions},
		{"no attributes", ctx, nil, 1, policies.ErrPartition},
		{"other attributes", ctx, map[string]string{"user": "x"}, 1, policies.ErrPartition},
		{"empty tenant", ctx, map[string]string{"tenant": ""}, 1, policies.ErrPartition},
		{"cancelled", cancelled, acme, 1, context.Canceled},
	} {
		for _, op := range []struct {
			name string
			fn   func(context.Context, map[string]string, int64) (ratelimit.Result, error)
		}{{"TryAcquire", api.TryAcquire}, {"Acquire", api.Acquire}} {
			res, err := op.fn(c.ctx, c.attrs, c.n)
			if !errors.Is(err, c.want) || res != (ratelimit.Result{}) {
				t.Errorf("%s %s: %+v, %v; want %v", op.name, c.name, res, err, c.want)
			}
		}
	}
	if n := s.MustCmd(t, "DBSIZE"); n != "0" {
		t.Fatalf("DBSIZE %s after refused calls", n)
	}
	if got := metricValue(scrape(t, h), `coordhost_ratelimit_decisions_total{outcome="error",rate_limit="api"}`); got != 14 {
		t.Errorf("errors counted %v, want 14", got)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := api.TryAcquire(ctx, acme, 1); !errors.Is(err, host.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
	if _, err := h.RateLimit("api"); !errors.Is(err, host.ErrClosed) {
		t.Fatalf("RateLimit after Close: %v", err)
	}
}
