package ratelimit

import (
	"context"
	"fmt"
	"time"
)

// Allow reports whether one permit is granted now: TryAcquire(ctx, 1)
// without its details. An error counts as not allowed (fail closed); call
// TryAcquire to tell the two apart.
func (l *Limiter) Allow(ctx context.Context) bool { return l.AllowN(ctx, 1) }

// AllowN reports whether n permits are granted now, as Allow does for one.
func (l *Limiter) AllowN(ctx context.Context, n int64) bool {
	res, err := l.TryAcquire(ctx, n)
	return err == nil && res.Acquired
}

// Wait blocks until one permit is granted: WaitN(ctx, 1).
func (l *Limiter) Wait(ctx context.Context) error { return l.WaitN(ctx, 1) }

// WaitN blocks until n permits are granted, like x/time/rate's WaitN: it
// calls Acquire (which queues when the options allow), and when that is
// refused (no queue, or a full one) sleeps for the RetryAfter the server
// gave and tries again. It returns nil once granted.
//
// Errors: ErrExceedsLimit (n is more than the limit; nothing is sent),
// ErrWouldExceedDeadline (a refusal's RetryAfter ends after ctx's
// deadline: returned at once, as x/time/rate does, also from the queue as
// soon as a retry learns the permits come back too late; it also matches
// ErrQueueFull when the queue had no room), ctx.Err(),
// primitives.ErrClosed, and those of Acquire.
func (l *Limiter) WaitN(ctx context.Context, n int64) error {
	never, err := l.checkCall(ctx, n)
	if err != nil {
		return err
	}
	if never {
		l.rejected.Add(1)
		return fmt.Errorf("%w: %d permits, limit %d on %q", ErrExceedsLimit, n, l.policy.Limit, l.key)
	}
	// One call under way for the whole wait, sleeps included, so the
	// limiter never looks idle (and is never swept) under it.
	if err := l.begin(); err != nil {
		return err
	}
	defer l.end()
	for {
		res, err := l.acquire(ctx, n, false)
		if err != nil {
			return err
		}
		if res.Acquired {
			return nil
		}
		if pastDeadline(ctx, time.Now().Add(res.RetryAfter)) {
			err := fmt.Errorf("%w: %q has %d permits back in %v", ErrWouldExceedDeadline, l.key, n, res.RetryAfter)
			if l.queueLimit > 0 && l.Statistics().Queued+max(n, 1) > l.queueLimit {
				err = fmt.Errorf("%w: %w", ErrQueueFull, err)
			}
			return err
		}
		t := l.ls.clk.NewTimer(res.RetryAfter)
		select {
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-l.closed:
			t.Stop()
			return l.closedErr()
		}
	}
}
