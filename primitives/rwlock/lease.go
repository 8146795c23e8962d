package rwlock

import (
	"context"
	"fmt"
	"time"

	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/internal/handle"
	"github.com/coordhost/coordhost/primitives/internal/replica"
	"github.com/redis/rueidis"
)

// Lease is a granted read or write lease. Methods are safe for concurrent
// use; copies of a *Lease share one state (a Lease value must not be
// copied). A zero Lease, or a nil *Lease, is no grant: its calls fail with
// primitives.ErrInvalidOptions.
type Lease struct {
	h       handle.Handle[leaseOps]
	mode    Mode
	granted int64 // server time of the grant, ms since the epoch
}

var _ primitives.Lease = (*Lease)(nil)

// core is the handle core; nil for a nil *Lease.
func (l *Lease) core() *handle.Handle[leaseOps] {
	if l == nil {
		return nil
	}
	return &l.h
}

// Key returns the lock's Redis key, prefix included.
func (l *Lease) Key() string { return l.core().Key() }

// Token returns the random ownership token (the member in the lock's
// sorted set is "r:" or "w:" followed by it).
func (l *Lease) Token() string { return l.core().Token() }

// Mode returns Read or Write; 0 for no grant.
func (l *Lease) Mode() Mode {
	if l.core().Ops() == nil {
		return 0
	}
	return l.mode
}

// GrantedAt returns the server's time when it granted the lease (the zero
// Time for no grant, and for a lease rebuilt by Locker.Resume).
func (l *Lease) GrantedAt() time.Time {
	if l.core().Ops() == nil || l.granted == 0 {
		return time.Time{}
	}
	return time.UnixMilli(l.granted)
}

// Remaining returns the local estimate of the time left, measured from
// before the acquire (or last accepted renewal) was sent, so it never
// exceeds the server's deadline. Zero once lost or released.
func (l *Lease) Remaining() time.Duration { return l.core().Remaining() }

// Done is closed when the estimate runs out, ownership is found lost or
// becomes uncertain, or the lease is released. Closing is final.
func (l *Lease) Done() <-chan struct{} { return l.core().Done() }

// Renew sets this lease's deadline to ttl from now if it is still live on
// the server; a reader renews even while waiting writers hold new readers
// off. The lock's key then expires at the latest deadline of its members,
// so a shorter renewal never cuts another holder's lease. False without a
// round trip once the estimate ran out or the lease was lost or released;
// false after a round trip when the member is gone or past its deadline
// (the handle is then lost). A transport error or cancellation fails the
// handle closed and returns an error matching primitives.ErrUncertain.
// With Options.Replicas, a renewal too few replicas confirmed in time also
// fails it closed, with an error matching primitives.ErrNotReplicated. ttl
// follows the rules of Locker.TryAcquireRead (at most MaxTTL).
func (l *Lease) Renew(ctx context.Context, ttl time.Duration) (bool, error) {
	return l.core().Renew(ctx, ttl)
}

// Verify asks the server whether this lease is still live: false (without
// an error) when its member is gone or past its deadline, or the key holds
// another type. A false answer marks the handle lost; errors leave it as
// it was.
func (l *Lease) Verify(ctx context.Context) (bool, error) { return l.core().Verify(ctx) }

// Release removes this lease's member if it is still live and announces
// the release on the lock's channel (fire and forget). It returns
// primitives.Released, primitives.AlreadyReleased (released before, or
// expired, and nobody else holds the lock) or primitives.NotOwned (this
// lease is gone and another owner holds the lock; nothing of theirs is
// touched). A transport error or cancellation returns an error matching
// primitives.ErrUncertain and closes Done; calling Release again settles
// it.
func (l *Lease) Release(ctx context.Context) (primitives.ReleaseResult, error) {
	return l.core().Release(ctx)
}

// Close releases the lease best effort within DefaultCloseTimeout. It never
// touches another owner's lease and is idempotent; it returns an error only
// when the outcome stayed unknown.
func (l *Lease) Close() error { return l.core().Close() }

// leaseOps are one lease's owner-checked operations (handle.Ops).
type leaseOps struct {
	key, member, channel string
	mode                 Mode
	rep                  replica.Wait // renewals wait for replicas when on
}

func (o leaseOps) Describe() string { return fmt.Sprintf("rwlock %q %s lease", o.key, o.mode) }

func (o leaseOps) Renew(ctx context.Context, c rueidis.Client, _, ms string) (int64, error) {
	return o.rep.Renew(ctx, c, renewScript, o.Describe, []string{o.key}, []string{o.member, ms})
}

func (o leaseOps) Release(ctx context.Context, c rueidis.Client, _ string) (int64, error) {
	n, err := releaseScript.Run(ctx, c, []string{o.key}, []string{o.member, o.channel}).AsInt64()
	return n, releaseScript.Classify(err)
}

// Owner answers the handle's own token while its member is live, else ""
// (no owner the handle could be).
func (o leaseOps) Owner(ctx context.Context, c rueidis.Client) (string, error) {
	n, err := ownerScript.Run(ctx, c, []string{o.key}, []string{o.member}).AsInt64()
	if err != nil {
		return "", ownerScript.Classify(err)
	}
	if n == 1 {
		return o.member[2:], nil
	}
	return "", nil
}

func (o leaseOps) Explain(err error) error { return handle.MapScriptErr(o.Describe(), err) }
