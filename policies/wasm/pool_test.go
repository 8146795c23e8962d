package wasm

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeInstances stands in for a Module's create and destroy: its instances
// are empty, and it counts what the pool does with them.
type fakeInstances struct {
	fail      atomic.Pointer[error] // create's error, when set
	created   atomic.Int64
	destroyed atomic.Int64
	live      atomic.Int64
	peak      atomic.Int64

	mu   sync.Mutex
	gone map[*instance]bool // destroyed instances
}

func (f *fakeInstances) create(ctx context.Context) (*instance, error) {
	if err := f.fail.Load(); err != nil {
		return nil, *err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f.created.Add(1)
	live := f.live.Add(1)
	for p := f.peak.Load(); live > p && !f.peak.CompareAndSwap(p, live); p = f.peak.Load() {
	}
	return &instance{}, nil
}

func (f *fakeInstances) destroy(in *instance) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gone[in] {
		panic("an instance was destroyed twice")
	}
	if f.gone == nil {
		f.gone = map[*instance]bool{}
	}
	f.gone[in] = true
	f.destroyed.Add(1)
	f.live.Add(-1)
}

func (f *fakeInstances) isGone(in *instance) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gone[in]
}

func newTestPool(n int, logger *slog.Logger) (*pool, *fakeInstances) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	f := &fakeInstances{}
	return newPool(n, f.create, f.destroy, logger), f
}

func mustAcquire(t *testing.T, p *pool) *instance {
	t.Helper()
	in, err := p.acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// acquireAsync calls acquire on another goroutine; give it time to block
// before acting on the pool.
func acquireAsync(ctx context.Context, p *pool) <-chan error {
	ch := make(chan error, 1)
	go func() {
		in, err := p.acquire(ctx)
		if err == nil {
			p.release(in)
		}
		ch <- err
	}()
	return ch
}

func waitResult(t *testing.T, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(returnsSoon):
		t.Fatal("acquire did not return")
		return nil
	}
}

func TestPoolIsBoundedAndReusesInstances(t *testing.T) {
	p, f := newTestPool(2, nil)
	if p.size() != 2 {
		t.Fatalf("size %d", p.size())
	}
	a, b := mustAcquire(t, p), mustAcquire(t, p)
	if a == b || f.created.Load() != 2 {
		t.Fatalf("two acquires: created %d", f.created.Load())
	}
	// Full: a third caller waits until its ctx ends, creating nothing.
	ctx, cancel := context.WithTimeout(context.Background(), 20*ms)
	defer cancel()
	if _, err := p.acquire(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("acquire from a full pool: %v, want the deadline", err)
	}
	if f.created.Load() != 2 {
		t.Fatalf("a full pool created instance %d", f.created.Load())
	}
	// A released instance is reused, not recreated.
	p.release(a)
	if got := mustAcquire(t, p); got != a {
		t.Fatal("a released instance was not reused")
	}
	p.release(a)
	p.release(b)
	if f.created.Load() != 2 || f.peak.Load() != 2 || len(p.idle) != 2 || len(p.tokens) != 0 {
		t.Fatalf("created %d, peak %d, idle %d, tokens %d", f.created.Load(), f.peak.Load(), len(p.idle), len(p.tokens))
	}
}

func TestPoolDiscardFreesTheSlot(t *testing.T) {
	// After a trap the caller discards its instance: it is destroyed,
	// never handed out again, and its slot lets a new one be created.
	p, f := newTestPool(1, nil)
	a := mustAcquire(t, p)
	p.discard(a)
	if !f.isGone(a) || f.live.Load() != 0 || len(p.tokens) != 1 {
		t.Fatalf("after discard: destroyed %v, live %d, tokens %d", f.isGone(a), f.live.Load(), len(p.tokens))
	}
	b := mustAcquire(t, p)
	if b == a || f.created.Load() != 2 {
		t.Fatalf("after discard: got the discarded instance again, or created %d", f.created.Load())
	}
	p.release(b)
}

func TestPoolWaitingCallerGetsAFreedSlot(t *testing.T) {
	p, f := newTestPool(1, nil)
	a := mustAcquire(t, p)
	// A released instance goes to the waiter.
	ch := acquireAsync(context.Background(), p)
	time.Sleep(20 * ms)
	p.release(a)
	if err := waitResult(t, ch); err != nil {
		t.Fatal(err)
	}
	if f.created.Load() != 1 {
		t.Fatalf("created %d, want the released instance reused", f.created.Load())
	}
	// A discarded instance's slot lets the waiter create a new one.
	a = mustAcquire(t, p)
	ch = acquireAsync(context.Background(), p)
	time.Sleep(20 * ms)
	p.discard(a)
	if err := waitResult(t, ch); err != nil {
		t.Fatal(err)
	}
	if f.created.Load() != 2 || f.live.Load() != 1 {
		t.Fatalf("created %d, live %d", f.created.Load(), f.live.Load())
	}
}

