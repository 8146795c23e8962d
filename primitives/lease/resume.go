package lease

import (
	"fmt"

	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/internal/base"
)

// Resume rebuilds the handle of a lease that an earlier TryAcquire or
// Acquire granted, possibly in another process, from its hash key (as
// given to the acquisition, without the prefix), its field and its
// ownership token (Lease.Token). It sends nothing and starts no goroutine:
// Renew, Verify and Release are owner-checked by the token on that one
// field on the server, as for the original handle. The resumed handle has
// no local estimate until a renewal is accepted: Remaining is 0 and Done
// stays open until then (unless the handle is found lost or is released).
// It does not probe the server for hash-field expiry (that takes a round
// trip); a lease can only have been granted by a server that has it.
//
// Errors, with nothing sent: primitives.ErrInvalidKey as in TryAcquire
// (an empty or reserved hash key, an empty field),
// primitives.ErrInvalidToken, primitives.ErrInvalidOptions for nil Leases.
func (ls *Leases) Resume(hashKey, field, token string) (*Lease, error) {
	if ls == nil || ls.client == nil {
		return nil, fmt.Errorf("%w: lease: nil Leases (use lease.New)", primitives.ErrInvalidOptions)
	}
	full, field, channel, err := ls.target(hashKey, field)
	if err != nil {
		return nil, err
	}
	if err := base.CheckToken(token); err != nil {
		return nil, fmt.Errorf("lease %q field %q: resume: %w", full, field, err)
	}
	l := &Lease{}
	l.h.Resume(ls.client, ls.clk, full, token, leaseOps{key: full, field: field, channel: channel, rep: ls.rep})
	return l, nil
}
