package handle

import (
	"context"
	"errors"
	"time"

	"github.com/coordhost/coordhost/primitives/internal/base"
	"github.com/coordhost/coordhost/primitives/internal/wait"
)

// Attempt tries once to acquire on c; the zero Conn means the caller's
// first attempt, on the shared client. It returns the grant, or nil and the
// holder's remaining TTL (negative when unknown), or an error.
type Attempt[T any] func(ctx context.Context, c wait.Conn) (*T, time.Duration, error)

// Acquire is the waiting acquire every primitive shares. Unless local
// waiters are already queued for req (and alwaysFirst is false), it makes
// a first attempt; then it waits on e, re-attempting as the engine says.
// After an attempt whose outcome is unknown (Retryable) it calls fresh, so
// a grant that may still land under the old token is never taken for
// ours. Errors come back as they are: the attempt's, or Wait's (ErrGaveUp,
// ErrClosed, ctx.Err()) for the caller to map.
func Acquire[T any](ctx context.Context, e *wait.Engine, req wait.Request, alwaysFirst bool, try Attempt[T], fresh func()) (*T, error) {
	req.Start = time.Now()
	req.Attempts, req.HolderTTL = 0, -1
	queue := req.Queue
	if queue == "" {
		queue = req.Key
	}
	if alwaysFirst || !e.Queued(queue) {
		// Otherwise join the local waiters without an attempt: the head is
		// registered for wake-ups and hands over in turn.
		got, ttl, err := try(ctx, wait.Conn{})
		if err != nil && !Retryable(ctx, err) {
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
	err := e.Wait(ctx, req, func(ctx context.Context, c wait.Conn) (wait.Outcome, error) {
		g, ttl, err := try(ctx, c)
		switch {
		case err != nil && Retryable(ctx, err):
			fresh()
			return wait.Outcome{}, &wait.Retryable{Err: err, Uncertain: errors.Is(err, base.ErrUncertain)}
		case err != nil:
			return wait.Outcome{}, err
		case g != nil:
			got = g
			return wait.Outcome{Acquired: true}, nil
		}
		return wait.Outcome{HolderTTL: ttl}, nil
	})
	if err != nil {
		return nil, err
	}
	return got, nil
}
