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
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// lockMetricsConfig has builtin policies only (fast to load): "job" waits
// with the default backoff, "never" gives up at once, "tenant" is
// partitioned by the tenant attribute, "short" has a 300ms lease.
func lockMetricsConfig(t *testing.T, addr string) string {
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

lock "job" {
  ttl = "1m"
}
lock "never" {
  ttl   = "1m"
  retry = policy.retry.none
}
lock "tenant" {
  ttl       = "1m"
  partition = policy.partition.tenant
}
lock "short" {
  ttl = "300ms"
}
`, addr)
	path := filepath.Join(t.TempDir(), "coordhost.hcl")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func mustLock(t *testing.T, h *host.Host, name string) *host.Lock {
	t.Helper()
	l, err := h.Lock(name)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Each lock metric moves as docs/metrics.md says, labelled by the
// configured lock name, never by the (partitioned) key; the Go and process
// collectors are exported too.
func TestLockMetrics(t *testing.T) {
	s := redistest.Start(t)
	path := lockMetricsConfig(t, s.Addr)
	h := newHost(t, path)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	job, never, tenant, short := mustLock(t, h, "job"), mustLock(t, h, "never"), mustLock(t, h, "tenant"), mustLock(t, h, "short")

	// Every outcome series of a configured lock exists from the start.
	m := scrape(t, h)
	for _, series := range []string{
		`coordhost_lock_acquisitions_total{lock="job",outcome="gave_up"} 0`,
		`coordhost_lock_acquisitions_total{lock="job",outcome="partition_failed"} 0`,
		`coordhost_lock_renewals_total{lock="job",outcome="error"} 0`,
		`coordhost_lock_releases_total{lock="job",result="not_owned"} 0`,
		`coordhost_lock_lost_total{lock="job",reason="verify"} 0`,
		`coordhost_lock_hold_duration_seconds_count{lock="job"} 0`,
	} {
		if !strings.Contains(m, series+"\n") {
			t.Errorf("missing %s", series)
		}
	}

	// Acquisitions, one per outcome the host can tell apart.
	a, err := job.TryAcquire(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := job.TryAcquire(ctx, nil); !errors.Is(err, primitives.ErrNotAcquired) {
		t.Fatal(err)
	}
	n1, err := never.TryAcquire(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := never.Acquire(ctx, nil); !errors.Is(err, primitives.ErrNotAcquired) {
		t.Fatal(err)
	}
	short300, cancel300 := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = job.Acquire(short300, nil)
	cancel300()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatal(err)
	}
	cancelled, cancelNow := context.WithCancel(ctx)
	cancelNow()
	if _, err := job.Acquire(cancelled, nil); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if _, err := tenant.TryAcquire(ctx, nil); !errors.Is(err, policies.ErrPartition) {
		t.Fatal(err)
	}
	acme, err := tenant.TryAcquire(ctx, map[string]string{"tenant": "acme"})
	if err != nil {
		t.Fatal(err)
	}

	// Renewals: renewed; then the key is deleted from outside, and the
	// next renewal finds it gone.
	if ok, err := a.Renew(ctx, time.Minute); !ok || err != nil {
		t.Fatal(ok, err)
	}
	s.MustCmd(t, "DEL", a.Key())
	if ok, err := a.Renew(ctx, time.Minute); ok || err != nil {
		t.Fatal(ok, err)
	}
	if r, _ := a.Release(ctx); r != primitives.AlreadyReleased {
		t.Fatal(r)
	}

	// Releases: one held and released; Verify finding another owner;
	// Release finding another owner; Release finding no key; a lease that
	// ran out before Release.
	b, err := job.TryAcquire(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := b.Release(ctx); r != primitives.Released {
		t.Fatal(r)
	}
	v, err := job.TryAcquire(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.MustCmd(t, "SET", v.Key(), "someone-else")
	if ok, err := v.Verify(ctx); ok || err != nil {
		t.Fatal(ok, err)
	}
	if r, _ := v.Release(ctx); r != primitives.NotOwned {
		t.Fatal(r)
	}
	s.MustCmd(t, "DEL", v.Key())
	o, err := job.TryAcquire(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.MustCmd(t, "SET", o.Key(), "someone-else")
	if r, _ := o.Release(ctx); r != primitives.NotOwned {
		t.Fatal(r)
	}
	s.MustCmd(t, "DEL", o.Key())
	d, err := job.TryAcquire(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.MustCmd(t, "DEL", d.Key())
	if r, _ := d.Release(ctx); r != primitives.AlreadyReleased {
		t.Fatal(r)
	}
	e, err := short.TryAcquire(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-e.Done() // the local estimate ran out
	e.Release(ctx)

	// A lock granted before a reload, released after it, is counted under
	// the same name; counters survive the reload.
	if err := h.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if r, _ := n1.Release(ctx); r != primitives.Released {
		t.Fatal(r)
	}
	if r, _ := acme.Release(ctx); r != primitives.Released {
		t.Fatal(r)
	}

	m = scrape(t, h)
	for series, want := range map[string]float64{
		`coordhost_lock_acquisitions_total{lock="job",outcome="acquired"}`:            5,
		`coordhost_lock_acquisitions_total{lock="job",outcome="not_acquired"}`:        1,
		`coordhost_lock_acquisitions_total{lock="job",outcome="deadline_exceeded"}`:   1,
		`coordhost_lock_acquisitions_total{lock="job",outcome="cancelled"}`:           1,
		`coordhost_lock_acquisitions_total{lock="job",outcome="gave_up"}`:             0,
		`coordhost_lock_acquisitions_total{lock="job",outcome="error"}`:               0,
		`coordhost_lock_acquisitions_total{lock="never",outcome="acquired"}`:          1,
		`coordhost_lock_acquisitions_total{lock="never",outcome="gave_up"}`:           1,
		`coordhost_lock_acquisitions_total{lock="tenant",outcome="partition_failed"}`: 1,
		`coordhost_lock_acquisitions_total{lock="tenant",outcome="acquired"}`:         1,
		`coordhost_lock_acquisitions_total{lock="short",outcome="acquired"}`:          1,

		`coordhost_lock_wait_duration_seconds_count{lock="job",outcome="acquired"}`:          5,
		`coordhost_lock_wait_duration_seconds_count{lock="job",outcome="deadline_exceeded"}`: 1,
		`coordhost_lock_wait_duration_seconds_count{lock="never",outcome="gave_up"}`:         1,

		`coordhost_lock_renewals_total{lock="job",outcome="renewed"}`: 1,
		`coordhost_lock_renewals_total{lock="job",outcome="lost"}`:    1,
		`coordhost_lock_renewals_total{lock="job",outcome="error"}`:   0,

		`coordhost_lock_releases_total{lock="job",result="released"}`:         1,
		`coordhost_lock_releases_total{lock="job",result="already_released"}`: 2,
		`coordhost_lock_releases_total{lock="job",result="not_owned"}`:        2,
		`coordhost_lock_releases_total{lock="job",result="error"}`:            0,
		`coordhost_lock_releases_total{lock="never",result="released"}`:       1,
		`coordhost_lock_releases_total{lock="tenant",result="released"}`:      1,

		`coordhost_lock_hold_duration_seconds_count{lock="job"}`:    1,
		`coordhost_lock_hold_duration_seconds_count{lock="never"}`:  1,
		`coordhost_lock_hold_duration_seconds_count{lock="tenant"}`: 1,

		`coordhost_lock_lost_total{lock="job",reason="renew_refused"}`:     1,
		`coordhost_lock_lost_total{lock="job",reason="renew_uncertain"}`:   0,
		`coordhost_lock_lost_total{lock="job",reason="verify"}`:            1,
		`coordhost_lock_lost_total{lock="job",reason="release_not_owned"}`: 1,
		`coordhost_lock_lost_total{lock="job",reason="release_absent"}`:    1,
		`coordhost_lock_lost_total{lock="job",reason="expired"}`:           0,
		`coordhost_lock_lost_total{lock="short",reason="expired"}`:         1,
		`coordhost_lock_lost_total{lock="never",reason="expired"}`:         0,
	} {
		if got := metricValue(m, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	if t.Failed() {
		t.Fatalf("scrape:\n%s", grep(m, "coordhost_lock_"))
	}
	// The short lease's release answer depends on the server's expiry;
	// it was counted once either way, with no hold time.
	shortReleases := metricValue(m, `coordhost_lock_releases_total{lock="short",result="released"}`) +
		metricValue(m, `coordhost_lock_releases_total{lock="short",result="already_released"}`)
	if shortReleases != 1 {
		t.Errorf("short lease: %v releases counted, want 1", shortReleases)
	}
	if v := metricValue(m, `coordhost_lock_wait_duration_seconds_sum{lock="job",outcome="deadline_exceeded"}`); v <= 0 {
		t.Errorf("wait of the deadline-bound Acquire: %vs", v)
	}
	if strings.Contains(m, "acme") {
		t.Errorf("a partition key leaked into a label:\n%s", grep(m, "acme"))
	}
	for _, name := range []string{"go_goroutines", "go_memstats_alloc_bytes", "process_cpu_seconds_total", "process_resident_memory_bytes"} {
		if !strings.Contains(m, "\n"+name+" ") {
			t.Errorf("no %s: the Go and process collectors are missing", name)
		}
	}
	// The registry is consistent (Gather checks it).
	if _, err := h.Registry().Gather(); err != nil {
		t.Errorf("Gather: %v", err)
	}
}

func newHostOn(t *testing.T, ctx context.Context, path string, reg *prometheus.Registry) (*host.Host, error) {
	t.Helper()
	cfg, diags := config.Load(path, config.LoadOptions{})
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	return host.New(ctx, cfg, host.Options{Logger: quietLogger(t), Registry: reg})
}

func gathered(t *testing.T, reg *prometheus.Registry) map[string]bool {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	return names
}

// A registry can serve Host after Host: the Go and process collectors
// register without a panic, whether the registry's owner registered one
// already (it stays after Close) or the Host did (it goes at Close). A
// second Host on a registry in use is refused and leaves the first's
// metrics in place.
func TestMetricsRegistryReuse(t *testing.T) {
	s := redistest.Start(t)
	path := lockMetricsConfig(t, s.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector()) // the embedder's
	h1, err := newHostOn(t, ctx, path, reg)
	if err != nil {
		t.Fatal(err)
	}
	h1.Handler()
	m := scrape(t, h1) // a second Handler on the same registry
	if !strings.Contains(m, "\ngo_goroutines ") || !strings.Contains(m, "\nprocess_cpu_seconds_total ") {
		t.Fatalf("runtime metrics missing:\n%s", m)
	}
	if _, err := newHostOn(t, ctx, path, reg); err == nil {
		t.Fatal("a second Host registered on a registry in use")
	}
	if names := gathered(t, reg); !names["coordhost_config_generation"] || !names["coordhost_lock_acquisitions_total"] {
		t.Fatalf("the refused Host removed the first one's metrics: %v", names)
	}
	if err := h1.Close(); err != nil {
		t.Fatal(err)
	}
	names := gathered(t, reg)
	if !names["go_goroutines"] {
		t.Error("Close unregistered the embedder's Go collector")
	}
	if names["process_cpu_seconds_total"] || names["coordhost_config_generation"] {
		t.Errorf("Close left the Host's collectors registered: %v", names)
	}

	for i := range 2 {
		h, err := newHostOn(t, ctx, path, reg)
		if err != nil {
			t.Fatalf("Host %d on a reused registry: %v", i+2, err)
		}
		names := gathered(t, reg)
		if !names["process_cpu_seconds_total"] || !names["coordhost_lock_lost_total"] {
			t.Errorf("Host %d: metrics missing: %v", i+2, names)
		}
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
