package wasm

import "sync/atomic"

// Breaker states.
const (
	stateClosed int32 = iota
	stateOpen
	stateHalfOpen
)

// breaker is a consecutive-failure circuit breaker. Times are nanoseconds
// on the module's monotonic clock.
type breaker struct {
	threshold int32 // 0: disabled
	cooldown  int64
	failures  atomic.Int32
	state     atomic.Int32
	openedAt  atomic.Int64
}

// allow reports whether a call may go to the module. After the cooldown,
// exactly one caller (the probe) gets true while the state is half-open.
func (b *breaker) allow(now int64) bool {
	switch b.state.Load() {
	case stateClosed:
		return true
	case stateOpen:
		if now-b.openedAt.Load() < b.cooldown {
			return false
		}
		return b.state.CompareAndSwap(stateOpen, stateHalfOpen)
	default:
		return false
	}
}

func (b *breaker) success() {
	if b.failures.Load() != 0 {
		b.failures.Store(0)
	}
	if b.state.Load() == stateHalfOpen {
		b.state.Store(stateClosed)
	}
}

// failure records a failure and reports whether the breaker opened now.
func (b *breaker) failure(now int64) bool {
	if b.threshold == 0 {
		return false
	}
	if b.state.Load() == stateHalfOpen {
		b.openedAt.Store(now)
		b.state.Store(stateOpen) // the probe failed
		return true
	}
	if b.failures.Add(1) >= b.threshold && b.state.Load() == stateClosed {
		// openedAt first: allow reads it as soon as the state is open.
		b.openedAt.Store(now)
		if b.state.CompareAndSwap(stateClosed, stateOpen) {
			b.failures.Store(0)
			return true
		}
	}
	return false
}

// open reports whether the breaker is open or half-open.
func (b *breaker) open() bool { return b.state.Load() != stateClosed }
