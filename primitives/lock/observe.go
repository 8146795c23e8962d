package lock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/coordhost/coordhost/primitives"
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
type AcquireOutcome uint8

// The acquisition outcomes.
const (
	// AcquireAcquired: the lock was granted.
	AcquireAcquired AcquireOutcome = iota
	// AcquireNotAcquired: TryAcquire found the lock held (or, with FIFO,
	// earlier waiters queued), or the grant arrived too late.
	AcquireNotAcquired
	// AcquireGaveUp: Acquire's retry policy gave up.
	AcquireGaveUp
	// AcquireCancelled: the caller's context was cancelled.
	AcquireCancelled
	// AcquireDeadlineExceeded: the caller's context deadline passed.
	AcquireDeadlineExceeded
	// AcquireClosed: the Locker was closed while the call waited.
	AcquireClosed
	// AcquireError: any other error (transport, unknown outcome, a key of
	// the wrong type, an unusable fencing counter).
	AcquireError
)

// String returns the outcome's name, suitable as a metric label:
// "acquired", "not_acquired", "gave_up", "cancelled", "deadline_exceeded",
// "closed" or "error".
func (o AcquireOutcome) String() string {
	switch o {
	case AcquireAcquired:
		return "acquired"
	case AcquireNotAcquired:
		return "not_acquired"
	case AcquireGaveUp:
		return "gave_up"
	case AcquireCancelled:
		return "cancelled"
	case AcquireDeadlineExceeded:
		return "deadline_exceeded"
	case AcquireClosed:
		return "closed"
	}
	return "error"
}

// RenewOutcome classifies a renewal for Observer.ObserveRenew.
type RenewOutcome uint8

// The renewal outcomes.
const (
	// RenewRenewed: the server extended the lock.
	RenewRenewed RenewOutcome = iota
	// RenewLost: Renew returned false: the server refused (another owner
	// or no key), or the handle's estimate had run out or it was lost
	// before (no round trip).
	RenewLost
	// RenewError: Renew returned an error; the outcome is unknown and the
	// handle failed closed.
	RenewError
)

// String returns "renewed", "lost" or "error".
func (o RenewOutcome) String() string {
	switch o {
	case RenewRenewed:
		return "renewed"
	case RenewLost:
		return "lost"
	}
	return "error"
}

// LostReason says how a handle found its ownership gone.
type LostReason uint8

// The reasons, in the order a handle can find them.
const (
	// LostRenewRefused: a renewal, sent while the estimate still ran, was
	// refused by the server (another owner holds the key, or none does).
	LostRenewRefused LostReason = iota
	// LostRenewUncertain: a renewal's outcome is unknown (transport error,
	// cancellation); the handle failed closed.
	LostRenewUncertain
	// LostVerify: Verify found another owner or no key.
	LostVerify
	// LostExpired: the local estimate had run out when Renew or Release
	// was called, whatever the server then answered.
	LostExpired
	// LostReleaseNotOwned: Release, called while the estimate still ran,
	// found another owner.
	LostReleaseNotOwned
	// LostReleaseAbsent: Release, called while the estimate still ran,
	// found no key although this handle had not released it (deleted or
	// expired on the server).
	LostReleaseAbsent
)

// String returns the reason's name, suitable as a metric label:
// "renew_refused", "renew_uncertain", "verify", "expired",
// "release_not_owned" or "release_absent".
func (r LostReason) String() string {
	switch r {
	case LostRenewRefused:
		return "renew_refused"
	case LostRenewUncertain:
		return "renew_uncertain"
	case LostVerify:
		return "verify"
	case LostExpired:
		return "expired"
	case LostReleaseNotOwned:
		return "release_not_owned"
	}
	return "release_absent"
}

// observe runs one validated acquisition through fn and reports it.
func (l *Locker) observe(ctx context.Context, req *request, waits bool, fn func(*Locker, context.Context, *request) (*Lock, error)) (*Lock, error) {
	if l.obs == nil {
		return fn(l, ctx, req)
	}
	start := time.Now()
	lk, err := fn(l, ctx, req)
	wait := time.Since(start)
	if lk != nil {
		lk.watch = &watch{o: l.obs, granted: time.Now()}
	}
	l.obs.ObserveAcquire(req.key, acquireOutcome(ctx, waits, err), wait, err)
	return lk, err
}

func acquireOutcome(ctx context.Context, waits bool, err error) AcquireOutcome {
	cerr := ctx.Err()
	switch {
	case err == nil:
		return AcquireAcquired
	case errors.Is(err, primitives.ErrClosed):
		return AcquireClosed
	case cerr != nil && errors.Is(err, cerr):
		if errors.Is(cerr, context.DeadlineExceeded) {
			return AcquireDeadlineExceeded
		}
		return AcquireCancelled
	case errors.Is(err, primitives.ErrNotAcquired):
		if waits {
			return AcquireGaveUp
		}
		return AcquireNotAcquired
	}
	return AcquireError
}

