package ratelimit_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/faulttest"
	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/internal/clock"
	"github.com/coordhost/coordhost/primitives/ratelimit"
	"github.com/redis/rueidis"
)

// No server this suite runs (Redis 7.0 to 8.6, Valkey 8.1) has INCREX
// (Redis 8.8), so the fast path is tested through faulttest.IncrexShim: a
// loopback RESP server in front of a real Redis that implements INCREX's
// documented semantics atomically, and answers "unknown command" or
// "syntax error" on demand like an older server or a partial
// implementation.
func increxClient(t *testing.T) (*faulttest.IncrexShim, rueidis.Client) {
	t.Helper()
	srv := redistest.Start(t)
	shim := faulttest.StartIncrexShim(t, srv.Addr)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{shim.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return shim, c
}

// Through INCREX, a fixed window decides as the script does: grants to the
// limit, a refusal with the window's remaining time, a new window after
// it. Every decision is one INCREX (pipelined with PTTL).
func TestFixedWindowIncrex(t *testing.T) {
	shim, c := increxClient(t)
	ls := newLimiters(t, c, "x:")
	ctx := xtest.Ctx(t, 10*time.Second)
	const window = 200 * time.Millisecond
	l := must(t)(ls.FixedWindow("w", ratelimit.FixedWindowOptions{Limit: 3, Window: window}))
	for i, want := range []int64{2, 0} {
		r := try(t, ctx, l, []int64{1, 2}[i])
		if !r.Acquired || r.Remaining != want || !r.ServerTime.IsZero() {
			t.Fatalf("grant %d: %s server time %v", i, describe(r), r.ServerTime)
		}
	}
	if ls.FastPath() != ratelimit.FastPathIncrex {
		t.Fatalf("fast path %v after INCREX answered", ls.FastPath())
	}
	r := try(t, ctx, l, 1)
	if r.Acquired || r.RetryAfter <= 0 || r.RetryAfter > window+time.Millisecond || r.Remaining != 0 {
		t.Fatalf("refused: %s", describe(r))
	}
	if n := shim.Calls(); n != 3 {
		t.Fatalf("%d INCREX for 3 decisions", n)
	}
	// A peek (n = 0) and a refused-without-asking call send no INCREX.
	try(t, ctx, l, 0)
	try(t, ctx, l, 4)
	if n := shim.Calls(); n != 3 {
		t.Fatalf("peek or impossible request sent INCREX (%d)", n)
	}
	time.Sleep(r.RetryAfter + 5*time.Millisecond)
	if r := try(t, ctx, l, 3); !r.Acquired {
		t.Fatalf("new window: %s", describe(r))
	}

	// A full counter someone left without expiry: INCREX refuses and
	// cannot give it one (ENX applies only with the increment), so the
	// script does, and the window can end.
	if err := c.Do(ctx, c.B().Set().Key("x:stuck").Value("3").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	stuck := must(t)(ls.FixedWindow("stuck", ratelimit.FixedWindowOptions{Limit: 3, Window: window}))
	if r := try(t, ctx, stuck, 1); r.Acquired || r.RetryAfter <= 0 {
		t.Fatalf("stuck counter: %s", describe(r))
	}
	if ms, _ := c.Do(ctx, c.B().Pttl().Key("x:stuck").Build()).AsInt64(); ms <= 0 {
		t.Fatalf("stuck counter still has no expiry (PTTL %d)", ms)
	}
	// A key of another type is the same error as through the script.
	if err := c.Do(ctx, c.B().Hset().Key("x:hash").FieldValue().FieldValue("f", "v").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	hash := must(t)(ls.FixedWindow("hash", ratelimit.FixedWindowOptions{Limit: 3, Window: window}))
	if _, err := hash.TryAcquire(ctx, 1); !errors.Is(err, primitives.ErrWrongType) {
		t.Fatalf("INCREX on a hash: %v", err)
	}
}

// A server that refuses INCREX (unknown command, or a syntax error from a
// partial implementation) costs one extra round trip: every limiter of the
// same Limiters then uses the script, until the re-probe interval passes;
// a server upgraded meanwhile regains the fast path.
func TestFixedWindowIncrexRefused(t *testing.T) {
	for _, mode := range []faulttest.IncrexMode{faulttest.IncrexUnknown, faulttest.IncrexSyntaxError} {
		t.Run([]string{"native", "unknown", "syntax"}[mode], func(t *testing.T) {
			shim, c := increxClient(t)
			shim.SetMode(mode)
			ls := newLimiters(t, c, "x:")
			fake := clock.NewFake(time.Now())
			ratelimit.SetClock(ls, fake)
			ctx := xtest.Ctx(t, 10*time.Second)
			a := must(t)(ls.FixedWindow("a", ratelimit.FixedWindowOptions{Limit: 2, Window: time.Minute}))
			b := must(t)(ls.FixedWindow("b", ratelimit.FixedWindowOptions{Limit: 2, Window: time.Minute}))
			if r := try(t, ctx, a, 1); !r.Acquired || r.Remaining != 1 || r.ServerTime.IsZero() {
				t.Fatalf("first decision after a refused INCREX: %s", describe(r))
			}
			if ls.FastPath() != ratelimit.FastPathLua || shim.Calls() != 1 {
				t.Fatalf("after a refusal: fast path %v, %d INCREX", ls.FastPath(), shim.Calls())
			}
			try(t, ctx, a, 1)
			try(t, ctx, b, 1)
			try(t, ctx, a, 1) // refused
			if n := shim.Calls(); n != 1 {
				t.Fatalf("%d INCREX within the re-probe interval", n)
			}
			fake.Advance(ratelimit.DefaultProbeInterval - time.Second)
			try(t, ctx, b, 1)
			if n := shim.Calls(); n != 1 {
				t.Fatalf("re-probed before the interval: %d INCREX", n)
			}
			shim.SetMode(faulttest.IncrexNative) // the server was upgraded
			fake.Advance(time.Second)
			r := try(t, ctx, b, 1) // b is full: refused, by INCREX
			if r.Acquired || ls.FastPath() != ratelimit.FastPathIncrex || shim.Calls() != 2 {
				t.Fatalf("after the interval on an upgraded server: %s, fast path %v, %d INCREX", describe(r), ls.FastPath(), shim.Calls())
			}
		})
	}
}

// While the answer is unknown, one call probes and the others use the
// script: a server without INCREX sees one INCREX however many callers
// start at once.
func TestIncrexProbeIsSingle(t *testing.T) {
	shim, c := increxClient(t)
	shim.SetMode(faulttest.IncrexUnknown)
	ls := newLimiters(t, c, "x:")
	ctx := xtest.Ctx(t, 10*time.Second)
	l := must(t)(ls.FixedWindow("crowd", ratelimit.FixedWindowOptions{Limit: 1000, Window: time.Minute}))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if _, err := l.TryAcquire(ctx, 1); err != nil {
				t.Error(err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if n := shim.Calls(); n != 1 {
		t.Fatalf("%d INCREX from 32 concurrent first calls, want 1", n)
	}
	if s := l.Statistics(); s.Granted != 32 || s.Available < 1000-32 || s.Available > 999 {
		t.Fatalf("statistics %+v", s)
	}
}
