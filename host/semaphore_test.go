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
	"github.com/coordhost/coordhost/primitives/semaphore"
)

// semaphoreConfig declares three semaphores: "jobs" (capacity 2, 1m
// permits, partitioned by tenant), "once" (capacity 1, permits without
// expiry, retry none) and "short" (capacity 1, 1m permits, no policies).
func semaphoreConfig(t *testing.T, addr string) string {
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

semaphore "jobs" {
  capacity  = 2
  ttl       = "1m"
  partition = policy.partition.tenant
}
semaphore "once" {
  capacity = 1
  ttl      = "none"
  retry    = policy.retry.none
}
semaphore "short" {
  capacity = 1
  ttl      = "1m"
}
`, addr)
	path := filepath.Join(t.TempDir(), "coordhost.hcl")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func mustSemaphore(t *testing.T, h *host.Host, name string) *host.Semaphore {
	t.Helper()
	s, err := h.Semaphore(name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// config keeps copies of package semaphore's limits: they must agree.
func TestSemaphoreConfigLimitsMatch(t *testing.T) {
	if config.MaxSemaphoreCapacity != semaphore.MaxCapacity || config.SemaphoreNoExpiry != semaphore.NoExpiry || config.MaxSemaphoreTTL != semaphore.MaxTTL {
		t.Fatalf("config %v %v %v, semaphore %v %v %v", config.MaxSemaphoreCapacity, config.SemaphoreNoExpiry, config.MaxSemaphoreTTL,
			semaphore.MaxCapacity, semaphore.NoExpiry, semaphore.MaxTTL)
	}
}

// A named semaphore grants permits of its capacity and ttl under its
// prefix and partition key; Acquire waits for a release; "none" permits
// never expire; a capacity mismatch has its own outcome; its metrics move
// by name only.
func TestSemaphore(t *testing.T) {
	s := redistest.Start(t)
	h := newHost(t, semaphoreConfig(t, s.Addr))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := h.Semaphore("nope"); !errors.Is(err, host.ErrNoSemaphore) {
		t.Fatalf("unknown semaphore: %v", err)
	}
	if _, err := h.Lock("jobs"); !errors.Is(err, host.ErrNoLock) {
		t.Fatalf("a semaphore served as a lock: %v", err)
	}
	jobs, once, short := mustSemaphore(t, h, "jobs"), mustSemaphore(t, h, "once"), mustSemaphore(t, h, "short")
	if jobs.Name() != "jobs" || jobs.Capacity() != 2 || jobs.TTL() != time.Minute || once.TTL() != semaphore.NoExpiry {
		t.Fatal(jobs.Name(), jobs.Capacity(), jobs.TTL(), once.TTL())
	}
	acme, other := map[string]string{"tenant": "acme"}, map[string]string{"tenant": "other"}
	if k, err := jobs.Key(ctx, acme); k != "jobs/tenant:acme" || err != nil {
		t.Fatal(k, err)
	}

	// Every series exists from the start.
	m := scrape(t, h)
	for _, series := range []string{
		`coordhost_semaphore_acquisitions_total{outcome="gave_up",semaphore="jobs"} 0`,
		`coordhost_semaphore_acquisitions_total{outcome="capacity_mismatch",semaphore="short"} 0`,
		`coordhost_semaphore_acquisitions_total{outcome="partition_failed",semaphore="once"} 0`,
		`coordhost_semaphore_releases_total{result="not_owned",semaphore="once"} 0`,
		`coordhost_semaphore_renewals_total{outcome="error",semaphore="short"} 0`,
		`coordhost_semaphore_lost_total{reason="verify",semaphore="jobs"} 0`,
		`coordhost_semaphore_hold_duration_seconds_count{semaphore="jobs"} 0`,
		`coordhost_semaphore_abandoned_total{reason="noperm",semaphore="jobs",stage="acquire"} 0`,
		`coordhost_semaphore_abandoned_total{reason="closed",semaphore="once",stage="release"} 0`,
	} {
		if !strings.Contains(m, series+"\n") {
			t.Errorf("missing %s", series)
		}
	}

	// "jobs": two permits per tenant, a third waits for a release.
	p1, err := jobs.TryAcquire(ctx, acme)
	if err != nil {
		t.Fatal(err)
	}
	if p1.Key() != "m:coordhost:semaphore:jobs/tenant:acme" || p1.Capacity() != 2 || p1.NoExpiry() {
		t.Fatalf("key %q capacity %d no expiry %v", p1.Key(), p1.Capacity(), p1.NoExpiry())
	}
	if r := p1.Remaining(); r <= 50*time.Second || r > time.Minute {
		t.Fatalf("remaining %v, want about the configured 1m", r)
	}
	p2, err := jobs.TryAcquire(ctx, acme)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jobs.TryAcquire(ctx, acme); !errors.Is(err, primitives.ErrNotAcquired) {
		t.Fatalf("a third permit of capacity 2: %v", err)
	}
	po, err := jobs.TryAcquire(ctx, other)
	if err != nil {
		t.Fatalf("another tenant's semaphore: %v", err)
	}
	if _, err := jobs.TryAcquire(ctx, nil); !errors.Is(err, policies.ErrPartition) {
		t.Fatalf("without the partition attribute: %v", err)
	}
	type result struct {
		p   *semaphore.Permit
		err error
	}
	wdone := make(chan result, 1)
	go func() {
		p, err := jobs.Acquire(ctx, acme)
		wdone <- result{p, err}
	}()
	time.Sleep(50 * time.Millisecond)
	select {
	case r := <-wdone:
		t.Fatalf("Acquire on a full semaphore returned at once: %v", r.err)
	default:
	}
	if ok, err := p2.Renew(ctx, time.Minute); !ok || err != nil {
		t.Fatalf("a holder renews: %v, %v", ok, err)
	}
	if res, err := p1.Release(ctx); res != primitives.Released || err != nil {
		t.Fatal(res, err)
	}
	got := <-wdone
	if got.err != nil {
		t.Fatalf("the waiter after a release: %v", got.err)
	}
	for _, p := range []*semaphore.Permit{got.p, p2, po} {
		if res, err := p.Release(ctx); res != primitives.Released || err != nil {
			t.Fatal(res, err)
		}
	}

	// "once": a permit without expiry; with retry none a full semaphore's
	// Acquire gives up at once; a permit removed from outside is lost.
	pf, err := once.TryAcquire(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !pf.NoExpiry() || s.MustCmd(t, "PTTL", "m:coordhost:semaphore:once") != "-1" {
		t.Fatalf("ttl none: NoExpiry %v, PTTL %s", pf.NoExpiry(), s.MustCmd(t, "PTTL", "m:coordhost:semaphore:once"))
	}
	if _, err := once.Acquire(ctx, nil); !errors.Is(err, primitives.ErrNotAcquired) {
		t.Fatalf("Acquire with retry none on a full semaphore: %v", err)
	}
	s.MustCmd(t, "DEL", "m:coordhost:semaphore:once")
	if ok, err := pf.Verify(ctx); ok || err != nil {
		t.Fatalf("Verify after DEL: %v, %v", ok, err)
	}
	if res, _ := pf.Release(ctx); res != primitives.AlreadyReleased {
		t.Fatalf("Release after DEL: %v", res)
	}

	// "short": a contender with another capacity holds the key, so the
	// host's acquisition is a capacity mismatch; once it leaves, the
	// configured capacity applies.
	raw, err := semaphore.New(s.Client(t), semaphore.Options{Prefix: "m:coordhost:semaphore:"})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	rp, err := raw.TryAcquire(ctx, "short", 3, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := short.TryAcquire(ctx, nil); !errors.Is(err, semaphore.ErrCapacityMismatch) {
		t.Fatalf("capacity 1 against live permits of capacity 3: %v", err)
	}
	rp.Release(ctx)
	ps, err := short.TryAcquire(ctx, nil)
	if err != nil || ps.Capacity() != 1 {
		t.Fatal(ps, err)
	}
	ps.Close()

	m = scrape(t, h)
	for series, want := range map[string]float64{
		`coordhost_semaphore_acquisitions_total{outcome="acquired",semaphore="jobs"}`:           4,
		`coordhost_semaphore_acquisitions_total{outcome="not_acquired",semaphore="jobs"}`:       1,
		`coordhost_semaphore_acquisitions_total{outcome="partition_failed",semaphore="jobs"}`:   1,
		`coordhost_semaphore_wait_duration_seconds_count{outcome="acquired",semaphore="jobs"}`:  4,
		`coordhost_semaphore_renewals_total{outcome="renewed",semaphore="jobs"}`:                1,
		`coordhost_semaphore_releases_total{result="released",semaphore="jobs"}`:                4,
		`coordhost_semaphore_hold_duration_seconds_count{semaphore="jobs"}`:                     4,
		`coordhost_semaphore_acquisitions_total{outcome="acquired",semaphore="once"}`:           1,
		`coordhost_semaphore_acquisitions_total{outcome="gave_up",semaphore="once"}`:            1,
		`coordhost_semaphore_lost_total{reason="verify",semaphore="once"}`:                      1,
		`coordhost_semaphore_releases_total{result="already_released",semaphore="once"}`:        1,
		`coordhost_semaphore_acquisitions_total{outcome="capacity_mismatch",semaphore="short"}`: 1,
		`coordhost_semaphore_acquisitions_total{outcome="acquired",semaphore="short"}`:          1,
		`coordhost_semaphore_releases_total{result="released",semaphore="short"}`:               1,
	} {
		if got := metricValue(m, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	if strings.Contains(m, "acme") {
		t.Errorf("a partition key leaked into a label:\n%s", grep(m, "acme"))
	}
	if t.Failed() {
		t.Logf("scrape:\n%s", grep(m, "coordhost_semaphore_"))
	}
}

// A waiter blocked when the configuration is reloaded moves to the new
// generation's Semaphores and is granted there; a reload that removes the
// semaphore makes the name unknown.
func TestSemaphoreReload(t *testing.T) {
	s := redistest.Start(t)
	path := semaphoreConfig(t, s.Addr)
	h := newHost(t, path)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	short := mustSemaphore(t, h, "short")
	p, err := short.TryAcquire(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	wdone := make(chan error, 1)
	go func() {
		w, err := short.Acquire(ctx, nil)
		if err == nil {
			w.Release(ctx)
		}
		wdone <- err
	}()
	time.Sleep(100 * time.Millisecond)
	if err := h.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	// The permit granted by the retired generation still works.
	if res, err := p.Release(ctx); res != primitives.Released || err != nil {
		t.Fatalf("the old generation's permit after the reload: %v, %v", res, err)
	}
	select {
	case err := <-wdone:
		if err != nil {
			t.Fatalf("the waiter across the reload: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not move to the new generation")
	}

	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(src), `semaphore "short"`)
	if err := os.WriteFile(path, src[:i], 0o644); err != nil {
		t.Fatal(err)
	}
	if err := h.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := short.TryAcquire(ctx, nil); !errors.Is(err, host.ErrNoSemaphore) {
		t.Fatalf("after the semaphore was removed: %v", err)
	}
	if short.Capacity() != 0 || short.TTL() != 0 {
		t.Fatalf("capacity %d ttl %v of a removed semaphore", short.Capacity(), short.TTL())
	}
}

// A background release that gives up is counted by stage and reason: a
// permit's Close against a paused server hands its release to the
// background; a reload retires that generation's Semaphores, whose last
// attempt fails too, so the cleanup is abandoned with reason "closed" (and
// the permit, taken without expiry, stays until someone removes it).
func TestSemaphoreAbandonedCounter(t *testing.T) {
	s := redistest.Start(t)
	h := newHost(t, semaphoreConfig(t, s.Addr))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := mustSemaphore(t, h, "once").TryAcquire(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Pause()
	resumed := false
	defer func() {
		if !resumed {
			s.Resume()
		}
	}()
	if err := p.Close(); !errors.Is(err, primitives.ErrUncertain) {
		t.Fatalf("Close against a paused server: %v", err)
	}
	if err := h.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	series := `coordhost_semaphore_abandoned_total{reason="closed",semaphore="once",stage="release"}`
	xtest.Eventually(t, 10*time.Second, "the abandoned cleanup is counted", func() bool {
		return metricValue(scrape(t, h), series) == 1
	})
	s.Resume()
	resumed = true
	m := scrape(t, h)
	if got := metricValue(m, `coordhost_semaphore_releases_total{result="error",semaphore="once"}`); got < 2 {
		t.Errorf("release errors %v, want Close's and the last background attempt's (>= 2)", got)
	}
	if got := metricValue(m, `coordhost_semaphore_abandoned_total{reason="timeout",semaphore="once",stage="release"}`); got != 0 {
		t.Errorf("abandoned by timeout: %v", got)
	}
	if n := s.MustCmd(t, "ZCARD", "m:coordhost:semaphore:once"); n != "1" {
		t.Errorf("the abandoned permit without expiry: ZCARD %s, want 1", n)
	}
}
