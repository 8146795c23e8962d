package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/policies"
)

// returnsSoon bounds how long a call cut by its caller may take in these
// tests: far below the 30 s call deadline they set, far above what it
// takes, so a slow shared machine cannot make them flaky.
const returnsSoon = 5 * time.Second

func cancelAfter(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	timer := time.AfterFunc(d, cancel)
	t.Cleanup(func() { timer.Stop(); cancel() })
	return ctx
}

func TestCallerCancellationCutsPluginCall(t *testing.T) {
	p := launch(t, allKindsPlugin(t), func(o *Options) {
		o.Config = []byte(`{"sleep_ms": 20000}`)
		o.CallTimeout = 30 * time.Second
		o.PartitionCacheSize = -1
		o.FallbackStarvation = policies.StarvationFunc(func(context.Context, policies.StarvationRequest) time.Duration { return 42 })
	})
	retry, _ := p.Retry()
	starve, _ := p.Starvation()
	part, _ := p.Partition()
	timed := func(what string, f func(ctx context.Context)) {
		t.Helper()
		start := time.Now()
		f(cancelAfter(t, 50*time.Millisecond))
		el := time.Since(start)
		t.Logf("%s: returned after %v (cancelled at 50ms)", what, el)
		if el > returnsSoon {
			t.Errorf("%s: returned after %v: the caller's cancellation did not cut the plugin call", what, el)
		}
	}
	timed("retry", func(ctx context.Context) {
		if got := retry.DecideRetry(ctx, policies.RetryRequest{Attempt: 1}); got.Delay != DefaultFallbackRetryDelay {
			t.Errorf("retry: %+v, want the fallback", got)
		}
	})
	timed("starvation", func(ctx context.Context) {
		if got := starve.WriterBound(ctx, policies.StarvationRequest{}); got != 42 {
			t.Errorf("starvation: %v, want the fallback", got)
		}
	})
	timed("partition", func(ctx context.Context) {
		_, err := part.PartitionKey(ctx, policies.PartitionRequest{Name: "x"})
		if !errors.Is(err, policies.ErrPartition) || !errors.Is(err, context.Canceled) || errors.Is(err, ErrUnavailable) {
			t.Errorf("partition: %v; want ErrPartition and context.Canceled, not ErrUnavailable", err)
		}
	})
	// The caller gave up: no fault of the plugin's.
	st := p.Stats()
	for _, ks := range []KindStats{st.Retry, st.Starvation, st.Partition} {
		if ks.Failures != 0 {
			t.Errorf("kind stats %+v: a cancelled call counted as a failure", ks)
		}
	}
	if !st.Up {
		t.Error("the plugin was taken down")
	}
}

// spawned returns the pids the allkinds plugin reports having spawned.
func spawned(t *testing.T, p *Plugin) []int {
	t.Helper()
	rs, err := p.remoteStats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, s := range strings.Split(rs.GetInfo()["spawned"], ",") {
		pid, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("spawned %q: %v", rs.GetInfo()["spawned"], err)
		}
		pids = append(pids, pid)
	}
	return pids
}