// watch is what a granted Lock needs to report to its Observer; nil when
// the Locker has none. Each method the Lock calls is a nil check that
// inlines; the work is in its *Slow twin.
type watch struct {
	o       Observer
	granted time.Time

	mu      sync.Mutex
	lost    bool // ObserveLost was called
	pending int  // Release calls between releasing and released
	freed   bool // a release answered Released
	// unsure: a release failed with an unknown outcome (its script may
	// have deleted the key), so later answers say nothing about a loss.
	unsure bool
}

// renewing reports, before a Renew is sent, whether the handle could still
// renew: not lost, not released, estimate running.
func (w *watch) renewing(l *Lock) bool {
	return w != nil && w.renewingSlow(l)
}

func (w *watch) renewingSlow(l *Lock) bool { return l.state.CanRenew(time.Now()) }

// renewed reports a Renew's result; live is what renewing said before it.
func (w *watch) renewed(l *Lock, live, ok bool, err error) {
	if w != nil {
		w.renewedSlow(l, live, ok, err)
	}
}

func (w *watch) renewedSlow(l *Lock, live, ok bool, err error) {
	switch {
	case ok:
		w.o.ObserveRenew(l, RenewRenewed, nil)
	case l.state.IsReleased():
		// Renewing a released lock is the caller's slip, not a renewal.
	case err != nil:
		w.o.ObserveRenew(l, RenewError, err)
		if live && !l.state.CanRenew(time.Now()) {
			// The renewal was sent and failed closed (an error before
			// sending leaves the handle renewable).
			w.lose(l, LostRenewUncertain)
		}
	default:
		w.o.ObserveRenew(l, RenewLost, nil)
		if live {
			w.lose(l, LostRenewRefused)
		} else {
			w.lose(l, LostExpired) // or lost before: reported then
		}
	}
}

// verified reports a Verify's result.
func (w *watch) verified(l *Lock, ok bool, err error) {
	if w != nil && !ok && err == nil {
		w.verifiedSlow(l)
	}
}

func (w *watch) verifiedSlow(l *Lock) {
	if !l.state.IsReleased() {
		w.lose(l, LostVerify)
	}
}

// releasing counts a Release about to be sent and reports whether the
// handle's estimate had already run out (or it was lost).
func (w *watch) releasing(l *Lock) (gone bool) {
	return w != nil && w.releasingSlow(l)
}

func (w *watch) releasingSlow(l *Lock) (gone bool) {
	gone = l.state.Remaining() == 0
	w.mu.Lock()
	w.pending++
	w.mu.Unlock()
	return gone
}

// released reports a Release's result: n is the script's answer (1
// released, 0 absent, -1 another owner's); gone is what releasing said.
func (w *watch) released(l *Lock, gone bool, n int64, err error) {
	if w != nil {
		w.releasedSlow(l, gone, n, err)
	}
}

func (w *watch) releasedSlow(l *Lock, gone bool, n int64, err error) {
	held := time.Since(w.granted)
	w.mu.Lock()
	w.pending--
	var lost bool
	switch {
	case err != nil:
		w.unsure = true
	case n == 1:
		w.freed = true
		lost = gone // released, but only after the estimate ran out
	case w.pending > 0 || w.freed:
		// A concurrent Release of this handle deleted the key (or is
		// still settling): this call's "absent" (or "another owner's",
		// if someone took the lock in between) is its echo. The last
		// call to settle judges the loss.
	default:
		lost = true
	}
	lost = lost && !w.unsure && !w.lost
	w.lost = w.lost || lost
	w.mu.Unlock()
	if err != nil {
		w.o.ObserveRelease(l, 0, held, err)
		return
	}
	w.o.ObserveRelease(l, releaseResult(n), held, nil)
	if lost {
		switch {
		case gone:
			w.o.ObserveLost(l, LostExpired)
		case n < 0:
			w.o.ObserveLost(l, LostReleaseNotOwned)
		default:
			w.o.ObserveLost(l, LostReleaseAbsent)
		}
	}
}

// lose reports a loss unless one was reported already, or a release with
// an unknown outcome may explain it.
func (w *watch) lose(l *Lock, reason LostReason) {
	w.mu.Lock()
	report := !w.lost && !w.unsure
	w.lost = true
	w.mu.Unlock()
	if report {
		w.o.ObserveLost(l, reason)
	}
}
