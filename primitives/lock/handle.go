package lock

import (
	"context"
	"fmt"
	"time"

	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/internal/handle"
	"github.com/coordhost/coordhost/primitives/internal/replica"
	"github.com/redis/rueidis"
)

// Lock is a granted lock. All methods are safe for concurrent use; copies
// of a *Lock share one state (a Lock value must not be copied: go vet's
// copylocks check says so). A zero Lock, or a nil *Lock, is no grant:
// its calls fail with primitives.ErrInvalidOptions.
type Lock struct {
	h     handle.Handle[lockOps]
	fence int64
}

var _ primitives.Lease = (*Lock)(nil)

// core is the handle core; nil for a nil *Lock, which then behaves as no
// grant (calls fail with primitives.ErrInvalidOptions).
func (l *Lock) core() *handle.Handle[lockOps] {
	if l == nil {
		return nil
	}
	return &l.h
}

// Key returns the lock's Redis key, prefix included.
func (l *Lock) Key() string { return l.core().Key() }

// Token returns the random ownership token stored at the key.
func (l *Lock) Token() string { return l.core().Token() }

// FencingToken returns the counter value this grant received; 0 when
// fencing is off. It is greater than every earlier grant's on the same key
// as long as the server keeps the counter: see "What the guarantees rest
// on" in the package documentation (a restart without persistence, an
// eviction, a failover that loses writes, or someone deleting the counter
// restarts the sequence).
func (l *Lock) FencingToken() int64 {
	if l == nil {
		return 0
	}
	return l.fence
}

// Remaining returns the local estimate of the time left, measured from
// before the acquire (or last accepted renewal) was sent, so it never
// exceeds the server's TTL. Zero once lost or released.
func (l *Lock) Remaining() time.Duration { return l.core().Remaining() }

// Done is closed when the estimate runs out, ownership is found lost or
// becomes uncertain, or the lock is released. Protected work should stop
// when it closes. Closing is final.
func (l *Lock) Done() <-chan struct{} { return l.core().Done() }

// Renew sets the lock's TTL to ttl from now if this handle still owns it.
// It returns false without a round trip when the estimate has already run
// out or the lock was lost or released; false after a round trip when
// another owner holds the key (the handle is then lost). A transport error
// or cancellation leaves the outcome unknown: the handle fails closed (Done
// closes, later renewals return false) and the error, matching
// primitives.ErrUncertain, is returned. With Options.Replicas, a renewal
// the server made but too few replicas confirmed in time also fails the
// handle closed, with an error matching primitives.ErrNotReplicated; the
// lock stays ours on the primary until its TTL or Release. ttl follows the
// rules of Locker.TryAcquire (at most MaxTTL); a bad ttl or a context
// already done sends nothing.
func (l *Lock) Renew(ctx context.Context, ttl time.Duration) (bool, error) {
	return l.core().Renew(ctx, ttl)
}

// Verify asks the server whether this handle still owns the lock: false
// (without an error) when the key is gone, holds another token, or holds a
// value of another type. A false answer marks the handle lost. Errors leave
// the handle as it was.
func (l *Lock) Verify(ctx context.Context) (bool, error) { return l.core().Verify(ctx) }

// Release deletes the lock if this handle still owns it and announces the
// release on the key's channel (fire and forget). It returns
// primitives.Released, primitives.AlreadyReleased (the key is gone:
// released before through this handle, expired, or deleted by someone
// else — possibly after another owner held it meanwhile; Options.Observer
// reports which, as LostReleaseAbsent when this handle had not released)
// or primitives.NotOwned (another owner holds it; nothing deleted). A transport error or cancellation returns an
// error matching primitives.ErrUncertain and closes Done; calling Release
// again settles ownership.
func (l *Lock) Release(ctx context.Context) (primitives.ReleaseResult, error) {
	return l.core().Release(ctx)
}

// Close releases the lock best effort within DefaultCloseTimeout. It never
// deletes another owner's lock and is idempotent; it returns an error only
// when the release outcome stayed unknown.
func (l *Lock) Close() error { return l.core().Close() }

// lockOps are a lock's owner-checked operations (handle.Ops).
type lockOps struct {
	key, channel string
	rep          replica.Wait // renewals wait for replicas when on
}

func (o lockOps) Describe() string { return fmt.Sprintf("lock %q", o.key) }

func (o lockOps) Renew(ctx context.Context, c rueidis.Client, token, ms string) (int64, error) {
	return o.rep.Renew(ctx, c, renewScript, o.Describe, []string{o.key}, []string{token, ms})
}

func (o lockOps) Release(ctx context.Context, c rueidis.Client, token string) (int64, error) {
	n, err := releaseScript.Run(ctx, c, []string{o.key}, []string{token, o.channel}).AsInt64()
	return n, releaseScript.Classify(err)
}

func (o lockOps) Owner(ctx context.Context, c rueidis.Client) (string, error) {
	return c.Do(ctx, c.B().Get().Key(o.key).Build()).ToString()
}

func (o lockOps) Explain(err error) error { return handle.MapScriptErr(o.Describe(), err) }
