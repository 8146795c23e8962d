// Package handle keeps the local state every lease-like handle shares: the
// ownership estimate measured from before a command was sent, the Done
// channel, and the fail-closed rules for uncertain outcomes (DESIGN.md §4.1).
package handle

import (
	"sync"
	"time"

	"github.com/coordhost/coordhost/primitives/internal/clock"
)

// State is the local view of one granted lease. Safe for concurrent use.
//
// The Done channel and its timer are made on the first call to Done: most
// handles are released without anyone watching Done, and a timer per grant
// is a measurable share of an uncontended acquire+release cycle.
type State struct {
	mu       sync.Mutex
	clk      clock.Clock
	deadline time.Time // local estimate of the server-side expiry
	lastSent time.Time // send time of the latest renewal applied
	done     chan struct{}
	timer    clock.Timer
	// renewing holds one token while a renewal is on the wire: renewals
	// of one handle go one at a time, so the server applies them in the
	// order their send times say (made on the first Renew).
	renewing chan struct{}
	over     bool // Done is (or, once made, will be) closed: final
	lost     bool // ownership lost or uncertain: renewals are refused locally
	released bool // released through this handle
	// unknown: resumed from a token alone (InitUnknown): there is no
	// estimate until a renewal is accepted. Remaining is 0, Done stays
	// open, and renewals are sent.
	unknown bool
}

// New starts the estimate at sent+ttl on the system clock, where sent was
// read before the acquire command was written.
func New(sent time.Time, ttl time.Duration) *State {
	s := &State{}
	s.Init(clock.Real, sent, ttl)
	return s
}

// Init starts the estimate of a zero State at sent+ttl on clk (nil: the
// system clock), where sent was read from clk before the acquire command
// was written.
func (s *State) Init(clk clock.Clock, sent time.Time, ttl time.Duration) {
	s.clk = clock.Or(clk)
	s.deadline = sent.Add(ttl)
	if !s.clk.Now().Before(s.deadline) {
		s.over, s.lost = true, true
	}
}

// InitUnknown starts a zero State with no estimate, for a handle rebuilt
// from its token without a round trip (a Resume): the server alone knows
// how long the lease has left. Until a renewal is accepted, Remaining is 0,
// Done stays open (it closes when the handle is lost or released) and
// CanRenew lets renewals through; the first accepted renewal starts the
// estimate as Init would.
func (s *State) InitUnknown(clk clock.Clock) {
	s.clk = clock.Or(clk)
	s.unknown = true
}

// Now reads the State's clock.
func (s *State) Now() time.Time { return s.clk.Now() }

// Done is closed when the estimate runs out, ownership is lost or
// uncertain, or the lease is released. Closing is final.
func (s *State) Done() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done == nil {
		s.done = make(chan struct{})
		if s.unknown && !s.over {
			return s.done // no estimate: no timer until a renewal
		}
		if now := s.clk.Now(); s.over || !now.Before(s.deadline) {
			s.over = true
			close(s.done)
		} else {
			s.timer = s.clk.AfterFunc(s.deadline.Sub(now), s.expire)
		}
	}
	return s.done
}

func (s *State) expire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now := s.clk.Now(); !s.over && !now.Before(s.deadline) {
		s.finishLocked()
	} else if !s.over {
		s.timer.Reset(s.deadline.Sub(now))
	}
}

// finishLocked makes Done closed for good.
func (s *State) finishLocked() {
	if s.over && (s.done == nil || isClosed(s.done)) {
		return
	}
	s.over = true
	if s.done != nil {
		close(s.done)
	}
	if s.timer != nil {
		s.timer.Stop()
	}
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Remaining returns the time left on the estimate, zero once lost or
// released.
func (s *State) Remaining() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lost || s.released || s.unknown {
		return 0
	}
	return max(s.deadline.Sub(s.clk.Now()), 0)
}

// CanRenew reports whether a renewal may be sent: the handle is neither
// lost nor released and the estimate has not run out at now.
func (s *State) CanRenew(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.lost && !s.released && (s.unknown || now.Before(s.deadline))
}

// Renewed records a renewal the server accepted; sent was read before the
// renewal was written. The deadline moves even if Done already closed
// (closing is final; the server did extend the lease).
func (s *State) Renewed(sent time.Time, ttl time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.released || sent.Before(s.lastSent) {
		// An older renewal answered after a newer one: the server holds
		// the newer one's TTL.
		return
	}
	s.lastSent = sent
	now := s.clk.Now()
	if !s.over && !s.unknown && !now.Before(s.deadline) {
		// The estimate ran out while the renewal was in flight: Done
		// closes now even if nobody had asked for it yet.
		s.finishLocked()
	}
	s.unknown = false
	s.deadline = sent.Add(ttl)
	switch {
	case s.over:
	case s.timer != nil:
		s.timer.Reset(s.deadline.Sub(now))
	case s.done != nil:
		// Done was made while the estimate was unknown, without a timer.
		s.timer = s.clk.AfterFunc(s.deadline.Sub(now), s.expire)
	}
}

// Lost records that ownership is gone or uncertain: Done closes and later
// renewals are refused without a round trip.
func (s *State) Lost() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lost = true
	s.finishLocked()
}

// Released records a settled release (Released, AlreadyReleased or
// NotOwned): Done closes and later releases answer locally.
func (s *State) Released() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.released = true
	s.finishLocked()
}

// IsReleased reports whether a release through this handle has settled.
func (s *State) IsReleased() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.released
}