// dead reports whether pid has ended: it does not exist or is a zombie
// (whose parent, perhaps a container's init, has not reaped it).
func dead(pid int) bool {
	if processGone(pid) {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || i+2 >= len(b) || b[i+2] == 'Z' || b[i+2] == 'X'
}

// checkDetached checks that pids run outside the plugin's process group
// (so the group kill cannot reach them); it kills them at the end of the
// test whatever happens.
func checkDetached(t *testing.T, pluginPID int, pids []int) {
	t.Helper()
	t.Cleanup(func() {
		for _, pid := range pids {
			if !dead(pid) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	for _, pid := range pids {
		if dead(pid) {
			t.Fatalf("spawned process %d is not running", pid)
		}
		pg, err := syscall.Getpgid(pid)
		if err != nil || pg == pluginPID {
			t.Fatalf("spawned process %d is in process group %d (%v), want a group of its own", pid, pg, err)
		}
	}
}

func eventuallyDead(t *testing.T, what string, pids []int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for _, pid := range pids {
		for !dead(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: process %d (started by the plugin) still runs", what, pid)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

func TestCloseKillsDetachedDescendants(t *testing.T) {
	p := launch(t, allKindsPlugin(t), func(o *Options) { o.Config = []byte(`{"spawn": true}`) })
	pid := p.Stats().PID
	pids := spawned(t, p)
	checkDetached(t, pid, pids)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if !processGone(pid) {
		t.Errorf("plugin %d survives Close", pid)
	}
	eventuallyDead(t, "after Close", pids)
}

func TestRestartKillsDescendantsOfTheDeadProcess(t *testing.T) {
	// The plugin dies (SIGKILL: it cannot clean up); what it started was
	// reparented away from it, and is killed before the restart.
	p := launch(t, allKindsPlugin(t), func(o *Options) { o.Config = []byte(`{"spawn": true}`) })
	oldPID := p.Stats().PID
	pids := spawned(t, p)
	checkDetached(t, oldPID, pids)
	if err := syscall.Kill(oldPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	xtest.Eventually(t, 20*time.Second, "the restart", func() bool { st := p.Stats(); return st.Up && st.PID != oldPID })
	eventuallyDead(t, "after the restart", pids)
	// The new process spawned its own, which Close ends.
	fresh := spawned(t, p)
	checkDetached(t, p.Stats().PID, fresh)
	p.Close()
	eventuallyDead(t, "after Close", fresh)
}

// recordingHandler keeps every record's text, at every level.
type recordingHandler struct {
	mu    *sync.Mutex
	lines *[]string
	attrs []slog.Attr
}

func (h recordingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h recordingHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	for _, a := range h.attrs {
		fmt.Fprintf(&b, " %s", a)
	}
	r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s", a); return true })
	h.mu.Lock()
	*h.lines = append(*h.lines, b.String())
	h.mu.Unlock()
	return nil
}
func (h recordingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	h.attrs = append(append([]slog.Attr(nil), h.attrs...), as...)
	return h
}
func (h recordingHandler) WithGroup(string) slog.Handler { return h }

// hostile is text a plugin could use to take over the terminal: clear the
// screen, then a fake line.
const hostile = "\x1b[2J\x1b[H\nlock acquired"

func checkNoControl(t *testing.T, what, s string) {
	t.Helper()
	if i := strings.IndexFunc(s, func(r rune) bool { return r < ' ' || r == 0x7f }); i >= 0 {
		t.Errorf("%s holds control character %q: %q", what, s[i], s)
	}
}

func TestUntrustedPluginTextIsEscaped(t *testing.T) {
	cfg := func(kv ...string) []byte {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	bin := allKindsPlugin(t)

	// A configure error.
	_, err := Launch(context.Background(), Options{Path: bin.path, SHA256: bin.sum, Logger: testLogger(), Config: cfg("fail_configure", hostile)})
	if err == nil {
		t.Fatal("Launch succeeded")
	}
	checkNoControl(t, "configure error", err.Error())
	if !strings.Contains(err.Error(), `\x1b[2J\x1b[H\nlock acquired`) {
		t.Errorf("configure error %q does not show the escaped text", err)
	}

	// A refusal, and standard error lines (which the host logs).
	lines := new([]string)
	logger := slog.New(recordingHandler{mu: new(sync.Mutex), lines: lines})
	p := launch(t, bin, func(o *Options) {
		o.Config = cfg("refuse", hostile, "stderr", hostile)
		o.Logger = logger
	})
	part, _ := p.Partition()
	_, err = part.PartitionKey(context.Background(), policies.PartitionRequest{Name: "x"})
	if !errors.Is(err, policies.ErrPartition) {
		t.Fatalf("refusal: %v", err)
	}
	checkNoControl(t, "refusal", err.Error())
	if !strings.Contains(err.Error(), `refused: "\x1b[2J\x1b[H\nlock acquired"`) {
		t.Errorf("refusal %q not quoted", err)
	}

	// An error the plugin's panic puts into a gRPC status.
	p2 := launch(t, bin, func(o *Options) {
		o.Config = cfg("panic", hostile)
		o.Logger = logger
		o.PartitionCacheSize = -1
	})
	part2, _ := p2.Partition()
	_, err = part2.PartitionKey(context.Background(), policies.PartitionRequest{Name: "y"})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("panic: %v", err)
	}
	checkNoControl(t, "gRPC error", err.Error())
	if !strings.Contains(err.Error(), `\x1b[2J`) {
		t.Errorf("gRPC error %q does not show the escaped text", err)
	}
	if err := p2.SelfTest(context.Background()); err == nil {
		t.Error("SelfTest of a panicking plugin passed")
	} else {
		// One line per kind (errors.Join), each escaped.
		for _, l := range strings.Split(err.Error(), "\n") {
			checkNoControl(t, "self-test error", l)
			if !strings.HasPrefix(l, `plugin "`) {
				t.Errorf("self-test error line %q", l)
			}
		}
	}

	p.Close()
	p2.Close()
	var sawStderr bool
	for _, l := range *lines {
		checkNoControl(t, "log line", l)
		sawStderr = sawStderr || strings.Contains(l, `\x1b[2J\x1b[H`)
	}
	if !sawStderr {
		t.Errorf("the plugin's standard error line was not logged: %q", *lines)
	}
}

func TestEscapeArgs(t *testing.T) {
	args := []any{"k", "v\x1b", "err", errors.New("e\n"), "n", 3}
	got := escapeArgs(args)
	if args[1] != "v\x1b" {
		t.Error("escapeArgs modified its argument")
	}
	if got[1] != `v\x1b` || fmt.Sprint(got[3]) != `e\n` || got[5] != 3 {
		t.Errorf("escapeArgs = %q", got)
	}
	plain := []any{"k", "v"}
	if out := escapeArgs(plain); &out[0] != &plain[0] {
		t.Error("escapeArgs copied plain args")
	}
}
