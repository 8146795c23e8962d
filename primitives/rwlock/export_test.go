package rwlock

import (
	"strings"

	"github.com/coordhost/coordhost/lua"
	"github.com/coordhost/coordhost/primitives/internal/clock"
	"github.com/coordhost/coordhost/primitives/internal/script"
	"github.com/coordhost/coordhost/primitives/internal/wait"
)

// EnableGrantLog makes every grant append its member ("r:<token>" or
// "w:<token>") to the list at Prefix+ReservedPrefix+"rw-grants:"+key (in the
// key's slot), so fault tests can settle acquisitions whose reply was lost.
func EnableGrantLog(l *Locker) { l.grantLog = true }

// BreakReaders makes l's read acquisitions ignore a holding writer: the
// control of the fault test, which the history checker must flag.
func BreakReaders(l *Locker) {
	const check = "if first[1] and string.sub(first[1], 1, 2) == 'w:' then"
	if !strings.Contains(lua.RWLockAcquireRead, check) {
		panic("rwlock_acquire_read.lua no longer has the writer check BreakReaders removes")
	}
	l.reads = script.New("rwlock_acquire_read_broken", strings.Replace(lua.RWLockAcquireRead, check, "if false then", 1))
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

// PendingCleanups reports whether background cleanups may still run.
func WaitCleanups(l *Locker) { l.cleanups.wg.Wait() }

// LateGrantWindow is the delay of the second cleanup after an uncertain
// attempt on the shared client.
const LateGrantWindow = lateGrantWindow
