package ratelimit_test

// Recheck tests: a second hostile pass on the fixes of the first one. A
// test that found a bug is skipped with "FINDING n: ..." so the branch
// stays green; the others are attacks the fixes survived.

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/ratelimit"
)

// An OldestFirst call queued behind a front copies the front's wakeAt
// (enqueue: w.wakeAt = h.wakeAt). When the front leaves the queue early
// (its ctx ends), the next call becomes the front with that copy: the
// dispatcher sleeps until the time the departed call's permits were due,
// although this call's own permits are free now, and every newcomer with a
// deadline before it is refused ("would exceed deadline") while permits
// are free.
func TestRecheckStaleWakeAfterFrontLeaves(t *testing.T) {

	c := redistest.Start(t).Client(t)
	ls := newLimiters(t, c, "rc:")
	ctx := xtest.Ctx(t, 30*time.Second)
	l := must(t)(ls.FixedWindow("stale", ratelimit.FixedWindowOptions{Limit: 10, Window: time.Minute, QueueLimit: 10}))
	if r := try(t, ctx, l, 8); !r.Acquired {
		t.Fatal(describe(r))
	}
	// A waits for 5 permits (2 free: back in a minute); B for 1, behind A.
	actx, acancel := context.WithCancel(context.Background())
	defer acancel()
	bctx, bcancel := context.WithCancel(context.Background())
	defer bcancel()
	outA, outB := make(chan outcome, 1), make(chan outcome, 1)
	queued(t, actx, l, 5, outA, "A")
	queued(t, bctx, l, 1, outB, "B")
	acancel()
	if o := <-outA; !errors.Is(o.err, context.Canceled) {
		t.Fatalf("A: %s, %v", describe(o.res), o.err)
	}
	// 2 permits are free and only B (1 permit) is queued: a newcomer with
	// 10 s to spare can be served at once after B.
	cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
	defer ccancel()
	r, err := l.Acquire(cctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Acquired && r.RetryAfter > 5*time.Second {
		t.Errorf("C: Acquire(1) with 2 permits free and 1 queued: %s (refused on the departed front's wait)", describe(r))
	}
	select {
	case o := <-outB:
		if !o.res.Acquired || o.err != nil {
			t.Errorf("B: %s, %v", describe(o.res), o.err)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("B: still queued 5 s after the front left, with 2 permits free (sleeping until the departed front's wakeAt)")
		bcancel()
		<-outB
	}
}

// NewestFirst with random sizes (0 to 3), cancellations and deadlines:
// the queue never holds more permits than QueueLimit, a call is never left
// hanging, and the queue drains to 0 (q.permits stays exact when
// eviction skips the call in flight).
func TestRecheckNewestFirstChurn(t *testing.T) {
	c := redistest.Start(t).Client(t)
	ls := newLimiters(t, c, "rc:")
	ctx := xtest.Ctx(t, 60*time.Second)
	const qlimit = 4
	for _, order := range []ratelimit.QueueOrder{ratelimit.NewestFirst, ratelimit.OldestFirst} {
		l := must(t)(ls.SlidingWindow("churn"+strconv.Itoa(int(order)), ratelimit.SlidingWindowOptions{Limit: 3, Window: 40 * time.Millisecond, Segments: 4, QueueLimit: qlimit, QueueOrder: order}))
		var over atomic.Int64
		stop := make(chan struct{})
		var watch sync.WaitGroup
		watch.Add(1)
		go func() {
			defer watch.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if q := l.Statistics().Queued; q > qlimit || q < 0 {
					over.Store(q)
				}
				time.Sleep(50 * time.Microsecond)
			}
		}()
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(g), 7))
				for range 60 {
					n := rng.Int64N(4)
					cctx, cancel := context.WithCancel(ctx)
					switch rng.IntN(3) {
					case 0:
						cctx, cancel = context.WithTimeout(ctx, time.Duration(rng.IntN(30))*time.Millisecond)
					case 1:
						time.AfterFunc(time.Duration(rng.IntN(20))*time.Millisecond, cancel)
					}
					_, err := l.Acquire(cctx, n)
					cancel()
					if err != nil && !ctxEnded(err) {
						t.Errorf("Acquire(%d): %v", n, err)
					}
				}
			}()
		}
		wg.Wait()
		close(stop)
		watch.Wait()
		if q := over.Load(); q != 0 {
			t.Errorf("%v: Statistics().Queued reached %d, QueueLimit %d", order, q, qlimit)
		}
		xtest.Eventually(t, 5*time.Second, "queue drains", func() bool { return l.Statistics().Queued == 0 })
		if _, idle := l.IdleDuration(); !idle {
			t.Errorf("%v: not idle after every call returned", order)
		}
	}
}

