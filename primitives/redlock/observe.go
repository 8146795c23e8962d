package redlock

import (
	"context"
	"time"

	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/internal/base"
	"github.com/coordhost/coordhost/primitives/internal/handle"
)

// Observer is told about a Group's acquisitions, the life of the locks it
// grants and its nodes' restarts, typically to export metrics (this
// package depends on no metrics library). Set it as Options.Observer; nil
// means none and costs nothing.
//
// Methods are called synchronously, from many goroutines at once: they
// must be safe for concurrent use, fast, must not block, and must not call
// back into the Group or the Lock they report on. Calls refused before
// anything is sent are not reported.
type Observer interface {
	// ObserveAcquire reports the outcome of one TryAcquire or Acquire
	// call: the key (prefix included), the outcome, the time from the call
	// to its outcome, and the call's error (nil when acquired).
	ObserveAcquire(key string, outcome AcquireOutcome, wait time.Duration, err error)
	// ObserveRenew reports one Renew call on a lock not released through
	// its handle.
	ObserveRenew(l *Lock, outcome RenewOutcome, err error)
	// ObserveRelease reports one Release (or Close) call not answered
	// locally by an earlier settled release: the result (0 with a non-nil
	// err when too few nodes answered) and the time since the grant.
	ObserveRelease(l *Lock, result primitives.ReleaseResult, held time.Duration, err error)
	// ObserveLost reports, at most once per lock, that the handle found
	// ownership gone before releasing it.
	ObserveLost(l *Lock, reason LostReason)
	// ObserveRestart reports that node (its index in the clients given to
	// New) was found restarted (a young server at identification, or a
	// changed run_id) and sits out of quorums for the given time (restart
	// guard).
	ObserveRestart(node int, sitsOut time.Duration)
}

// AcquireOutcome classifies an acquisition; its String gives the metric
// label ("acquired", "not_acquired", "gave_up", "cancelled",
// "deadline_exceeded", "closed", "error"). ErrNoQuorum is "error".
type AcquireOutcome = base.AcquireOutcome

// RenewOutcome classifies a renewal: "renewed", "lost" or "error".
type RenewOutcome = base.RenewOutcome

// LostReason says how a handle found its ownership gone (see package
// lock's LostReason values, which are the same).
type LostReason = base.LostReason

// observe runs one validated acquisition through fn and reports it.
func (g *Group) observe(ctx context.Context, r *request, waits bool, fn func(context.Context) (*Lock, error)) (*Lock, error) {
	if g.obs == nil {
		return fn(ctx)
	}
	start := time.Now()
	l, err := fn(ctx)
	wait := time.Since(start)
	if l != nil {
		l.h.Observe(reporter{o: g.obs, l: l}, g.clk.Now())
	}
	g.obs.ObserveAcquire(r.key, handle.AcquireOutcomeOf(ctx, waits, err), wait, err)
	return l, err
}

// reportRestart tells the Observer that n sits out for d.
func (g *Group) reportRestart(n *node, d time.Duration) {
	if g.obs != nil {
		g.obs.ObserveRestart(n.idx, d)
	}
}

// reporter adapts an Observer to the handle's reports about one Lock.
type reporter struct {
	o Observer
	l *Lock
}

func (r reporter) Renewed(o RenewOutcome, err error) { r.o.ObserveRenew(r.l, o, err) }

func (r reporter) Released(res primitives.ReleaseResult, held time.Duration, err error) {
	r.o.ObserveRelease(r.l, res, held, err)
}

func (r reporter) Lost(reason LostReason) { r.o.ObserveLost(r.l, reason) }
