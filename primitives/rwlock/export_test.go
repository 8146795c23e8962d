package rwlock

import (
	"strings"

	"github.com/coordhost/coordhost/lua"
	"github.com/coordhost/coordhost/primitives/internal/script"
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

// WaitCleanups waits for the background cleanups of uncertain attempts.
func WaitCleanups(l *Locker) { l.cleanups.wg.Wait() }
