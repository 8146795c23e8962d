package lock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/internal/handle"
	"github.com/coordhost/coordhost/primitives/internal/script"
	"github.com/redis/rueidis"
)

// Lock is a granted lock. All methods are safe for concurrent use; copies
// of a *Lock share one state.
type Lock struct {
	client  rueidis.Client
	key     string
	token   string
	channel string
	fence   int64
	state   *handle.State
	watch   *watch // reports to Options.Observer; nil without one (observe.go)
}

var _ primitives.Lease = (*Lock)(nil)

// Key returns the lock's Redis key, prefix included.
func (l *Lock) Key() string { return l.key }

// Token returns the random ownership token stored at the key.
func (l *Lock) Token() string { return l.token }

// FencingToken returns the counter value this grant received; 0 when
// fencing is off. It is greater than every earlier grant's on the same key
// as long as the server keeps the counter: see "What the guarantees rest
// on" in the package documentation (a restart without persistence, an
// eviction, a failover that loses writes, or someone deleting the counter
// restarts the sequence).
func (l *Lock) FencingToken() int64 { return l.fence }

// Remaining returns the local estimate of the time left, measured from
// before the acquire (or last accepted renewal) was sent, so it never
// exceeds the server's TTL. Zero once lost or released.
func (l *Lock) Remaining() time.Duration { return l.state.Remaining() }

// Done is closed when the estimate runs out, ownership is found lost or
// becomes uncertain, or the lock is released. Protected work should stop
// when it closes. Closing is final.
func (l *Lock) Done() <-chan struct{} { return l.state.Done() }

// Renew sets the lock's TTL to ttl from now if this handle still owns it.
// It returns false without a round trip when the estimate has already run
// out or the lock was lost or released; false after a round trip when
// another owner holds the key (the handle is then lost). A transport error
// or cancellation leaves the outcome unknown: the handle fails closed (Done
// closes, later renewals return false) and the error is returned. ttl
// follows the rules of Locker.TryAcquire (at most MaxTTL).
func (l *Lock) Renew(ctx context.Context, ttl time.Duration) (bool, error) {
	ttl, ms, err := leaseMillis(ttl)
	if err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, err // nothing sent
	}
	live := l.watch.renewing(l)
	ok, err := l.state.Renew(ctx, ttl, func(ctx context.Context) (int64, error) {
		return renewScript.Run(ctx, l.client, []string{l.key}, []string{l.token, ms}).AsInt64()
	})
	l.watch.renewed(l, live, ok, err)
	return ok, l.explain("renew", renewScript, err)
}

// Verify asks the server whether this handle still owns the lock. A false
// answer marks the handle lost. Errors leave the handle as it was.
func (l *Lock) Verify(ctx context.Context) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	ok, err := l.state.Verify(ctx, l.token, func(ctx context.Context) (string, error) {
		return l.client.Do(ctx, l.client.B().Get().Key(l.key).Build()).ToString()
	})
	l.watch.verified(l, ok, err)
	if err != nil {
		err = fmt.Errorf("lock %q: verify: %w", l.key, err)
	}
	return ok, err
}

// Release deletes the lock if this handle still owns it and announces the
// release on the key's channel (fire and forget). It returns
// primitives.Released, primitives.AlreadyReleased (released before through
// this handle, or expired and free) or primitives.NotOwned (another owner
// holds it; nothing deleted). A transport error or cancellation returns the
// error and closes Done; calling Release again settles ownership.
func (l *Lock) Release(ctx context.Context) (primitives.ReleaseResult, error) {
	if l.state.IsReleased() {
		return primitives.AlreadyReleased, nil
	}
	if err := ctx.Err(); err != nil {
		return 0, err // nothing sent
	}
	gone := l.watch.releasing(l)
	n, err := l.state.Release(ctx, func(ctx context.Context) (int64, error) {
		return releaseScript.Run(ctx, l.client, []string{l.key}, []string{l.token, l.channel}).AsInt64()
	})
	l.watch.released(l, gone, n, err)
	if err != nil {
		return 0, l.explain("release", releaseScript, err)
	}
	return releaseResult(n), nil
}

// releaseResult maps the release scripts' answer.
func releaseResult(n int64) primitives.ReleaseResult {
	switch n {
	case 1:
		return primitives.Released
	case 0:
		return primitives.AlreadyReleased
	}
	return primitives.NotOwned
}

// explain annotates an error of op: an unknown outcome says the handle
// closed; a server answer is mapped to the package's sentinels.
func (l *Lock) explain(op string, sc *script.Script, err error) error {
	if err == nil {
		return nil
	}
	err = sc.Classify(err)
	if script.IsUncertain(err) {
		return fmt.Errorf("lock %q: %s outcome unknown, handle closed: %w", l.key, op, err)
	}
	return mapScriptErr(l.key, err)
}

// Close releases the lock best effort within DefaultCloseTimeout. It never
// deletes another owner's lock and is idempotent; it returns an error only
// when the release outcome stayed unknown.
func (l *Lock) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), DefaultCloseTimeout)
	defer cancel()
	_, err := l.Release(ctx)
	if errors.Is(err, primitives.ErrWrongType) {
		return nil
	}
	return err
}
