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
	"github.com/coordhost/coordhost/policies"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/lease"
)

// leaseConfig declares three lease blocks: "jobs" (ttl 1m, max_ttl 10m,
// partitioned by tenant), "once" (ttl 1m, retry none) and "short" (ttl
// 1m, no policies), with key_prefix "m:".
func leaseConfig(t *testing.T, addr string) string {
	t.Helper()
	src := fmt.Sprintf(`
redis {
  addresses  = [%q]
  key_prefix = "m:"
}

policy "retry" "none" {
  driver = "builtin"
  kind   = "none"
}
policy "partition" "tenant" {
  driver   = "builtin"
  template = "tenant:$${tenant}"
}

lease "jobs" {
  ttl       = "1m"
  max_ttl   = "10m"
  partition = policy.partition.tenant
}
lease "once" {
  ttl   = "1m"
  retry = policy.retry.none
}
lease "short" {
  ttl = "1m"
}
`, addr)
	path := filepath.Join(t.TempDir(), "coordhost.hcl")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func mustLease(t *testing.T, h *host.Host, name string) *host.Lease {
	t.Helper()
	l, err := h.Lease(name)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// hpttl returns the server's remaining time of field of key.
func hpttl(t *testing.T, s *redistest.Server, key, field string) time.Duration {
	t.Helper()
	ms, err := s.Do(context.Background(), "HPTTL", key, "FIELDS", "1", field).AsIntSlice()
	if err != nil || len(ms) != 1 {
		t.Fatalf("HPTTL %s %s: %v %v", key, field, ms, err)
	}
	return time.Duration(ms[0]) * time.Millisecond
}

// config keeps a copy of package lease's limit: they must agree.
func TestLeaseConfigLimitsMatch(t *testing.T) {
	if config.MaxLeaseTTL != lease.MaxTTL {
		t.Fatalf("config.MaxLeaseTTL %v, lease.MaxTTL %v", config.MaxLeaseTTL, lease.MaxTTL)
	}
}

// A named lease block grants fields of its hash under its prefix and
// partition key, for the configured ttl or the one asked for up to
// max_ttl; a held field is refused while other fields are granted; Acquire
// waits for a release; retry none gives up; the metrics move by name only.
func TestLease(t *testing.T) {
	s := redistest.Start(t, redistest.WithKind(redistest.Redis80))
	h := newHost(t, leaseConfig(t, s.Addr))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := h.Lease("nope"); !errors.Is(err, host.ErrNoLease) || !strings.Contains(err.Error(), `no lease "nope"`) {
		t.Fatalf("unknown lease: %v", err)
	}
	if _, err := h.Lock("jobs"); !errors.Is(err, host.ErrNoLock) {
		t.Fatalf("a lease served as a lock: %v", err)
	}
	jobs, once, short := mustLease(t, h, "jobs"), mustLease(t, h, "once"), mustLease(t, h, "short")
	if jobs.Name() != "jobs" || jobs.TTL() != time.Minute || jobs.MaxTTL() != 10*time.Minute || short.MaxTTL() != time.Minute {
		t.Fatal(jobs.Name(), jobs.TTL(), jobs.MaxTTL(), short.MaxTTL())
	}
	acme, other := map[string]string{"tenant": "acme"}, map[string]string{"tenant": "other"}
	if k, err := jobs.Key(ctx, acme); k != "jobs/tenant:acme" || err != nil {
		t.Fatal(k, err)
	}
	if k, err := short.Key(ctx, acme); k != "short" || err != nil {
		t.Fatal(k, err)
	}
	if _, err := jobs.Key(ctx, nil); !errors.Is(err, policies.ErrPartition) {
		t.Fatalf("Key without the partition attribute: %v", err)
	}

	m := scrape(t, h)
	for _, series := range []string{
		`coordhost_lease_acquisitions_total{lease="jobs",outcome="acquired"} 0`,
		`coordhost_lease_acquisitions_total{lease="once",outcome="gave_up"} 0`,
		`coordhost_lease_acquisitions_total{lease="short",outcome="unsupported"} 0`,
		`coordhost_lease_acquisitions_total{lease="short",outcome="partition_failed"} 0`,
	} {
		if !strings.Contains(m, series+"\n") {
			t.Errorf("missing %s", series)
		}
	}

	// The configured ttl (ttl 0), then one asked for, up to max_ttl.
	const hash = "m:coordhost:lease:jobs/tenant:acme"
	a, err := jobs.TryAcquire(ctx, acme, "job-1", 0)
	if err != nil {
		t.Fatal(err)
	}
	if a.Key() != hash || a.Field() != "job-1" {
		t.Fatalf("key %q field %q", a.Key(), a.Field())
	}
	if r, srv := a.Remaining(), hpttl(t, s, hash, "job-1"); r <= 50*time.Second || r > time.Minute || srv <= 50*time.Second || srv > time.Minute {
		t.Fatalf("remaining %v, HPTTL %v; want about the configured 1m", r, srv)
	}
	b, err := jobs.TryAcquire(ctx, acme, "job-2", 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if srv := hpttl(t, s, hash, "job-2"); srv <= 9*time.Minute || srv > 10*time.Minute {
		t.Fatalf("HPTTL %v, want about the max_ttl asked for (10m)", srv)
	}
	c, err := jobs.TryAcquire(ctx, acme, "job-3", 1500*time.Microsecond)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()

	// Contention is per field and per hash.
	if _, err := jobs.TryAcquire(ctx, acme, "job-1", 0); !errors.Is(err, primitives.ErrNotAcquired) {
		t.Fatalf("a held field: %v", err)
	}
	o, err := jobs.TryAcquire(ctx, other, "job-1", 0)
	if err != nil {
		t.Fatalf("the same field in another tenant's hash: %v", err)
	}
	if o.Key() != "m:coordhost:lease:jobs/tenant:other" {
		t.Fatalf("another tenant's hash: %q", o.Key())
	}
	if _, err := jobs.TryAcquire(ctx, nil, "job-1", 0); !errors.Is(err, policies.ErrPartition) {
		t.Fatalf("without the partition attribute: %v", err)
	}

	// Acquire on a held field waits, and a release wakes it long before
	// the holder's minute runs out.
	type result struct {
		l   *lease.Lease
		err error
	}
	wdone := make(chan result, 1)
	go func() {
		l, err := jobs.Acquire(ctx, acme, "job-1", 0)
		wdone <- result{l, err}
	}()
	time.Sleep(100 * time.Millisecond)
	select {
	case r := <-wdone:
		t.Fatalf("Acquire on a held field returned at once: %v", r.err)
	default:
	}
	if ok, err := a.Renew(ctx, time.Minute); !ok || err != nil {
		t.Fatalf("a holder renews: %v, %v", ok, err)
	}
	released := time.Now()
	if res, err := a.Release(ctx); res != primitives.Released || err != nil {
		t.Fatal(res, err)
	}
	var got result
	select {
	case got = <-wdone:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not woken by the release")
	}
	if got.err != nil {
		t.Fatalf("the waiter after a release: %v", got.err)
	}
	t.Logf("the waiter was granted %v after the release", time.Since(released))
	for _, l := range []*lease.Lease{got.l, b, o} {
		if res, err := l.Release(ctx); res != primitives.Released || err != nil {
			t.Fatal(res, err)
		}
	}

	// "once": retry none gives up at once on a held field.
	p, err := once.TryAcquire(ctx, nil, "f", 0)
	if err != nil {
		t.Fatal(err)
	}
	if p.Key() != "m:coordhost:lease:once" {
		t.Fatalf("key %q", p.Key())
	}
	start := time.Now()
	if _, err := once.Acquire(ctx, nil, "f", 0); !errors.Is(err, primitives.ErrNotAcquired) {
		t.Fatalf("Acquire with retry none on a held field: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("retry none waited %v", d)
	}
	p.Close()

	m = scrape(t, h)
	for series, want := range map[string]float64{
		`coordhost_lease_acquisitions_total{lease="jobs",outcome="acquired"}`:          5,
		`coordhost_lease_acquisitions_total{lease="jobs",outcome="not_acquired"}`:      1,
		`coordhost_lease_acquisitions_total{lease="jobs",outcome="partition_failed"}`:  1,
		`coordhost_lease_wait_duration_seconds_count{lease="jobs",outcome="acquired"}`: 5,
		`coordhost_lease_acquisitions_total{lease="once",outcome="acquired"}`:          1,
		`coordhost_lease_acquisitions_total{lease="once",outcome="gave_up"}`:           1,
		`coordhost_lease_acquisitions_total{lease="short",outcome="acquired"}`:         0,
	} {
		if got := metricValue(m, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	if strings.Contains(m, "acme") || strings.Contains(m, "job-1") {
		t.Errorf("a partition key or field leaked into a label:\n%s", grep(m, "lease"))
	}
	if n := s.MustCmd(t, "DBSIZE"); n != "0" {
		t.Errorf("DBSIZE %s after every lease was released: %s", n, s.MustCmd(t, "KEYS", "*"))
	}
}

// A reload that changes ttl and max_ttl applies to the next acquisitions
// (leases granted before keep theirs and keep working); a waiter blocked
// across the reload moves to the new generation; a reload that removes the
// block makes the name unknown.
func TestLeaseReload(t *testing.T) {
	s := redistest.Start(t, redistest.WithKind(redistest.Redis80))
	path := leaseConfig(t, s.Addr)
	h := newHost(t, path)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	short := mustLease(t, h, "short")
	held, err := short.TryAcquire(ctx, nil, "f", 0)
	if err != nil {
		t.Fatal(err)
	}
	wdone := make(chan error, 1)
	var waited *lease.Lease
	go func() {
		var err error
		waited, err = short.Acquire(ctx, nil, "f", 0)
		wdone <- err
	}()
	time.Sleep(100 * time.Millisecond)
	if _, err := short.TryAcquire(ctx, nil, "g", 2*time.Minute); !errors.Is(err, primitives.ErrInvalidTTL) || !strings.Contains(err.Error(), "max_ttl") {
		t.Fatalf("2m before the reload (max_ttl 1m): %v", err)
	}

	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	changed := strings.Replace(string(src), "lease \"short\" {\n  ttl = \"1m\"\n}", "lease \"short\" {\n  ttl     = \"2m\"\n  max_ttl = \"3m\"\n}", 1)
	if changed == string(src) {
		t.Fatal("test config changed shape")
	}
	if err := os.WriteFile(path, []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := h.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if short.TTL() != 2*time.Minute || short.MaxTTL() != 3*time.Minute {
		t.Fatalf("after the reload: ttl %v max_ttl %v", short.TTL(), short.MaxTTL())
	}
	// The lease granted by the retired generation still works; its
	// release wakes the waiter, now in the new generation, which gets the
	// new ttl.
	if ok, err := held.Renew(ctx, time.Minute); !ok || err != nil {
		t.Fatalf("the old generation's lease renews after the reload: %v, %v", ok, err)
	}
	if res, err := held.Release(ctx); res != primitives.Released || err != nil {
		t.Fatalf("the old generation's lease after the reload: %v, %v", res, err)
	}
	select {
	case err := <-wdone:
		if err != nil {
			t.Fatalf("the waiter across the reload: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not move to the new generation")
	}
	if srv := hpttl(t, s, "m:coordhost:lease:short", "f"); srv <= 110*time.Second || srv > 2*time.Minute {
		t.Fatalf("the waiter's HPTTL %v, want about the new ttl 2m", srv)
	}
	waited.Close()
	g, err := short.TryAcquire(ctx, nil, "g", 3*time.Minute)
	if err != nil {
		t.Fatalf("the new max_ttl: %v", err)
	}
	if srv := hpttl(t, s, "m:coordhost:lease:short", "g"); srv <= 170*time.Second || srv > 3*time.Minute {
		t.Fatalf("HPTTL %v, want about 3m", srv)
	}
	g.Close()

	i := strings.Index(changed, `lease "short"`)
	if err := os.WriteFile(path, []byte(changed[:i]), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := h.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := short.TryAcquire(ctx, nil, "f", 0); !errors.Is(err, host.ErrNoLease) {
		t.Fatalf("after the block was removed: %v", err)
	}
	if _, err := short.Key(ctx, nil); !errors.Is(err, host.ErrNoLease) {
		t.Fatalf("Key after the block was removed: %v", err)
	}
	if short.TTL() != 0 || short.MaxTTL() != 0 {
		t.Fatalf("ttl %v max_ttl %v of a removed block", short.TTL(), short.MaxTTL())
	}
	if _, err := h.Lease("short"); !errors.Is(err, host.ErrNoLease) {
		t.Fatalf("Host.Lease of a removed block: %v", err)
	}
}

// On Redis 7.0 (no hash-field expiry) the Host starts with lease blocks,
// and every acquisition fails with primitives.ErrUnsupported saying that
// hash-field leases need Redis 7.4 or newer, writing nothing.
func TestLeaseUnsupportedServer(t *testing.T) {
	s := redistest.Start(t, redistest.WithKind(redistest.Redis70))
	h := newHost(t, leaseConfig(t, s.Addr))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	short := mustLease(t, h, "short")
	for name, call := range map[string]func() (*lease.Lease, error){
		"TryAcquire": func() (*lease.Lease, error) { return short.TryAcquire(ctx, nil, "f", 0) },
		"Acquire":    func() (*lease.Lease, error) { return short.Acquire(ctx, nil, "f", 0) },
		"partitioned": func() (*lease.Lease, error) {
			return mustLease(t, h, "jobs").TryAcquire(ctx, map[string]string{"tenant": "a"}, "f", time.Second)
		},
	} {
		l, err := call()
		if l != nil || !errors.Is(err, primitives.ErrUnsupported) || !strings.Contains(err.Error(), "hash-field leases need") || !strings.Contains(err.Error(), "Redis 7.4 or newer") {
			t.Errorf("%s on Redis 7.0: %v, %v", name, l, err)
		}
	}
	if n := s.MustCmd(t, "DBSIZE"); n != "0" {
		t.Fatalf("DBSIZE %s after refused leases", n)
	}
	m := scrape(t, h)
	if got := metricValue(m, `coordhost_lease_acquisitions_total{lease="short",outcome="unsupported"}`); got != 2 {
		t.Errorf("unsupported outcomes of short: %v, want 2\n%s", got, grep(m, "coordhost_lease_"))
	}
}

// Bad input to a named lease fails with a clear error and writes nothing.
func TestLeaseBadInputs(t *testing.T) {
	s := redistest.Start(t, redistest.WithKind(redistest.Redis80))
	h := newHost(t, leaseConfig(t, s.Addr))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	jobs, short := mustLease(t, h, "jobs"), mustLease(t, h, "short")
	acme := map[string]string{"tenant": "acme"}
	// Keys that are there before: a hash with a key-level TTL (leases
	// would end with it) and a string where a hash is wanted.
	s.MustCmd(t, "HSET", "m:coordhost:lease:jobs/tenant:ttl", "other", "x")
	s.MustCmd(t, "PEXPIRE", "m:coordhost:lease:jobs/tenant:ttl", "600000")
	s.MustCmd(t, "SET", "m:coordhost:lease:jobs/tenant:str", "x")
	dump := func() string {
		return s.MustCmd(t, "DBSIZE") + "|" + s.MustCmd(t, "HGETALL", "m:coordhost:lease:jobs/tenant:ttl") + "|" + s.MustCmd(t, "GET", "m:coordhost:lease:jobs/tenant:str")
	}
	before := dump()
	cancelled, stop := context.WithCancel(ctx)
	stop()
	for _, tc := range []struct {
		name  string
		ctx   context.Context
		l     *host.Lease
		attrs map[string]string
		field string
		ttl   time.Duration
		want  error
		frag  string
	}{
		{"nil ctx", nil, short, nil, "f", 0, primitives.ErrInvalidOptions, "nil context"},
		{"empty field", ctx, short, nil, "", 0, primitives.ErrInvalidKey, "field is empty"},
		{"empty field, partitioned", ctx, jobs, nil, "", 0, primitives.ErrInvalidKey, "field is empty"},
		{"negative ttl", ctx, short, nil, "f", -time.Second, primitives.ErrInvalidTTL, "negative"},
		{"ttl below 1ms", ctx, short, nil, "f", 500 * time.Microsecond, primitives.ErrInvalidTTL, "below 1ms"},
		{"ttl above max_ttl", ctx, short, nil, "f", time.Minute + time.Nanosecond, primitives.ErrInvalidTTL, "max_ttl, 1m0s"},
		{"ttl above a partitioned max_ttl", ctx, jobs, acme, "f", 11 * time.Minute, primitives.ErrInvalidTTL, "max_ttl, 10m0s"},
		{"huge ttl", ctx, jobs, acme, "f", 1<<63 - 1, primitives.ErrInvalidTTL, "max_ttl"},
		{"no partition attribute", ctx, jobs, nil, "f", 0, policies.ErrPartition, "tenant"},
		{"empty partition attribute", ctx, jobs, map[string]string{"tenant": ""}, "f", 0, policies.ErrPartition, ""},
		{"cancelled ctx", cancelled, short, nil, "f", 0, context.Canceled, ""},
		{"hash with a key-level TTL", ctx, jobs, map[string]string{"tenant": "ttl"}, "f", 0, lease.ErrHashHasTTL, "key-level TTL"},
		{"a string at the key", ctx, jobs, map[string]string{"tenant": "str"}, "f", 0, primitives.ErrWrongType, ""},
	} {
		for _, waits := range []bool{false, true} {
			call, fn := "TryAcquire", tc.l.TryAcquire
			if waits {
				call, fn = "Acquire", tc.l.Acquire
			}
			t.Run(tc.name+"/"+call, func(t *testing.T) {
				l, err := fn(tc.ctx, tc.attrs, tc.field, tc.ttl)
				if l != nil || !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.frag) {
					t.Fatalf("got %v, %v; want %v with %q", l, err, tc.want, tc.frag)
				}
				if after := dump(); after != before {
					t.Fatalf("wrote something: %q, was %q", after, before)
				}
			})
		}
	}
	m := scrape(t, h)
	if got := metricValue(m, `coordhost_lease_acquisitions_total{lease="short",outcome="error"}`); got != 10 {
		t.Errorf("bad input counted as %v errors of short, want 10", got)
	}
	if got := metricValue(m, `coordhost_lease_acquisitions_total{lease="jobs",outcome="partition_failed"}`); got != 4 {
		t.Errorf("partition failures of jobs: %v, want 4", got)
	}

	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := short.TryAcquire(ctx, nil, "f", 0); !errors.Is(err, host.ErrClosed) {
		t.Fatalf("TryAcquire after Close: %v", err)
	}
	if _, err := h.Lease("short"); !errors.Is(err, host.ErrClosed) {
		t.Fatalf("Host.Lease after Close: %v", err)
	}
	if after := dump(); after != before {
		t.Fatalf("wrote something: %q, was %q", after, before)
	}
}
