package lock_test

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives/lock"
)

// Close racing calls whose attempts end uncertain: no cleanup is left in
// the background once Close and the calls have returned (run with -race:
// the cleanups' bookkeeping must not race Close).
func TestCloseRacesUncertainAttempts(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client(t)
	ctx := xtest.Ctx(t, time.Minute)
	for round := range 5 {
		l, err := lock.New(c, lock.Options{})
		if err != nil {
			t.Fatal(err)
		}
		derived, err := lock.New(c, lock.Options{Fencing: true})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for g := range 32 {
			lk := l
			if g%2 == 1 {
				lk = derived
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 20 {
					actx, cancel := context.WithTimeout(ctx, time.Duration(rand.IntN(200))*time.Microsecond)
					if h, err := lk.TryAcquire(actx, "close-race:"+strconv.Itoa(round)+":"+strconv.Itoa(g)+":"+strconv.Itoa(i), time.Second); err == nil {
						h.Release(ctx)
					}
					cancel()
				}
			}()
		}
		time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
		derived.Close()
		l.Close()
		wg.Wait()
		if n := lock.PendingCleanups(l) + lock.PendingCleanups(derived); n != 0 {
			t.Fatalf("round %d: %d cleanups still in the background after Close and every call returned", round, n)
		}
	}
}

// A FIFO waiter that gives up while Redis is unreachable for longer than
// its cleanup's bound leaves its queue entry behind; the leave goes on in
// the background, so once Redis is back the live waiter behind it is
// granted within one refresh round, not when the entry expires.
func TestFIFOLeaveSettledAfterOutage(t *testing.T) {
	s := redistest.Start(t)
	ctx := xtest.Ctx(t, time.Minute)
	const key = "{outage}"
	mk := func() *lock.Locker { return newLocker(t, s.Client(t), lock.Options{FIFO: true}) }
	holderL, goneL, liveL := mk(), mk(), mk()
	h, err := holderL.TryAcquire(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	gctx, gcancel := context.WithCancel(ctx)
	gone := make(chan error, 1)
	go func() { _, err := goneL.Acquire(gctx, key, time.Second); gone <- err }()
	queue := lock.ReservedPrefix + "queue:!" + key // a key starting with { is escaped
	xtest.Eventually(t, 5*time.Second, "the condition", func() bool { return s.MustCmd(t, "ZCARD", queue) == "1" })
	granted := make(chan time.Time, 1)
	go func() {
		wh, err := liveL.Acquire(ctx, key, time.Second)
		if err != nil {
			t.Error(err)
			granted <- time.Time{}
			return
		}
		granted <- time.Now()
		wh.Release(ctx)
	}()
	xtest.Eventually(t, 5*time.Second, "the condition", func() bool { return s.MustCmd(t, "ZCARD", queue) == "2" })

	s.Pause()
	gcancel()
	time.Sleep(lock.DefaultCloseTimeout + 500*time.Millisecond) // every try of the leave fails
	s.Resume()
	if err := <-gone; err == nil {
		t.Fatal("the cancelled waiter acquired")
	}
	released := time.Now()
	if _, err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case at := <-granted:
		if at.IsZero() {
			return
		}
		t.Logf("live waiter granted %v after the release", at.Sub(released))
		if d := at.Sub(released); d > lock.QueueEntryTTL/3 {
			t.Fatalf("live waiter granted %v after the release, want within one refresh round (%v)", d, lock.QueueEntryTTL/3)
		}
	case <-time.After(lock.QueueEntryTTL + 5*time.Second):
		t.Fatal("no grant")
	}
}
