package latch_test

import (
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/latch"
	"github.com/redis/rueidis"
)

// Found by a hostile review: local waiters were grouped under
// key+"\x00"+generation, so key "a\x00b" with generation G and key "a"
// with generation "b\x00"+G shared one waiter and its answer. A waiter on
// an absent latch must answer false at once, never another latch's true.
func TestWaitersOfDifferentLatchesNeverShare(t *testing.T) {
	s := redistest.Start(t)
	ctx := xtest.Ctx(t, 20*time.Second)
	ls := newLatches(t, s.Client(t), latch.Options{RecheckInterval: 50 * time.Millisecond})
	real, err := ls.Create(ctx, "a\x00b", 1) // live, count 1
	if err != nil {
		t.Fatal(err)
	}
	// A forged handle on key "a" (no latch there) whose id collides.
	forged, err := ls.Attach("a", "b\x00"+real.Generation())
	if err != nil {
		t.Fatal(err)
	}
	// real waits first (live, sleeps); forged then joins the same local queue.
	rch := waitAsync(ctx, real)
	time.Sleep(50 * time.Millisecond)
	fch := waitAsync(ctx, forged)
	select {
	case r := <-fch:
		t.Logf("forged (no latch at key a) Wait returned %v, %v promptly", r.ok, r.err)
		if r.ok {
			t.Errorf("forged waiter on an absent key returned true")
		}
		if n, err := real.CountDown(ctx); n != 0 || err != nil {
			t.Fatal(n, err)
		}
	case <-time.After(500 * time.Millisecond):
		t.Errorf("forged waiter on an absent key still blocked after 500ms (should return false at once)")
		if n, err := real.CountDown(ctx); n != 0 || err != nil {
			t.Fatal(n, err)
		}
		r := <-fch
		if r.ok {
			t.Errorf("forged waiter on absent key \"a\" returned TRUE after an unrelated latch completed")
		}
	}
	<-rch
}

// Found by a hostile review: two Latches on one Waiter shared a wait queue
// for the same key and generation, so a waiter re-read at the head's
// interval (10s), not at its own (50ms), after a change without a
// notification.
func TestRecheckIntervalIsEachLatchesOwn(t *testing.T) {
	s := redistest.Start(t)
	ctx := xtest.Ctx(t, 30*time.Second)
	c := s.Client(t, func(o *rueidis.ClientOption) { o.AlwaysRESP2 = true; o.DisableCache = true })
	wr, _ := primitives.NewWaiter(c, primitives.WaiterOptions{})
	defer wr.Close()
	slow := newLatches(t, c, latch.Options{Waiter: wr, RecheckInterval: 10 * time.Second})
	fast := newLatches(t, c, latch.Options{Waiter: wr, RecheckInterval: 50 * time.Millisecond})
	l, _ := slow.Create(ctx, "k", 1)
	sch := waitAsync(ctx, l)
	time.Sleep(50 * time.Millisecond)
	f, _ := fast.Attach("k", l.Generation())
	fch := waitAsync(ctx, f)
	time.Sleep(50 * time.Millisecond)
	s.MustCmd(t, "DEL", "k") // no publish
	st := time.Now()
	select {
	case r := <-fch:
		t.Logf("fast waiter: %v %v after %v", r.ok, r.err, time.Since(st))
	case <-time.After(2 * time.Second):
		t.Errorf("waiter with RecheckInterval 50ms still blocked 2s after an outside DEL (queued behind a 10s-recheck waiter of another Latches on the same Waiter)")
		slow.Close()
		<-fch
	}
	slow.Close()
	<-sch
}
