package rwlock_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/policies"
	"github.com/coordhost/coordhost/policies/builtin"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/internal/leasetest"
	"github.com/coordhost/coordhost/primitives/rwlock"
)

// Every entry point refuses bad input with an error naming the problem and
// writes nothing (the whole keyspace, values, scores and expiries, is the
// same before and after).
func TestBadInputsWriteNothing(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client(t)
	l := newLocker(t, c, rwlock.Options{Prefix: "p:"})
	closed, err := rwlock.New(c, rwlock.Options{Prefix: "p:"})
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	ctx := xtest.Ctx(t, 20*time.Second)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	var nilCtx context.Context
	var nilLocker *rwlock.Locker

	// Keys holding foreign values, and a live lease to show that refused
	// calls leave it alone.
	s.MustCmd(t, "SET", "p:str", "x")
	s.MustCmd(t, "SET", "p:__coordhost:rw-writers:!{w}", "x")
	held, err := l.TryAcquireRead(ctx, "held", time.Minute)
	if err != nil {
		t.Fatal(err)
	}

	type call func(*rwlock.Locker, context.Context, string, time.Duration) (*rwlock.Lease, error)
	calls := map[string]call{
		"TryAcquireRead": (*rwlock.Locker).TryAcquireRead, "TryAcquireWrite": (*rwlock.Locker).TryAcquireWrite,
		"AcquireRead": (*rwlock.Locker).AcquireRead, "AcquireWrite": (*rwlock.Locker).AcquireWrite,
	}
	cases := []struct {
		name string
		l    *rwlock.Locker
		ctx  context.Context
		key  string
		ttl  time.Duration
		want error
		says string // in the message
	}{
		{"empty key", l, ctx, "", time.Second, primitives.ErrInvalidKey, "empty"},
		{"reserved key", l, ctx, "__coordhost:x", time.Second, primitives.ErrInvalidKey, "reserved"},
		{"key without a usable hash tag", l, ctx, "a{}b{", time.Second, primitives.ErrInvalidKey, "slot"},
		{"zero ttl", l, ctx, "k", 0, primitives.ErrInvalidTTL, "below 1ms"},
		{"negative ttl", l, ctx, "k", -time.Second, primitives.ErrInvalidTTL, "below 1ms"},
		{"sub-ms ttl", l, ctx, "k", time.Microsecond, primitives.ErrInvalidTTL, "below 1ms"},
		{"ttl above MaxTTL", l, ctx, "k", rwlock.MaxTTL + time.Millisecond, primitives.ErrInvalidTTL, "maximum"},
		{"MaxInt64 ttl", l, ctx, "k", math.MaxInt64, primitives.ErrInvalidTTL, "maximum"},
		{"MinInt64 ttl", l, ctx, "k", math.MinInt64, primitives.ErrInvalidTTL, "below 1ms"},
		{"cancelled", l, cancelled, "k", time.Second, context.Canceled, `"p:k"`},
		{"nil context", l, nilCtx, "k", time.Second, primitives.ErrInvalidOptions, "nil context"},
		{"nil Locker", nilLocker, ctx, "k", time.Second, primitives.ErrInvalidOptions, "nil Locker"},
		{"closed Locker", closed, ctx, "k", time.Second, primitives.ErrClosed, `"p:k"`},
		{"lock key of another type", l, ctx, "str", time.Second, primitives.ErrWrongType, `"p:str"`},
		{"pending-writer key of another type", l, ctx, "{w}", time.Second, primitives.ErrWrongType, `"p:{w}"`},
	}
	for name, fn := range calls {
		for _, tc := range cases {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				before := leasetest.Keyspace(t, s)
				got, err := fn(tc.l, tc.ctx, tc.key, tc.ttl)
				if !errors.Is(err, tc.want) || got != nil {
					t.Fatalf("got %v, %v; want an error matching %v", got, err, tc.want)
				}
				if !strings.Contains(err.Error(), tc.says) {
					t.Errorf("error %q does not say %q", err, tc.says)
				}
				if after := leasetest.Keyspace(t, s); after != before {
					t.Fatalf("a refused call wrote:\nbefore %s\nafter  %s", before, after)
				}
			})
		}
	}
	if ok, err := held.Verify(ctx); !ok || err != nil {
		t.Fatalf("the refused calls disturbed a live lease: %v, %v", ok, err)
	}
}

