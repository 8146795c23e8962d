package ratelimit_test

// Hostile tests: attacks on the contract the doc comments state. A test
// that found a bug is skipped with "FINDING n: ..." so the branch stays
// green; the others are attacks the code survived.

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/faulttest"
	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/ratelimit"
	"github.com/redis/rueidis"
)

// A refusal whose permits can come back carries RetryAfter > 0 (Result
// doc: 0 only when acquired or when the request can never succeed). With
// OldestFirst, a call that finds the queue full is answered by a peek; when
// the permits it asks for are free right now (the queue's head waits for
// more than are free), the peek grants, Acquire forces Acquired false and
// returns RetryAfter 0, and WaitN takes that for "more than the limit".
func TestHostileQueueFullRetryAfterZero(t *testing.T) {
	t.Skip("FINDING A: OldestFirst full queue answers RetryAfter 0 while permits are free; WaitN returns ErrExceedsLimit")
	c := redistest.Start(t).Client(t)
	ls := newLimiters(t, c, "h:")
	ctx := xtest.Ctx(t, 20*time.Second)
	l := must(t)(ls.FixedWindow("qfull", ratelimit.FixedWindowOptions{Limit: 2, Window: time.Minute, QueueLimit: 2}))
	if r := try(t, ctx, l, 1); !r.Acquired {
		t.Fatal(describe(r))
	}
	// The head waits for 2 permits (1 is free): it fills the queue.
	out := make(chan outcome, 1)
	qctx, cancel := context.WithCancel(ctx)
	defer cancel()
	queued(t, qctx, l, 2, out, "head")

	r, err := l.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Acquired && r.RetryAfter <= 0 {
		t.Errorf("Acquire(1) with a full queue and 1 permit free: %s (refused, RetryAfter 0 means 'never')", describe(r))
	}
	wctx, wcancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer wcancel()
	if err := l.WaitN(wctx, 1); errors.Is(err, ratelimit.ErrExceedsLimit) {
		t.Errorf("WaitN(1) on a limit of 2: %v", err)
	}
	cancel()
	<-out
}

// QueueLimit 0 means no queue (FixedWindowOptions doc), so Acquire
// decides at once like TryAcquire. A call for 0 permits adds 0 to the
// queue's permit count, so it passes the QueueLimit check and queues
// anyway, on every limiter, without any bound on the number of callers.
func TestHostileZeroPermitsIgnoreQueueLimit(t *testing.T) {
	t.Skip("FINDING B: Acquire(ctx, 0) queues although QueueLimit is 0, without bound")
	c := redistest.Start(t).Client(t)
	ls := newLimiters(t, c, "h:")
	ctx := xtest.Ctx(t, 20*time.Second)
	l := must(t)(ls.FixedWindow("zero", ratelimit.FixedWindowOptions{Limit: 1, Window: time.Minute}))
	if r := try(t, ctx, l, 1); !r.Acquired {
		t.Fatal(describe(r))
	}
	actx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	r, err := l.Acquire(actx, 0)
	if err != nil {
		t.Fatalf("Acquire(0) with QueueLimit 0 and no permit: %v (it queued)", err)
	}
	if r.Acquired || r.RetryAfter <= 0 {
		t.Fatalf("Acquire(0) with no permit: %s", describe(r))
	}
}

// NOPERM, READONLY and OOM are real errors (DESIGN §3): the fixed window
// returns them, does not fall back to the script (which would consume
// where INCREX was refused), does not take them for "no INCREX" (the
// server looked the command up before refusing it), and keeps asking
// INCREX.
func TestHostileIncrexRealErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode faulttest.IncrexMode
		word string
	}{
		{"noperm", faulttest.IncrexNoPerm, "NOPERM"},
		{"readonly", faulttest.IncrexReadOnly, "READONLY"},
		{"oom", faulttest.IncrexOOM, "OOM"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			shim, c := increxClient(t)
			shim.SetMode(tc.mode)
			ls := newLimiters(t, c, "x:")
			ctx := xtest.Ctx(t, 10*time.Second)
			l := must(t)(ls.FixedWindow("w", ratelimit.FixedWindowOptions{Limit: 3, Window: time.Minute}))
			for i := range 2 {
				r, err := l.TryAcquire(ctx, 1)
				if err == nil || !strings.Contains(err.Error(), tc.word) {
					t.Fatalf("call %d: %s, %v; want a %s error", i, describe(r), err, tc.word)
				}
				if errors.Is(err, primitives.ErrWrongType) {
					t.Fatalf("call %d: %v classified as ErrWrongType", i, err)
				}
			}
			if n := shim.Calls(); n != 2 {
				t.Fatalf("%d INCREX for 2 calls", n)
			}
			if ls.FastPath() == ratelimit.FastPathLua {
				t.Fatalf("fast path %v after a %s", ls.FastPath(), tc.word)
			}
			if err := c.Do(ctx, c.B().Get().Key("x:w").Build()).Error(); !rueidis.IsRedisNil(err) {
				t.Fatalf("the counter was written after a refused INCREX: %v", err)
			}
			if s := l.Statistics(); s.Granted != 0 || s.Rejected != 0 {
				t.Fatalf("errors counted as decisions: %+v", s)
			}
			shim.SetMode(faulttest.IncrexNative)
			if r := try(t, ctx, l, 1); !r.Acquired || r.Remaining != 2 {
				t.Fatalf("after the fault: %s", describe(r))
			}
		})
	}
}

