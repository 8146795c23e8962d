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
	"github.com/redis/rueidis"
)

// writeSentinelConfig writes an HCL file whose redis block finds the
// primary of st through its sentinels.
func writeSentinelConfig(t *testing.T, dir string, st *redistest.Sentinel, masterSet string) string {
	t.Helper()
	src := fmt.Sprintf(`
redis {
  sentinel {
    master_set = %q
    addresses  = [%q, %q, %q]
  }
  key_prefix = "sentinel:"
}

lock "job" {
  ttl     = "3s"
  fencing = true
}
`, masterSet, st.SentinelAddrs()[0], st.SentinelAddrs()[1], st.SentinelAddrs()[2])
	path := filepath.Join(dir, "coordhost.hcl")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestSentinelHost: a Host built from HCL with a sentinel block takes locks
// on the primary the sentinels report, and takes them again after a
// SENTINEL FAILOVER and after the primary is killed, where a blocked
// Acquire still wakes when the holder releases. It logs how long the Host
// took to grant again after each failover returned.
func TestSentinelHost(t *testing.T) {
	st := redistest.StartSentinel(t, 2)
	dir := t.TempDir()
	path := writeSentinelConfig(t, dir, st, st.MasterSet())
	h := newHost(t, path)
	if h.Client().Mode() != rueidis.ClientModeSentinel {
		t.Fatalf("client mode %v, want sentinel", h.Client().Mode())
	}
	lk, err := h.Lock("job")
	if err != nil {
		t.Fatal(err)
	}
	const key = "sentinel:coordhost:lock:job"

	// grant takes the lock with TryAcquire, retrying while the Host's
	// client still talks to a demoted or dead primary, or while a grant
	// whose release went to the old primary still holds the lock on the
	// new one (until its 3 s ttl), checks that the lock is on the current
	// primary, and releases it. It returns how long the first grant took
	// and its fencing token.
	grant := func(step string) (time.Duration, int64) {
		t.Helper()
		begin := time.Now()
		var lastErr error
		for time.Since(begin) < 20*time.Second {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			held, err := lk.TryAcquire(ctx, nil)
			if err != nil {
				cancel()
				lastErr = err
				time.Sleep(20 * time.Millisecond)
				continue
			}
			took := time.Since(begin)
			if got := st.Primary().MustCmd(t, "EXISTS", key); got != "1" {
				t.Errorf("%s: the lock is not on the primary %s (EXISTS %s)", step, st.Primary().Addr, got)
			}
			if _, err := held.Release(ctx); err != nil {
				t.Errorf("%s: Release: %v", step, err)
			}
			cancel()
			t.Logf("%s: granted after %v (fencing token %d; last error before: %v)", step, took, held.FencingToken(), lastErr)
			return took, held.FencingToken()
		}
		t.Fatalf("%s: no grant within 20s: %v", step, lastErr)
		return 0, 0
	}

	// wake checks that a blocked Acquire is granted once the holder
	// releases: the wait engine's connection follows the primary.
	wake := func(step string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		holder, err := lk.TryAcquire(ctx, nil)
		if err != nil {
			t.Fatalf("%s: TryAcquire: %v", step, err)
		}
		got := make(chan error, 1)
		go func() {
			w, err := lk.Acquire(ctx, nil)
			if err == nil {
				_, err = w.Release(context.WithoutCancel(ctx))
			}
			got <- err
		}()
		time.Sleep(100 * time.Millisecond) // let the waiter block
		released := time.Now()
		if _, err := holder.Release(ctx); err != nil {
			t.Fatalf("%s: Release: %v", step, err)
		}
		if err := <-got; err != nil {
			t.Fatalf("%s: the blocked Acquire: %v", step, err)
		}
		t.Logf("%s: a blocked Acquire got the lock %v after the release", step, time.Since(released))
	}

	_, first := grant("before any failover")
	if first != 1 {
		t.Errorf("first fencing token %d, want 1", first)
	}
	wake("before any failover")
	if err := h.Ready(context.Background()); err != nil {
		t.Errorf("Ready: %v", err)
	}

	// Grants go on while the sentinels fail over. SENTINEL FAILOVER does
	// not stop writes on the old primary: what it grants between the
	// promotion and its demotion is lost, and the fencing counter goes
	// back. Measured, not asserted (that is what replication-aware grants
	// are for).
	var top int64
	stop := probe(t, lk, &top)
	ft := st.Failover(t)
	t.Logf("Failover: promoted after %v, settled after %v; %s", ft.Promoted, ft.Settled, stop())
	_, tok := grant("after Failover")
	if tok <= first {
		t.Errorf("after Failover: fencing token %d, want above %d", tok, first)
	}
	t.Logf("after Failover: %d fencing increments lost (token %d after %d)", max(top+1-tok, 0), tok, top)
	wake("after Failover")

	stop = probe(t, lk, &top)
	ft = st.KillPrimary(t)
	t.Logf("KillPrimary: promoted after %v, settled after %v; %s", ft.Promoted, ft.Settled, stop())
	_, tok = grant("after KillPrimary")
	t.Logf("after KillPrimary: %d fencing increments lost (token %d after %d)", max(top+1-tok, 0), tok, top)
	wake("after KillPrimary")

	// The sentinel block is part of the redis block: changing it needs a
	// restart, and a reload says so.
	writeSentinelConfig(t, dir, st, "other")
	err = h.Reload(context.Background())
	if !errors.Is(err, host.ErrReload) || !strings.Contains(err.Error(), "sentinel changed") {
		t.Errorf("Reload with another master_set: %v", err)
	}
}

// probe takes and releases lk in a loop (each call bounded by 500 ms)
// until the returned function is called, which reports the longest span
// without a grant (how long the Host could not grant through the
// failover) and the highest fencing token granted; maxToken then holds it.
func probe(t *testing.T, lk *host.Lock, maxToken *int64) (stop func() string) {
	t.Helper()
	done := make(chan struct{})
	out := make(chan string, 1)
	go func() {
		last, longest, grants, failures := time.Now(), time.Duration(0), 0, 0
		var top int64
		for {
			select {
			case <-done:
				longest = max(longest, time.Since(last))
				*maxToken = top
				out <- fmt.Sprintf("the Host's longest span without a grant: %v (%d grants, %d failed attempts, highest fencing token %d)",
					longest.Round(time.Millisecond), grants, failures, top)
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			held, err := lk.TryAcquire(ctx, nil)
			if err == nil {
				top = max(top, held.FencingToken())
				_, err = held.Release(ctx)
			}
			cancel()
			if err != nil {
				failures++
				time.Sleep(10 * time.Millisecond)
				continue
			}
			grants++
			now := time.Now()
			longest = max(longest, now.Sub(last))
			last = now
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return func() string {
		close(done)
		return <-out
	}
}

// TestSentinelHostUnreachable: a sentinel block whose sentinels do not
// answer fails New with an error that names the master set and the
// sentinels.
func TestSentinelHostUnreachable(t *testing.T) {
	st := redistest.StartSentinel(t, 0)
	dir := t.TempDir()
	path := writeSentinelConfig(t, dir, st, "no-such-set")
	cfg, diags := config.Load(path, config.LoadOptions{})
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h, err := host.New(ctx, cfg, host.Options{WasmCacheDir: t.TempDir(), Logger: quietLogger(t)})
	if err == nil {
		h.Close()
		t.Fatal("New with an unknown master set succeeded")
	}
	if !strings.Contains(err.Error(), `master set "no-such-set"`) || !strings.Contains(err.Error(), st.SentinelAddrs()[0]) {
		t.Errorf("New: %v", err)
	}
}

// TestSentinelHostAuth: the sentinel block's username and password reach
// the sentinels (and the redis block's reach the primary): with the
// sentinels' default user off, a Host without them cannot find the primary.
func TestSentinelHostAuth(t *testing.T) {
	st := redistest.StartSentinel(t, 0)
	for _, s := range st.Sentinels {
		s.MustCmd(t, "ACL", "SETUSER", "watcher", "on", ">sentinel-pw", "+@all")
		s.MustCmd(t, "ACL", "SETUSER", "default", "off")
	}
	st.Primary().MustCmd(t, "ACL", "SETUSER", "coord", "on", ">redis-pw", "~*", "&*", "+@all")
	st.Primary().MustCmd(t, "ACL", "SETUSER", "default", "resetkeys")
	build := func(sentinelCreds string) (*host.Host, error) {
		t.Helper()
		src := fmt.Sprintf(`
redis {
  sentinel {
    master_set = %q
    addresses  = [%q, %q, %q]
    %s
  }
  username = "coord"
  password = "redis-pw"
}
lock "job" {
  ttl = "10s"
}
`, st.MasterSet(), st.SentinelAddrs()[0], st.SentinelAddrs()[1], st.SentinelAddrs()[2], sentinelCreds)
		path := filepath.Join(t.TempDir(), "coordhost.hcl")
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, diags := config.Load(path, config.LoadOptions{})
		if diags.HasErrors() {
			t.Fatal(diags.Error())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		return host.New(ctx, cfg, host.Options{WasmCacheDir: t.TempDir(), Logger: quietLogger(t)})
	}

	if h, err := build(""); err == nil {
		h.Close()
		t.Fatal("New without the sentinels' credentials succeeded")
	} else if !strings.Contains(err.Error(), "through the sentinels") || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("New without the sentinels' credentials: %v", err)
	}

	h, err := build(`username = "watcher"
    password = "sentinel-pw"`)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	lk, err := h.Lock("job")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	held, err := lk.TryAcquire(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
