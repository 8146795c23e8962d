package ratelimit_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/internal/leasetest"
	"github.com/coordhost/coordhost/primitives/ratelimit"
)

// The constructors refuse every bad option with an error naming it (they
// send nothing, so there is nothing to write).
func TestConstructorsRefuseBadOptions(t *testing.T) {
	srv := redistest.Start(t)
	ls := newLimiters(t, srv.Client(t), "b:")
	if _, err := ratelimit.New(nil, ratelimit.Options{}); !errors.Is(err, primitives.ErrInvalidOptions) {
		t.Fatalf("nil client: %v", err)
	}
	var nilLs *ratelimit.Limiters
	fw := func(o ratelimit.FixedWindowOptions) func() error {
		return func() error { _, err := ls.FixedWindow("k", o); return err }
	}
	sw := func(o ratelimit.SlidingWindowOptions) func() error {
		return func() error { _, err := ls.SlidingWindow("k", o); return err }
	}
	tb := func(o ratelimit.TokenBucketOptions) func() error {
		return func() error { _, err := ls.TokenBucket("k", o); return err }
	}
	okFW := ratelimit.FixedWindowOptions{Limit: 1, Window: time.Second}
	with := func(f func(*ratelimit.FixedWindowOptions)) ratelimit.FixedWindowOptions {
		o := okFW
		f(&o)
		return o
	}
	cases := []struct {
		name string
		call func() error
		want error
		says string
	}{
		{"nil Limiters", func() error { _, err := nilLs.FixedWindow("k", okFW); return err }, primitives.ErrInvalidOptions, "nil"},
		{"zero Limiters", func() error {
			_, err := (&ratelimit.Limiters{}).SlidingWindow("k", ratelimit.SlidingWindowOptions{Limit: 1, Window: time.Second})
			return err
		}, primitives.ErrInvalidOptions, "zero"},
		{"empty key", func() error { _, err := ls.FixedWindow("", okFW); return err }, primitives.ErrInvalidKey, "empty"},
		{"reserved key", func() error { _, err := ls.FixedWindow("__coordhost:x", okFW); return err }, primitives.ErrInvalidKey, "reserved"},
		{"fixed: limit 0", fw(with(func(o *ratelimit.FixedWindowOptions) { o.Limit = 0 })), primitives.ErrInvalidOptions, "Limit 0"},
		{"fixed: limit -1", fw(with(func(o *ratelimit.FixedWindowOptions) { o.Limit = -1 })), primitives.ErrInvalidOptions, "Limit -1"},
		{"fixed: limit MaxInt64", fw(with(func(o *ratelimit.FixedWindowOptions) { o.Limit = math.MaxInt64 })), primitives.ErrInvalidOptions, "Limit"},
		{"fixed: limit above MaxLimit", fw(with(func(o *ratelimit.FixedWindowOptions) { o.Limit = ratelimit.MaxLimit + 1 })), primitives.ErrInvalidOptions, "Limit"},
		{"fixed: window 0", fw(with(func(o *ratelimit.FixedWindowOptions) { o.Window = 0 })), primitives.ErrInvalidOptions, "Window"},
		{"fixed: window negative", fw(with(func(o *ratelimit.FixedWindowOptions) { o.Window = -time.Second })), primitives.ErrInvalidOptions, "Window"},
		{"fixed: window MinInt64", fw(with(func(o *ratelimit.FixedWindowOptions) { o.Window = math.MinInt64 })), primitives.ErrInvalidOptions, "Window"},
		{"fixed: window below 1ms", fw(with(func(o *ratelimit.FixedWindowOptions) { o.Window = time.Millisecond - 1 })), primitives.ErrInvalidOptions, "Window"},
		{"fixed: window not whole ms", fw(with(func(o *ratelimit.FixedWindowOptions) { o.Window = 1500 * time.Microsecond })), primitives.ErrInvalidOptions, "whole number of milliseconds"},
		{"fixed: window above MaxWindow", fw(with(func(o *ratelimit.FixedWindowOptions) { o.Window = ratelimit.MaxWindow + time.Millisecond })), primitives.ErrInvalidOptions, "Window"},
		{"fixed: window MaxInt64", fw(with(func(o *ratelimit.FixedWindowOptions) { o.Window = math.MaxInt64 })), primitives.ErrInvalidOptions, "Window"},
		{"fixed: queue limit -1", fw(with(func(o *ratelimit.FixedWindowOptions) { o.QueueLimit = -1 })), primitives.ErrInvalidOptions, "QueueLimit"},
		{"fixed: queue limit above MaxLimit", fw(with(func(o *ratelimit.FixedWindowOptions) { o.QueueLimit = ratelimit.MaxLimit + 1 })), primitives.ErrInvalidOptions, "QueueLimit"},
		{"fixed: queue order 2", fw(with(func(o *ratelimit.FixedWindowOptions) { o.QueueOrder = 2 })), primitives.ErrInvalidOptions, "QueueOrder"},
		{"fixed: queue order -1", fw(with(func(o *ratelimit.FixedWindowOptions) { o.QueueOrder = -1 })), primitives.ErrInvalidOptions, "QueueOrder"},
		{"sliding: segments -1", sw(ratelimit.SlidingWindowOptions{Limit: 1, Window: time.Second, Segments: -1}), primitives.ErrInvalidOptions, "Segments"},
		{"sliding: segments above MaxSegments", sw(ratelimit.SlidingWindowOptions{Limit: 1, Window: time.Hour, Segments: ratelimit.MaxSegments + 1}), primitives.ErrInvalidOptions, "Segments"},
		{"sliding: segments shorter than 1ms", sw(ratelimit.SlidingWindowOptions{Limit: 1, Window: 5 * time.Millisecond, Segments: 6}), primitives.ErrInvalidOptions, "Segments"},
		{"sliding: no window", sw(ratelimit.SlidingWindowOptions{Limit: 1}), primitives.ErrInvalidOptions, "Window"},
		{"sliding: no limit", sw(ratelimit.SlidingWindowOptions{Window: time.Second}), primitives.ErrInvalidOptions, "Limit"},
		{"bucket: no tokens per period", tb(ratelimit.TokenBucketOptions{Limit: 5, Period: time.Second}), primitives.ErrInvalidOptions, "TokensPerPeriod"},
		{"bucket: tokens per period above limit", tb(ratelimit.TokenBucketOptions{Limit: 5, TokensPerPeriod: 6, Period: time.Second}), primitives.ErrInvalidOptions, "TokensPerPeriod"},
		{"bucket: negative tokens per period", tb(ratelimit.TokenBucketOptions{Limit: 5, TokensPerPeriod: -1, Period: time.Second}), primitives.ErrInvalidOptions, "TokensPerPeriod"},
		{"bucket: no period", tb(ratelimit.TokenBucketOptions{Limit: 5, TokensPerPeriod: 1}), primitives.ErrInvalidOptions, "Period"},
		{"bucket: period not whole ms", tb(ratelimit.TokenBucketOptions{Limit: 5, TokensPerPeriod: 1, Period: time.Second + 1}), primitives.ErrInvalidOptions, "milliseconds"},
		{"bucket: fills in more than MaxWindow", tb(ratelimit.TokenBucketOptions{Limit: ratelimit.MaxLimit, TokensPerPeriod: 1, Period: time.Hour}), primitives.ErrInvalidOptions, "to fill"},
		{"bucket: no limit", tb(ratelimit.TokenBucketOptions{TokensPerPeriod: 1, Period: time.Second}), primitives.ErrInvalidOptions, "Limit"},
		{"partitioned: no New", func() error { _, err := ratelimit.NewPartitioned(ratelimit.PartitionedOptions{}); return err }, primitives.ErrInvalidOptions, "New"},
		{"partitioned: negative idle", func() error {
			_, err := ratelimit.NewPartitioned(ratelimit.PartitionedOptions{New: func(string) (*ratelimit.Limiter, error) { return nil, nil }, IdleTimeout: -1})
			return err
		}, primitives.ErrInvalidOptions, "negative"},
		{"partitioned: negative max", func() error {
			_, err := ratelimit.NewPartitioned(ratelimit.PartitionedOptions{New: func(string) (*ratelimit.Limiter, error) { return nil, nil }, MaxPartitions: -1})
			return err
		}, primitives.ErrInvalidOptions, "negative"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("error %q does not name %q", err, tc.says)
			}
		})
	}
	if n := srv.MustCmd(t, "DBSIZE"); n != "0" {
		t.Fatalf("constructors wrote %s keys", n)
	}
}

