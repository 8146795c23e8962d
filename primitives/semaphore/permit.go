package semaphore

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/internal/base"
	"github.com/coordhost/coordhost/primitives/internal/handle"
	"github.com/coordhost/coordhost/primitives/internal/replica"
	"github.com/coordhost/coordhost/primitives/internal/script"
	"github.com/redis/rueidis"
)

// Permit is a granted permit of a semaphore. Methods are safe for
// concurrent use; copies of a *Permit share one state (a Permit value must
// not be copied). A zero Permit, or a nil *Permit, is no grant: its calls
// fail with primitives.ErrInvalidOptions.
type Permit struct {
	h        handle.Handle[permitOps]
	s        *Semaphores
	capacity int
	forever  atomic.Bool
}

var _ primitives.Lease = (*Permit)(nil)

// core is the handle core; nil for a nil *Permit.
func (p *Permit) core() *handle.Handle[permitOps] {
	if p == nil {
		return nil
	}
	return &p.h
}

// Key returns the semaphore's key, prefix included.
func (p *Permit) Key() string { return p.core().Key() }

// Token returns the permit's random ownership token (its member in the
// sorted set).
func (p *Permit) Token() string { return p.core().Token() }

// Capacity returns the capacity the permit was taken with (0 for no grant;
// for a permit rebuilt by Semaphores.Resume, the capacity it was given).
func (p *Permit) Capacity() int {
	if p == nil {
		return 0
	}
	return p.capacity
}

// NoExpiry reports whether the permit was taken with NoExpiry (and not
// renewed since): it then expires only when released. For a permit rebuilt
// by Semaphores.Resume it reports what Resume was given until a renewal.
func (p *Permit) NoExpiry() bool { return p != nil && p.forever.Load() }

// Remaining returns the local estimate of the time left, measured from
// before the acquire (or last accepted renewal) was sent; MaxTTL for a
// permit without expiry. Zero once lost or released, and for a permit
// rebuilt by Semaphores.Resume until a renewal is accepted.
func (p *Permit) Remaining() time.Duration { return p.core().Remaining() }

// Done is closed when the estimate runs out, ownership is lost or
// uncertain, or the permit is released. Closing is final.
func (p *Permit) Done() <-chan struct{} { return p.core().Done() }

// Renew sets the permit's deadline to ttl from now, on the server's clock,
// if this handle still owns a live permit; a permit taken with NoExpiry
// then expires too. ttl follows TryAcquire's rules for finite ttls
// (NoExpiry is refused here with primitives.ErrInvalidTTL). False without
// a round trip once the estimate ran out or the permit was lost or
// released; false after a round trip when the permit is gone (the handle
// is then lost). A transport error or cancellation fails the handle closed
// and returns an error matching primitives.ErrUncertain. With
// Options.Replicas, a renewal too few replicas confirmed in time also
// fails it closed, with an error matching primitives.ErrNotReplicated.
func (p *Permit) Renew(ctx context.Context, ttl time.Duration) (bool, error) {
	ok, err := p.core().Renew(ctx, ttl)
	if ok {
		p.forever.Store(false)
	}
	return ok, err
}

// Verify asks the server whether this permit is still live. A false answer
// marks the handle lost; errors leave it as it was.
func (p *Permit) Verify(ctx context.Context) (bool, error) { return p.core().Verify(ctx) }

// Release returns the permit if this handle still owns it and announces
// the release, waking waiters. Released; AlreadyReleased when the permit
// was gone (expired, released, removed); NotOwned when it was gone and the
// semaphore is full of other live permits (its place went to another
// owner). A transport error or cancellation returns an error matching
// primitives.ErrUncertain and closes Done; calling Release again settles
// it.
func (p *Permit) Release(ctx context.Context) (primitives.ReleaseResult, error) {
	return p.core().Release(ctx)
}

// Close releases the permit, waiting DefaultCloseWait (about one second)
// at most. When the release's outcome stays unknown, Close returns an
// error matching primitives.ErrUncertain and keeps retrying the release in
// the background, with capped, jittered backoff, for up to
// DefaultCleanupFor (a minute); a background release that gives up is
// reported to Options.OnAbandon and logged (stage "release"). Close never
// deletes another owner's permit and is idempotent.
func (p *Permit) Close() error {
	h := p.core()
	if h == nil || p.s == nil {
		return nil // no grant: nothing to release
	}
	s := p.s
	release := func(ctx context.Context) error {
		_, err := h.Release(ctx)
		if errors.Is(err, base.ErrWrongType) {
			return nil // the key was replaced by a foreign value: no permit left
		}
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.limits.wait)
	err := release(ctx)
	cancel()
	if err == nil {
		return nil
	}
	if s.background(h.Key(), h.Token(), "release", err, release) {
		return fmt.Errorf("%w (retrying in the background for up to %v)", err, s.limits.total)
	}
	return err
}

// permitOps are a permit's owner-checked operations (handle.Ops).
type permitOps struct {
	key, capKey, channel, token string
	rep                         replica.Wait // renewals wait for replicas when on
}

func (o permitOps) Describe() string { return fmt.Sprintf("semaphore %q", o.key) }

func (o permitOps) Renew(ctx context.Context, c rueidis.Client, token, ms string) (int64, error) {
	return o.rep.Renew(ctx, c, renewScript, o.Describe, []string{o.key, o.capKey}, []string{token, ms})
}

func (o permitOps) Release(ctx context.Context, c rueidis.Client, token string) (int64, error) {
	n, err := releaseScript.Run(ctx, c, []string{o.key, o.capKey}, []string{token, o.channel}).AsInt64()
	return n, releaseScript.Classify(err)
}

// Owner answers the permit's token while the permit is live on the
// server's clock, else "" (no owner the handle can rely on).
func (o permitOps) Owner(ctx context.Context, c rueidis.Client) (string, error) {
	n, err := verifyScript.Run(ctx, c, []string{o.key}, []string{o.token}).AsInt64()
	if err = verifyScript.Classify(err); err != nil {
		var se *script.Error
		if errors.As(err, &se) && se.Code == script.CodeWrongType {
			return "", nil // a foreign value: no permit
		}
		return "", err
	}
	if n == 1 {
		return o.token, nil
	}
	return "", nil
}

func (o permitOps) Explain(err error) error { return handle.MapScriptErr(o.Describe(), err) }
