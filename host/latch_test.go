package host_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/config"
	"github.com/coordhost/coordhost/host"
	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/policies"
	"github.com/coordhost/coordhost/primitives/latch"
)

// latchConfig declares latches with every attribute: "batch" with
// defaults, "tenant" partitioned, "forever" never expiring, "hour" with a
// TTL, a recheck and a retry policy; extra is appended (for reloads).
func latchConfig(t *testing.T, path, addr, extra string) string {
	t.Helper()
	src := fmt.Sprintf(`
redis {
  addresses  = [%q]
  key_prefix = "m:"
}

policy "retry" "fast" {
  driver = "builtin"
  kind   = "constant"
  delay  = "10ms"
}

policy "partition" "tenant" {
  driver   = "builtin"
  template = "$${tenant}"
}

latch "batch" {}
latch "tenant" {
  partition = policy.partition.tenant
}
latch "forever" {
  ttl = "none"
}
latch "hour" {
  ttl     = "1h"
  recheck = "100ms"
  prefix  = "l:"
  retry   = policy.retry.fast
}
%s`, addr, extra)
	if path == "" {
		path = filepath.Join(t.TempDir(), "coordhost.hcl")
	}
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func mustLatch(t *testing.T, h *host.Host, name string) *host.Latch {
	t.Helper()
	l, err := h.Latch(name)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// config keeps copies of package latch's limits: they must agree.
func TestLatchConfigLimitsMatch(t *testing.T) {
	if config.MaxLatchTTL != latch.MaxTTL || config.LatchNoExpiry != latch.NoExpiry || config.MinLatchRecheck != latch.MinRecheckInterval {
		t.Fatalf("config %v %v %v, latch %v %v %v", config.MaxLatchTTL, config.LatchNoExpiry, config.MinLatchRecheck,
			latch.MaxTTL, latch.NoExpiry, latch.MinRecheckInterval)
	}
}

// Named latches: keys from the name, the prefixes and the partition
// policy; TTLs as configured; calls by generation; metrics by name.
func TestNamedLatches(t *testing.T) {
	s := redistest.Start(t)
	h := newHost(t, latchConfig(t, "", s.Addr, ""))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := h.Latch("nope"); !errors.Is(err, host.ErrNoLatch) {
		t.Fatalf("unknown latch: %v", err)
	}
	batch, tenant, forever, hour := mustLatch(t, h, "batch"), mustLatch(t, h, "tenant"), mustLatch(t, h, "forever"), mustLatch(t, h, "hour")

	// Every counter series exists from the start.
	m := scrape(t, h)
	for _, series := range []string{
		`coordhost_latch_operations_total{latch="batch",op="create",outcome="exists"} 0`,
		`coordhost_latch_operations_total{latch="batch",op="count_down",outcome="completed"} 0`,
		`coordhost_latch_operations_total{latch="hour",op="join",outcome="partition_failed"} 0`,
	} {
		if !strings.Contains(m, series+"\n") {
			t.Errorf("missing %s", series)
		}
	}

	l, err := batch.Create(ctx, nil, 2)
	if err != nil {
		t.Fatal(err)
	}
	if l.Key() != "m:coordhost:latch:batch" {
		t.Fatalf("key %q", l.Key())
	}
	if pttl, _ := strconv.ParseInt(s.MustCmd(t, "PTTL", l.Key()), 10, 64); pttl < latch.DefaultTTL.Milliseconds()-60_000 {
		t.Fatalf("PTTL %d", pttl)
	}
	if _, err := batch.Create(ctx, nil, 2); !errors.Is(err, latch.ErrExists) {
		t.Fatal(err)
	}
	done := make(chan bool, 1)
	go func() {
		ok, err := batch.Wait(ctx, nil, l.Generation())
		if err != nil {
			t.Error(err)
		}
		done <- ok
	}()
	j, err := batch.Join(ctx, nil)
	if err != nil || j.Generation() != l.Generation() {
		t.Fatalf("Join: %v", err)
	}
	if n, err := batch.CountDown(ctx, nil, l.Generation()); n != 1 || err != nil {
		t.Fatal(n, err)
	}
	if n, err := batch.Count(ctx, nil, l.Generation()); n != 1 || err != nil {
		t.Fatal(n, err)
	}
	if n, err := batch.CountDown(ctx, nil, l.Generation()); n != 0 || err != nil {
		t.Fatal(n, err)
	}
	if !<-done {
		t.Fatal("Wait returned false")
	}
	if _, err := batch.CountDown(ctx, nil, l.Generation()); !errors.Is(err, latch.ErrCompleted) {
		t.Fatal(err)
	}
	r, err := batch.Reset(ctx, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := batch.CountDown(ctx, nil, "not-a-generation"); n != -1 || err != nil {
		t.Fatal(n, err)
	}
	if _, err := batch.CountDown(ctx, nil, ""); !errors.Is(err, latch.ErrInvalidGeneration) {
		t.Fatal(err)
	}

	// Partitioned: the key follows the attribute; no attribute fails closed.
	if _, err := tenant.Create(ctx, nil, 1); !errors.Is(err, policies.ErrPartition) {
		t.Fatal(err)
	}
	acme, err := tenant.Create(ctx, map[string]string{"tenant": "acme"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if acme.Key() != "m:coordhost:latch:tenant/acme" {
		t.Fatalf("key %q", acme.Key())
	}
	if _, err := tenant.Join(ctx, map[string]string{"tenant": "other"}); !errors.Is(err, latch.ErrNotFound) {
		t.Fatal(err)
	}

	// TTLs.
	f, err := forever.Create(ctx, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	if p := s.MustCmd(t, "PTTL", f.Key()); p != "-1" {
		t.Fatalf("ttl none: PTTL %s", p)
	}
	hl, err := hour.Create(ctx, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	if pttl, _ := strconv.ParseInt(s.MustCmd(t, "PTTL", hl.Key()), 10, 64); hl.Key() != "m:l:hour" || pttl > 3_600_000 || pttl < 3_590_000 {
		t.Fatalf("key %q PTTL %d", hl.Key(), pttl)
	}

	// A Wait that times out, one on a replaced generation.
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	if _, err := batch.Wait(short, nil, r.Generation()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatal(err)
	}
	cancelShort()
	if ok, err := batch.Wait(ctx, nil, "replaced"); ok || err != nil {
		t.Fatal(ok, err)
	}

	m = scrape(t, h)
	for series, want := range map[string]float64{
		`coordhost_latch_operations_total{latch="batch",op="create",outcome="created"}`:              1,
		`coordhost_latch_operations_total{latch="batch",op="create",outcome="exists"}`:               1,
		`coordhost_latch_operations_total{latch="batch",op="join",outcome="joined"}`:                 1,
		`coordhost_latch_operations_total{latch="batch",op="count_down",outcome="counted"}`:          1,
		`coordhost_latch_operations_total{latch="batch",op="count_down",outcome="completed"}`:        1,
		`coordhost_latch_operations_total{latch="batch",op="count_down",outcome="already_complete"}`: 1,
		`coordhost_latch_operations_total{latch="batch",op="count_down",outcome="not_current"}`:      1,
		`coordhost_latch_operations_total{latch="batch",op="count_down",outcome="error"}`:            1,
		`coordhost_latch_operations_total{latch="batch",op="count",outcome="counted"}`:               1,
		`coordhost_latch_operations_total{latch="batch",op="reset",outcome="reset"}`:                 1,
		`coordhost_latch_operations_total{latch="tenant",op="create",outcome="partition_failed"}`:    1,
		`coordhost_latch_operations_total{latch="tenant",op="join",outcome="not_found"}`:             1,
		`coordhost_latch_wait_duration_seconds_count{latch="batch",outcome="completed"}`:             1,
		`coordhost_latch_wait_duration_seconds_count{latch="batch",outcome="deadline_exceeded"}`:     1,
		`coordhost_latch_wait_duration_seconds_count{latch="batch",outcome="not_current"}`:           1,
	} {
		if got := metricValue(m, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
}

// A Wait blocked when the configuration reloads carries on in the new
// one and returns true when the count reaches zero.
func TestLatchWaitSurvivesReload(t *testing.T) {
	s := redistest.Start(t)
	path := latchConfig(t, "", s.Addr, "")
	h := newHost(t, path)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	batch := mustLatch(t, h, "batch")
	l, err := batch.Create(ctx, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		ok, err := batch.Wait(ctx, nil, l.Generation())
		if err == nil && !ok {
			err = errors.New("Wait returned false")
		}
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	latchConfig(t, path, s.Addr, "latch \"added\" {}\n")
	if err := h.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if h.Generation() != 2 {
		t.Fatalf("generation %d", h.Generation())
	}
	mustLatch(t, h, "added")
	select {
	case err := <-done:
		t.Fatalf("Wait returned at the reload: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	if n, err := batch.CountDown(ctx, nil, l.Generation()); n != 0 || err != nil {
		t.Fatal(n, err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wait did not return")
	}
	// A reload that removes the latch: calls fail with ErrNoLatch.
	latchConfig(t, path, s.Addr, "")
	if err := os.WriteFile(path, []byte(fmt.Sprintf("redis {\n  addresses = [%q]\n  key_prefix = \"m:\"\n}\n", s.Addr)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := h.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := batch.Join(ctx, nil); !errors.Is(err, host.ErrNoLatch) {
		t.Fatalf("Join after the latch was removed: %v", err)
	}
}
