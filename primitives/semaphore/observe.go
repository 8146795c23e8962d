package semaphore

import (
	"time"

	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/internal/base"
)

// Observer is told about a Semaphores' acquisitions and about the life of
// the permits it grants, typically to export metrics (the host does). Set
// it as Options.Observer; nil means none and costs nothing. Permits keep
// the Observer of the Semaphores that granted them.
//
// Methods are called synchronously, on the goroutine of the call they
// report (a background release's goroutine for the releases Permit.Close
// hands over), from many goroutines at once: they must be safe for
// concurrent use, fast, must not block, and must not call back into the
// Semaphores or the Permit they report on. Calls refused before anything
// is sent (invalid key, capacity or ttl, a closed Semaphores, a context
// already done) are not reported.
type Observer interface {
	// ObserveAcquire reports the outcome of one TryAcquire or Acquire
	// call: the semaphore's key (prefix included), the outcome, the time
	// from the call to its outcome, and the call's error (nil when
	// acquired; ErrCapacityMismatch is an AcquireError).
	ObserveAcquire(key string, outcome AcquireOutcome, wait time.Duration, err error)
	// ObserveRenew reports one Renew call on a permit not released through
	// its handle.
	ObserveRenew(p *Permit, outcome RenewOutcome, err error)
	// ObserveRelease reports one Release (or Close, or background release)
	// not answered locally by an earlier settled release: the server's
	// answer (0 with a non-nil err when the outcome is unknown) and the
	// time since the grant.
	ObserveRelease(p *Permit, result primitives.ReleaseResult, held time.Duration, err error)
	// ObserveLost reports, at most once per permit, that the handle found
	// its permit gone before releasing it.
	ObserveLost(p *Permit, reason LostReason)
}

// AcquireOutcome classifies an acquisition; its String gives the metric
// label ("acquired", "not_acquired", "gave_up", "cancelled",
// "deadline_exceeded", "closed", "error"). See lock.AcquireOutcome.
type AcquireOutcome = base.AcquireOutcome

// RenewOutcome classifies a renewal ("renewed", "lost", "error").
type RenewOutcome = base.RenewOutcome

// LostReason says how a handle found its permit gone ("renew_refused",
// "renew_uncertain", "verify", "expired", "release_not_owned",
// "release_absent").
type LostReason = base.LostReason

// reporter adapts an Observer to the handle's reports about one Permit.
type reporter struct {
	o Observer
	p *Permit
}

func (r reporter) Renewed(o RenewOutcome, err error) { r.o.ObserveRenew(r.p, o, err) }

func (r reporter) Released(res primitives.ReleaseResult, held time.Duration, err error) {
	r.o.ObserveRelease(r.p, res, held, err)
}

func (r reporter) Lost(reason LostReason) { r.o.ObserveLost(r.p, reason) }
