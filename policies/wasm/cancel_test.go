package wasm

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordhost/coordhost/policies"
)

// longCallTimeout is a call deadline the cancellation tests must not wait
// for: each asserts that its call returns well before it.
const longCallTimeout = 30 * time.Second

// returnsSoon is how long a stopped call may take in these tests: far below
// longCallTimeout, far above what it takes (microseconds to milliseconds),
// so a slow, shared CI machine cannot make the tests flaky.
const returnsSoon = 5 * time.Second

// cancelAfter returns a context that is cancelled after d.
func cancelAfter(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	timer := time.AfterFunc(d, cancel)
	t.Cleanup(func() { timer.Stop(); cancel() })
	return ctx
}

func TestCallerCancellationStopsTheCall(t *testing.T) {
	checkLeaks := noNewGoroutines(t)
	r := newRuntime(t, RuntimeOptions{})
	logger, logs := newLogRecorder()
	obs := &recordingObserver{}
	m := load(t, r, testdata("loop"), ModuleOptions{
		Name: "loop", CallTimeout: longCallTimeout, FallbackRetry: sentinelRetry, Observer: obs, Logger: logger,
		CircuitThreshold: 1, // a single failure would open it
		FallbackStarvation: policies.StarvationFunc(func(context.Context, policies.StarvationRequest) time.Duration {
			return 42 * ms
		}),
	})
	timed := func(what string, f func(ctx context.Context)) {
		t.Helper()
		start := time.Now()
		f(cancelAfter(t, 50*ms))
		el := time.Since(start)
		t.Logf("%s: returned %v after the call started (cancelled at 50ms)", what, el)
		if el > returnsSoon {
			t.Errorf("%s: returned after %v; the caller's cancellation did not stop the call (deadline %v)", what, el, longCallTimeout)
		}
	}
	timed("retry", func(ctx context.Context) {
		if got := m.Retry().DecideRetry(ctx, policies.RetryRequest{Attempt: 1}); got.Delay != 777*ms {
			t.Errorf("retry: %+v, want the fallback", got)
		}
	})
	timed("starvation", func(ctx context.Context) {
		if got := m.Starvation().WriterBound(ctx, policies.StarvationRequest{Readers: 1}); got != 42*ms {
			t.Errorf("starvation: %v, want the fallback", got)
		}
	})
	timed("partition", func(ctx context.Context) {
		key, err := m.Partition().PartitionKey(ctx, policies.PartitionRequest{Kind: "lock", Name: "n"})
		if key != "" || !errors.Is(err, policies.ErrPartition) || !errors.Is(err, context.Canceled) || errors.Is(err, ErrCall) {
			t.Errorf("partition: %q, %v; want ErrPartition and context.Canceled, not ErrCall", key, err)
		}
	})
	// A deadline on the caller's context ends a call the same way.
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 50*ms)
	defer cancel()
	_, err := m.Partition().PartitionKey(ctx, policies.PartitionRequest{Kind: "lock"})
	if el := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || el > returnsSoon {
		t.Errorf("caller's deadline: %v after %v", err, el)
	}

	s := m.Stats()
	if s.Canceled != 4 || s.Failures != 0 || s.Timeouts != 0 || s.CircuitOpen || s.InstancesDiscarded != 4 || s.Fallbacks != 4 {
		t.Errorf("stats %+v: want 4 cancelled calls, no failure, circuit closed", s)
	}
	for _, o := range obs.outcomes() {
		if o != OutcomeCanceled {
			t.Errorf("observed %v, want %v", o, OutcomeCanceled)
		}
	}
	if n := countLines(logs(), "call failed"); n != 0 {
		t.Errorf("a cancelled call was logged as a failure: %q", logs())
	}
	if err := m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkLeaks()
}

