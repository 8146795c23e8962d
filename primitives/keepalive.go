package primitives

import (
	"context"
	"sync"
	"time"
)

// KeepAlive renews lease to ttl every ttl/3 until ctx ends, the lease's
// Done closes, or a renewal fails or has an uncertain outcome (the lease's
// own Renew then closes Done). It returns stop, which ends the renewals and
// waits for the background goroutine; stop is idempotent.
//
// Nothing renews a lease by default; KeepAlive is the opt-in helper.
func KeepAlive(ctx context.Context, lease Lease, ttl time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		interval := max(ttl/3, time.Millisecond)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-lease.Done():
				return
			case <-t.C:
			}
			// A renewal in flight finishes even if stop is called: cutting
			// it off would make its outcome unknown and close the lease.
			// The interval bounds it so a stuck call cannot outlive the
			// lease it is trying to save.
			rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), interval)
			ok, err := lease.Renew(rctx, ttl)
			rcancel()
			if !ok || err != nil {
				return
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			wg.Wait()
		})
	}
}
