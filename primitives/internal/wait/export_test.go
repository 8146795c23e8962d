package wait

// QueueLen reports how many local waiters are queued under queue (a
// Request.Queue, or Key when Queue is empty).
func QueueLen(e *Engine, queue string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if q := e.queues[queue]; q != nil {
		return len(q.waiters)
	}
	return 0
}
