package ratelimit_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives/ratelimit"
)

func pttl(t *testing.T, s *redistest.Server, key string) time.Duration {
	t.Helper()
	n, err := strconv.ParseInt(s.MustCmd(t, "PTTL", key), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return time.Duration(n) * time.Millisecond
}

// A fixed window starts with its first permit and is not extended by
// later ones; a counter someone left without expiry gets one.
func TestFixedWindowExpiry(t *testing.T) {
	srv := redistest.Start(t)
	ls := newLimiters(t, srv.Client(t), "f:")
	ctx := xtest.Ctx(t, 10*time.Second)
	l := must(t)(ls.FixedWindow("w", ratelimit.FixedWindowOptions{Limit: 10, Window: time.Second}))
	try(t, ctx, l, 1)
	first := pttl(t, srv, "f:w")
	if first <= 900*time.Millisecond || first > time.Second+time.Millisecond {
		t.Fatalf("PTTL after the first permit %v, want the window (up to 1ms more)", first)
	}
	time.Sleep(50 * time.Millisecond)
	try(t, ctx, l, 1)
	if later := pttl(t, srv, "f:w"); later > first-40*time.Millisecond {
		t.Fatalf("a later permit extended the window: PTTL %v after %v", later, first)
	}
	srv.MustCmd(t, "SET", "f:stuck", "10")
	stuck := must(t)(ls.FixedWindow("stuck", ratelimit.FixedWindowOptions{Limit: 10, Window: time.Second}))
	if r := try(t, ctx, stuck, 1); r.Acquired || r.RetryAfter <= 0 || r.RetryAfter > time.Second+time.Millisecond {
		t.Fatalf("full counter without expiry: %s", describe(r))
	}
	if d := pttl(t, srv, "f:stuck"); d <= 0 {
		t.Fatalf("counter without expiry was not given one: PTTL %v", d)
	}
}

// A sliding window's refusal names when the oldest permit stops counting:
// never before it is a whole window old, at most one segment after.
func TestSlidingWindowSegments(t *testing.T) {
	srv := redistest.Start(t)
	ls := newLimiters(t, srv.Client(t), "s:")
	ctx := xtest.Ctx(t, 10*time.Second)
	const window, segments = 400 * time.Millisecond, 8
	seg := window / segments
	l := must(t)(ls.SlidingWindow("w", ratelimit.SlidingWindowOptions{Limit: 3, Window: window, Segments: segments}))
	var grants []time.Time
	for range 3 {
		r := try(t, ctx, l, 1)
		if !r.Acquired {
			t.Fatal(describe(r))
		}
		grants = append(grants, r.ServerTime)
		time.Sleep(seg + seg/3) // spread over segments
	}
	r := try(t, ctx, l, 1)
	if r.Acquired {
		t.Fatal(describe(r))
	}
	back := r.ServerTime.Add(r.RetryAfter)
	if exact := grants[0].Add(window); back.Before(exact) || back.After(exact.Add(seg)) {
		t.Fatalf("permit of %v back at %v: want within [%v, %v]", grants[0], back, exact, exact.Add(seg))
	}
	if n := srv.MustCmd(t, "HLEN", "s:w"); n != "3" {
		t.Fatalf("HLEN %s, want one field per segment used", n)
	}
	if d := pttl(t, srv, "s:w"); d > window+seg+time.Millisecond {
		t.Fatalf("PTTL %v beyond the last segment's end + window", d)
	}

	// Segments dated an hour ahead (the server's clock went back) count as
	// taken now: the limiter is shut for a window, not for an hour.
	future := strconv.FormatInt(time.Now().Add(time.Hour).UnixMicro(), 10)
	srv.MustCmd(t, "HSET", "s:ahead", future, "3")
	srv.MustCmd(t, "PEXPIRE", "s:ahead", "7200000")
	a := must(t)(ls.SlidingWindow("ahead", ratelimit.SlidingWindowOptions{Limit: 3, Window: window, Segments: segments}))
	r = try(t, ctx, a, 1)
	if r.Acquired || r.RetryAfter > window+seg+time.Millisecond {
		t.Fatalf("segments an hour ahead: %s", describe(r))
	}
	time.Sleep(r.RetryAfter + 5*time.Millisecond)
	if r := try(t, ctx, a, 1); !r.Acquired {
		t.Fatalf("after RetryAfter: %s", describe(r))
	}
}

// A token bucket under steady traffic still refills (its refill time
// advances by whole periods, not to every call), expires when it would
// be full again, and recovers from a refill time in the future.
func TestTokenBucketRefills(t *testing.T) {
	srv := redistest.Start(t)
	ls := newLimiters(t, srv.Client(t), "b:")
	ctx := xtest.Ctx(t, 20*time.Second)
	const period = 60 * time.Millisecond
	l := must(t)(ls.TokenBucket("steady", ratelimit.TokenBucketOptions{Limit: 3, TokensPerPeriod: 1, Period: period}))
	if r := try(t, ctx, l, 3); !r.Acquired {
		t.Fatal(describe(r))
	}
	if d := pttl(t, srv, "b:steady"); d <= 2*period || d > 3*period+time.Millisecond {
		t.Fatalf("PTTL %v after emptying: want the time to fill, 3 periods", d)
	}
	// Calls every half period: a bucket that reset its refill clock on
	// every call would never refill.
	start, granted := time.Now(), 0
	for time.Since(start) < 20*period {
		if try(t, ctx, l, 1).Acquired {
			granted++
		}
		time.Sleep(period / 2)
	}
	if granted < 15 {
		t.Fatalf("%d grants in 20 periods of steady traffic, want about 20 (one per period)", granted)
	}

	future := strconv.FormatInt(time.Now().Add(time.Hour).UnixMicro(), 10)
	srv.MustCmd(t, "HSET", "b:future", "tokens", "0", "at", future)
	f := must(t)(ls.TokenBucket("future", ratelimit.TokenBucketOptions{Limit: 3, TokensPerPeriod: 1, Period: period}))
	r := try(t, ctx, f, 1)
	if r.Acquired || r.RetryAfter > period+time.Millisecond {
		t.Fatalf("refill time an hour ahead: %s (want a refill within a period)", describe(r))
	}
	time.Sleep(r.RetryAfter + 5*time.Millisecond)
	if r := try(t, ctx, f, 1); !r.Acquired {
		t.Fatalf("no refill after RetryAfter: %s", describe(r))
	}

	// A smaller limit from another process clamps the stored tokens.
	big := must(t)(ls.TokenBucket("shrink", ratelimit.TokenBucketOptions{Limit: 10, TokensPerPeriod: 1, Period: time.Hour}))
	try(t, ctx, big, 1) // 9 left
	small := must(t)(ls.TokenBucket("shrink", ratelimit.TokenBucketOptions{Limit: 2, TokensPerPeriod: 1, Period: time.Hour}))
	if r := try(t, ctx, small, 2); !r.Acquired || r.Remaining != 0 {
		t.Fatalf("clamped bucket: %s", describe(r))
	}
}
