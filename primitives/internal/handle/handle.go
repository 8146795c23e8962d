// Package handle keeps the local state every lease-like handle shares: the
// ownership estimate measured from before a command was sent, the Done
// channel, and the fail-closed rules for uncertain outcomes (DESIGN.md §4.1).
package handle

import (
	"sync"
	"time"
)

// State is the local view of one granted lease. Safe for concurrent use.
type State struct {
	mu       sync.Mutex
	deadline time.Time // local estimate of the server-side expiry
	done     chan struct{}
	timer    *time.Timer
	closed   bool // done is closed
	lost     bool // ownership lost or uncertain: renewals are refused locally
	released bool // released through this handle
}

// New starts the estimate at sent+ttl, where sent was read before the
// acquire command was written. Done closes when the estimate runs out.
func New(sent time.Time, ttl time.Duration) *State {
	s := &State{deadline: sent.Add(ttl), done: make(chan struct{})}
	left := time.Until(s.deadline)
	if left <= 0 {
		s.closeLocked()
		s.lost = true
		return s
	}
	s.timer = time.AfterFunc(left, s.expire)
	return s
}

func (s *State) expire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed && !time.Now().Before(s.deadline) {
		s.closeLocked()
	}
}

func (s *State) closeLocked() {
	if !s.closed {
		s.closed = true
		close(s.done)
	}
	if s.timer != nil {
		s.timer.Stop()
	}
}

// Done is closed when the estimate runs out, ownership is lost or
// uncertain, or the lease is released. Closing is final.
func (s *State) Done() <-chan struct{} { return s.done }

// Remaining returns the time left on the estimate, zero once lost or
// released.
func (s *State) Remaining() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lost || s.released {
		return 0
	}
	return max(time.Until(s.deadline), 0)
}

// CanRenew reports whether a renewal may be sent: the handle is neither
// lost nor released and the estimate has not run out at now.
func (s *State) CanRenew(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.lost && !s.released && now.Before(s.deadline)
}

// Renewed records a renewal the server accepted; sent was read before the
// renewal was written. The deadline moves even if Done already closed
// (closing is final; the server did extend the lease).
func (s *State) Renewed(sent time.Time, ttl time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.released {
		return
	}
	s.deadline = sent.Add(ttl)
	if s.closed {
		return
	}
	s.timer.Reset(time.Until(s.deadline))
}

// Lost records that ownership is gone or uncertain: Done closes and later
// renewals are refused without a round trip.
func (s *State) Lost() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lost = true
	s.closeLocked()
}

// Released records a settled release (Released, AlreadyReleased or
// NotOwned): Done closes and later releases answer locally.
func (s *State) Released() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.released = true
	s.closeLocked()
}

// IsReleased reports whether a release through this handle has settled.
func (s *State) IsReleased() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.released
}
