package host_test

import (
	"context"
	"errors"
	"fmt"
	"net"
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
	"github.com/coordhost/coordhost/primitives/redlock"
)

// The config package keeps its own copy of the redlock defaults (it may
// not import primitives): they must agree.
func TestRedlockDefaultsAgree(t *testing.T) {
	if config.DefaultRedlockMaxTTL != redlock.DefaultMaxTTL || config.DefaultRedlockDrift != redlock.DefaultDrift ||
		config.DefaultRedlockDriftFactor != redlock.DefaultDriftFactor || config.MinRedlockNodes != redlock.MinNodes {
		t.Fatal("config's redlock defaults differ from primitives/redlock's")
	}
}

func redlockConfig(t *testing.T, main string, nodes []string) string {
	t.Helper()
	q := make([]string, len(nodes))
	for i, a := range nodes {
		q[i] = fmt.Sprintf("%q", a)
	}
	src := fmt.Sprintf(`
redis {
  addresses  = [%q]
  key_prefix = "m:"
}
policy "partition" "tenant" {
  driver   = "builtin"
  template = "$${tenant}"
}
redlock "invoice" {
  addresses    = [%s]
  ttl          = "1s"
  max_ttl      = "1s"
  node_timeout = "50ms"
}
redlock "tenant" {
  addresses = [%[2]s]
  ttl       = "1s"
  max_ttl   = "1s"
  partition = policy.partition.tenant
}
`, main, strings.Join(q, ", "))
	path := filepath.Join(t.TempDir(), "coordhost.hcl")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// A redlock block is served by name on clients the Host builds for its
// nodes: acquisition (waiting out the restart guard on fresh servers),
// contention, partitioning, a reload that keeps granted locks working,
// and the metrics per redlock.
func TestRedlockNamed(t *testing.T) {
	main := redistest.Start(t)
	var nodes []*redistest.Server
	var addrs []string
	for range 3 {
		s := redistest.Start(t)
		nodes = append(nodes, s)
		addrs = append(addrs, s.Addr)
	}
	h := newHost(t, redlockConfig(t, main.Addr, addrs))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := h.Redlock("nope"); !errors.Is(err, host.ErrNoRedlock) {
		t.Fatal(err)
	}
	rl, err := h.Redlock("invoice")
	if err != nil {
		t.Fatal(err)
	}
	if rl.Name() != "invoice" || rl.TTL() != time.Second {
		t.Fatal(rl.Name(), rl.TTL())
	}
	m := scrape(t, h)
	for _, series := range []string{
		`coordhost_redlock_acquisitions_total{outcome="gave_up",redlock="invoice"} 0`,
		`coordhost_redlock_releases_total{redlock="invoice",result="not_owned"} 0`,
		`coordhost_redlock_node_restarts_total{node="2",redlock="invoice"} 0`,
		`coordhost_redlock_hold_duration_seconds_count{redlock="invoice"} 0`,
	} {
		if !strings.Contains(m, series+"\n") {
			t.Errorf("missing %s", series)
		}
	}
	l, err := rl.Acquire(ctx, nil) // the fresh nodes sit out about a second
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range nodes {
		if v := s.MustCmd(t, "GET", "m:coordhost:redlock:invoice"); v != l.Token() {
			t.Fatalf("node %d holds %q", i, v)
		}
	}
	if main.MustCmd(t, "DBSIZE") != "0" {
		t.Fatal("the redlock wrote to the redis block's server")
	}
	if _, err := rl.TryAcquire(ctx, nil); !errors.Is(err, primitives.ErrNotAcquired) {
		t.Fatal(err)
	}
	tenant, err := h.Redlock("tenant")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tenant.TryAcquire(ctx, nil); !errors.Is(err, policies.ErrPartition) {
		t.Fatal(err)
	}
	tl, err := tenant.Acquire(ctx, map[string]string{"tenant": "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if tl.Key() != "m:coordhost:redlock:tenant/acme" {
		t.Fatal(tl.Key())
	}
	// A reload: the locks granted before it still renew and release.
	if err := h.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := l.Renew(ctx, time.Second); !ok || err != nil {
		t.Fatalf("Renew after a reload: %v, %v", ok, err)
	}
	if r, err := l.Release(ctx); r != primitives.Released || err != nil {
		t.Fatalf("Release after a reload: %v, %v", r, err)
	}
	tl.Release(ctx)

	m = scrape(t, h)
	for series, want := range map[string]float64{
		`coordhost_redlock_acquisitions_total{outcome="acquired",redlock="invoice"}`:        1,
		`coordhost_redlock_acquisitions_total{outcome="not_acquired",redlock="invoice"}`:    1,
		`coordhost_redlock_acquisitions_total{outcome="partition_failed",redlock="tenant"}`: 1,
		`coordhost_redlock_releases_total{redlock="invoice",result="released"}`:             1,
		`coordhost_redlock_renewals_total{outcome="renewed",redlock="invoice"}`:             1,
		`coordhost_redlock_hold_duration_seconds_count{redlock="invoice"}`:                  1,
	} {
		if got := metricValue(m, series); got != want {
			t.Errorf("%s = %v, want %v\n%s", series, got, want, grep(m, "coordhost_redlock_"))
		}
	}
	// Every node was met young: each one sat out once (restart guard).
	var restarts float64
	for i := range 3 {
		restarts += metricValue(m, fmt.Sprintf(`coordhost_redlock_node_restarts_total{node="%d",redlock="invoice"}`, i))
	}
	if restarts != 3 {
		t.Errorf("node restarts %v, want 3\n%s", restarts, grep(m, "restarts"))
	}
}

// A node that is down when the Host starts does not stop it: the Host
// logs it, and the redlock works on the other two.
func TestRedlockNodeDownAtStart(t *testing.T) {
	main := redistest.Start(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	a, b := redistest.Start(t), redistest.Start(t)
	h := newHost(t, redlockConfig(t, main.Addr, []string{a.Addr, b.Addr, dead}))
	rl, err := h.Redlock("invoice")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lk, err := rl.Acquire(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := lk.Release(ctx); r != primitives.Released || err != nil {
		t.Fatal(r, err)
	}
}
