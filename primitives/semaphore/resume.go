package semaphore

import (
	"fmt"

	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/internal/base"
)

// Resume rebuilds the handle of a permit that an earlier TryAcquire or
// Acquire granted, possibly in another process, from the semaphore's key
// (as given to the acquisition, without the prefix), the permit's
// ownership token (Permit.Token), the capacity it was taken with
// (Permit.Capacity) and whether it was taken with NoExpiry
// (Permit.NoExpiry). It sends nothing and starts no goroutine: Renew,
// Verify and Release are owner-checked by the token on the server, as for
// the original handle, and Close retries its release in the background as
// the original's does. The resumed handle has no local estimate until a
// renewal is accepted: Remaining is 0 (also for a permit without expiry,
// whose original handle reports MaxTTL) and Done stays open until then
// (unless the handle is found lost or is released). A renewal gives a
// permit without expiry a finite deadline, as through the original handle,
// and NoExpiry then reports false. The capacity and noExpiry are taken as
// given, for Capacity and NoExpiry to report: only the server's state
// vouches for them (its capacity key decides every acquisition and
// release). Options.Observer is not told about resumed handles.
//
// Errors, with nothing sent: primitives.ErrInvalidKey as in TryAcquire,
// primitives.ErrInvalidToken, ErrInvalidCapacity (which matches
// primitives.ErrInvalidOptions), primitives.ErrInvalidOptions for nil
// Semaphores.
func (s *Semaphores) Resume(key, token string, capacity int, noExpiry bool) (*Permit, error) {
	if s == nil || s.client == nil {
		return nil, fmt.Errorf("%w: semaphore: nil Semaphores (use semaphore.New)", primitives.ErrInvalidOptions)
	}
	full, capKey, channel, err := s.keysOf(key)
	if err != nil {
		return nil, err
	}
	if err := base.CheckToken(token); err != nil {
		return nil, fmt.Errorf("semaphore %q: resume: %w", full, err)
	}
	if capacity < 1 || capacity > MaxCapacity {
		return nil, fmt.Errorf("semaphore %q: resume: %w, not %d", full, ErrInvalidCapacity, capacity)
	}
	p := &Permit{s: s, capacity: capacity}
	p.forever.Store(noExpiry)
	p.h.Resume(s.client, s.clk, full, token, permitOps{key: full, capKey: capKey, channel: channel, token: token, rep: s.rep})
	return p, nil
}
