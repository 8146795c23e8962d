package redlock

import (
	"fmt"

	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/internal/base"
)

// Resume rebuilds the handle of a lock that an earlier TryAcquire or
// Acquire granted, possibly in another process, from its key (as given to
// the acquisition, without the prefix) and its ownership token
// (Lock.Token); Redlock has no fencing token. It sends nothing and starts
// no goroutine. Renew, Verify and Release work on every node as for the
// original handle, owner-checked by the token on each: a renewal must be
// confirmed by a majority with validity left, or the lease ends and the
// token is removed from every node. The resumed handle has no local
// validity until a renewal is accepted: Remaining is 0 and Done stays open
// until then (unless the handle is found lost or is released); an accepted
// renewal for ttl makes it ttl less the drift allowance from before the
// renewal was sent, as on the original handle. The Group should have the
// same nodes, prefix and MaxTTL as the one that granted the lock.
// Options.Observer is not told about resumed handles.
//
// Errors, with nothing sent: primitives.ErrInvalidKey as in TryAcquire,
// primitives.ErrInvalidToken, primitives.ErrInvalidOptions for a nil
// Group, ErrDuplicateNode once the Group has found one.
func (g *Group) Resume(key, token string) (*Lock, error) {
	if g == nil || len(g.nodes) == 0 {
		return nil, fmt.Errorf("%w: redlock: nil Group (use redlock.New)", primitives.ErrInvalidOptions)
	}
	r, err := g.derive(key)
	if err != nil {
		return nil, err
	}
	if err := base.CheckToken(token); err != nil {
		return nil, fmt.Errorf("redlock %q: resume: %w", r.key, err)
	}
	if err := g.brokenErr(); err != nil {
		return nil, err
	}
	r.token = token
	l := &Lock{}
	l.h.Resume(g.nodes[0].client, g.clk, r.key, token, r.ops(g))
	return l, nil
}