// Every bad call fails with a clear error and writes nothing: the
// keyspace (values and expiries) is the same before and after.
func TestBadCallsWriteNothing(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := xtest.Ctx(t, 20*time.Second)
	ls := newLimiters(t, c, "b:")
	srv.MustCmd(t, "SET", "b:str", "abc")
	srv.MustCmd(t, "HSET", "b:hash", "x", "1")
	srv.MustCmd(t, "HSET", "b:bucketstate", "tokens", "1", "at", "1")
	// Live state the bad calls must leave alone.
	live := must(t)(ls.SlidingWindow("live", ratelimit.SlidingWindowOptions{Limit: 5, Window: time.Minute}))
	if r := try(t, ctx, live, 1); !r.Acquired {
		t.Fatal(describe(r))
	}
	closed := must(t)(ls.FixedWindow("closed", ratelimit.FixedWindowOptions{Limit: 5, Window: time.Minute}))
	closed.Close()
	var nilL *ratelimit.Limiter
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	part, err := ratelimit.NewPartitioned(ratelimit.PartitionedOptions{New: func(p string) (*ratelimit.Limiter, error) {
		return ls.FixedWindow("p:"+p, ratelimit.FixedWindowOptions{Limit: 5, Window: time.Minute})
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer part.Close()
	closedPart, _ := ratelimit.NewPartitioned(ratelimit.PartitionedOptions{New: func(p string) (*ratelimit.Limiter, error) {
		return ls.FixedWindow("p:"+p, ratelimit.FixedWindowOptions{Limit: 5, Window: time.Minute})
	}})
	closedPart.Close()
	failing, _ := ratelimit.NewPartitioned(ratelimit.PartitionedOptions{New: func(p string) (*ratelimit.Limiter, error) {
		return ls.FixedWindow("", ratelimit.FixedWindowOptions{Limit: 5, Window: time.Minute})
	}})
	defer failing.Close()

	fixedOn := func(key string) *ratelimit.Limiter {
		return must(t)(ls.FixedWindow(key, ratelimit.FixedWindowOptions{Limit: 5, Window: time.Minute}))
	}
	slidingOn := func(key string) *ratelimit.Limiter {
		return must(t)(ls.SlidingWindow(key, ratelimit.SlidingWindowOptions{Limit: 5, Window: time.Minute}))
	}
	bucketOn := func(key string) *ratelimit.Limiter {
		return must(t)(ls.TokenBucket(key, ratelimit.TokenBucketOptions{Limit: 5, TokensPerPeriod: 1, Period: time.Second}))
	}
	type call func(context.Context, int64) (ratelimit.Result, error)
	on := func(l *ratelimit.Limiter) []call { return []call{l.TryAcquire, l.Acquire} }
	cases := []struct {
		name  string
		calls []call
		ctx   context.Context
		n     int64
		want  error
	}{
		{"negative permits", on(live), ctx, -1, ratelimit.ErrInvalidPermits},
		{"MinInt64 permits", on(live), ctx, math.MinInt64, ratelimit.ErrInvalidPermits},
		{"nil context", on(live), nil, 1, primitives.ErrInvalidOptions},
		{"nil limiter", on(nilL), ctx, 1, primitives.ErrInvalidOptions},
		{"zero limiter", on(&ratelimit.Limiter{}), ctx, 1, primitives.ErrInvalidOptions},
		{"closed limiter", on(closed), ctx, 1, primitives.ErrClosed},
		{"cancelled context", on(live), cancelled, 1, context.Canceled},
		{"fixed window on a text value", on(fixedOn("str")), ctx, 1, primitives.ErrWrongType},
		{"fixed window on a hash", on(fixedOn("hash")), ctx, 1, primitives.ErrWrongType},
		{"sliding window on a string", on(slidingOn("str")), ctx, 1, primitives.ErrWrongType},
		{"sliding window on a foreign hash", on(slidingOn("hash")), ctx, 1, primitives.ErrWrongType},
		{"sliding window on bucket state", on(slidingOn("bucketstate")), ctx, 1, primitives.ErrWrongType},
		{"bucket on a string", on(bucketOn("str")), ctx, 1, primitives.ErrWrongType},
		{"bucket on a foreign hash", on(bucketOn("hash")), ctx, 1, primitives.ErrWrongType},
		{"partitioned: negative permits", []call{
			func(ctx context.Context, n int64) (ratelimit.Result, error) { return part.TryAcquire(ctx, "a", n) },
			func(ctx context.Context, n int64) (ratelimit.Result, error) { return part.Acquire(ctx, "a", n) },
		}, ctx, -1, ratelimit.ErrInvalidPermits},
		{"partitioned: closed", []call{
			func(ctx context.Context, n int64) (ratelimit.Result, error) {
				return closedPart.TryAcquire(ctx, "a", n)
			},
		}, ctx, 1, primitives.ErrClosed},
		{"partitioned: New fails", []call{
			func(ctx context.Context, n int64) (ratelimit.Result, error) { return failing.TryAcquire(ctx, "a", n) },
		}, ctx, 1, primitives.ErrInvalidKey},
		{"partitioned: nil context", []call{
			func(ctx context.Context, n int64) (ratelimit.Result, error) { return part.TryAcquire(ctx, "a", n) },
		}, nil, 1, primitives.ErrInvalidOptions},
	}
	for _, tc := range cases {
		for i, f := range tc.calls {
			t.Run(tc.name+[]string{"/TryAcquire", "/Acquire"}[i], func(t *testing.T) {
				before := leasetest.Keyspace(t, srv)
				res, err := f(tc.ctx, tc.n)
				if !errors.Is(err, tc.want) {
					t.Fatalf("got %s, %v; want %v", describe(res), err, tc.want)
				}
				if res.Acquired {
					t.Fatalf("acquired with an error: %s", describe(res))
				}
				if after := leasetest.Keyspace(t, srv); after != before {
					t.Fatalf("wrote to Redis:\nbefore %s\nafter  %s", before, after)
				}
				t.Log(err)
			})
		}
	}
	// A nil or zero Limiter answers empty accessors and refuses Close.
	for _, l := range []*ratelimit.Limiter{nilL, {}} {
		if err := l.Close(); !errors.Is(err, primitives.ErrInvalidOptions) {
			t.Fatalf("Close of a nil or zero Limiter: %v", err)
		}
		if _, idle := l.IdleDuration(); idle || l.Key() != "" || l.Statistics() != (ratelimit.Statistics{}) || l.Policy() != (ratelimit.Policy{}) {
			t.Fatal("a nil or zero Limiter answered non-empty accessors")
		}
	}
	// The conveniences fail the same way.
	if live.Allow(cancelled) {
		t.Fatal("Allow with a cancelled context allowed")
	}
	if err := live.WaitN(ctx, -1); !errors.Is(err, ratelimit.ErrInvalidPermits) {
		t.Fatalf("WaitN(-1): %v", err)
	}
	if err := live.WaitN(ctx, 6); !errors.Is(err, ratelimit.ErrExceedsLimit) {
		t.Fatalf("WaitN above the limit: %v", err)
	}
	if err := closed.Wait(ctx); !errors.Is(err, primitives.ErrClosed) {
		t.Fatalf("Wait on a closed limiter: %v", err)
	}
}
