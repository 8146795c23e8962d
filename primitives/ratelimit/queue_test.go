package ratelimit_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/ratelimit"
)

// queued starts Acquire(n) in a goroutine and waits until the limiter
// counts it as queued.
func queued(t *testing.T, ctx context.Context, l *ratelimit.Limiter, n int64, out chan<- outcome, tag string) {
	t.Helper()
	before := l.Statistics().Queued
	go func() {
		res, err := l.Acquire(ctx, n)
		out <- outcome{tag, res, err, time.Now()}
	}()
	xtest.Eventually(t, 5*time.Second, "the call is queued", func() bool { return l.Statistics().Queued >= before+n })
}

type outcome struct {
	tag string
	res ratelimit.Result
	err error
	at  time.Time
}

// Queued calls are served in arrival order (OldestFirst), each when the
// server said its permits are back, and a full queue refuses with the
// RetryAfter of a refusal.
func TestQueueOldestFirst(t *testing.T) {
	c := redistest.Start(t).Client(t)
	ls := newLimiters(t, c, "q:")
	ctx := xtest.Ctx(t, 20*time.Second)
	const window = 200 * time.Millisecond
	l := must(t)(ls.FixedWindow("oldest", ratelimit.FixedWindowOptions{Limit: 2, Window: window, QueueLimit: 3}))
	if r := try(t, ctx, l, 2); !r.Acquired {
		t.Fatal(describe(r))
	}
	start := time.Now()
	out := make(chan outcome, 4)
	queued(t, ctx, l, 1, out, "first")
	queued(t, ctx, l, 2, out, "second")
	// Queue holds 3 permits: one more is refused at once, with RetryAfter.
	r, err := l.Acquire(ctx, 1)
	if err != nil || r.Acquired || r.RetryAfter <= 0 || r.RetryAfter > window+time.Millisecond {
		t.Fatalf("queue full: %s, %v", describe(r), err)
	}
	var got []outcome
	for range 2 {
		got = append(got, <-out)
	}
	if got[0].tag != "first" || got[1].tag != "second" {
		t.Fatalf("served %s then %s", got[0].tag, got[1].tag)
	}
	for _, o := range got {
		if o.err != nil || !o.res.Acquired {
			t.Fatalf("%s: %s, %v", o.tag, describe(o.res), o.err)
		}
	}
	// first fits the second window; second (2 permits) needs a third.
	if d := got[0].at.Sub(start); d < window-20*time.Millisecond {
		t.Fatalf("first served after %v, before the window ended", d)
	}
	if d := got[1].at.Sub(start); d < 2*window-20*time.Millisecond {
		t.Fatalf("second served after %v, before the next window", d)
	}
	if s := l.Statistics(); s.Queued != 0 || s.Granted != 3 || s.Rejected != 1 {
		t.Fatalf("statistics %+v", s)
	}
}

// NewestFirst serves the latest call first and refuses the oldest when
// the queue is full.
func TestQueueNewestFirst(t *testing.T) {
	c := redistest.Start(t).Client(t)
	ls := newLimiters(t, c, "q:")
	ctx := xtest.Ctx(t, 20*time.Second)
	l := must(t)(ls.SlidingWindow("newest", ratelimit.SlidingWindowOptions{Limit: 1, Window: 200 * time.Millisecond, Segments: 4, QueueLimit: 2, QueueOrder: ratelimit.NewestFirst}))
	if r := try(t, ctx, l, 1); !r.Acquired {
		t.Fatal(describe(r))
	}
	out := make(chan outcome, 4)
	queued(t, ctx, l, 1, out, "a")
	queued(t, ctx, l, 1, out, "b")
	go func() { // evicts a
		res, err := l.Acquire(ctx, 1)
		out <- outcome{"c", res, err, time.Now()}
	}()
	first := <-out
	if first.tag != "a" || first.err != nil || first.res.Acquired || first.res.RetryAfter <= 0 {
		t.Fatalf("the oldest call was not refused to make room: %+v", first)
	}
	second := <-out
	if second.tag != "c" || !second.res.Acquired {
		t.Fatalf("newest not served first: %+v", second)
	}
	third := <-out
	if third.tag != "b" || !third.res.Acquired {
		t.Fatalf("then b: %+v", third)
	}
}

