package main

import (
	"context"
	"errors"
	"os"
	"strconv"

	"github.com/coordhost/coordhost/primitives"
)

// errWaitTimeout is the cancellation cause when -wait runs out.
var errWaitTimeout = errors.New("-wait ran out")

// acquireFunc waits for the lock or lease (*lock.Locker.Acquire,
// *host.Lock.Acquire, *rwlock.Locker.AcquireRead, *host.RWLock.AcquireWrite
// and so on, with the command line's name, ttl and attributes); it returns
// a nil lease with every error.
type acquireFunc func(ctx context.Context) (primitives.Lease, error)

// fenced is a lease with a fencing token (*lock.Lock).
type fenced interface{ FencingToken() int64 }

// waitForLock takes the lock or lease cfg.name with acquire, waiting as
// long as ctx and cfg.wait allow. stopRelay ends the translation of
// signals into cancellation of ctx once the wait is over, so that later
// signals go to CMD; interrupted reports a signal that cancelled ctx. It
// returns the lock; or, with done, the exit status when a signal ended the
// wait or came just as the lock did (the lock is then released), or when
// -wait ran out; or the error of an acquisition that failed otherwise, for
// the caller to report.
func waitForLock[L heldLock](ctx context.Context, acquire func(context.Context) (L, error), cfg holdConfig, e *env, stopRelay func(), interrupted func(string) (int, bool)) (l L, code int, done bool, err error) {
	acqCtx, acqCancel := ctx, context.CancelFunc(func() {})
	if cfg.wait > 0 {
		acqCtx, acqCancel = context.WithTimeoutCause(ctx, cfg.wait, errWaitTimeout)
	}
	stopNote := noteAfter(e.waitNote, func() { e.logf("waiting for %s", cfg.subject()) })
	l, err = acquire(acqCtx)
	stopNote()
	stopRelay()
	acqCancel()
	if err != nil {
		if code, ok := interrupted("while waiting for " + cfg.subject()); ok {
			return l, code, true, nil
		}
		if errors.Is(context.Cause(acqCtx), errWaitTimeout) && ctx.Err() == nil {
			e.logf("%s not acquired within -wait %v", cfg.subject(), cfg.wait)
			return l, exitFailure, true, nil
		}
		return l, 0, false, err
	}
	if code, ok := interrupted("just as " + cfg.subject() + " was acquired"); ok {
		// The signal raced the grant: do not start CMD.
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		defer rcancel()
		_, _ = l.Release(rctx)
		return l, code, true, nil
	}
	return l, 0, false, nil
}

// holdWithLock takes the lock or lease cfg.name with acquire (waitForLock),
// then runs CMD (found at path) under it with holdAndRun; cfg.ttl is the
// lease it keeps renewing. It returns the exit status.
func holdWithLock(ctx context.Context, acquire acquireFunc, cfg holdConfig, path string, e *env, sigs <-chan os.Signal, stopRelay func(), interrupted func(string) (int, bool)) int {
	l, code, done, err := waitForLock(ctx, acquire, cfg, e, stopRelay, interrupted)
	if done {
		return code
	}
	if err != nil {
		if errors.Is(err, primitives.ErrInvalidKey) || errors.Is(err, primitives.ErrInvalidTTL) {
			// Bad input that only the primitive can judge (reserved
			// namespace, cluster slots).
			k := cfg.kind
			return e.usageErrorFor(k.cmd, "%s: %s NAME %q: %v", k.cmd, k.noun, cfg.name, err)
		}
		if errors.Is(err, primitives.ErrNotAcquired) {
			// The retry policy gave up.
			e.logf("%s not acquired: %v", cfg.subject(), err)
			return exitFailure
		}
		e.logf("acquiring %s: %v", cfg.subject(), err)
		return exitFailure
	}

	token, note := "", ""
	if f, ok := l.(fenced); ok && cfg.fencing {
		token = strconv.FormatInt(f.FencingToken(), 10)
		note = " (fencing token " + token + ")"
	}
	e.logf("acquired %s%s; key %q, ttl %v", cfg.subject(), note, l.Key(), cfg.ttl)
	keepAlive := func(kctx context.Context) (stop func()) {
		// cfg.ttl was validated by the acquire; a refusal here would be a bug.
		stopRenewing, err := primitives.KeepAlive(kctx, l, cfg.ttl)
		if err != nil {
			e.logf("keeping %s alive: %v", cfg.subject(), err)
			return func() {}
		}
		return func() {
			if err := stopRenewing(); err != nil {
				e.logf("%s: %v", cfg.subject(), err)
			}
		}
	}
	return holdAndRun(ctx, l, keepAlive, buildChildCmd(path, cfg, e, token), cfg, e, sigs)
}
