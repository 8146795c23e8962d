package primitives

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/coordhost/coordhost/primitives/internal/handle"
)

// KeepAlive renews lease to ttl every ttl/3 until ctx ends, stop is called,
// the lease's Done closes (it was released, lost or ran out), or a renewal
// fails: refused (the lease was lost; Renew closed Done) or with an error
// (an uncertain outcome also closes Done). Nothing renews a lease by
// default; KeepAlive is the opt-in helper.
//
// A ttl below 1ms or above 100 years (the primitives' MaxTTL) fails at once
// with an error matching ErrInvalidTTL, and nothing is started. Otherwise
// KeepAlive returns stop, which ends the renewals, waits for the background
// goroutine and reports why they ended: nil when stop or ctx ended them or
// the lease's Done closed first, an error matching ErrLost for a refused
// renewal, or the failed renewal's error. stop is idempotent and safe for
// concurrent use; every call returns the same answer.
func KeepAlive(ctx context.Context, lease Lease, ttl time.Duration) (stop func() error, err error) {
	if lease == nil {
		return nil, fmt.Errorf("%w: KeepAlive: nil lease", ErrInvalidOptions)
	}
	if _, _, err := handle.Millis(ttl); err != nil {
		return nil, fmt.Errorf("KeepAlive %q: %w", lease.Key(), err)
	}
	ctx, cancel := context.WithCancel(ctx)
	var (
		wg    sync.WaitGroup
		ended error
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		ended = keepRenewing(ctx, lease, ttl)
	}()
	var once sync.Once
	return func() error {
		once.Do(func() {
			cancel()
			wg.Wait()
		})
		return ended
	}, nil
}

// keepRenewing is KeepAlive's loop; it returns why it ended.
func keepRenewing(ctx context.Context, lease Lease, ttl time.Duration) error {
	interval := max(ttl/3, time.Millisecond)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-lease.Done():
			return nil
		case <-t.C:
		}
		// A renewal in flight finishes even if stop is called: cutting it
		// off would make its outcome unknown and close the lease. The
		// interval bounds it so a stuck call cannot outlive the lease it is
		// trying to save.
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), interval)
		ok, err := lease.Renew(rctx, ttl)
		rcancel()
		switch {
		case err != nil:
			return fmt.Errorf("KeepAlive %q: %w", lease.Key(), err)
		case !ok:
			return fmt.Errorf("KeepAlive %q: renewal refused: %w", lease.Key(), ErrLost)
		}
	}
}