// A counter someone set negative: the script refuses it as not a permit
// count (ErrWrongType, nothing written, see lua's "fixed: negative
// counter"). INCREX adds to it (value -5+1 is within UBOUND), the reply's
// negative value is then refused as "unreadable" (not ErrWrongType), and
// the counter has moved: each call consumes while failing, and once it
// reaches 0 the window grants Limit more on top.
func TestHostileIncrexNegativeCounter(t *testing.T) {
	t.Skip("FINDING D: INCREX adds to a negative foreign counter and fails without ErrWrongType")
	_, c := increxClient(t)
	ls := newLimiters(t, c, "x:")
	ctx := xtest.Ctx(t, 10*time.Second)
	if err := c.Do(ctx, c.B().Set().Key("x:neg").Value("-5").Px(time.Minute).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	l := must(t)(ls.FixedWindow("neg", ratelimit.FixedWindowOptions{Limit: 3, Window: time.Minute}))
	_, err := l.TryAcquire(ctx, 1)
	v, _ := c.Do(ctx, c.B().Get().Key("x:neg").Build()).ToString()
	if !errors.Is(err, primitives.ErrWrongType) || v != "-5" {
		t.Fatalf("INCREX on a counter of -5: error %v (want ErrWrongType), counter now %q (want -5 untouched)", err, v)
	}
}

// A lost INCREX reply: the call fails with a transport error, INCREX is
// not retried by the client (it would consume twice), the fast path stays
// as it was, and the next call works on a new connection.
func TestHostileIncrexLostReply(t *testing.T) {
	srv := redistest.Start(t)
	shim := faulttest.StartIncrexShim(t, srv.Addr)
	proxy := faulttest.New(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{shim.Addr()}, DisableCache: true, DialCtxFn: proxy.DialCtxFn})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ls := newLimiters(t, c, "x:")
	ctx := xtest.Ctx(t, 20*time.Second)
	l := must(t)(ls.FixedWindow("lost", ratelimit.FixedWindowOptions{Limit: 5, Window: time.Minute}))
	// Two calls: learn INCREX, and let rueidis open the second
	// connection it uses for DoMulti, so the drop hits INCREX's reply and
	// not a handshake's.
	try(t, ctx, l, 1)
	try(t, ctx, l, 1)
	proxy.DropReplies(1)
	if _, err := l.TryAcquire(ctx, 1); err == nil {
		t.Fatal("no error for a lost reply")
	}
	if st := proxy.Stats(); st.DroppedReplies != 1 {
		t.Fatalf("proxy %+v", st)
	}
	// The drop may hit the reply of INCREX (then the shim saw 3) or of
	// a handshake before it was written (2): never a retry (4).
	n := shim.Calls()
	if n > 3 {
		t.Fatalf("%d INCREX for 3 calls: the lost one was retried", n)
	}
	if v := srv.MustCmd(t, "GET", "x:lost"); v != strconv.FormatInt(n, 10) {
		t.Fatalf("counter %s after %d INCREX", v, n)
	}
	if ls.FastPath() != ratelimit.FastPathIncrex {
		t.Fatalf("fast path %v after a transport error", ls.FastPath())
	}
	if r := try(t, ctx, l, 1); !r.Acquired || r.Remaining != 5-n-1 {
		t.Fatalf("after the lost reply: %s", describe(r))
	}
}

// A probe that ends with the caller's ctx (before or while it is sent)
// leaves the fast path unknown and lets the next call probe.
func TestHostileIncrexCancelledProbe(t *testing.T) {
	shim, c := increxClient(t)
	ls := newLimiters(t, c, "x:")
	ctx := xtest.Ctx(t, 10*time.Second)
	l := must(t)(ls.FixedWindow("cp", ratelimit.FixedWindowOptions{Limit: 5, Window: time.Minute}))
	dead, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.TryAcquire(dead, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled ctx: %v", err)
	}
	if ls.FastPath() != ratelimit.FastPathUnknown {
		t.Fatalf("fast path %v after a cancelled probe", ls.FastPath())
	}
	before := shim.Calls()
	if r := try(t, ctx, l, 1); !r.Acquired {
		t.Fatal(describe(r))
	}
	if shim.Calls() != before+1 || ls.FastPath() != ratelimit.FastPathIncrex {
		t.Fatalf("no probe after a cancelled one: %d INCREX, fast path %v", shim.Calls()-before, ls.FastPath())
	}
	if v, _ := c.Do(ctx, c.B().Get().Key("x:cp").Build()).ToString(); v != "1" && v != "2" {
		t.Fatalf("counter %q", v)
	}
}

// Many goroutines on one fixed window while the server flips between
// having INCREX and not (an upgrade and a failover to an older replica):
// INCREX and the script share one counter, so exactly Limit permits are
// granted in the window, every call is answered, and -race sees no race.
func TestHostileIncrexFlappingUnderLoad(t *testing.T) {
	shim, c := increxClient(t)
	ls := newLimiters(t, c, "x:")
	ratelimit.SetProbeInterval(ls, 0) // re-probe on every call after a refusal
	ctx := xtest.Ctx(t, 30*time.Second)
	const limit = 100
	l := must(t)(ls.FixedWindow("flap", ratelimit.FixedWindowOptions{Limit: limit, Window: time.Hour}))
	var granted atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			shim.SetMode([]faulttest.IncrexMode{faulttest.IncrexNative, faulttest.IncrexUnknown, faulttest.IncrexSyntaxError}[i%3])
			time.Sleep(time.Millisecond)
		}
	}()
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				r, err := l.TryAcquire(ctx, 1)
				if err != nil {
					t.Error(err)
					return
				}
				if r.Acquired {
					granted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	if g := granted.Load(); g != limit {
		t.Fatalf("%d granted in one window of limit %d (%d INCREX)", g, limit, shim.Calls())
	}
	if v := c.Do(ctx, c.B().Get().Key("x:flap").Build()); v.Error() != nil {
		t.Fatal(v.Error())
	} else if s, _ := v.ToString(); s != "100" {
		t.Fatalf("counter %s", s)
	}
}
