package lock

import (
	"context"
	"time"

	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/internal/base"
	"github.com/coordhost/coordhost/primitives/internal/handle"
)

// Observer is told about a Locker's acquisitions and about the life of the
// locks it grants, typically to export metrics (this package depends on no
// metrics library). Set it as Options.Observer; nil means none and costs
// nothing. Locks keep the Observer of the Locker that granted them.
//
// Methods are called synchronously, on the goroutine of the call they
// report, from many goroutines at once: they must be safe for concurrent
// use, fast, must not block, and must not call back into the Locker or the
// Lock they report on.
//
// Calls refused before anything is sent (invalid key or ttl, a closed
// Locker, a context already done) are not reported. A lock that nobody
// renews, verifies or releases reports nothing after its grant: losses are
// found by those calls, not by a timer.
type Observer interface {
	// ObserveAcquire reports the outcome of one TryAcquire, Acquire,
	// TryAcquireFenced or AcquireFenced call: the lock's key (prefix
	// included), the outcome, the time from the call to its outcome, and
	// the call's error (nil when acquired).
	ObserveAcquire(key string, outcome AcquireOutcome, wait time.Duration, err error)
	// ObserveRenew reports one Renew call on a lock that was not released
	// through its handle: renewed, refused (by the server, or locally
	// because the estimate ran out or the lock was lost before), or an
	// error (the outcome is unknown and the handle failed closed).
	ObserveRenew(l *Lock, outcome RenewOutcome, err error)
	// ObserveRelease reports one Release (or Close) call that was not
	// answered locally by an earlier settled release: the server's answer
	// (0 with a non-nil err when the outcome is unknown), and held, the
	// time since the grant.
	ObserveRelease(l *Lock, result primitives.ReleaseResult, held time.Duration, err error)
	// ObserveLost reports, at most once per lock, that the handle found
	// ownership gone before releasing it; reason says how.
	ObserveLost(l *Lock, reason LostReason)
}

// AcquireOutcome classifies an acquisition for Observer.ObserveAcquire.
// Its String gives the metric label: "acquired", "not_acquired",
// "gave_up", "cancelled", "deadline_exceeded", "closed" or "error".
type AcquireOutcome = base.AcquireOutcome

// The acquisition outcomes.
const (
	// AcquireAcquired: the lock was granted.
	AcquireAcquired = base.AcquireAcquired
	// AcquireNotAcquired: TryAcquire found the lock held (or, with FIFO,
	// earlier waiters queued), or the grant arrived too late.
	AcquireNotAcquired = base.AcquireNotAcquired
	// AcquireGaveUp: Acquire's retry policy gave up.
	AcquireGaveUp = base.AcquireGaveUp
	// AcquireCancelled: the caller's context was cancelled.
	AcquireCancelled = base.AcquireCancelled
	// AcquireDeadlineExceeded: the caller's context deadline passed.
	AcquireDeadlineExceeded = base.AcquireDeadlineExceeded
	// AcquireClosed: the Locker was closed while the call waited.
	AcquireClosed = base.AcquireClosed
	// AcquireError: any other error (transport, unknown outcome, a key of
	// the wrong type, an unusable fencing counter).
	AcquireError = base.AcquireError
)

// RenewOutcome classifies a renewal for Observer.ObserveRenew. Its String
// gives "renewed", "lost" or "error".
type RenewOutcome = base.RenewOutcome

// The renewal outcomes.
const (
	// RenewRenewed: the server extended the lock.
	RenewRenewed = base.RenewRenewed
	// RenewLost: Renew returned false: the server refused (another owner
	// or no key), or the handle's estimate had run out or it was lost
	// before (no round trip).
	RenewLost = base.RenewLost
	// RenewError: Renew returned an error; the outcome is unknown and the
	// handle failed closed.
	RenewError = base.RenewError
)

// LostReason says how a handle found its ownership gone. Its String gives
// the metric label: "renew_refused", "renew_uncertain", "verify",
// "expired", "release_not_owned" or "release_absent".
type LostReason = base.LostReason

// The reasons, in the order a handle can find them.
const (
	// LostRenewRefused: a renewal, sent while the estimate still ran, was
	// refused by the server (another owner holds the key, or none does).
	LostRenewRefused = base.LostRenewRefused
	// LostRenewUncertain: a renewal's outcome is unknown (transport error,
	// cancellation); the handle failed closed.
	LostRenewUncertain = base.LostRenewUncertain
	// LostVerify: Verify found another owner or no key.
	LostVerify = base.LostVerify
	// LostExpired: the local estimate had run out when Renew or Release
	// was called, whatever the server then answered.
	LostExpired = base.LostExpired
	// LostReleaseNotOwned: Release, called while the estimate still ran,
	// found another owner.
	LostReleaseNotOwned = base.LostReleaseNotOwned
	// LostReleaseAbsent: Release, called while the estimate still ran,
	// found no key although this handle had not released it (deleted or
	// expired on the server).
	LostReleaseAbsent = base.LostReleaseAbsent
)

// observe runs one validated acquisition through fn and reports it.
func (l *Locker) observe(ctx context.Context, req *request, waits bool, fn func(*Locker, context.Context, *request) (*Lock, error)) (*Lock, error) {
	if l.obs == nil {
		return fn(l, ctx, req)
	}
	start := time.Now()
	lk, err := fn(l, ctx, req)
	wait := time.Since(start)
	if lk != nil {
		lk.h.Observe(reporter{o: l.obs, l: lk}, l.clk.Now())
	}
	l.obs.ObserveAcquire(req.key, handle.AcquireOutcomeOf(ctx, waits, err), wait, err)
	return lk, err
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
