package rwlock

import (
	"time"

	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/internal/base"
)

// Observer is told about a Locker's acquisitions and about the life of the
// leases it grants, typically to export metrics. Set it as
// Options.Observer; nil means none and costs nothing. Leases keep the
// Observer of the Locker that granted them.
//
// Methods are called synchronously, on the goroutine of the call they
// report, from many goroutines at once: they must be safe for concurrent
// use, fast, must not block, and must not call back into the Locker or the
// Lease they report on. Calls refused before anything is sent (invalid
// key or ttl, a closed Locker, a context already done) are not reported.
type Observer interface {
	// ObserveAcquire reports the outcome of one TryAcquireRead,
	// TryAcquireWrite, AcquireRead or AcquireWrite call: the lock's key
	// (prefix included), the mode, the outcome, the time from the call to
	// its outcome, and the call's error (nil when acquired).
	ObserveAcquire(key string, mode Mode, outcome AcquireOutcome, wait time.Duration, err error)
	// ObserveRenew reports one Renew call on a lease not released through
	// its handle.
	ObserveRenew(l *Lease, outcome RenewOutcome, err error)
	// ObserveRelease reports one Release (or Close) call not answered
	// locally by an earlier settled release: the server's answer (0 with a
	// non-nil err when the outcome is unknown) and the time since the
	// grant.
	ObserveRelease(l *Lease, result primitives.ReleaseResult, held time.Duration, err error)
	// ObserveLost reports, at most once per lease, that the handle found
	// its lease gone before releasing it.
	ObserveLost(l *Lease, reason LostReason)
}

// AcquireOutcome classifies an acquisition; its String gives the metric
// label ("acquired", "not_acquired", "gave_up", "cancelled",
// "deadline_exceeded", "closed", "error"). See lock.AcquireOutcome.
type AcquireOutcome = base.AcquireOutcome

// RenewOutcome classifies a renewal ("renewed", "lost", "error").
type RenewOutcome = base.RenewOutcome

// LostReason says how a handle found its lease gone ("renew_refused",
// "renew_uncertain", "verify", "expired", "release_not_owned",
// "release_absent").
type LostReason = base.LostReason

// reporter adapts an Observer to the handle's reports about one Lease.
type reporter struct {
	o Observer
	l *Lease
}

func (r reporter) Renewed(o RenewOutcome, err error) { r.o.ObserveRenew(r.l, o, err) }

func (r reporter) Released(res primitives.ReleaseResult, held time.Duration, err error) {
	r.o.ObserveRelease(r.l, res, held, err)
}

func (r reporter) Lost(reason LostReason) { r.o.ObserveLost(r.l, reason) }
