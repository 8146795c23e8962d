package plugin

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/policies"
)

// Supervision: what callers get while the process is down, restarts with
// backoff, health pings, and Close.

// recorder is an Observer that counts.
type recorder struct {
	calls, fails, fallbacks, hits, misses, restarts, restartFails atomic.Uint64
}

func (r *recorder) ObserveCall(_ policies.Kind, _ time.Duration, err error) {
	r.calls.Add(1)
	if err != nil {
		r.fails.Add(1)
	}
}
func (r *recorder) ObserveFallback(policies.Kind) { r.fallbacks.Add(1) }
func (r *recorder) ObserveCache(hit bool) {
	if hit {
		r.hits.Add(1)
	} else {
		r.misses.Add(1)
	}
}
func (r *recorder) ObserveRestart(err error) {
	if err == nil {
		r.restarts.Add(1)
	} else {
		r.restartFails.Add(1)
	}
}

func TestKilledProcessFallsBackAndRestarts(t *testing.T) {
	obs := &recorder{}
	fallback := policies.RetryDecision{Action: policies.RetryAfter, Delay: 7 * time.Millisecond}
	p := launch(t, examplePlugin(t), func(o *Options) {
		o.FallbackRetry = policies.RetryFunc(func(context.Context, policies.RetryRequest) policies.RetryDecision { return fallback })
		o.Observer = obs
		// Long enough that the test sees the plugin down.
		o.RestartBackoff = 300 * time.Millisecond
		o.RestartBackoffMax = time.Second
	})
	retry, _ := p.Retry()
	part, _ := p.Partition()
	cached := policies.PartitionRequest{Name: "n", Attributes: map[string]string{"tenant": "cached"}}
	if _, err := part.PartitionKey(context.Background(), cached); err != nil {
		t.Fatal(err)
	}
	fromPlugin := policies.RetryDecision{Action: policies.WaitForWake, Delay: 20 * time.Millisecond}
	if got := retry.DecideRetry(context.Background(), policies.RetryRequest{Attempt: 1}); got != fromPlugin {
		t.Fatalf("DecideRetry = %+v, want %+v", got, fromPlugin)
	}
	oldPID := p.Stats().PID
	if err := syscall.Kill(oldPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Every decision from now on is the fallback's or the plugin's, never
	// a wait; once the supervisor notices, it is the fallback's without a
	// call.
	xtest.Eventually(t, 20*time.Second, "the fallback decision", func() bool {
		return retry.DecideRetry(context.Background(), policies.RetryRequest{Attempt: 1}) == fallback
	})
	xtest.Eventually(t, 20*time.Second, "the plugin to be marked down", func() bool { return !p.Stats().Up || p.Stats().PID != oldPID })
	if !p.Stats().Up {
		calls := p.Stats().Retry.Calls
		if got := retry.DecideRetry(context.Background(), policies.RetryRequest{Attempt: 2}); got != fallback {
			t.Errorf("DecideRetry while down = %+v, want the fallback", got)
		}
		if p.Stats().Retry.Calls != calls {
			t.Error("a decision while down was sent to the plugin")
		}
		// Partition fails closed, except for keys already cached.
		_, err := part.PartitionKey(context.Background(), policies.PartitionRequest{Name: "n", Attributes: map[string]string{"tenant": "new"}})
		if !errors.Is(err, policies.ErrPartition) || !errors.Is(err, ErrUnavailable) {
			t.Errorf("PartitionKey while down: err = %v, want ErrPartition and ErrUnavailable", err)
		}
		if err := p.SelfTest(context.Background()); !errors.Is(err, ErrUnavailable) {
			t.Errorf("SelfTest while down: %v, want ErrUnavailable", err)
		}
	}
	if key, err := part.PartitionKey(context.Background(), cached); err != nil || key != "tenant:cached" {
		t.Errorf("cached PartitionKey after the kill = %q, %v", key, err)
	}
	xtest.Eventually(t, 20*time.Second, "the restart", func() bool { st := p.Stats(); return st.Up && st.PID != oldPID })
	if !processGone(oldPID) {
		t.Errorf("old process %d still exists", oldPID)
	}
	if got := retry.DecideRetry(context.Background(), policies.RetryRequest{Attempt: 1}); got != fromPlugin {
		t.Fatalf("DecideRetry after restart = %+v, want the plugin's %+v", got, fromPlugin)
	}
	st := p.Stats()
	if st.Restarts != 1 || st.Retry.Fallbacks == 0 {
		t.Fatalf("Stats = %+v, want 1 restart and some fallbacks", st)
	}
	if obs.restarts.Load() != 1 || obs.fallbacks.Load() == 0 || obs.calls.Load() == 0 || obs.hits.Load() == 0 {
		t.Fatalf("observer saw restarts=%d fallbacks=%d calls=%d hits=%d", obs.restarts.Load(), obs.fallbacks.Load(), obs.calls.Load(), obs.hits.Load())
	}
	rs, err := p.remoteStats(context.Background())
	if err != nil || rs.GetConfigureCalls() != 1 {
		t.Fatalf("restarted plugin not configured: %v, %v", rs, err)
	}
}

func TestStarvationFallbackWhileDown(t *testing.T) {
	p := launch(t, allKindsPlugin(t), func(o *Options) {
		o.RestartBackoff = 200 * time.Millisecond
		o.RestartBackoffMax = time.Second
	})
	starve, _ := p.Starvation()
	if got := starve.WriterBound(context.Background(), policies.StarvationRequest{}); got != 5*time.Millisecond {
		t.Fatalf("WriterBound = %v, want 5ms", got)
	}
	oldPID := p.Stats().PID
	if err := syscall.Kill(oldPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The default fallback is strict writer preference.
	xtest.Eventually(t, 20*time.Second, "the fallback bound", func() bool { return starve.WriterBound(context.Background(), policies.StarvationRequest{}) == 0 })
	xtest.Eventually(t, 20*time.Second, "the restart", func() bool { st := p.Stats(); return st.Up && st.PID != oldPID })
	if got := starve.WriterBound(context.Background(), policies.StarvationRequest{}); got != 5*time.Millisecond {
		t.Fatalf("WriterBound after restart = %v, want 5ms", got)
	}
}

func TestRestartBackoffUntilBinaryIsBack(t *testing.T) {
	// A private copy, so the test can break and repair it.
	src := examplePlugin(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "plugin")
	data, err := os.ReadFile(src.path)
	if err != nil {
		t.Fatal(err)
	}
	writeExec(t, path, string(data))
	obs := &recorder{}
	p := launch(t, pluginBin{path: path, sum: src.sum}, func(o *Options) {
		o.Observer = obs
		o.RestartBackoff = 5 * time.Millisecond
		o.RestartBackoffMax = 40 * time.Millisecond
	})
	// Replace the executable with something else: restarts must refuse it.
	if err := os.Rename(path, path+".good"); err != nil {
		t.Fatal(err)
	}
	writeExec(t, path, "#!/bin/sh\nexit 3\n")
	oldPID := p.Stats().PID
	if err := syscall.Kill(oldPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	xtest.Eventually(t, 20*time.Second, "failed restarts", func() bool { return p.Stats().RestartFailures >= 4 })
	if st := p.Stats(); st.Up || st.Restarts != 0 {
		t.Fatalf("Stats = %+v: the replaced executable must not be started", st)
	}
	if err := os.Rename(path+".good", path); err != nil {
		t.Fatal(err)
	}
	xtest.Eventually(t, 20*time.Second, "the restart", func() bool { return p.Stats().Up })
	st := p.Stats()
	if st.Restarts != 1 || st.PID == oldPID {
		t.Fatalf("Stats = %+v, want one restart with a new pid", st)
	}
	if obs.restartFails.Load() != st.RestartFailures || obs.restarts.Load() != 1 {
		t.Fatalf("observer restarts=%d failures=%d, stats %+v", obs.restarts.Load(), obs.restartFails.Load(), st)
	}
}

func TestRestartDelay(t *testing.T) {
	o := Options{RestartBackoff: 100 * time.Millisecond, RestartBackoffMax: time.Second}
	want := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i, w := range want {
		if got := restartDelay(o, i); got != w*time.Millisecond {
			t.Errorf("restartDelay(%d) = %v, want %v", i, got, w*time.Millisecond)
		}
	}
	if got := restartDelay(o, 200); got != time.Second {
		t.Errorf("restartDelay(200) = %v, want the cap", got)
	}
}

func TestCloseLeavesNoProcess(t *testing.T) {
	p := launch(t, examplePlugin(t), nil)
	pid := p.Stats().PID
	if processGone(pid) {
		t.Fatalf("plugin process %d not running", pid)
	}
	retry, _ := p.Retry()
	part, _ := p.Partition()
	if _, err := part.PartitionKey(context.Background(), policies.PartitionRequest{Attributes: map[string]string{"tenant": "a"}}); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if !processGone(pid) {
		t.Fatalf("plugin process %d survives Close", pid)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if st := p.Stats(); st.Up || st.PID != 0 || st.CacheLen != 0 {
		t.Fatalf("Stats after Close = %+v", st)
	}
	if got := retry.DecideRetry(context.Background(), policies.RetryRequest{Attempt: 1}); got.Action != policies.WaitForWake || got.Delay != DefaultFallbackRetryDelay {
		t.Errorf("DecideRetry after Close = %+v, want the default fallback", got)
	}
	_, err := part.PartitionKey(context.Background(), policies.PartitionRequest{Attributes: map[string]string{"tenant": "a"}})
	if !errors.Is(err, policies.ErrPartition) || !errors.Is(err, ErrClosed) {
		t.Errorf("PartitionKey after Close: err = %v, want ErrPartition and ErrClosed", err)
	}
	if err := p.SelfTest(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("SelfTest after Close: %v, want ErrClosed", err)
	}
}

func TestCloseWhileRestarting(t *testing.T) {
	p := launch(t, examplePlugin(t), func(o *Options) {
		o.RestartBackoff = time.Hour
		o.RestartBackoffMax = time.Hour
	})
	pid := p.Stats().PID
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	xtest.Eventually(t, 20*time.Second, "the plugin to be marked down", func() bool { return !p.Stats().Up })
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestWedgedPluginRestarted(t *testing.T) {
	// A stopped process keeps its socket open but answers nothing: the
	// health pings time out and the supervisor replaces it.
	p := launch(t, examplePlugin(t), func(o *Options) {
		o.HealthInterval = 20 * time.Millisecond
		o.PingTimeout = 100 * time.Millisecond
	})
	oldPID := p.Stats().PID
	if err := syscall.Kill(oldPID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	xtest.Eventually(t, 20*time.Second, "the restart", func() bool { st := p.Stats(); return st.Up && st.PID != oldPID })
	if !processGone(oldPID) {
		_ = syscall.Kill(oldPID, syscall.SIGKILL)
		t.Fatalf("wedged process %d still exists", oldPID)
	}
	retry, _ := p.Retry()
	if got := retry.DecideRetry(context.Background(), policies.RetryRequest{Attempt: 1}); got.Delay != 20*time.Millisecond {
		t.Fatalf("DecideRetry after restart = %+v", got)
	}
}

func TestCloseWedgedPlugin(t *testing.T) {
	p := launch(t, examplePlugin(t), nil)
	pid := p.Stats().PID
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// go-plugin's graceful Shutdown cannot finish; Close kills it after
	// closeGrace.
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if !processGone(pid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("wedged process %d survives Close", pid)
	}
}
