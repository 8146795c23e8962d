package lock

import (
	"context"
	"sync"
	"time"

	"github.com/coordhost/coordhost/primitives/internal/fence"
	"github.com/coordhost/coordhost/primitives/internal/script"
	"github.com/coordhost/coordhost/primitives/internal/wait"
	"github.com/redis/rueidis"
)

// settle releases r's token best effort, and with leave also takes r's
// waiter out of the FIFO queue, on a context that survives the caller's
// cancellation but is bounded. When the attempt ran on the wait engine's
// connection (c.ID != 0) the release goes on that same connection, behind
// the attempt, so it cannot overtake it; if that connection fails, it is
// killed first (CLIENT KILL ID ... ADDR ...), so the attempt has either run
// or never will, and the release goes on the shared client.
//
// On the shared client nothing orders the release after the attempt:
// rueidis pipelines over several connections (ClientOption.PipelineMultiplex)
// and picks one at random per command, and it may close a connection whose
// command passed its deadline, so the attempt can land after the release.
// A second owner-checked release follows after lateGrantWindow (see
// settleLater) for that case.
//
// A leave whose every try stays uncertain (Redis unreachable for longer
// than DefaultCloseTimeout) goes on in the background (leaveLater): the
// entry of a waiter that is gone would otherwise hold the queue until it
// expires.
func (l *Locker) settle(ctx context.Context, c wait.Conn, r *request, leave bool) {
	sc, keys, args := releaseScript, []string{r.key}, []string{r.token, r.channel}
	leave = leave && r.queue != ""
	if leave {
		sc, keys, args = leaveScript, []string{r.key, r.queue, r.deadlines}, []string{r.token, r.channel, r.waiter}
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultCloseTimeout)
	defer cancel()
	run := func(on rueidis.CoreClient) error {
		return sc.Run(ctx, on, keys, args).Error()
	}
	if c.ID != 0 {
		if !script.IsUncertain(run(c.CoreClient)) {
			return
		}
		_ = fence.Kill(ctx, l.client, c.Identity)
	} else {
		defer l.settleLater(sc, keys, args)
	}
	// Both scripts are idempotent: a lost reply is worth another try while
	// the bound lasts, since a waiter that fails to leave holds up the
	// queue until its entry expires.
	tries := 3
	if l.freshQueueEntry {
		tries = 1 // the control for the FIFO stall fix: as before it
	}
	for range tries {
		if err := run(l.client); !script.IsUncertain(err) {
			return
		}
		if ctx.Err() != nil {
			break
		}
	}
	if leave && !l.freshQueueEntry {
		l.leaveLater(sc, keys, args)
	}
}

// lateGrantWindow is how long after an uncertain attempt on the shared
// client its second cleanup runs: long enough for a command already on the
// wire to have been processed (a loopback round trip is ~25µs).
const lateGrantWindow = 100 * time.Millisecond

// settleLater runs sc once more after lateGrantWindow, in the background,
// bounded by DefaultCloseTimeout: an owner-checked release of a token no
// one else holds, so it can only delete a grant that landed after the
// first cleanup. Measured with 3×2000 randomly cancelled acquires
// (TestAcquireCancelledMidFlight): 0.05–0.9% of calls left a lock held by
// no handle until its TTL with one cleanup, none with both.
func (l *Locker) settleLater(sc *script.Script, keys, args []string) {
	if l.noSecondCleanup {
		return
	}
	l.cleanups.spawn(func(closing <-chan struct{}) {
		t := time.NewTimer(lateGrantWindow)
		defer t.Stop()
		select {
		case <-t.C:
		case <-closing: // the Locker is closing: run now rather than never
		}
		ctx, cancel := context.WithTimeout(context.Background(), DefaultCloseTimeout)
		defer cancel()
		_ = sc.Run(ctx, l.client, keys, args).Error()
	})
}

// leaveRetries are the pauses between the background tries of a leave that
// could not be settled in the caller's time: together with the tries'
// bounds they span about QueueEntryTTL, after which the entry has expired
// anyway.
var leaveRetries = []time.Duration{100 * time.Millisecond, 400 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second}

// leaveLater retries an idempotent leave in the background until it is
// settled, the pauses run out, or the Locker closes (then once more, at
// once).
func (l *Locker) leaveLater(sc *script.Script, keys, args []string) {
	l.cleanups.spawn(func(closing <-chan struct{}) {
		for _, pause := range leaveRetries {
			t := time.NewTimer(pause)
			closed := false
			select {
			case <-t.C:
			case <-closing:
				closed = true
			}
			t.Stop()
			ctx, cancel := context.WithTimeout(context.Background(), DefaultCloseTimeout)
			err := sc.Run(ctx, l.client, keys, args).Error()
			cancel()
			if !script.IsUncertain(err) || closed {
				return
			}
		}
	})
}

// cleanups runs the background cleanups of a Locker and lets Close wait
// for them. Unlike a WaitGroup it
// allows a spawn to race a wait: a cleanup that arrives once the Locker
// is closing runs in its caller instead, so none is left behind on a
// client its owner is about to close.
type cleanups struct {
	mu      sync.Mutex
	idle    sync.Cond // signalled when running drops to 0
	running int
	closed  bool
	closing chan struct{} // closed by wait(true)
}

func newCleanups() *cleanups {
	c := &cleanups{closing: make(chan struct{})}
	c.idle.L = &c.mu
	return c
}

// spawn runs fn in the background, or in the caller once closing. fn gets
// the closing channel: it should finish promptly when that closes.
func (c *cleanups) spawn(fn func(closing <-chan struct{})) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		fn(c.closing)
		return
	}
	c.running++
	c.mu.Unlock()
	go func() {
		defer c.finish()
		fn(c.closing)
	}()
}

func (c *cleanups) finish() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running--; c.running == 0 {
		c.idle.Broadcast()
	}
}

// close tells the running cleanups to finish now, makes later ones run in
// their callers, and returns once none runs in the background. Each is
// bounded by DefaultCloseTimeout once told.
func (c *cleanups) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.closed = true
		close(c.closing)
	}
	for c.running > 0 {
		c.idle.Wait()
	}
}
