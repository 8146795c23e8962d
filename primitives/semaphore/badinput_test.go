package semaphore_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/internal/leasetest"
	"github.com/coordhost/coordhost/primitives/semaphore"
)

// Every bad input to New, TryAcquire and Acquire fails with a clear error
// and writes nothing: the keyspace (values and expiries) is the same
// before and after each call.
func TestBadInput(t *testing.T) {
	for _, k := range redistest.Kinds() {
		t.Run(k.String(), func(t *testing.T) {
			srv := redistest.Start(t, redistest.WithKind(k))
			c := srv.Client(t)
			ctx := xtest.Ctx(t, 20*time.Second)
			s := newSems(t, c, semaphore.Options{Prefix: "b:"})
			closed, err := semaphore.New(c, semaphore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			closed.Close()
			// Live state the bad calls must leave alone: a semaphore of
			// capacity 2 with a permit, and a key of another type.
			held, err := s.TryAcquire(ctx, "held", 2, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			defer held.Close()
			srv.MustCmd(t, "SET", "b:str", "x")
			srv.MustCmd(t, "SET", "b:__coordhost:semaphore-capacity:{b:capstr}", "x")
			srv.MustCmd(t, "HSET", "b:__coordhost:semaphore-capacity:{b:caphash}", "f", "v")
			var nilSems *semaphore.Semaphores
			cancelled, cancel := context.WithCancel(ctx)
			cancel()

			cases := []struct {
				name     string
				s        *semaphore.Semaphores
				ctx      context.Context
				key      string
				capacity int
				ttl      time.Duration
				want     []error
			}{
				{"nil Semaphores", nilSems, ctx, "k", 1, time.Second, []error{primitives.ErrInvalidOptions}},
				{"nil context", s, nil, "k", 1, time.Second, []error{primitives.ErrInvalidOptions}},
				{"empty key", s, ctx, "", 1, time.Second, []error{primitives.ErrInvalidKey}},
				{"reserved key", s, ctx, "__coordhost:x", 1, time.Second, []error{primitives.ErrInvalidKey}},
				{"key without a slot for its capacity", s, ctx, "}{", 1, time.Second, []error{primitives.ErrInvalidKey}},
				{"capacity 0", s, ctx, "k", 0, time.Second, []error{semaphore.ErrInvalidCapacity, primitives.ErrInvalidOptions}},
				{"capacity -1", s, ctx, "k", -1, time.Second, []error{semaphore.ErrInvalidCapacity}},
				{"capacity MinInt", s, ctx, "k", math.MinInt, time.Second, []error{semaphore.ErrInvalidCapacity}},
				{"capacity above MaxCapacity", s, ctx, "k", semaphore.MaxCapacity + 1, time.Second, []error{semaphore.ErrInvalidCapacity}},
				{"capacity MaxInt", s, ctx, "k", math.MaxInt, time.Second, []error{semaphore.ErrInvalidCapacity}},
				{"ttl 0", s, ctx, "k", 1, 0, []error{primitives.ErrInvalidTTL}},
				{"ttl -2ns", s, ctx, "k", 1, -2, []error{primitives.ErrInvalidTTL}},
				{"ttl -1s", s, ctx, "k", 1, -time.Second, []error{primitives.ErrInvalidTTL}},
				{"ttl MinInt64", s, ctx, "k", 1, math.MinInt64, []error{primitives.ErrInvalidTTL}},
				{"ttl below 1ms", s, ctx, "k", 1, time.Millisecond - 1, []error{primitives.ErrInvalidTTL}},
				{"ttl above MaxTTL", s, ctx, "k", 1, semaphore.MaxTTL + time.Millisecond, []error{primitives.ErrInvalidTTL}},
				{"ttl MaxInt64", s, ctx, "k", 1, math.MaxInt64, []error{primitives.ErrInvalidTTL}},
				{"cancelled context", s, cancelled, "k", 1, time.Second, []error{context.Canceled}},
				{"closed Semaphores", closed, ctx, "k", 1, time.Second, []error{primitives.ErrClosed}},
				{"capacity mismatch", s, ctx, "held", 3, time.Second, []error{semaphore.ErrCapacityMismatch}},
				{"lower capacity mismatch", s, ctx, "held", 1, semaphore.NoExpiry, []error{semaphore.ErrCapacityMismatch}},
				{"key of another type", s, ctx, "str", 1, time.Second, []error{primitives.ErrWrongType}},
				{"capacity key of another type", s, ctx, "caphash", 1, time.Second, []error{primitives.ErrWrongType}},
			}
			type call struct {
				name string
				f    func(*semaphore.Semaphores, context.Context, string, int, time.Duration) (*semaphore.Permit, error)
			}
			for _, fn := range []call{{"TryAcquire", (*semaphore.Semaphores).TryAcquire}, {"Acquire", (*semaphore.Semaphores).Acquire}} {
				for _, tc := range cases {
					t.Run(fn.name+"/"+tc.name, func(t *testing.T) {
						before := leasetest.Keyspace(t, srv)
						p, err := fn.f(tc.s, tc.ctx, tc.key, tc.capacity, tc.ttl)
						if p != nil || err == nil {
							t.Fatalf("got %v, %v; want an error", p, err)
						}
						for _, w := range tc.want {
							if !errors.Is(err, w) {
								t.Fatalf("error %q does not match %v", err, w)
							}
						}
						if after := leasetest.Keyspace(t, srv); after != before {
							t.Fatalf("wrote to Redis:\nbefore %s\nafter  %s", before, after)
						}
						t.Log(err)
					})
				}
			}
			// A garbage capacity key with no live permit is simply replaced.
			if p, err := s.TryAcquire(ctx, "capstr", 1, time.Second); err != nil {
				t.Fatalf("garbage capacity key without permits: %v", err)
			} else {
				p.Close()
			}
		})
	}
}

// New refuses bad options.
func TestNewBadOptions(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	other := redistest.Start(t).Client(t)
	if _, err := semaphore.New(nil, semaphore.Options{}); !errors.Is(err, primitives.ErrInvalidOptions) {
		t.Fatalf("nil client: %v", err)
	}
	w, err := primitives.NewWaiter(other, primitives.WaiterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := semaphore.New(c, semaphore.Options{Waiter: w}); !errors.Is(err, primitives.ErrInvalidOptions) {
		t.Fatalf("a Waiter of another client: %v", err)
	}
	if _, err := semaphore.New(c, semaphore.Options{Waiter: &primitives.Waiter{}}); !errors.Is(err, primitives.ErrInvalidOptions) {
		t.Fatalf("a zero Waiter: %v", err)
	}
}