func TestCancelledContextSkipsTheModule(t *testing.T) {
	r := newRuntime(t, RuntimeOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, timeout := range []time.Duration{testCallTimeout, NoCallTimeout} {
		m := load(t, r, testdata("echo"), ModuleOptions{CallTimeout: timeout, FallbackRetry: sentinelRetry})
		before := m.Stats()
		if got := m.Retry().DecideRetry(ctx, policies.RetryRequest{Attempt: 42}); got.Delay != 777*ms {
			t.Errorf("timeout %v: %+v, want the fallback", timeout, got)
		}
		if _, err := m.Partition().PartitionKey(ctx, policies.PartitionRequest{Kind: "lock"}); !errors.Is(err, context.Canceled) || !errors.Is(err, policies.ErrPartition) {
			t.Errorf("timeout %v: partition: %v", timeout, err)
		}
		if got := m.Starvation().WriterBound(ctx, policies.StarvationRequest{Readers: 1, Writers: 1}); got != 0 {
			t.Errorf("timeout %v: starvation %v, want the default fallback 0", timeout, got)
		}
		s := m.Stats()
		if s.Canceled != 3 || s.OK != 0 || s.InstancesCreated != before.InstancesCreated || s.InstancesDiscarded != 0 {
			t.Errorf("timeout %v: stats %+v: the module was called", timeout, s)
		}
	}
}

func TestCancellationWhileWaitingForAnInstance(t *testing.T) {
	// A pool of one instance, busy in a call that loops.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	r := newRuntime(t, RuntimeOptions{})
	m := load(t, r, testdata("loop"), ModuleOptions{CallTimeout: longCallTimeout, FallbackRetry: sentinelRetry})
	if m.MaxInstances() != 1 {
		t.Fatalf("pool of %d", m.MaxInstances())
	}
	busyCtx, stopBusy := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		m.Retry().DecideRetry(busyCtx, policies.RetryRequest{Attempt: 1})
	}()
	defer func() { stopBusy(); wg.Wait() }()
	// Wait until the busy call holds the only instance.
	for deadline := time.Now().Add(returnsSoon); len(m.pool.idle) != 0; {
		if time.Now().After(deadline) {
			t.Fatal("the busy call never took the instance")
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * ms)
	start := time.Now()
	if got := m.Retry().DecideRetry(cancelAfter(t, 50*ms), policies.RetryRequest{Attempt: 1}); got.Delay != 777*ms {
		t.Errorf("got %+v, want the fallback", got)
	}
	if el := time.Since(start); el > returnsSoon {
		t.Errorf("a caller waiting for an instance returned %v after its cancellation", el)
	}
	stopBusy()
	wg.Wait()
	if s := m.Stats(); s.Canceled != 2 || s.Failures != 0 {
		t.Errorf("stats %+v", s)
	}
}

func TestNoCallTimeoutModuleIsNotInterrupted(t *testing.T) {
	// The uninterruptible runtime checks ctx only before a call: a call
	// that started runs to its end (here: the answer).
	r := newRuntime(t, RuntimeOptions{})
	m := load(t, r, testdata("growloop"), ModuleOptions{CallTimeout: NoCallTimeout, MemoryPages: 64})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if got := m.Retry().DecideRetry(ctx, policies.RetryRequest{Attempt: 1}); got.Delay != 64*ms {
		t.Fatalf("got %+v", got)
	}
}

func TestDeadlineAddsNoAllocationWithoutCancellableContext(t *testing.T) {
	// With context.Background (Done is nil) a call with a deadline
	// allocates no more than wazero itself does for any call it must be
	// able to stop (its watchdog goroutine); the caller's-context link
	// costs nothing then.
	r := newRuntime(t, RuntimeOptions{})
	m := load(t, r, watConstant, ModuleOptions{CallTimeout: time.Minute})
	p := m.Retry()
	req := policies.RetryRequest{Attempt: 2, Reason: policies.ReasonContended, Rand: 1}
	p.DecideRetry(context.Background(), req)
	ours := testing.AllocsPerRun(500, func() { p.DecideRetry(context.Background(), req) })

	in, err := m.pool.acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer m.pool.release(in)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stack [5]uint64
	bare := testing.AllocsPerRun(500, func() {
		stack = [5]uint64{2, 1}
		if err := in.retry.CallWithStack(ctx, stack[:]); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("allocations per decision: %.1f; wazero's own per interruptible call: %.1f", ours, bare)
	if ours > bare && !raceEnabled {
		t.Errorf("a decision with a deadline allocates %.1f times, wazero alone %.1f", ours, bare)
	}
}

func TestDefaultMemoryLimitWithPermissiveRuntime(t *testing.T) {
	// The host's runtime allows 4 GiB so that memory_pages may ask for it;
	// a module without a limit of its own still gets the default.
	r := newRuntime(t, RuntimeOptions{MemoryLimitPages: MaxMemoryLimitPages})
	m := load(t, r, testdata("growloop"), ModuleOptions{})
	if got := m.Retry().DecideRetry(context.Background(), policies.RetryRequest{Attempt: 1}); got.Delay != DefaultMemoryLimitPages*ms {
		t.Fatalf("grew to %d pages, want the default limit of %d", got.Delay/ms, DefaultMemoryLimitPages)
	}
	// An explicit limit above the default is honoured.
	m2 := load(t, r, testdata("growloop"), ModuleOptions{MemoryPages: 600})
	if got := m2.Retry().DecideRetry(context.Background(), policies.RetryRequest{Attempt: 1}); got.Delay != 600*ms {
		t.Fatalf("grew to %d pages, want 600", got.Delay/ms)
	}
}

func TestDeadlineStopsAGrowingLoop(t *testing.T) {
	// A module that grows memory forever (ignoring failures) is stopped by
	// its deadline and by its caller, and never holds more than its limit.
	r := newRuntime(t, RuntimeOptions{MemoryLimitPages: MaxMemoryLimitPages})
	for _, c := range []struct {
		name    string
		timeout time.Duration
		ctx     func() context.Context
		outcome uint64
	}{
		{"deadline", 50 * ms, context.Background, 1},
		{"caller", longCallTimeout, func() context.Context { return cancelAfter(t, 50*ms) }, 1},
	} {
		m := load(t, r, testdata("growloop"), ModuleOptions{CallTimeout: c.timeout, FallbackRetry: sentinelRetry})
		in, err := m.pool.acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		lm := in.lm
		m.pool.release(in)
		start := time.Now()
		if got := m.Retry().DecideRetry(c.ctx(), policies.RetryRequest{Attempt: 2}); got.Delay != 777*ms {
			t.Errorf("%s: %+v, want the fallback", c.name, got)
		}
		if el := time.Since(start); el > returnsSoon {
			t.Errorf("%s: the growing loop ran %v", c.name, el)
		}
		if lm == nil || uint64(len(lm.buf)) > DefaultMemoryLimitPages*65536 || cap(lm.buf) > DefaultMemoryLimitPages*65536 {
			t.Errorf("%s: memory of %d bytes, above the default limit", c.name, len(lm.buf))
		}
		s := m.Stats()
		if (c.name == "deadline" && s.Timeouts != 1) || (c.name == "caller" && s.Canceled != 1) {
			t.Errorf("%s: stats %+v", c.name, s)
		}
	}
}

func TestLinearMemoryRefusesToGrowOnceDone(t *testing.T) {
	done := make(chan struct{})
	a := &memoryAllocator{}
	lm := a.Allocate(65536, 4*65536).(*linearMemory)
	lm.done = done
	if b := lm.Reallocate(65536); len(b) != 65536 {
		t.Fatalf("initial: %d bytes", len(b))
	}
	b := lm.Reallocate(3 * 65536)
	if len(b) != 3*65536 {
		t.Fatalf("grow: %d bytes", len(b))
	}
	b[0], b[len(b)-1] = 1, 2
	if lm.Reallocate(5*65536) != nil {
		t.Error("grew beyond the maximum")
	}
	close(done)
	if lm.Reallocate(4*65536) != nil {
		t.Error("grew after the call's context ended")
	}
	if b := lm.Reallocate(3 * 65536); len(b) != 3*65536 || b[0] != 1 || b[len(b)-1] != 2 {
		t.Error("the memory changed")
	}
	// Growing within the capacity yields zeroed bytes.
	lm2 := (&memoryAllocator{}).Allocate(0, 8*65536).(*linearMemory)
	lm2.Reallocate(65536)
	g := lm2.Reallocate(2 * 65536)
	for i, c := range g {
		if c != 0 {
			t.Fatalf("byte %d is %d", i, c)
		}
	}
	lm2.Free()
	if lm2.buf != nil {
		t.Error("Free kept the buffer")
	}
}

func TestUntrustedTextIsEscaped(t *testing.T) {
	// hostile.wat puts "\x1b[2J" (clear screen), newlines and fake log
	// lines into its refusal, its configure error and its log lines.
	logger, logs := newLogRecorder()
	r := newRuntime(t, RuntimeOptions{})
	_, err := r.Load(context.Background(), readWasm(t, testdata("hostile")), ModuleOptions{Name: "hostile", Config: []byte("F"), Logger: logger})
	if err == nil || !errors.Is(err, ErrABI) {
		t.Fatalf("configure error: %v", err)
	}
	checkClean(t, "configure error", err.Error())
	if !strings.Contains(err.Error(), `"\x1b[2J\nlock acquired`) {
		t.Errorf("configure error does not quote the message: %q", err)
	}
	m := load(t, r, testdata("hostile"), ModuleOptions{Name: "hostile", Logger: logger})
	_, err = m.Partition().PartitionKey(context.Background(), policies.PartitionRequest{Kind: "lock"})
	if err == nil {
		t.Fatal("no refusal")
	}
	checkClean(t, "refusal", err.Error())
	if !strings.Contains(err.Error(), `refused: "\x1b[2J\nlock acquired`) {
		t.Errorf("refusal not quoted: %q", err)
	}
	// A trap's error carries the module's function names: give them
	// escapes (a name section of our own replaces wat2wasm's).
	bin := withFunctionNames(t, readWasm(t, testdata("hostile")), 8, "\x1b]0;owned\x07\x1b[2J\nfake")
	m2, err := r.Load(context.Background(), bin, ModuleOptions{Name: "hostile-names", Logger: logger, CallTimeout: testCallTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close(context.Background())
	m2.Retry().DecideRetry(context.Background(), policies.RetryRequest{Attempt: 1})
	lines := logs()
	if countLines(lines, `\x1b]0;owned\a\x1b[2J\nfake`) != 1 {
		t.Errorf("the trap's stack trace does not show the escaped function name: %q", lines)
	}
	if len(lines) < 3 {
		t.Fatalf("log lines: %q", lines)
	}
	for _, l := range lines {
		checkClean(t, "log line", l)
	}
	if countLines(lines, `INFO \x1b[2J\nlock acquired`) == 0 {
		t.Errorf("guest log line not escaped: %q", lines)
	}
	if countLines(lines, `stream=stdout`) == 0 {
		t.Errorf("no stdout line: %q", lines)
	}
	if countLines(lines, "call failed") != 1 {
		t.Errorf("no failure warning: %q", lines)
	}
}

// withFunctionNames returns bin with its custom "name" section replaced by
// one naming functions 0..n-1 name.
func withFunctionNames(t *testing.T, bin []byte, n int, name string) []byte {
	t.Helper()
	var names []byte
	names = appendU32(names, uint32(n))
	for i := range n {
		names = appendU32(names, uint32(i))
		names = appendU32(names, uint32(len(name)))
		names = append(names, name...)
	}
	var body []byte
	body = appendU32(body, 4)
	body = append(body, "name"...)
	body = append(body, 1) // function names
	body = appendU32(body, uint32(len(names)))
	body = append(body, names...)

	out := append([]byte(nil), bin[:8]...)
	r := &reader{b: bin, off: 8}
	for r.off < len(bin) {
		start := r.off
		id, err := r.byte()
		if err != nil {
			t.Fatal(err)
		}
		size, err := r.u32()
		if err != nil {
			t.Fatal(err)
		}
		end := r.off + int(size)
		sec := &reader{b: bin[r.off:end]}
		r.off = end
		if sn, err := sec.name(); id == 0 && err == nil && sn == "name" {
			continue
		}
		out = append(out, bin[start:end]...)
	}
	out = append(out, 0)
	out = appendU32(out, uint32(len(body)))
	return append(out, body...)
}

// checkClean fails t if s holds a control character.
func checkClean(t *testing.T, what, s string) {
	t.Helper()
	if i := strings.IndexFunc(s, func(r rune) bool { return r < ' ' || r == 0x7f }); i >= 0 {
		t.Errorf("%s holds control character %q at %d: %q", what, s[i], i, s)
	}
}
