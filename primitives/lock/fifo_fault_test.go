package lock_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives/lock"
)

// fifoKillRun runs 12 FIFO waiters on 4 Lockers (4 clients: 4 "processes")
// that take turns holding one lock, kills every normal connection every
// 250ms for 3s, and returns how long after the last kill the waiters had
// made two rounds of grants. control makes the Lockers behave as before the fix: a fresh queue
// entry after every uncertain attempt, the old one removed best effort.
func fifoKillRun(t *testing.T, control bool) (stall time.Duration, entriesAfter string) {
	s := redistest.Start(t)
	ctx := xtest.Ctx(t, 2*time.Minute)
	run, stopRun := context.WithCancel(ctx)
	defer stopRun()
	const (
		lockers   = 4
		perLocker = 3
		key       = "{fifo-kill}"
	)
	var ls []*lock.Locker
	for range lockers {
		l := newLocker(t, s.Client(t), lock.Options{FIFO: true})
		if control {
			lock.FreshQueueEntryOnUncertain(l)
		}
		ls = append(ls, l)
	}

	var (
		mu         sync.Mutex
		grants     []time.Time
		stop       atomic.Bool
		wg         sync.WaitGroup
		overlapped atomic.Bool
		holding    atomic.Int32
	)
	for i := range lockers * perLocker {
		l := ls[i%lockers]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				actx, cancel := context.WithTimeout(run, 30*time.Second)
				h, err := l.Acquire(actx, key, time.Second)
				cancel()
				if err != nil {
					if run.Err() != nil || stop.Load() {
						return
					}
					continue // an error during the faults: try again
				}
				if holding.Add(1) > 1 {
					overlapped.Store(true)
				}
				mu.Lock()
				grants = append(grants, time.Now())
				mu.Unlock()
				time.Sleep(10 * time.Millisecond)
				holding.Add(-1)
				// A release whose reply a kill took leaves the lock held
				// until its TTL; a careful caller settles it.
				rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
				if _, err := h.Release(rctx); err != nil {
					h.Release(rctx)
				}
				rcancel()
			}
		}()
	}
	time.Sleep(500 * time.Millisecond) // everyone queued and cycling

	var lastKill time.Time
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		kctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := s.Do(kctx, "CLIENT", "KILL", "TYPE", "normal").Error()
		cancel()
		if err != nil {
			t.Fatalf("CLIENT KILL: %v", err)
		}
		lastKill = time.Now()
	}

	// Progress means two rounds of the 12 waiters (24 grants) after the
	// last kill. Bounded well past QueueEntryTTL, so the control's stall is
	// measured, not cut off.
	const resumed = 2 * lockers * perLocker
	var at time.Time
	deadline := lastKill.Add(lock.QueueEntryTTL + 10*time.Second)
	for at.IsZero() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		n := 0
		for _, g := range grants {
			if g.After(lastKill) {
				if n++; n == resumed {
					at = g
				}
			}
		}
		mu.Unlock()
	}
	entriesAfter = s.MustCmd(t, "ZCARD", lock.ReservedPrefix+"queue:"+key)
	stop.Store(true)
	stopRun()
	wg.Wait()
	if overlapped.Load() {
		t.Error("two holders at once")
	}
	if at.IsZero() {
		return deadline.Sub(lastKill), entriesAfter
	}
	return at.Sub(lastKill), entriesAfter
}

// After connection kills, a FIFO queue makes progress within one refresh
// round of its waiters (QueueEntryTTL/3): uncertain attempts keep their
// waiter's queue entry instead of leaving an orphan at the head.
func TestFIFOProgressAfterConnectionKills(t *testing.T) {
	stall, entries := fifoKillRun(t, false)
	t.Logf("24 grants %v after the last kill; queue entries then: %s (12 live waiters)", stall, entries)
	if round := lock.QueueEntryTTL / 3; stall > round {
		t.Fatalf("grants resumed %v after the faults stopped, want within one refresh round (%v)", stall, round)
	}
}

// The control: with a fresh queue entry per uncertain attempt (the old
// behaviour), orphaned entries hold the queue until they expire.
func TestFIFOStallControl(t *testing.T) {
	if testing.Short() {
		t.Skip("control run takes about QueueEntryTTL")
	}
	stall, entries := fifoKillRun(t, true)
	t.Logf("control: 24 grants %v after the last kill; queue entries then: %s (12 live waiters)", stall, entries)
	if round := lock.QueueEntryTTL / 3; stall <= round {
		t.Fatalf("control resumed within %v: the fault did not reproduce the stall the fix is for", stall)
	}
}
