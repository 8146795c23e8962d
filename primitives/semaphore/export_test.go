package semaphore

import "time"

// EnableGrantLog makes every grant append its token to the list at
// ReservedPrefix+"grants:"+key (placed in the key's slot), so fault tests
// can settle acquisitions whose reply was lost.
func EnableGrantLog(s *Semaphores) { s.grantLog = true }

// SetCleanupLimits shortens Permit.Close's wait and the background
// release's span and backoff, for tests of the give-up path.
func SetCleanupLimits(s *Semaphores, wait, total, base, maxBackoff time.Duration) {
	s.limits = cleanupLimits{wait: wait, total: total, base: base, maxBackoff: maxBackoff}
}

// PendingCleanups reports how many background cleanups run.
func PendingCleanups(s *Semaphores) int {
	n := 0
	s.bgMu.Lock()
	n = s.bgRunning
	s.bgMu.Unlock()
	return n
}

// Queued reports whether a waiting Acquire of s on key (prefix included)
// is asleep on the wait engine, after a first attempt found it full.
func Queued(s *Semaphores, key string) bool { return s.engine.Queued(key) }
