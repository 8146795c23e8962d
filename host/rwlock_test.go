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

	"github.com/coordhost/coordhost/host"
	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/policies"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/rwlock"
)

// rwlockConfig declares three rwlocks: "accounts" with a WASM starvation
// policy (writersfirst.wasm: bound 0 under 4 readers) and a partition
// policy; "reports" with a builtin 1h bound; "plain" with neither
// (reader preference).
func rwlockConfig(t *testing.T, addr string) string {
	t.Helper()
	src := fmt.Sprintf(`
redis {
  addresses  = [%q]
  key_prefix = "m:"
}

policy "starvation" "writers_first" {
  driver = "wasm"
  module = %q
}
policy "starvation" "patient" {
  driver = "builtin"
  bound  = "1h"
}
policy "retry" "none" {
  driver = "builtin"
  kind   = "none"
}
policy "partition" "tenant" {
  driver   = "builtin"
  template = "tenant:$${tenant}"
}

rwlock "accounts" {
  ttl        = "1m"
  starvation = policy.starvation.writers_first
  partition  = policy.partition.tenant
}
rwlock "reports" {
  ttl        = "1m"
  marker_ttl = "500ms"
  starvation = policy.starvation.patient
  retry      = policy.retry.none
}
rwlock "plain" {
  ttl = "1m"
}
`, addr, abs(t, "testdata/writersfirst.wasm"))
	path := filepath.Join(t.TempDir(), "coordhost.hcl")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func mustRWLock(t *testing.T, h *host.Host, name string) *host.RWLock {
	t.Helper()
	l, err := h.RWLock(name)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// A named rwlock serves read and write leases under its prefix and
// partition key; its WASM starvation policy, consulted while a writer
// waits, holds new readers off; its metrics move by name and mode.
func TestRWLock(t *testing.T) {
	s := redistest.Start(t)
	h := newHost(t, rwlockConfig(t, s.Addr))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := h.RWLock("nope"); !errors.Is(err, host.ErrNoRWLock) {
		t.Fatalf("unknown rwlock: %v", err)
	}
	if _, err := h.Lock("accounts"); !errors.Is(err, host.ErrNoLock) {
		t.Fatalf("an rwlock served as a lock: %v", err)
	}
	acc, reports := mustRWLock(t, h, "accounts"), mustRWLock(t, h, "reports")
	if acc.Name() != "accounts" || acc.TTL() != time.Minute {
		t.Fatal(acc.Name(), acc.TTL())
	}
	acme := map[string]string{"tenant": "acme"}
	if k, err := acc.Key(ctx, acme); k != "accounts/tenant:acme" || err != nil {
		t.Fatal(k, err)
	}

	// Every series exists from the start.
	m := scrape(t, h)
	for _, series := range []string{
		`coordhost_rwlock_acquisitions_total{mode="write",outcome="gave_up",rwlock="accounts"} 0`,
		`coordhost_rwlock_acquisitions_total{mode="read",outcome="partition_failed",rwlock="plain"} 0`,
		`coordhost_rwlock_releases_total{mode="read",result="not_owned",rwlock="reports"} 0`,
		`coordhost_rwlock_renewals_total{mode="write",outcome="error",rwlock="plain"} 0`,
		`coordhost_rwlock_lost_total{mode="read",reason="verify",rwlock="accounts"} 0`,
		`coordhost_rwlock_hold_duration_seconds_count{mode="write",rwlock="accounts"} 0`,
	} {
		if !strings.Contains(m, series+"\n") {
			t.Errorf("missing %s", series)
		}
	}

	r, err := acc.TryAcquireRead(ctx, acme)
	if err != nil {
		t.Fatal(err)
	}
	if r.Key() != "m:coordhost:rwlock:accounts/tenant:acme" || r.Mode() != rwlock.Read {
		t.Fatalf("key %q mode %v", r.Key(), r.Mode())
	}
	if _, err := acc.TryAcquireRead(ctx, nil); !errors.Is(err, policies.ErrPartition) {
		t.Fatalf("without the partition attribute: %v", err)
	}
	type result struct {
		l   *rwlock.Lease
		err error
	}
	wdone := make(chan result, 1)
	go func() {
		w, err := acc.AcquireWrite(ctx, acme)
		wdone <- result{w, err}
	}()
	// The policy says 0 with one reader: new readers are held off at once.
	var refused error
	admitted := 0 // readers admitted before the writer's entry was in place
	deadline := time.Now().Add(5 * time.Second)
	for refused == nil && time.Now().Before(deadline) {
		if r2, err := acc.TryAcquireRead(ctx, acme); err == nil {
			admitted++
			r2.Release(ctx)
			time.Sleep(5 * time.Millisecond)
		} else {
			refused = err
		}
	}
	if !errors.Is(refused, primitives.ErrNotAcquired) || !strings.Contains(refused.Error(), "waiting writers") {
		t.Fatalf("readers while a writer waits under the WASM policy: %v", refused)
	}
	if ok, err := r.Renew(ctx, time.Minute); !ok || err != nil {
		t.Fatalf("a holding reader renews: %v, %v", ok, err)
	}
	if res, err := r.Release(ctx); res != primitives.Released || err != nil {
		t.Fatal(res, err)
	}
	got := <-wdone
	if got.err != nil {
		t.Fatal(got.err)
	}
	if res, _ := got.l.Release(ctx); res != primitives.Released {
		t.Fatal(res)
	}

	// "reports": bound 1h and no retry: a contended AcquireWrite gives up
	// and leaves no entry; readers were never held off.
	rr, err := reports.TryAcquireRead(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reports.AcquireWrite(ctx, nil); !errors.Is(err, primitives.ErrNotAcquired) {
		t.Fatalf("reports writer with retry none: %v", err)
	}
	if n := s.MustCmd(t, "EVAL", "return #redis.call('KEYS', ARGV[1])", "0", "*rw-writers*reports*"); n != "0" {
		t.Fatalf("the writer that gave up left its entry (EXISTS %s)", n)
	}
	rr.Release(ctx)

	m = scrape(t, h)
	for series, want := range map[string]float64{
		`coordhost_rwlock_acquisitions_total{mode="read",outcome="acquired",rwlock="accounts"}`:           float64(1 + admitted),
		`coordhost_rwlock_releases_total{mode="read",result="released",rwlock="accounts"}`:                float64(1 + admitted),
		`coordhost_rwlock_acquisitions_total{mode="read",outcome="partition_failed",rwlock="accounts"}`:   1,
		`coordhost_rwlock_acquisitions_total{mode="read",outcome="not_acquired",rwlock="accounts"}`:       1,
		`coordhost_rwlock_acquisitions_total{mode="write",outcome="acquired",rwlock="accounts"}`:          1,
		`coordhost_rwlock_acquisitions_total{mode="write",outcome="gave_up",rwlock="reports"}`:            1,
		`coordhost_rwlock_acquisitions_total{mode="read",outcome="acquired",rwlock="reports"}`:            1,
		`coordhost_rwlock_wait_duration_seconds_count{mode="write",outcome="acquired",rwlock="accounts"}`: 1,
		`coordhost_rwlock_renewals_total{mode="read",outcome="renewed",rwlock="accounts"}`:                1,
		`coordhost_rwlock_releases_total{mode="write",result="released",rwlock="accounts"}`:               1,
		`coordhost_rwlock_hold_duration_seconds_count{mode="write",rwlock="accounts"}`:                    1,
		`coordhost_rwlock_releases_total{mode="read",result="released",rwlock="reports"}`:                 1,
	} {
		if got := metricValue(m, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	// The starvation policies were consulted while the writers waited.
	if got := metricValue(m, `coordhost_policy_calls_total{driver="wasm",kind="starvation",outcome="ok",policy="starvation.writers_first"}`); got < 1 {
		t.Errorf("WASM starvation policy calls: %v\n%s", got, grep(m, "starvation"))
	}
	if got := metricValue(m, `coordhost_policy_calls_total{driver="builtin",kind="starvation",outcome="ok",policy="starvation.patient"}`); got < 1 {
		t.Errorf("builtin starvation policy calls: %v\n%s", got, grep(m, "starvation"))
	}
	if strings.Contains(m, "acme") {
		t.Errorf("a partition key leaked into a label:\n%s", grep(m, "acme"))
	}
	if t.Failed() {
		t.Logf("scrape:\n%s", grep(m, "coordhost_rwlock_"))
	}
}

// A writer waiting when the configuration is reloaded moves to the new
// generation's Locker and is granted there; a reload that removes the
// rwlock makes the name unknown.
func TestRWLockReload(t *testing.T) {
	s := redistest.Start(t)
	path := rwlockConfig(t, s.Addr)
	h := newHost(t, path)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	plain := mustRWLock(t, h, "plain")
	r, err := plain.TryAcquireRead(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	wdone := make(chan error, 1)
	go func() {
		w, err := plain.AcquireWrite(ctx, nil)
		if err == nil {
			w.Release(ctx)
		}
		wdone <- err
	}()
	time.Sleep(100 * time.Millisecond)
	if err := h.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	r.Release(ctx)
	select {
	case err := <-wdone:
		if err != nil {
			t.Fatalf("the writer across the reload: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the writer did not move to the new generation")
	}

	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(src), `rwlock "plain"`)
	if err := os.WriteFile(path, src[:i], 0o644); err != nil {
		t.Fatal(err)
	}
	if err := h.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := plain.TryAcquireRead(ctx, nil); !errors.Is(err, host.ErrNoRWLock) {
		t.Fatalf("after the rwlock was removed: %v", err)
	}
}
