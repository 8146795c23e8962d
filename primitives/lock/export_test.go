package lock

// EnableGrantLog makes every grant append "token fence" to the list at
// Prefix+ReservedPrefix+"grants:"+key (placed in the key's slot), so fault
// tests can settle acquisitions whose reply was lost.
func EnableGrantLog(l *Locker) { l.grantLog = true }
