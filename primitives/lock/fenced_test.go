package lock_test

import (
	"context"
	"errors"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/lock"
)

func TestFencedLock(t *testing.T) {
	for _, f := range fleets() {
		t.Run(f.name, func(t *testing.T) {
			c, cmd := f.client(t)
			ctx := xtest.Ctx(t, 20*time.Second)
			l := newLocker(t, c, lock.Options{Prefix: "svc:"})
			lease, counter := "{inv}:lease", "{inv}:fence"

			// Exact around 2^53 and up to MaxInt64.
			for _, start := range []int64{1<<53 - 1, 1 << 53, math.MaxInt64 - 1} {
				cmd("SET", "svc:"+counter, strconv.FormatInt(start, 10))
				a, err := l.TryAcquireFenced(ctx, lease, counter, time.Second)
				if err != nil {
					t.Fatal(err)
				}
				if a.FencingToken() != start+1 {
					t.Fatalf("token %d, want %d", a.FencingToken(), start+1)
				}
				if got := cmd("GET", "svc:"+counter); got != strconv.FormatInt(start+1, 10) {
					t.Fatalf("counter %s", got)
				}
				if r, err := a.Release(ctx); r != primitives.Released || err != nil {
					t.Fatal(r, err)
				}
			}
			// MaxInt64 reached: the next grant would overflow.
			if _, err := l.TryAcquireFenced(ctx, lease, counter, time.Second); !errors.Is(err, primitives.ErrCorruptCounter) {
				t.Fatalf("overflow: %v", err)
			}
			if got := cmd("EXISTS", "svc:"+lease); got != "0" {
				t.Fatal("lease created on overflow")
			}
			cmd("DEL", "svc:"+counter)

			// Waiting on the lease key; tokens strictly increase.
			a, err := l.TryAcquireFenced(ctx, lease, counter, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan *lock.Lock, 1)
			go func() {
				b, err := l.AcquireFenced(ctx, lease, counter, time.Minute)
				if err != nil {
					t.Error(err)
				}
				got <- b
			}()
			time.Sleep(50 * time.Millisecond)
			a.Release(ctx)
			b := <-got
			if b == nil || b.FencingToken() != a.FencingToken()+1 {
				t.Fatalf("waiter token after %d: %v", a.FencingToken(), b)
			}
			b.Release(ctx)
		})
	}
}

func TestFencedBadInputsWriteNothing(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client(t)
	l := newLocker(t, c, lock.Options{Prefix: "p:"})
	ok := xtest.Ctx(t, 10*time.Second)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	s.MustCmd(t, "SET", "p:{x}:string-counter-ttl", "3", "PX", "60000")
	s.MustCmd(t, "HSET", "p:{x}:hash", "f", "v")

	type call func(ctx context.Context, lease, counter string, ttl time.Duration) (*lock.Lock, error)
	cases := []struct {
		name           string
		ctx            context.Context
		lease, counter string
		ttl            time.Duration
		want           error
	}{
		{"empty lease", ok, "", "{x}:c", time.Second, primitives.ErrInvalidKey},
		{"empty counter", ok, "{x}:l", "", time.Second, primitives.ErrInvalidKey},
		{"same key", ok, "{x}:l", "{x}:l", time.Second, primitives.ErrInvalidKey},
		{"different slots", ok, "lease-a", "counter-b", time.Second, primitives.ErrInvalidKey},
		{"reserved lease", ok, lock.ReservedPrefix + "l", "{x}:c", time.Second, primitives.ErrInvalidKey},
		{"zero ttl", ok, "{x}:l", "{x}:c", 0, primitives.ErrInvalidTTL},
		{"sub-ms ttl", ok, "{x}:l", "{x}:c", time.Nanosecond, primitives.ErrInvalidTTL},
		{"cancelled", cancelled, "{x}:l", "{x}:c", time.Second, context.Canceled},
		{"counter with ttl", ok, "{x}:l", "{x}:string-counter-ttl", time.Second, primitives.ErrCorruptCounter},
		{"counter wrong type", ok, "{x}:l", "{x}:hash", time.Second, primitives.ErrWrongType},
		{"lease wrong type", ok, "{x}:hash", "{x}:c", time.Second, primitives.ErrWrongType},
	}
	for name, fn := range map[string]call{"TryAcquireFenced": l.TryAcquireFenced, "AcquireFenced": l.AcquireFenced} {
		for _, tc := range cases {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				before := s.MustCmd(t, "DBSIZE")
				lk, err := fn(tc.ctx, tc.lease, tc.counter, tc.ttl)
				if !errors.Is(err, tc.want) || lk != nil {
					t.Fatalf("got %v, %v; want %v", lk, err, tc.want)
				}
				if after := s.MustCmd(t, "DBSIZE"); after != before {
					t.Fatalf("DBSIZE %s -> %s", before, after)
				}
				if s.MustCmd(t, "GET", "p:{x}:string-counter-ttl") != "3" {
					t.Fatal("counter changed")
				}
			})
		}
	}
}

// Binary-safe keys, with the caller's buffer reused right after the call.
func TestBinaryKeysAreCopied(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client(t)
	ctx := xtest.Ctx(t, 10*time.Second)
	l := newLocker(t, c, lock.Options{Fencing: true})
	buf := []byte("bin\x00\xff{t}")
	key := string(buf) // a Go string is immutable; the engine still must not alias caller memory
	a, err := l.TryAcquire(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		b, err := l.Acquire(ctx, key, time.Minute)
		if err == nil {
			b.Release(ctx)
		}
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	copy(buf, "XXXXXXXX")
	if got := s.MustCmd(t, "GET", "bin\x00\xff{t}"); got != a.Token() {
		t.Fatalf("binary key holds %q", got)
	}
	a.Release(ctx)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