// New refuses bad options and sends nothing.
func TestNewRefusesBadOptions(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client(t)
	other := s.Client(t)
	otherWaiter, err := primitives.NewWaiter(other, primitives.WaiterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer otherWaiter.Close()
	closedWaiter, _ := primitives.NewWaiter(c, primitives.WaiterOptions{})
	closedWaiter.Close()
	for name, tc := range map[string]struct {
		opts rwlock.Options
		says string
	}{
		"marker TTL too short":     {rwlock.Options{MarkerTTL: time.Millisecond}, "MarkerTTL"},
		"negative marker TTL":      {rwlock.Options{MarkerTTL: -time.Second}, "MarkerTTL"},
		"marker TTL above MaxTTL":  {rwlock.Options{MarkerTTL: rwlock.MaxTTL + time.Second}, "MarkerTTL"},
		"invalid retry policy":     {rwlock.Options{Retry: builtin.Exponential{Base: time.Second, Max: time.Millisecond}}, "retry policy"},
		"invalid starvation bound": {rwlock.Options{Starvation: builtin.WriterPreference{Bound: -time.Second}}, "starvation policy"},
		"waiter of another client": {rwlock.Options{Waiter: otherWaiter}, "another rueidis client"},
		"closed waiter":            {rwlock.Options{Waiter: closedWaiter}, "closed"},
		"zero waiter":              {rwlock.Options{Waiter: new(primitives.Waiter)}, "NewWaiter"},
	} {
		t.Run(name, func(t *testing.T) {
			l, err := rwlock.New(c, tc.opts)
			if !errors.Is(err, primitives.ErrInvalidOptions) || l != nil || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("got %v, %v; want ErrInvalidOptions saying %q", l, err, tc.says)
			}
		})
	}
	if _, err := rwlock.New(nil, rwlock.Options{}); !errors.Is(err, primitives.ErrInvalidOptions) {
		t.Fatalf("nil client: %v", err)
	}
	if n := s.MustCmd(t, "DBSIZE"); n != "0" {
		t.Fatalf("DBSIZE %s", n)
	}
	// A nil or zero Locker closes without panicking; a policy without a
	// Validate method is taken as it is.
	var nilLocker *rwlock.Locker
	nilLocker.Close()
	new(rwlock.Locker).Close()
	l, err := rwlock.New(c, rwlock.Options{Starvation: policies.StarvationFunc(func(context.Context, policies.StarvationRequest) time.Duration { return 0 })})
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
}

// A zero or nil Lease is no grant: accessors answer empty, calls fail with
// ErrInvalidOptions.
func TestZeroLease(t *testing.T) {
	ctx := xtest.Ctx(t, time.Second)
	for name, l := range map[string]*rwlock.Lease{"nil": nil, "zero": new(rwlock.Lease)} {
		if l.Key() != "" || l.Token() != "" || l.Mode() != 0 || l.Remaining() != 0 || !l.GrantedAt().IsZero() {
			t.Fatalf("%s: accessors answer %q %q %v %v %v", name, l.Key(), l.Token(), l.Mode(), l.Remaining(), l.GrantedAt())
		}
		if _, err := l.Renew(ctx, time.Second); !errors.Is(err, primitives.ErrInvalidOptions) {
			t.Fatalf("%s Renew: %v", name, err)
		}
		if _, err := l.Verify(ctx); !errors.Is(err, primitives.ErrInvalidOptions) {
			t.Fatalf("%s Verify: %v", name, err)
		}
		if _, err := l.Release(ctx); !errors.Is(err, primitives.ErrInvalidOptions) {
			t.Fatalf("%s Release: %v", name, err)
		}
		if err := l.Close(); err != nil {
			t.Fatalf("%s Close: %v", name, err)
		}
		select {
		case <-l.Done():
		default:
			t.Fatalf("%s: Done open", name)
		}
	}
}

// An acquisition whose reply does not come (the server stands still) fails
// with an error matching primitives.ErrUncertain, and its grant, made once
// the server resumes, is released by the settling cleanups: nothing stays
// held by no handle.
func TestUncertainAcquireIsSettled(t *testing.T) {
	s := redistest.Start(t)
	l := newLocker(t, s.Client(t), rwlock.Options{})
	rwlock.EnableGrantLog(l) // to see that the grant did happen
	for _, mode := range []rwlock.Mode{rwlock.Read, rwlock.Write} {
		t.Run(mode.String(), func(t *testing.T) {
			try := l.TryAcquireRead
			if mode == rwlock.Write {
				try = l.TryAcquireWrite
			}
			// Load the script, so that the stalled EVALSHA runs on resume.
			ctx := xtest.Ctx(t, 5*time.Second)
			if warm, err := try(ctx, "warm", time.Minute); err != nil {
				t.Fatal(err)
			} else {
				warm.Release(ctx)
			}
			s.Pause()
			resumed := make(chan struct{})
			go func() { // while the cleanup waits for the server
				time.Sleep(300 * time.Millisecond)
				s.Resume()
				close(resumed)
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			got, err := try(ctx, "uncertain-"+mode.String(), time.Minute)
			cancel()
			<-resumed
			if !errors.Is(err, primitives.ErrUncertain) || got != nil {
				t.Fatalf("acquire on a paused server: %v, %v; want an error matching ErrUncertain", got, err)
			}
			rwlock.WaitCleanups(l)
			xtest.Eventually(t, 5*time.Second, "the uncertain grant released", func() bool {
				return s.MustCmd(t, "EXISTS", "uncertain-"+mode.String()) == "0"
			})
			if n := s.MustCmd(t, "LLEN", "__coordhost:rw-grants:{uncertain-"+mode.String()+"}"); n != "1" {
				t.Fatalf("grant log length %s: the acquisition was not granted after all, so nothing was settled", n)
			}
		})
	}
}
