package latch

// LocalWaiters returns how many Wait calls of ls are waiting on l's
// generation.
func LocalWaiters(ls *Latches, l *Latch) int {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if o := ls.outcomes[l.waitID()]; o != nil {
		return o.refs
	}
	return 0
}
