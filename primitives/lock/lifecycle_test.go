package lock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/lock"
	"github.com/redis/rueidis"
)

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// A renewal attempted after the local estimate ran out returns false
// without contacting Redis.
func TestRenewAfterEstimateSendsNothing(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client(t)
	ctx := xtest.Ctx(t, 10*time.Second)
	l := newLocker(t, c, lock.Options{})
	a, err := l.TryAcquire(ctx, "k", 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	<-a.Done()
	s.MustCmd(t, "CONFIG", "RESETSTAT")
	if ok, err := a.Renew(ctx, time.Minute); ok || err != nil {
		t.Fatalf("Renew after the estimate: %v %v", ok, err)
	}
	if n := commandstats(t, s)["evalsha"]; n != 0 {
		t.Fatalf("renewal after the estimate sent %d scripts", n)
	}
}

// A renewal sent before the estimate ran out and accepted by the server
// returns true even if its reply arrives after the estimate ran out. The
// acquire is delayed in the server, so the server's expiry lies later than
// the local estimate, as it does whenever the acquire spent time in flight.
func TestInFlightRenewalAccepted(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client(t)
	ctx := xtest.Ctx(t, 10*time.Second)
	l := newLocker(t, c, lock.Options{})
	const ttl = 600 * time.Millisecond
	s.MustCmd(t, "CLIENT", "PAUSE", "300", "WRITE")
	start := time.Now()
	a, err := l.TryAcquire(ctx, "k", ttl) // executes ~300ms after it was sent
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(start.Add(ttl - 50*time.Millisecond)))
	s.MustCmd(t, "CLIENT", "PAUSE", "150", "WRITE")
	ok, err := a.Renew(ctx, time.Minute) // sent before, answered after the estimate
	if time.Since(start) < ttl {
		t.Skipf("renewal came back before the estimate ran out (%v); timing did not line up", time.Since(start))
	}
	if !ok || err != nil {
		t.Fatalf("in-flight renewal accepted by the server: %v %v", ok, err)
	}
	if !isClosed(a.Done()) {
		t.Fatal("Done must have closed when the estimate ran out")
	}
	if r, err := a.Release(ctx); r != primitives.Released || err != nil {
		t.Fatal(r, err)
	}
}

// A renewal or release whose outcome is unknown fails the handle closed;
// a later owner-checked release settles ownership.
func TestUncertainRenewAndReleaseFailClosed(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client(t, func(o *rueidis.ClientOption) { o.DisableRetry = true })
	ctx := xtest.Ctx(t, 10*time.Second)
	l := newLocker(t, c, lock.Options{})
	a, err := l.TryAcquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	s.MustCmd(t, "CLIENT", "PAUSE", "10000", "WRITE") // until UNPAUSE: a slow machine cannot outlast it
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	ok, err := a.Renew(short, time.Minute)
	cancel()
	if ok || err == nil {
		t.Fatalf("uncertain renew: %v %v", ok, err)
	}
	if !isClosed(a.Done()) || a.Remaining() != 0 {
		t.Fatal("uncertain renew must close the handle")
	}
	if ok, err := a.Renew(ctx, time.Minute); ok || err != nil {
		t.Fatalf("renew after an uncertain one: %v %v", ok, err)
	}
	s.MustCmd(t, "CLIENT", "UNPAUSE")
	if r, err := a.Release(ctx); r != primitives.Released || err != nil {
		t.Fatalf("settling release: %v %v", r, err)
	}

	b, err := l.TryAcquire(ctx, "k2", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	s.MustCmd(t, "CLIENT", "PAUSE", "10000", "WRITE") // until UNPAUSE: a slow machine cannot outlast it
	short, cancel = context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = b.Release(short)
	cancel()
	if err == nil || !isClosed(b.Done()) {
		t.Fatalf("uncertain release: %v, done %v", err, isClosed(b.Done()))
	}
	s.MustCmd(t, "CLIENT", "UNPAUSE")
	r, err := b.Release(ctx)
	if err != nil || (r != primitives.Released && r != primitives.AlreadyReleased) {
		t.Fatalf("settling release: %v %v", r, err)
	}
	if s.MustCmd(t, "EXISTS", "k2") != "0" {
		t.Fatal("lock still held after settling")
	}
}

// A grant whose reply arrives after the whole lease ran out locally is not
// returned as acquired, and is released.
func TestLateGrantIsNotAcquired(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client(t)
	ctx := xtest.Ctx(t, 10*time.Second)
	l := newLocker(t, c, lock.Options{})
	s.MustCmd(t, "CLIENT", "PAUSE", "250", "WRITE")
	_, err := l.TryAcquire(ctx, "k", 100*time.Millisecond)
	if !errors.Is(err, primitives.ErrNotAcquired) || !strings.Contains(err.Error(), "ran out") {
		t.Fatalf("late grant: %v", err)
	}
	if s.MustCmd(t, "EXISTS", "k") != "0" {
		t.Fatal("late grant left the lock held")
	}
}
