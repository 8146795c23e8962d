package lock

import (
	"fmt"

	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/internal/base"
)

// Resume rebuilds the handle of a lock that an earlier TryAcquire or
// Acquire granted, possibly in another process, from its key (as given to
// Acquire, without the prefix), its ownership token (Lock.Token) and its
// fencing token (Lock.FencingToken; 0 without fencing). It sends nothing
// and starts no goroutine: Renew, Verify and Release are owner-checked by
// the token on the server, as for the original handle. The resumed handle
// has no local estimate until a renewal is accepted: Remaining is 0 and
// Done stays open until then (unless the handle is found lost or is
// released). The fencing token is taken as given; only the server's
// counter at acquisition vouches for it. Options.Observer is not told
// about resumed handles.
//
// Errors, with nothing sent: primitives.ErrInvalidKey as in TryAcquire,
// primitives.ErrInvalidToken, primitives.ErrInvalidOptions for a negative
// fencing token, a non-zero one on a Locker without fencing, or a nil
// Locker.
func (l *Locker) Resume(key, token string, fencingToken int64) (*Lock, error) {
	if l == nil || l.client == nil {
		return nil, fmt.Errorf("%w: lock: nil Locker (use lock.New)", primitives.ErrInvalidOptions)
	}
	full, err := l.space.Key(key)
	if err != nil {
		return nil, fmt.Errorf("lock: %w: %w", primitives.ErrInvalidKey, err)
	}
	if err := base.CheckToken(token); err != nil {
		return nil, fmt.Errorf("lock %q: resume: %w", full, err)
	}
	switch {
	case fencingToken < 0:
		return nil, fmt.Errorf("%w: lock %q: resume: negative fencing token %d", primitives.ErrInvalidOptions, full, fencingToken)
	case fencingToken != 0 && !l.fence:
		return nil, fmt.Errorf("%w: lock %q: resume: fencing token %d on a Locker without fencing", primitives.ErrInvalidOptions, full, fencingToken)
	}
	lk := &Lock{fence: fencingToken}
	lk.h.Resume(l.client, l.clk, full, token, lockOps{key: full, channel: l.space.Channel("rel", key), rep: l.rep})
	return lk, nil
}
