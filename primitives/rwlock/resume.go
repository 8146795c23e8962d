package rwlock

import (
	"fmt"

	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/internal/base"
)

// Resume rebuilds the handle of a read or write lease that an earlier
// acquisition granted, possibly in another process, from its key (as given
// to the acquisition, without the prefix), its ownership token
// (Lease.Token) and its mode (Lease.Mode). It sends nothing and starts no
// goroutine: Renew, Verify and Release are owner-checked on the server by
// the lease's member ("r:" or "w:" followed by the token), as for the
// original handle, so a token resumed with the wrong mode owns nothing.
// The resumed handle has no local estimate until a renewal is accepted:
// Remaining is 0 and Done stays open until then (unless the handle is
// found lost or is released). GrantedAt is the zero Time: only the
// acquisition's reply carried the server's time of the grant.
// Options.Observer is not told about resumed handles.
//
// Errors, with nothing sent: primitives.ErrInvalidKey as in
// TryAcquireRead (an empty or reserved key, or one whose pending-writer
// key cannot share its cluster slot), primitives.ErrInvalidToken,
// primitives.ErrInvalidOptions for a mode other than Read or Write, or a
// nil Locker.
func (l *Locker) Resume(key, token string, mode Mode) (*Lease, error) {
	if l == nil || l.client == nil {
		return nil, fmt.Errorf("%w: rwlock: nil Locker (use rwlock.New)", primitives.ErrInvalidOptions)
	}
	r, err := l.derive(key, mode)
	if err != nil {
		return nil, err
	}
	if err := base.CheckToken(token); err != nil {
		return nil, fmt.Errorf("rwlock %q: resume: %w", r.key, err)
	}
	if mode != Read && mode != Write {
		return nil, fmt.Errorf("%w: rwlock %q: resume: %v is neither Read nor Write", primitives.ErrInvalidOptions, r.key, mode)
	}
	r.token = token
	ls := &Lease{mode: mode}
	ls.h.Resume(l.client, l.clk, r.key, token, r.ops())
	return ls, nil
}
