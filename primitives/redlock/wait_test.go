package redlock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/policies/builtin"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/redlock"
)

// A waiter whose retry policy would sleep a minute is woken by the
// release itself, through each node's Waiter: client tracking (the
// default) or the release channel.
func TestAcquireWakesOnRelease(t *testing.T) {
	for _, mode := range []primitives.WaitMode{primitives.WaitAuto, primitives.WaitChannel} {
		t.Run([]string{"tracking", "channel"}[mode], func(t *testing.T) {
			f := startFleet(t, 3, backwards(redistest.Kinds())...)
			ctx := xtest.Ctx(t, 20*time.Second)
			holderGroup := newGroup(t, f.clients, redlock.Options{})
			waiters := make([]*primitives.Waiter, 3)
			clients := f.newClients(t)
			for i, c := range clients {
				w, err := primitives.NewWaiter(c, primitives.WaiterOptions{Mode: mode})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { w.Close() })
				waiters[i] = w
			}
			g := newGroup(t, clients, redlock.Options{Retry: builtin.Constant{Delay: time.Minute}, Waiters: waiters})
			for range 3 {
				holder, err := holderGroup.TryAcquire(ctx, "k", time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				got := make(chan time.Time, 1)
				go func() {
					l, err := g.Acquire(ctx, "k", time.Second)
					if err != nil {
						t.Error(err)
						got <- time.Time{}
						return
					}
					at := time.Now()
					l.Release(ctx)
					got <- at
				}()
				time.Sleep(100 * time.Millisecond) // the waiter is asleep
				released := time.Now()
				holder.Release(ctx)
				at := <-got
				if at.IsZero() {
					t.FailNow()
				}
				d := at.Sub(released)
				t.Logf("acquired %v after the release", d)
				if d > time.Second {
					t.Fatalf("acquired %v after the release: not woken by it", d)
				}
			}
		})
	}
}

// A holder that never releases: the waiter wakes when enough holders'
// keys expire (the Waiters' timers at each PTTL), not at its policy's
// minute.
func TestAcquireWakesAtExpiry(t *testing.T) {
	f := startFleet(t, 3)
	ctx := xtest.Ctx(t, 20*time.Second)
	holder := newGroup(t, f.clients, redlock.Options{})
	if _, err := holder.TryAcquire(ctx, "k", 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	g := newGroup(t, f.newClients(t), redlock.Options{Retry: builtin.Constant{Delay: time.Minute}})
	start := time.Now()
	l, err := g.Acquire(ctx, "k", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	d := time.Since(start)
	t.Logf("acquired after %v (holder's ttl 300ms)", d)
	if d > 1300*time.Millisecond {
		t.Fatalf("acquired after %v: not woken at the holder's expiry", d)
	}
	l.Release(ctx)
}

// Acquire ends with the policy's give-up (ErrNotAcquired, naming the
// contention), with the Group's Close (ErrClosed), and with its context.
func TestAcquireEnds(t *testing.T) {
	f := startFleet(t, 3)
	ctx := xtest.Ctx(t, 20*time.Second)
	holder := newGroup(t, f.clients, redlock.Options{})
	if _, err := holder.TryAcquire(ctx, "k", time.Minute); err != nil {
		t.Fatal(err)
	}
	g := newGroup(t, f.newClients(t), redlock.Options{Retry: builtin.Constant{Delay: 20 * time.Millisecond, GiveUpAfter: 100 * time.Millisecond}})
	if _, err := g.Acquire(ctx, "k", time.Second); !errors.Is(err, primitives.ErrNotAcquired) {
		t.Fatalf("give-up: %v", err)
	}
	short := xtest.Ctx(t, 100*time.Millisecond)
	g2 := newGroup(t, f.newClients(t), redlock.Options{})
	if _, err := g2.Acquire(short, "k", time.Second); !errors.Is(err, short.Err()) {
		t.Fatalf("context: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := g2.Acquire(ctx, "k", time.Second)
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	g2.Close()
	if err := <-done; !errors.Is(err, primitives.ErrClosed) {
		t.Fatalf("Close: %v", err)
	}
	if _, err := g2.TryAcquire(ctx, "k", time.Second); !errors.Is(err, primitives.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
	// A Waiter given in Options.Waiters closed under a waiting Acquire
	// ends it too, naming the Waiter.
	clients := f.newClients(t)
	waiters := make([]*primitives.Waiter, len(clients))
	for i, c := range clients {
		w, err := primitives.NewWaiter(c, primitives.WaiterOptions{})
		if err != nil {
			t.Fatal(err)
		}
		waiters[i] = w
	}
	g3 := newGroup(t, clients, redlock.Options{Waiters: waiters, Retry: builtin.Constant{Delay: time.Minute}})
	go func() {
		_, err := g3.Acquire(ctx, "k", time.Second)
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	for _, w := range waiters {
		w.Close()
	}
	if err := <-done; !errors.Is(err, primitives.ErrClosed) || !strings.Contains(err.Error(), "Waiter") {
		t.Fatalf("a closed Waiter: %v", err)
	}
}

// The Observer hears every acquisition and the life of each lock.
func TestObserver(t *testing.T) {
	f := startFleet(t, 3)
	ctx := xtest.Ctx(t, 20*time.Second)
	o := &recorder{}
	g := newGroup(t, f.clients, redlock.Options{Observer: o})
	l, err := g.TryAcquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	g.TryAcquire(ctx, "k", time.Minute)
	l.Renew(ctx, time.Minute)
	l.Release(ctx)
	if o.acquired != 1 || o.refused != 1 || o.renewed != 1 || o.released != 1 {
		t.Fatalf("observer: %+v", o)
	}
}

type recorder struct {
	acquired, refused, renewed, released, lost, restarts int
}

func (r *recorder) ObserveAcquire(_ string, out redlock.AcquireOutcome, _ time.Duration, _ error) {
	if out.String() == "acquired" {
		r.acquired++
	} else {
		r.refused++
	}
}
func (r *recorder) ObserveRenew(*redlock.Lock, redlock.RenewOutcome, error) { r.renewed++ }
func (r *recorder) ObserveRelease(*redlock.Lock, primitives.ReleaseResult, time.Duration, error) {
	r.released++
}
func (r *recorder) ObserveLost(*redlock.Lock, redlock.LostReason) { r.lost++ }
func (r *recorder) ObserveRestart(int, time.Duration)             { r.restarts++ }