// Cancelling a queued call returns ctx's error and frees its place;
// closing the limiter ends the queued calls with ErrClosed and later calls
// too; no goroutine is left (goleak in TestMain).
func TestQueueCancelAndClose(t *testing.T) {
	c := redistest.Start(t).Client(t)
	ls := newLimiters(t, c, "q:")
	// Queued calls need contexts without a deadline: one before the
	// permits (an hour away) would not be queued at all.
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	l, err := ls.TokenBucket("close", ratelimit.TokenBucketOptions{Limit: 2, TokensPerPeriod: 1, Period: time.Hour, QueueLimit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if r := try(t, ctx, l, 2); !r.Acquired {
		t.Fatal(describe(r))
	}
	cctx, cancel := context.WithCancel(ctx)
	out := make(chan outcome, 4)
	queued(t, cctx, l, 1, out, "cancelled")
	queued(t, ctx, l, 2, out, "closed1")
	queued(t, ctx, l, 1, out, "closed2")
	if _, idle := l.IdleDuration(); idle {
		t.Fatal("idle while calls are queued")
	}
	cancel()
	if o := <-out; o.tag != "cancelled" || !errors.Is(o.err, context.Canceled) {
		t.Fatalf("cancelled call: %+v", o)
	}
	if q := l.Statistics().Queued; q != 3 {
		t.Fatalf("queued %d permits after a cancel, want 3", q)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); l.Close() }()
	for range 2 {
		if o := <-out; !errors.Is(o.err, primitives.ErrClosed) {
			t.Fatalf("%s after Close: %+v", o.tag, o)
		}
	}
	wg.Wait()
	if _, err := l.Acquire(ctx, 1); !errors.Is(err, primitives.ErrClosed) {
		t.Fatalf("Acquire after Close: %v", err)
	}
	if d, idle := l.IdleDuration(); !idle || d < 0 {
		t.Fatalf("IdleDuration after Close: %v %v", d, idle)
	}
}

// A call for 0 permits waits until one is available and consumes nothing;
// Wait and WaitN retry at RetryAfter when there is no queue; WaitN gives up
// at once when ctx's deadline comes first.
func TestWaitShapes(t *testing.T) {
	c := redistest.Start(t).Client(t)
	ls := newLimiters(t, c, "q:")
	ctx := xtest.Ctx(t, 20*time.Second)
	// The deadline checks run on limiters whose permits come back only
	// after a minute, with a deadline of soon: it still ends long before
	// the permits return, yet leaves a loaded machine seconds for the round
	// trips (a deadline of milliseconds could end during one, giving a
	// context error instead of the refusal). A refusal "at once" returns
	// well before the deadline.
	const soon = 10 * time.Second

	const window = 150 * time.Millisecond
	l := must(t)(ls.FixedWindow("wait", ratelimit.FixedWindowOptions{Limit: 2, Window: window, QueueLimit: 1}))
	start := time.Now() // the window opens after this: no permit is back before start+window
	if !l.AllowN(ctx, 2) {
		t.Fatal("AllowN(2) on a fresh limit of 2")
	}
	r, err := l.Acquire(ctx, 0)
	if err != nil || !r.Acquired || r.Remaining != 2 {
		t.Fatalf("Acquire(0): %s, %v", describe(r), err)
	}
	if d := time.Since(start); d < window-20*time.Millisecond {
		t.Fatalf("Acquire(0) returned after %v, before a permit was back", d)
	}
	// Acquire(0) consumed nothing and the window is over: take one permit
	// of a new one, so that WaitN(2) is refused, finds no queue room for 2,
	// sleeps RetryAfter and is granted in the window after.
	start = time.Now()
	if !l.Allow(ctx) {
		t.Fatal("Allow after Acquire(0)")
	}
	refused := l.Statistics().Rejected
	if err := l.WaitN(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < window-20*time.Millisecond {
		t.Fatalf("WaitN(2) returned after %v, before the permits were back", d)
	}
	// Refused once, granted on the retry at RetryAfter (or at once, if a
	// stall let the window end first): never retried early.
	if n := l.Statistics().Rejected - refused; n > 1 {
		t.Fatalf("WaitN(2) was refused %d times: it retried before RetryAfter", n)
	}
	if err := l.Wait(ctx); err != nil {
		t.Fatal(err)
	}

	// With no queue room for 2 and the permits back in a minute, WaitN
	// with a deadline of seconds is refused at once.
	m := must(t)(ls.FixedWindow("minute", ratelimit.FixedWindowOptions{Limit: 2, Window: time.Minute, QueueLimit: 1}))
	if !m.AllowN(ctx, 2) || m.Allow(ctx) {
		t.Fatal("AllowN(2) then Allow on a limit of 2")
	}
	dctx, cancel := context.WithTimeout(context.Background(), soon)
	defer cancel()
	start = time.Now()
	if err := m.WaitN(dctx, 2); !errors.Is(err, ratelimit.ErrWouldExceedDeadline) {
		t.Fatalf("WaitN with a deadline before the permits: %v", err)
	}
	if d := time.Since(start); d > soon/2 {
		t.Fatalf("WaitN refused after %v, not at once", d)
	}

	// With room in a queue, a deadline before the permits are back is
	// still refused at once (and holds no queue room), whether learnt on
	// the first attempt or by the queue's retry.
	q := must(t)(ls.TokenBucket("deadline", ratelimit.TokenBucketOptions{Limit: 1, TokensPerPeriod: 1, Period: time.Minute, QueueLimit: 5}))
	if !q.Allow(ctx) {
		t.Fatal("first permit refused")
	}
	dctx2, cancel2 := context.WithTimeout(context.Background(), soon)
	defer cancel2()
	start = time.Now()
	if err := q.Wait(dctx2); !errors.Is(err, ratelimit.ErrWouldExceedDeadline) {
		t.Fatalf("Wait with a queue and a deadline before the permits: %v", err)
	}
	if d := time.Since(start); d > soon/2 {
		t.Fatalf("refused after %v, not at once", d)
	}
	if s := q.Statistics(); s.Queued != 0 {
		t.Fatalf("the refused call holds queue room: %+v", s)
	}
	// Behind a call that waits beyond its deadline it is not queued
	// either. A fresh deadline: the steps since may have taken some of
	// the last one.
	out := make(chan outcome, 2)
	noDeadline, stop := context.WithCancel(context.Background())
	defer stop()
	queued(t, noDeadline, q, 1, out, "long")
	dctx3, cancel3 := context.WithTimeout(context.Background(), soon)
	defer cancel3()
	r, err = q.Acquire(dctx3, 1)
	if err != nil || r.Acquired || r.RetryAfter < 30*time.Second {
		t.Fatalf("queued behind another with a deadline before its permits: %s, %v", describe(r), err)
	}
	q.Close()
	<-out
}

// More permits than the limit are refused without RetryAfter, and a peek
// fills in Remaining and ResetAfter so headers do not claim quota is back
// now.
func TestNeverResultHasReset(t *testing.T) {
	c := redistest.Start(t).Client(t)
	ls := newLimiters(t, c, "q:")
	ctx := xtest.Ctx(t, 10*time.Second)
	l := must(t)(ls.TokenBucket("never", ratelimit.TokenBucketOptions{Limit: 2, TokensPerPeriod: 1, Period: 30 * time.Second}))
	l.AllowN(ctx, 2)
	r := try(t, ctx, l, 3)
	if r.Acquired || r.RetryAfter != 0 || r.Remaining != 0 || r.ResetAfter < 29*time.Second {
		t.Fatalf("3 permits of a bucket of 2: %s", describe(r))
	}
}

// Partitioned makes one limiter per partition, drops idle ones (their
// counts stay in Redis), and refuses new partitions past MaxPartitions.
func TestPartitioned(t *testing.T) {
	c := redistest.Start(t).Client(t)
	ls := newLimiters(t, c, "p:")
	ctx := xtest.Ctx(t, 20*time.Second)
	now := time.Now()
	var mu sync.Mutex
	made := map[string]int{}
	p, err := ratelimit.NewPartitioned(ratelimit.PartitionedOptions{
		New: func(part string) (*ratelimit.Limiter, error) {
			mu.Lock()
			made[part]++
			mu.Unlock()
			return ls.FixedWindow("tenant:"+part, ratelimit.FixedWindowOptions{Limit: 1, Window: time.Minute})
		},
		IdleTimeout:   time.Minute,
		MaxPartitions: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// Partitions use the real clock for IdleDuration; the sweep clock is
	// moved by hand.
	ratelimit.SetPartitionClock(p, func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	for _, part := range []string{"a", "b"} {
		if r, err := p.TryAcquire(ctx, part, 1); err != nil || !r.Acquired {
			t.Fatalf("%s: %s, %v", part, describe(r), err)
		}
	}
	if r, err := p.TryAcquire(ctx, "a", 1); err != nil || r.Acquired {
		t.Fatalf("a again: %s, %v", describe(r), err)
	}
	// A third partition replaces an idle one: the count of the one
	// dropped stays in Redis.
	if r, err := p.TryAcquire(ctx, "c", 1); err != nil || !r.Acquired || p.Len() != 2 {
		t.Fatalf("third partition: %s, %v, %d held", describe(r), err, p.Len())
	}
	for _, part := range []string{"a", "b"} {
		if r, err := p.TryAcquire(ctx, part, 1); err != nil || r.Acquired {
			t.Fatalf("%s after eviction: %s, %v", part, describe(r), err)
		}
	}
	// Past MaxPartitions with every limiter busy (queued calls), a new
	// partition is refused.
	busy, err := ratelimit.NewPartitioned(ratelimit.PartitionedOptions{
		New: func(part string) (*ratelimit.Limiter, error) {
			return ls.FixedWindow("busy:"+part, ratelimit.FixedWindowOptions{Limit: 1, Window: time.Minute, QueueLimit: 1})
		},
		MaxPartitions: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	noDeadline, stop := context.WithCancel(context.Background())
	defer stop()
	busy.TryAcquire(ctx, "a", 1)
	done := make(chan error, 1)
	go func() { _, err := busy.Acquire(noDeadline, "a", 1); done <- err }()
	xtest.Eventually(t, 5*time.Second, "a call is queued", func() bool { return busy.Statistics().Queued == 1 })
	if _, err := busy.TryAcquire(ctx, "b", 1); !errors.Is(err, ratelimit.ErrTooManyPartitions) {
		t.Fatalf("new partition while the only one is busy: %v", err)
	}
	if v, _ := c.Do(ctx, c.B().Exists().Key("p:busy:b").Build()).AsInt64(); v != 0 {
		t.Fatal("a refused partition wrote its key")
	}
	stop()
	<-done
	// Idle partitions are not dropped before IdleTimeout: fake a minute
	// of idleness by moving the limiters' idle clock is not possible, so
	// use a short real timeout instead.
	p2, err := ratelimit.NewPartitioned(ratelimit.PartitionedOptions{
		New: func(part string) (*ratelimit.Limiter, error) {
			return ls.FixedWindow("tenant:"+part, ratelimit.FixedWindowOptions{Limit: 1, Window: time.Minute})
		},
		IdleTimeout: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	if r, _ := p2.TryAcquire(ctx, "a", 1); r.Acquired {
		t.Fatal("the count of a is shared through Redis, yet a second Partitioned granted it")
	}
	if r, _ := p2.TryAcquire(ctx, "z", 1); !r.Acquired {
		t.Fatal(describe(r))
	}
	time.Sleep(60 * time.Millisecond)
	if r, _ := p2.TryAcquire(ctx, "y", 1); !r.Acquired { // sweeps a and z
		t.Fatal(describe(r))
	}
	if n := p2.Len(); n != 1 {
		t.Fatalf("%d partitions held after the idle sweep, want 1", n)
	}
	if s := p2.Statistics(); s.Granted != 2 || s.Rejected != 1 {
		t.Fatalf("statistics across dropped partitions: %+v", s)
	}
}