// A deadline exactly at the time the permits are back is enough: the call
// queues (jump path) and is granted. With a deadline 1 ms earlier it is
// refused at once with ErrWouldExceedDeadline from WaitN.
func TestRecheckDeadlineBoundary(t *testing.T) {
	c := redistest.Start(t).Client(t)
	ls := newLimiters(t, c, "rc:")
	ctx := xtest.Ctx(t, 20*time.Second)
	l := must(t)(ls.FixedWindow("edge", ratelimit.FixedWindowOptions{Limit: 1, Window: 300 * time.Millisecond, QueueLimit: 1}))
	if r := try(t, ctx, l, 1); !r.Acquired {
		t.Fatal(describe(r))
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	err := l.WaitN(short, 1)
	if !errors.Is(err, ratelimit.ErrWouldExceedDeadline) {
		t.Fatalf("WaitN with 50 ms to a window 300 ms long: %v", err)
	}
	if errors.Is(err, ratelimit.ErrQueueFull) {
		t.Errorf("the queue was empty: %v", err)
	}
	long, cancel2 := context.WithTimeout(ctx, 5*time.Second)
	defer cancel2()
	if err := l.WaitN(long, 1); err != nil {
		t.Fatalf("WaitN with 5 s to a window 300 ms long: %v", err)
	}
}

// Partitioned under a flood of new partitions from many goroutines: Len
// never exceeds MaxPartitions, keys of MaxPartitionKey bytes are taken and
// one more byte is refused without making a limiter, and no call is
// answered ErrClosed (a limiter retired under a call that began on it).
func TestRecheckPartitionedFlood(t *testing.T) {
	c := redistest.Start(t).Client(t)
	ls := newLimiters(t, c, "rc:")
	ctx := xtest.Ctx(t, 60*time.Second)
	const maxN = 5
	p, err := ratelimit.NewPartitioned(ratelimit.PartitionedOptions{
		New: func(k string) (*ratelimit.Limiter, error) {
			return ls.FixedWindow("flood:"+k, ratelimit.FixedWindowOptions{Limit: 1000, Window: time.Minute, QueueLimit: 10})
		},
		MaxPartitions: maxN,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.TryAcquire(ctx, strings.Repeat("k", ratelimit.MaxPartitionKey), 1); err != nil {
		t.Fatalf("a key of MaxPartitionKey bytes: %v", err)
	}
	before := p.Len()
	if _, err := p.TryAcquire(ctx, strings.Repeat("k", ratelimit.MaxPartitionKey+1), 1); !errors.Is(err, primitives.ErrInvalidKey) {
		t.Fatalf("a key of MaxPartitionKey+1 bytes: %v", err)
	}
	if p.Len() != before {
		t.Fatalf("a refused key changed Len from %d to %d", before, p.Len())
	}
	var maxLen atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 80 {
				k := strconv.Itoa((g*80 + i) % 13)
				var err error
				if i%3 == 0 {
					_, err = p.Acquire(ctx, k, int64(i%2))
				} else {
					_, err = p.TryAcquire(ctx, k, 1)
				}
				if err != nil && !errors.Is(err, ratelimit.ErrTooManyPartitions) {
					t.Errorf("partition %s: %v", k, err)
				}
				if n := int64(p.Len()); n > maxLen.Load() {
					maxLen.Store(n)
				}
			}
		}()
	}
	wg.Wait()
	if m := maxLen.Load(); m > maxN {
		t.Errorf("Len reached %d, MaxPartitions %d", m, maxN)
	}
}

// A call with a bad n on a new partition must not evict a live partition
// to make room for a limiter it never uses: checkCall runs after the
// eviction in Partitioned.begin.
func TestRecheckBadCallEvicts(t *testing.T) {

	c := redistest.Start(t).Client(t)
	ls := newLimiters(t, c, "rc:")
	ctx := xtest.Ctx(t, 20*time.Second)
	made := 0
	p, err := ratelimit.NewPartitioned(ratelimit.PartitionedOptions{
		New: func(k string) (*ratelimit.Limiter, error) {
			made++
			return ls.FixedWindow("bad:"+k, ratelimit.FixedWindowOptions{Limit: 10, Window: time.Minute})
		},
		MaxPartitions: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.TryAcquire(ctx, "live", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := p.TryAcquire(ctx, "new", -1); !errors.Is(err, ratelimit.ErrInvalidPermits) {
		t.Fatalf("n = -1: %v", err)
	}
	if made != 1 {
		t.Errorf("a call refused for n = -1 made a limiter (%d made), evicting the live partition", made)
	}
}
