package rwlock

import (
	"context"
	"sync"
	"time"

	"github.com/coordhost/coordhost/primitives/internal/fence"
	"github.com/coordhost/coordhost/primitives/internal/script"
	"github.com/coordhost/coordhost/primitives/internal/wait"
	"github.com/redis/rueidis"
)

// lateGrantWindow is how long after an uncertain attempt on the shared
// client its second cleanup runs (as package lock's): long enough for a
// command already on the wire to have been processed.
const lateGrantWindow = 100 * time.Millisecond

// settle releases r's member best effort after an attempt whose outcome is
// unknown, on a context that survives the caller's but is bounded by
// DefaultCloseTimeout. An attempt that ran on the wait engine's connection
// (c.ID != 0) is released behind it on that connection; if that fails,
// the connection is killed first (CLIENT KILL), so the attempt has run or
// never will. On the shared client nothing orders the release after the
// attempt (rueidis spreads commands over connections), so a second release
// follows lateGrantWindow later in the background. The release is
// owner-checked on a member no one else has: it never touches another
// owner.
func (l *Locker) settle(ctx context.Context, c wait.Conn, r *request) {
	keys, args := []string{r.key}, []string{r.member(), r.channel}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultCloseTimeout)
	defer cancel()
	run := func(on rueidis.CoreClient) error { return releaseScript.Run(ctx, on, keys, args).Error() }
	if c.ID != 0 {
		if !script.IsUncertain(run(c.CoreClient)) {
			return
		}
		_ = fence.Kill(ctx, l.client, c.Identity)
	} else {
		defer l.cleanups.spawn(func(closing <-chan struct{}) {
			t := time.NewTimer(lateGrantWindow)
			defer t.Stop()
			select {
			case <-t.C:
			case <-closing: // the Locker is closing: run now rather than never
			}
			ctx, cancel := context.WithTimeout(context.Background(), DefaultCloseTimeout)
			defer cancel()
			_ = releaseScript.Run(ctx, l.client, keys, args).Error()
		})
	}
	for range 3 {
		if err := run(l.client); !script.IsUncertain(err) || ctx.Err() != nil {
			return
		}
	}
}

// leave takes a writer that gives up out of the waiting writers (and
// releases the write lease its latest token may hold), so readers are no
// longer held off on its account, and announces it. It runs on the
// connection of the latest attempt first, behind it, then on the client,
// bounded by DefaultCloseTimeout. If every try fails, the entry expires
// within MarkerTTL.
func (l *Locker) leave(ctx context.Context, last wait.Conn, r *request) {
	keys, args := []string{r.key, r.writers}, []string{r.wid, r.member(), r.channel}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultCloseTimeout)
	defer cancel()
	if last.ID != 0 {
		if err := leaveScript.Run(ctx, last.CoreClient, keys, args).Error(); !script.IsUncertain(err) {
			return
		}
		_ = fence.Kill(ctx, l.client, last.Identity)
	}
	for range 3 {
		if err := leaveScript.Run(ctx, l.client, keys, args).Error(); !script.IsUncertain(err) || ctx.Err() != nil {
			return
		}
	}
}

// cleanups runs a Locker's background cleanups and lets Close wait for
// them. A cleanup spawned once the Locker is closing runs in its caller, so
// none is left behind on a client its owner is about to close.
type cleanups struct {
	mu      sync.Mutex
	wg      sync.WaitGroup
	closed  bool
	closing chan struct{} // closed by close
}

// spawn runs fn in the background, or in the caller once closing. fn gets
// the closing channel and should finish promptly when it closes.
func (c *cleanups) spawn(fn func(closing <-chan struct{})) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		fn(c.closing)
		return
	}
	c.wg.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.wg.Done()
		fn(c.closing)
	}()
}

// close tells running cleanups to finish now and waits for them.
func (c *cleanups) close() {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		close(c.closing)
	}
	c.mu.Unlock()
	c.wg.Wait()
}
