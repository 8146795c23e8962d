package lock

// EnableGrantLog makes every grant append "token fence" to the list at
// Prefix+ReservedPrefix+"grants:"+key (placed in the key's slot), so fault
// tests can settle acquisitions whose reply was lost.
func EnableGrantLog(l *Locker) { l.grantLog = true }

// FreshQueueEntryOnUncertain restores the behaviour before the FIFO stall
// fix, for the control test: after an uncertain attempt the waiter takes a
// fresh queue entry and removes the old one only best effort.
func FreshQueueEntryOnUncertain(l *Locker) { l.freshQueueEntry = true }
