package wait

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coordhost/coordhost/policies"
	"github.com/coordhost/coordhost/policies/builtin"
	"github.com/coordhost/coordhost/primitives/internal/base"
)

// Try tries once to acquire on c; the zero Conn means the caller's first
// attempt, on the shared client. It returns the grant, or nil and the
// holder's remaining TTL (negative when unknown), or an error.
type Try[T any] func(ctx context.Context, c Conn) (*T, time.Duration, error)

// Acquire is the waiting acquire every primitive shares. Unless local
// waiters are already queued for req (and alwaysFirst is false), it makes
// a first attempt; then it waits on e, re-attempting as the engine says.
// After an attempt whose outcome is unknown (worthRetrying) it calls fresh, so
// a grant that may still land under the old token is never taken for
// ours. Errors come back as they are: the attempt's, or Wait's (ErrGaveUp,
// ErrClosed, ErrStopped, ctx.Err()) for the caller to map.
func Acquire[T any](ctx context.Context, e *Engine, req Request, alwaysFirst bool, try Try[T], fresh func()) (*T, error) {
	req.Start = e.clk.Now()
	req.Attempts, req.HolderTTL = 0, -1
	queue := req.Queue
	if queue == "" {
		queue = req.Key
	}
	if alwaysFirst || !e.Queued(queue) {
		// Otherwise join the local waiters without an attempt: the head is
		// registered for wake-ups and hands over in turn.
		got, ttl, err := try(ctx, Conn{})
		if err != nil && !worthRetrying(ctx, err) {
			return nil, err
		}
		if got != nil {
			return got, nil
		}
		req.Attempts = 1
		if err == nil {
			req.HolderTTL = ttl
		} else {
			fresh()
		}
	}
	var got *T
	err := e.Wait(ctx, req, func(ctx context.Context, c Conn) (Outcome, error) {
		g, ttl, err := try(ctx, c)
		switch {
		case err != nil && worthRetrying(ctx, err):
			fresh()
			return Outcome{}, &Retryable{Err: err, Uncertain: errors.Is(err, base.ErrUncertain)}
		case err != nil:
			return Outcome{}, err
		case g != nil:
			got = g
			return Outcome{Acquired: true}, nil
		}
		return Outcome{HolderTTL: ttl}, nil
	})
	if err != nil {
		return nil, err
	}
	return got, nil
}

// worthRetrying reports whether an acquire error is worth another attempt
// while ctx lives: an unknown outcome, a late grant, a command the server
// refused to run for now, or a grant given back because too few replicas
// confirmed it. Other errors the server answered are final.
func worthRetrying(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	var late *base.LateGrant
	var unknown *base.Uncertain
	if errors.As(err, &unknown) && unknown.Unsettled != nil {
		// Not settled (e.g. CLIENT KILL refused): another attempt could
		// add a second grant no handle holds; stop and say why.
		return false
	}
	// A refusal (base.ErrUnavailable: a slot migrating, a failover) ran
	// nothing, and a grant too few replicas confirmed was given back
	// (base.ErrNotReplicated: a replica down or resyncing): try again.
	return errors.Is(err, base.ErrUncertain) || errors.As(err, &late) || errors.Is(err, base.ErrUnavailable) ||
		errors.Is(err, base.ErrNotReplicated)
}

// Policy returns p validated, or the default retry policy when p is nil:
// builtin.Exponential{} (10ms base, 1s cap, full jitter, never gives up).
// A policy with a Validate method that fails is refused with an error
// matching base.ErrInvalidOptions.
func Policy(p policies.RetryPolicy) (policies.RetryPolicy, error) {
	if p == nil {
		return builtin.Exponential{}, nil
	}
	if v, ok := p.(interface{ Validate() error }); ok {
		if err := v.Validate(); err != nil {
			return nil, fmt.Errorf("%w: retry policy: %w", base.ErrInvalidOptions, err)
		}
	}
	return p, nil
}

// Final maps the error of a waiting acquire of name (e.g. `lock "k"`) that
// started at start to the public error: a policy's give-up matches
// base.ErrNotAcquired, a closed primitive or engine base.ErrClosed (saying
// which), and the caller's
// context ending says how long it waited (and matches ctx.Err()). Other
// errors come back as they are.
func Final(ctx context.Context, name string, start time.Time, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrGaveUp):
		return fmt.Errorf("%w: %s: %w", base.ErrNotAcquired, name, err)
	case errors.Is(err, ErrStopped):
		return fmt.Errorf("%s: %w", name, base.ErrClosed)
	case errors.Is(err, ErrClosed):
		return fmt.Errorf("%s: %w: %w", name, base.ErrClosed, err)
	case ctx.Err() != nil && err == ctx.Err():
		// The bare context error names nothing: say what waited, how long.
		// (An attempt's own error already names the lease.)
		return fmt.Errorf("%s: not acquired after waiting %v: %w", name, time.Since(start).Round(time.Millisecond), err)
	}
	return err
}
