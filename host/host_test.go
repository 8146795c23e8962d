package host_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coordhost/coordhost/config"
	"github.com/coordhost/coordhost/host"
	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/policies"
	"github.com/coordhost/coordhost/primitives"
	"github.com/prometheus/client_golang/prometheus"
)

func TestMain(m *testing.M) {
	xtest.Main(m, xtest.ExampleServer(7, &exampleAddr), xtest.After(func() {
		if pluginBin != "" {
			os.RemoveAll(filepath.Dir(pluginBin)) // built by examplePlugin
		}
	}))
}

// exampleAddr is the server the runnable examples talk to.
var exampleAddr string

var (
	pluginOnce sync.Once
	pluginBin  string
	pluginErr  error
)

// examplePlugin builds plugins/examples/plugin once per test binary.
func examplePlugin(t *testing.T) (path, sum string) {
	t.Helper()
	pluginOnce.Do(func() {
		dir, err := os.MkdirTemp("", "coordhost-host-test-")
		if err != nil {
			pluginErr = err
			return
		}
		pluginBin = filepath.Join(dir, "coordhost-example-plugin")
		out, err := exec.Command("go", "build", "-o", pluginBin, "../plugins/examples/plugin").CombinedOutput()
		if err != nil {
			pluginErr = fmt.Errorf("building the example plugin: %v\n%s", err, out)
		}
	})
	if pluginErr != nil {
		t.Fatal(pluginErr)
	}
	b, err := os.ReadFile(pluginBin)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return pluginBin, hex.EncodeToString(s[:])
}

