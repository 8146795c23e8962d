package lock

import (
	"github.com/coordhost/coordhost/primitives/internal/clock"
	"github.com/coordhost/coordhost/primitives/internal/wait"
)

// EnableGrantLog makes every grant append "token fence" to the list at
// Prefix+ReservedPrefix+"grants:"+key (placed in the key's slot), so fault
// tests can settle acquisitions whose reply was lost.
func EnableGrantLog(l *Locker) { l.grantLog = true }

// FreshQueueEntryOnUncertain restores the behaviour before the FIFO stall
// fix, for the control test: after an uncertain attempt the waiter takes a
// fresh queue entry and removes the old one only best effort.
// lateGrantWindow is the delay of the second cleanup after an uncertain
// attempt on the shared client.
const LateGrantWindow = lateGrantWindow

func FreshQueueEntryOnUncertain(l *Locker) { l.freshQueueEntry = true }

// NoSecondCleanup turns off the cleanup that follows an uncertain attempt
// on the shared client after LateGrantWindow, for the control test.
func NoSecondCleanup(l *Locker) { l.noSecondCleanup = true }

// PendingCleanups reports how many cleanups run in the background.
func PendingCleanups(l *Locker) int {
	l.cleanups.mu.Lock()
	defer l.cleanups.mu.Unlock()
	return l.cleanups.running
}

// SetClock makes l's local estimates (and its private Waiter's timers)
// read clk; call it right after New.
func SetClock(l *Locker, clk clock.Clock) {
	l.clk = clk
	if l.ownsEngine {
		l.engine.Close()
		l.engine = wait.New(l.client, wait.Options{Clock: clk})
	}
}