func TestPoolWaitingCallerCancelled(t *testing.T) {
	p, f := newTestPool(1, nil)
	a := mustAcquire(t, p)
	ctx, cancel := context.WithCancel(context.Background())
	ch := acquireAsync(ctx, p)
	time.Sleep(20 * ms)
	start := time.Now()
	cancel()
	if err := waitResult(t, ch); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v", err)
	}
	if el := time.Since(start); el > returnsSoon {
		t.Errorf("the cancelled waiter returned after %v", el)
	}
	// It took nothing with it: the instance comes back and is reused.
	p.release(a)
	if len(p.idle) != 1 || len(p.tokens) != 0 || f.created.Load() != 1 {
		t.Fatalf("idle %d, tokens %d, created %d", len(p.idle), len(p.tokens), f.created.Load())
	}
	if got := mustAcquire(t, p); got != a {
		t.Fatal("the instance was not reused")
	}
}

func TestPoolCreateFailureReturnsTheSlot(t *testing.T) {
	logger, logs := newLogRecorder()
	p, f := newTestPool(1, logger)
	boom := errors.New("boom")
	f.fail.Store(&boom)
	if _, err := p.acquire(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("acquire: %v, want create's error", err)
	}
	if len(p.tokens) != 1 {
		t.Fatalf("tokens %d after a failed create, want the slot back", len(p.tokens))
	}
	if n := countLines(logs(), "cannot create an instance"); n != 1 {
		t.Errorf("%d warnings about the failed create, want 1: %q", n, logs())
	}
	// A caller that gave up during create gets its ctx's error, and no
	// warning: the module is not to blame.
	f.fail.Store(nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.acquire(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("acquire with a cancelled ctx: %v", err)
	}
	if n := countLines(logs(), "cannot create an instance"); n != 1 || len(p.tokens) != 1 {
		t.Errorf("after a cancelled create: %d warnings, %d tokens", n, len(p.tokens))
	}
	// fill reports a failure without a warning, and keeps the slot.
	f.fail.Store(&boom)
	if err := p.fill(context.Background()); !errors.Is(err, boom) || len(p.tokens) != 1 {
		t.Fatalf("fill: %v, tokens %d", err, len(p.tokens))
	}
	if n := countLines(logs(), "cannot create an instance"); n != 1 {
		t.Errorf("fill logged its failure")
	}
	f.fail.Store(nil)
	if err := p.fill(context.Background()); err != nil || len(p.idle) != 1 || len(p.tokens) != 0 {
		t.Fatalf("fill: %v, idle %d, tokens %d", err, len(p.idle), len(p.tokens))
	}
}

func TestPoolClose(t *testing.T) {
	p, f := newTestPool(2, nil)
	busy, idle := mustAcquire(t, p), mustAcquire(t, p)
	p.release(idle)
	if !p.close() {
		t.Fatal("close reported the pool closed already")
	}
	if p.close() {
		t.Fatal("a second close closed again")
	}
	// Idle instances are destroyed at once, busy ones when they come back.
	if !f.isGone(idle) || f.isGone(busy) {
		t.Fatalf("after close: idle destroyed %v, busy destroyed %v", f.isGone(idle), f.isGone(busy))
	}
	if _, err := p.acquire(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("acquire after close: %v, want ErrClosed", err)
	}
	p.release(busy)
	if !f.isGone(busy) || f.live.Load() != 0 || len(p.idle) != 0 || len(p.tokens) != 2 {
		t.Fatalf("after close: live %d, idle %d, tokens %d", f.live.Load(), len(p.idle), len(p.tokens))
	}
}

func TestPoolCloseWakesWaitingCallers(t *testing.T) {
	p, f := newTestPool(1, nil)
	held := mustAcquire(t, p)
	ch := acquireAsync(context.Background(), p)
	time.Sleep(20 * ms)
	p.close()
	if err := waitResult(t, ch); !errors.Is(err, ErrClosed) {
		t.Fatalf("waiter at close: %v, want ErrClosed", err)
	}
	p.discard(held)
	if f.live.Load() != 0 || f.created.Load() != 1 || len(p.tokens) != 1 {
		t.Fatalf("live %d, created %d, tokens %d", f.live.Load(), f.created.Load(), len(p.tokens))
	}
}

func TestPoolConcurrentUseStaysBounded(t *testing.T) {
	const size, callers, rounds = 3, 16, 300
	p, f := newTestPool(size, nil)
	var wg sync.WaitGroup
	var busy, maxBusy atomic.Int64
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rand.IntN(3))*time.Millisecond)
				in, err := p.acquire(ctx)
				cancel()
				if err != nil {
					if !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("acquire: %v", err)
					}
					continue
				}
				n := busy.Add(1)
				for m := maxBusy.Load(); n > m && !maxBusy.CompareAndSwap(m, n); m = maxBusy.Load() {
				}
				busy.Add(-1)
				if rand.IntN(5) == 0 {
					p.discard(in) // as after a trap
				} else {
					p.release(in)
				}
			}
		}()
	}
	wg.Wait()
	if f.peak.Load() > size || maxBusy.Load() > size {
		t.Fatalf("peak %d live, %d busy at once; the pool's size is %d", f.peak.Load(), maxBusy.Load(), size)
	}
	if got := int64(len(p.idle)); got != f.live.Load() || got+int64(len(p.tokens)) != size {
		t.Fatalf("at rest: idle %d, live %d, tokens %d, size %d", got, f.live.Load(), len(p.tokens), size)
	}
	p.close()
	if f.live.Load() != 0 || f.created.Load() != f.destroyed.Load() {
		t.Fatalf("after close: live %d, created %d, destroyed %d", f.live.Load(), f.created.Load(), f.destroyed.Load())
	}
}
