package lease

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

// Lease is a granted hash-field lease. Methods are safe for concurrent use;
// copies of a *Lease share one state.
type Lease struct {
	client  rueidis.Client
	key     string
	field   string
	token   string
	channel string
	state   *handle.State
}

var _ primitives.Lease = (*Lease)(nil)

// Key returns the hash key, prefix included.
func (l *Lease) Key() string { return l.key }

// Field returns the leased field.
func (l *Lease) Field() string { return l.field }

// Token returns the random ownership token stored in the field.
func (l *Lease) Token() string { return l.token }

// Remaining returns the local estimate of the time left, measured from
// before the acquire (or last accepted renewal) was sent. Zero once lost or
// released.
func (l *Lease) Remaining() time.Duration { return l.state.Remaining() }

// Done is closed when the estimate runs out, ownership is lost or
// uncertain, or the lease is released. Closing is final.
func (l *Lease) Done() <-chan struct{} { return l.state.Done() }

// Renew sets the field's expiry to ttl from now if this handle still owns
// it. False without a round trip once the estimate ran out or the lease was
// lost or released; false after a round trip when the field is gone or
// another owner's (the handle is then lost). When the hash got a key-level
// TTL after the grant, nothing is renewed, the handle is lost and the error
// matches ErrHashHasTTL. A transport error or cancellation fails the handle
// closed and returns the error. ttl follows the rules of
// Leases.TryAcquire (at most MaxTTL).
func (l *Lease) Renew(ctx context.Context, ttl time.Duration) (bool, error) {
	ttl, ms, err := leaseMillis(ttl)
	if err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, err // nothing sent
	}
	ok, err := l.state.Renew(ctx, ttl, func(ctx context.Context) (int64, error) {
		return renewScript.Run(ctx, l.client, []string{l.key}, []string{l.field, l.token, ms}).AsInt64()
	})
	return ok, l.explain("renew", renewScript, err)
}

// Verify asks the server whether this handle still owns the field. It
// answers false when the field is gone or another owner's, and also when
// the hash has a key-level TTL (added after the grant: the lease would end
// with the hash, whatever the field's expiry says). A false answer marks
// the handle lost; errors leave it as it was.
func (l *Lease) Verify(ctx context.Context) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	ok, err := l.state.Verify(ctx, l.token, func(ctx context.Context) (string, error) {
		rs := l.client.DoMulti(ctx,
			l.client.B().Hget().Key(l.key).Field(l.field).Build(),
			l.client.B().Pttl().Key(l.key).Build())
		v, err := rs[0].ToString()
		if err != nil {
			return "", err
		}
		if ms, err := rs[1].AsInt64(); err != nil {
			return "", err
		} else if ms >= 0 {
			return "", nil // a key-level TTL: not ours to rely on
		}
		return v, nil
	})
	if err != nil {
		err = fmt.Errorf("lease %q field %q: verify: %w", l.key, l.field, err)
	}
	return ok, err
}

// Release deletes the field if this handle still owns it and announces the
// release (fire and forget). Results as in primitives.ReleaseResult. A
// transport error or cancellation returns the error and closes Done;
// calling Release again settles ownership.
func (l *Lease) Release(ctx context.Context) (primitives.ReleaseResult, error) {
	if l.state.IsReleased() {
		return primitives.AlreadyReleased, nil
	}
	if err := ctx.Err(); err != nil {
		return 0, err // nothing sent
	}
	n, err := l.state.Release(ctx, func(ctx context.Context) (int64, error) {
		return releaseScript.Run(ctx, l.client, []string{l.key}, []string{l.field, l.token, l.channel}).AsInt64()
	})
	if err != nil {
		return 0, l.explain("release", releaseScript, err)
	}
	switch n {
	case 1:
		return primitives.Released, nil
	case 0:
		return primitives.AlreadyReleased, nil
	}
	return primitives.NotOwned, nil
}

// explain annotates an error of op (see lock.Lock for the rules).
func (l *Lease) explain(op string, sc *script.Script, err error) error {
	if err == nil {
		return nil
	}
	err = sc.Classify(err)
	if script.IsUncertain(err) {
		return fmt.Errorf("lease %q field %q: %s outcome unknown, handle closed: %w", l.key, l.field, op, err)
	}
	return mapScriptErr(l.key, err)
}

// Close releases the lease best effort within DefaultCloseTimeout; it never
// deletes another owner's field and is idempotent. It returns an error only
// when the outcome stayed unknown.
func (l *Lease) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), DefaultCloseTimeout)
	defer cancel()
	_, err := l.Release(ctx)
	if errors.Is(err, primitives.ErrWrongType) {
		return nil
	}
	return err
}
