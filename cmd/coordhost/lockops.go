package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"

	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/lock"
)

// errWaitTimeout is the cancellation cause when -wait runs out.
var errWaitTimeout = errors.New("-wait ran out")

// acquireFunc waits for the lock (*lock.Locker.Acquire or
// *host.Lock.Acquire with the command line's name, ttl and attributes).
type acquireFunc func(ctx context.Context) (*lock.Lock, error)

// holdWithLock takes the lock cfg.name with acquire, waiting as long as ctx
// and cfg.wait allow, then runs CMD (found at path) under it with
// holdAndRun; cfg.ttl is the lease it keeps renewing.
// stopRelay ends the translation of signals into cancellation of ctx once
// the wait is over, so that later signals go to CMD; interrupted reports a
// signal that cancelled ctx. It returns the exit status.
func holdWithLock(ctx context.Context, acquire acquireFunc, cfg holdConfig, path string, e *env, sigs <-chan os.Signal, stopRelay func(), interrupted func(string) (int, bool)) int {
	acqCtx, acqCancel := ctx, context.CancelFunc(func() {})
	if cfg.wait > 0 {
		acqCtx, acqCancel = context.WithTimeoutCause(ctx, cfg.wait, errWaitTimeout)
	}
	stopNote := noteAfter(e.waitNote, func() { e.logf("waiting for lock %q", cfg.name) })
	l, err := acquire(acqCtx)
	stopNote()
	stopRelay()
	acqCancel()
	if err != nil {
		if code, ok := interrupted(fmt.Sprintf("while waiting for lock %q", cfg.name)); ok {
			return code
		}
		if errors.Is(context.Cause(acqCtx), errWaitTimeout) && ctx.Err() == nil {
			e.logf("lock %q not acquired within -wait %v", cfg.name, cfg.wait)
			return exitFailure
		}
		if errors.Is(err, primitives.ErrInvalidKey) || errors.Is(err, primitives.ErrInvalidTTL) {
			// Bad input that only the lock package can judge (reserved
			// namespace, cluster slots).
			return e.usageErrorFor("lock hold", "lock hold: lock NAME %q: %v", cfg.name, err)
		}
		if errors.Is(err, primitives.ErrNotAcquired) {
			// The retry policy gave up.
			e.logf("lock %q not acquired: %v", cfg.name, err)
			return exitFailure
		}
		e.logf("acquiring lock %q: %v", cfg.name, err)
		return exitFailure
	}
	if code, ok := interrupted(fmt.Sprintf("just as lock %q was acquired", cfg.name)); ok {
		// The signal raced the grant: do not start CMD.
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		defer rcancel()
		_, _ = l.Release(rctx)
		return code
	}

	token, note := "", ""
	if cfg.fencing {
		token = strconv.FormatInt(l.FencingToken(), 10)
		note = " (fencing token " + token + ")"
	}
	e.logf("acquired lock %q%s; key %q, ttl %v", cfg.name, note, l.Key(), cfg.ttl)
	keepAlive := func(kctx context.Context) (stop func()) {
		// cfg.ttl was validated by the acquire; a refusal here would be a bug.
		stopRenewing, err := primitives.KeepAlive(kctx, l, cfg.ttl)
		if err != nil {
			e.logf("keeping lock %q alive: %v", cfg.name, err)
			return func() {}
		}
		return func() {
			if err := stopRenewing(); err != nil {
				e.logf("lock %q: %v", cfg.name, err)
			}
		}
	}
	return holdAndRun(ctx, l, keepAlive, buildChildCmd(path, cfg, e, token), cfg, e, sigs)
}
