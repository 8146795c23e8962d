package main

import (
	"context"
	"errors"
	"os"
	"strconv"

	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/lock"
	"github.com/redis/rueidis"
)

// errWaitTimeout is the cancellation cause when -wait runs out.
var errWaitTimeout = errors.New("-wait ran out")

// holdWithLock takes the lock cfg.name, waiting as long as ctx and
// cfg.wait allow, then runs CMD (found at path) under it with holdAndRun.
// stopRelay ends the translation of signals into cancellation of ctx once
// the wait is over, so that later signals go to CMD; interrupted reports a
// signal that cancelled ctx. It returns the exit status.
func holdWithLock(ctx context.Context, client rueidis.Client, cfg holdConfig, path string, e *env, sigs <-chan os.Signal, stopRelay func(), interrupted func(string) (int, bool)) int {
	lk, err := lock.New(client, lock.Options{Prefix: cfg.prefix, Fencing: cfg.fencing})
	if err != nil {
		return e.usageError("lock hold: %v", err)
	}
	defer lk.Close()

	acqCtx, acqCancel := ctx, context.CancelFunc(func() {})
	if cfg.wait > 0 {
		acqCtx, acqCancel = context.WithTimeoutCause(ctx, cfg.wait, errWaitTimeout)
	}
	stopNote := noteAfter(e.waitNote, func() { e.logf("waiting for lock %s", cfg.name) })
	l, err := lk.Acquire(acqCtx, cfg.name, cfg.ttl)
	stopNote()
	stopRelay()
	acqCancel()
	if err != nil {
		if code, ok := interrupted("while waiting for lock " + cfg.name); ok {
			return code
		}
		if errors.Is(context.Cause(acqCtx), errWaitTimeout) && ctx.Err() == nil {
			e.logf("lock %s not acquired within -wait %v", cfg.name, cfg.wait)
			return exitFailure
		}
		if errors.Is(err, primitives.ErrInvalidKey) || errors.Is(err, primitives.ErrInvalidTTL) {
			// Bad input that only the lock package can judge (reserved
			// namespace, cluster slots).
			return e.usageError("lock hold: lock NAME %q: %v", cfg.name, err)
		}
		e.logf("acquiring lock %s: %v", cfg.name, err)
		return exitFailure
	}
	if code, ok := interrupted("just as lock " + cfg.name + " was acquired"); ok {
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
	e.logf("acquired lock %s%s; key %s, ttl %v", cfg.name, note, l.Key(), cfg.ttl)
	keepAlive := func(kctx context.Context) (stop func()) {
		return primitives.KeepAlive(kctx, l, cfg.ttl)
	}
	return holdAndRun(ctx, l, keepAlive, buildChildCmd(path, cfg, e, token), cfg, e, sigs)
}
