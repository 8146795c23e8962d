package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/internal/handle"
	"github.com/coordhost/coordhost/primitives/internal/replica"
	"github.com/coordhost/coordhost/primitives/internal/script"
	"github.com/redis/rueidis"
)

// Lease is a granted hash-field lease. Methods are safe for concurrent use;
// copies of a *Lease share one state (a Lease value must not be copied). A
// zero Lease, or a nil *Lease, is no grant: its calls fail with
// primitives.ErrInvalidOptions.
type Lease struct {
	h handle.Handle[leaseOps]
}

var _ primitives.Lease = (*Lease)(nil)

// core is the handle core; nil for a nil *Lease, which then behaves as no
// grant (calls fail with primitives.ErrInvalidOptions).
func (l *Lease) core() *handle.Handle[leaseOps] {
	if l == nil {
		return nil
	}
	return &l.h
}

// Key returns the hash key, prefix included.
func (l *Lease) Key() string { return l.core().Key() }

// Field returns the leased field.
func (l *Lease) Field() string {
	if o := l.core().Ops(); o != nil {
		return o.field
	}
	return ""
}

// Token returns the random ownership token stored in the field.
func (l *Lease) Token() string { return l.core().Token() }

// Remaining returns the local estimate of the time left, measured from
// before the acquire (or last accepted renewal) was sent. Zero once lost or
// released.
func (l *Lease) Remaining() time.Duration { return l.core().Remaining() }

// Done is closed when the estimate runs out, ownership is lost or
// uncertain, or the lease is released. Closing is final.
func (l *Lease) Done() <-chan struct{} { return l.core().Done() }

// Renew sets the field's expiry to ttl from now if this handle still owns
// it. False without a round trip once the estimate ran out or the lease was
// lost or released; false after a round trip when the field is gone or
// another owner's (the handle is then lost). When the hash got a key-level
// TTL after the grant, nothing is renewed, the handle is lost and the error
// matches ErrHashHasTTL. A transport error or cancellation fails the handle
// closed and returns an error matching primitives.ErrUncertain. With
// Options.Replicas, a renewal too few replicas confirmed in time also
// fails it closed, with an error matching primitives.ErrNotReplicated. ttl
// follows the rules of Leases.TryAcquire (at most MaxTTL).
func (l *Lease) Renew(ctx context.Context, ttl time.Duration) (bool, error) {
	return l.core().Renew(ctx, ttl)
}

// Verify asks the server whether this handle still owns the field. It
// answers false when the field is gone or another owner's, and also when
// the hash has a key-level TTL (added after the grant: the lease would end
// with the hash, whatever the field's expiry says). A false answer marks
// the handle lost; errors leave it as it was.
func (l *Lease) Verify(ctx context.Context) (bool, error) { return l.core().Verify(ctx) }

// Release deletes the field if this handle still owns it and announces the
// release (fire and forget). Results as in primitives.ReleaseResult. A
// transport error or cancellation returns an error matching
// primitives.ErrUncertain and closes Done; calling Release again settles
// ownership.
func (l *Lease) Release(ctx context.Context) (primitives.ReleaseResult, error) {
	return l.core().Release(ctx)
}

// Close releases the lease best effort within DefaultCloseTimeout; it never
// deletes another owner's field and is idempotent. It returns an error only
// when the outcome stayed unknown.
func (l *Lease) Close() error { return l.core().Close() }

// leaseOps are a hash-field lease's owner-checked operations (handle.Ops).
type leaseOps struct {
	key, field, channel string
	rep                 replica.Wait // renewals wait for replicas when on
}

func (o leaseOps) Describe() string { return fmt.Sprintf("lease %q field %q", o.key, o.field) }

func (o leaseOps) Renew(ctx context.Context, c rueidis.Client, token, ms string) (int64, error) {
	return o.rep.Renew(ctx, c, renewScript, o.Describe, []string{o.key}, []string{o.field, token, ms})
}

func (o leaseOps) Release(ctx context.Context, c rueidis.Client, token string) (int64, error) {
	n, err := releaseScript.Run(ctx, c, []string{o.key}, []string{o.field, token, o.channel}).AsInt64()
	return n, releaseScript.Classify(err)
}

// Owner reads the field and the hash's key-level TTL in one round trip; a
// key-level TTL means no owner can rely on the field.
func (o leaseOps) Owner(ctx context.Context, c rueidis.Client) (string, error) {
	rs := c.DoMulti(ctx,
		c.B().Hget().Key(o.key).Field(o.field).Build(),
		c.B().Pttl().Key(o.key).Build())
	v, err := rs[0].ToString()
	if err != nil {
		return "", err
	}
	if ms, err := rs[1].AsInt64(); err != nil {
		return "", err
	} else if ms >= 0 {
		return "", nil
	}
	return v, nil
}

func (o leaseOps) Explain(err error) error { return mapScriptErr(o.Describe(), err) }

// mapScriptErr adds the hash's own error to the shared mapping.
func mapScriptErr(name string, err error) error {
	var se *script.Error
	if errors.As(err, &se) && se.Code == script.CodeKeyTTL {
		return fmt.Errorf("%s: %w", name, ErrHashHasTTL)
	}
	return handle.MapScriptErr(name, err)
}