func abs(t *testing.T, p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// writeConfig writes an HCL file that uses a wasm retry policy, a plugin
// partition policy and a builtin starvation bound.
func writeConfig(t *testing.T, dir, addr, retryModule string) string {
	t.Helper()
	plug, sum := examplePlugin(t)
	src := fmt.Sprintf(`
redis {
  addresses  = [%q]
  key_prefix = "e2e:"
}

policy "retry" "wasm" {
  driver = "wasm"
  module = %q
  limits {
    memory_pages = 4
    call_timeout = "50ms"
  }
}

policy "partition" "tenant" {
  driver = "plugin"
  path   = %q
  sha256 = %q
}

policy "starvation" "bounded" {
  driver = "builtin"
  bound  = "500ms"
}

lock "invoice" {
  ttl       = "10s"
  fencing   = true
  retry     = policy.retry.wasm
  partition = policy.partition.tenant
}
`, addr, retryModule, plug, sum)
	path := filepath.Join(dir, "coordhost.hcl")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func newHost(t *testing.T, path string) *host.Host {
	t.Helper()
	return newHostWith(t, path, host.Options{})
}

// newHostWith is newHost with opts, whose cache directory, logger and
// drain timeout it sets as newHost does; the Host shuts down at cleanup.
func newHostWith(t *testing.T, path string, opts host.Options) *host.Host {
	t.Helper()
	cfg, diags := config.Load(path, config.LoadOptions{})
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts.WasmCacheDir, opts.Logger, opts.DrainTimeout = t.TempDir(), quietLogger(t), 2*time.Second
	h, err := host.New(ctx, cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := h.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return h
}

func TestEndToEnd(t *testing.T) {
	s := redistest.Start(t)
	dir := t.TempDir()
	path := writeConfig(t, dir, s.Addr, abs(t, "testdata/giveup3.wasm"))
	h := newHost(t, path)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	inv, err := h.Lock("invoice")
	if err != nil {
		t.Fatal(err)
	}
	acme := map[string]string{"tenant": "acme"}
	held, err := inv.TryAcquire(ctx, acme)
	if err != nil {
		t.Fatal(err)
	}
	if held.Key() != "e2e:coordhost:lock:invoice/tenant:acme" || held.FencingToken() != 1 {
		t.Fatalf("key %q token %d", held.Key(), held.FencingToken())
	}

	// The wasm policy decides the waits: retry after 20ms twice, then give
	// up on the third failed attempt.
	const wasmOK = `coordhost_policy_calls_total{driver="wasm",kind="retry",outcome="ok",policy="retry.wasm"}`
	before := metricValue(scrape(t, h), wasmOK) // the load-time self-test
	start := time.Now()
	_, err = inv.Acquire(ctx, acme)
	if !errors.Is(err, primitives.ErrNotAcquired) || !strings.Contains(err.Error(), "3 attempts") {
		t.Fatalf("contended Acquire: %v", err)
	}
	if took := time.Since(start); took < 40*time.Millisecond {
		t.Fatalf("gave up after %v, before two 20ms retry-after sleeps", took)
	}
	metrics := scrape(t, h)
	if n := metricValue(metrics, wasmOK) - before; n != 3 {
		t.Fatalf("%v wasm retry decisions for one Acquire, want 3:\n%s", n, grep(metrics, "coordhost_policy_calls_total"))
	}

	// Another tenant is another key; a request without a tenant fails
	// closed, before anything is written.
	other, err := inv.TryAcquire(ctx, map[string]string{"tenant": "globex"})
	if err != nil {
		t.Fatal(err)
	}
	other.Release(ctx)
	if _, err := inv.TryAcquire(ctx, nil); !errors.Is(err, policies.ErrPartition) {
		t.Fatalf("missing tenant: %v", err)
	}

	// Kill the plugin: partition decisions for new inputs fail closed at
	// once (no acquisition waits for the restart); cached ones still work;
	// the plugin comes back.
	pid := findProcess(t, pluginPathOf(t))
	syscall.Kill(pid, syscall.SIGKILL)
	deadline := time.Now().Add(10 * time.Second)
	sawDown := false
	for {
		_, err := inv.TryAcquire(ctx, map[string]string{"tenant": fmt.Sprintf("t%d", time.Now().UnixNano())})
		if err == nil {
			break
		}
		if !errors.Is(err, policies.ErrPartition) {
			t.Fatalf("while the plugin is down: %v", err)
		}
		sawDown = true
		if time.Now().After(deadline) {
			t.Fatal("the plugin did not come back")
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("plugin killed: saw it down: %v; back after restart", sawDown)
	if r, err := held.Release(ctx); r != primitives.Released || err != nil {
		t.Fatal(r, err)
	}

	// /livez, /readyz.
	srv := httptest.NewServer(h.Handler())
	defer srv.Close()
	for _, p := range []string{"/livez", "/readyz"} {
		resp, err := srv.Client().Get(srv.URL + p)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %v %v", p, err, resp)
		}
		resp.Body.Close()
	}
}

// A module that traps or loops is refused at load by its self-test; one
// that passes the self-test and breaks later (trap, then endless loop)
// falls back to the builtin backoff: waiters still acquire, nothing gets
// stuck, and the fallbacks are counted.
func TestBrokenModulesFallBack(t *testing.T) {
	for _, mod := range []string{"trap", "loop"} {
		t.Run("refused/"+mod, func(t *testing.T) {
			s := redistest.Start(t)
			path := writeConfig(t, t.TempDir(), s.Addr, abs(t, "../policies/wasm/testdata/"+mod+".wasm"))
			cfg, diags := config.Load(path, config.LoadOptions{})
			if diags.HasErrors() {
				t.Fatal(diags.Error())
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			h, err := host.New(ctx, cfg, host.Options{WasmCacheDir: t.TempDir(), Logger: quietLogger(t)})
			if err == nil {
				h.Close()
				t.Fatal("a module that fails its self-test was loaded")
			}
			t.Logf("refused at load: %v", err)
		})
	}
	t.Run("fails-later", func(t *testing.T) {
		s := redistest.Start(t)
		h := newHost(t, writeConfig(t, t.TempDir(), s.Addr, abs(t, "testdata/latefail.wasm")))
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		inv, _ := h.Lock("invoice")
		attrs := map[string]string{"tenant": "a"}
		held, err := inv.TryAcquire(ctx, attrs)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			l, err := inv.Acquire(ctx, attrs)
			if err == nil {
				l.Release(ctx)
			}
			got <- err
		}()
		// Let the waiter go through attempts 2 (trap) and 3+ (loop): both
		// answered by the fallback, and counted, before the release.
		var m string
		defer func() {
			if t.Failed() {
				t.Logf("last scrape:\n%s", grep(m, "coordhost_policy"))
			}
		}()
		xtest.Eventually(t, 10*time.Second, "the trap and the loop counted as fallbacks (want 2 at least)", func() bool {
			m = scrape(t, h)
			return metricValue(m, `coordhost_policy_fallbacks_total{driver="wasm",kind="retry",policy="retry.wasm"}`) >= 2
		})
		held.Release(ctx)
		select {
		case err := <-got:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("waiter stuck behind a broken policy")
		}
	})
}

// Reload: a broken file keeps the old generation; a good one replaces it.
// Lock handles follow the new configuration, and a waiter blocked during the
// reload moves to the new generation and still gets the lock.
func TestReload(t *testing.T) {
	s := redistest.Start(t)
	dir := t.TempDir()
	path := writeConfig(t, dir, s.Addr, abs(t, "testdata/giveup3.wasm"))
	good, _ := os.ReadFile(path)
	// A retry policy that waits for wake-ups, so a waiter stays blocked.
	src := strings.Replace(string(good), `retry     = policy.retry.wasm`, `retry     = policy.retry.wait`, 1) + `
policy "retry" "wait" {
  driver = "builtin"
  kind   = "constant"
}
`
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	h := newHost(t, path)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	inv, _ := h.Lock("invoice")
	attrs := map[string]string{"tenant": "x"}

	if err := os.WriteFile(path, []byte(strings.Replace(src, `ttl       = "10s"`, `ttl       = "ten seconds"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	err := h.Reload(ctx)
	var re *host.ReloadError
	if !errors.As(err, &re) || !errors.Is(err, host.ErrReload) {
		t.Fatalf("broken reload: %v", err)
	}
	if h.Generation() != 1 {
		t.Fatalf("generation %d after a failed reload", h.Generation())
	}
	held, err := inv.TryAcquire(ctx, attrs)
	if err != nil {
		t.Fatalf("old generation stopped working: %v", err)
	}

	// A waiter blocks on generation 1 ...
	got := make(chan error, 1)
	go func() {
		l, err := inv.Acquire(ctx, attrs)
		if err == nil {
			if l.Remaining() <= 10*time.Second {
				err = fmt.Errorf("waiter got a %v lease, want the reloaded 20s", l.Remaining())
			}
			l.Release(ctx)
		}
		got <- err
	}()
	time.Sleep(100 * time.Millisecond)

	// ... the good reload replaces generation 1 ...
	if err := os.WriteFile(path, []byte(strings.Replace(src, `ttl       = "10s"`, `ttl       = "20s"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := h.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if h.Generation() != 2 || inv.TTL() != 20*time.Second {
		t.Fatalf("generation %d, ttl %v", h.Generation(), inv.TTL())
	}
	// ... and the waiter gets the lock from generation 2 on release.
	time.Sleep(100 * time.Millisecond)
	held.Release(ctx)
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter blocked during the reload never got the lock")
	}

	// Changing the redis block needs a restart.
	if err := os.WriteFile(path, []byte(strings.Replace(src, `key_prefix = "e2e:"`, `key_prefix = "other:"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := h.Reload(ctx); !errors.Is(err, host.ErrReload) || !strings.Contains(err.Error(), "key_prefix") {
		t.Fatalf("key_prefix change: %v", err)
	}
}

// Shutdown returns only when every generation, replaced ones included, is
// closed: no goroutine, plugin or waiter outlives it; the registry can
// serve a new Host afterwards.
func TestShutdownClosesReplacedGenerations(t *testing.T) {
	s := redistest.Start(t)
	path := writeConfig(t, t.TempDir(), s.Addr, abs(t, "testdata/giveup3.wasm"))
	cfg, diags := config.Load(path, config.LoadOptions{})
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reg := prometheus.NewRegistry()
	h, err := host.New(ctx, cfg, host.Options{WasmCacheDir: t.TempDir(), Logger: quietLogger(t), Registry: reg, DrainTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	inv, _ := h.Lock("invoice")
	held, err := inv.TryAcquire(ctx, map[string]string{"tenant": "x"})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	if err := h.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("Close waited %v for a drain bounded by an hour", took)
	}
	if _, err := inv.TryAcquire(ctx, nil); !errors.Is(err, host.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
	h2, err := host.New(ctx, cfg, host.Options{WasmCacheDir: t.TempDir(), Logger: quietLogger(t), Registry: reg})
	if err != nil {
		t.Fatalf("a new Host on the same registry: %v", err)
	}
	h2.Close()
}

func scrape(t *testing.T, h *host.Host) string {
	srv := httptest.NewServer(h.Handler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// metricValue returns the value of the sample line that starts with
// series, or 0.
func metricValue(text, series string) float64 {
	for _, l := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			var f float64
			fmt.Sscan(v, &f)
			return f
		}
	}
	return 0
}

func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func pluginPathOf(t *testing.T) string {
	p, _ := examplePlugin(t)
	return p
}

// findProcess returns the pid of the process running exe.
func findProcess(t *testing.T, exe string) int {
	t.Helper()
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
			continue
		}
		if target, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err == nil && target == exe {
			return pid
		}
	}
	t.Fatalf("no process runs %s", exe)
	return 0
}
