package handle

import (
	"sync"
	"time"

	"github.com/coordhost/coordhost/primitives/internal/base"
)

// Reporter receives what a Handle's Watch finds: each primitive adapts it
// to its public observer. Called synchronously, from many goroutines.
type Reporter interface {
	// Renewed reports one Renew on a handle not released through itself.
	Renewed(outcome base.RenewOutcome, err error)
	// Released reports one Release not answered locally by an earlier
	// settled release: the server's answer (0 with a non-nil err when the
	// outcome is unknown) and the time since the grant.
	Released(result base.ReleaseResult, held time.Duration, err error)
	// Lost reports, at most once per handle, that ownership was found gone
	// before the release.
	Lost(reason base.LostReason)
}

// Watch is what a granted handle needs to report to an observer; nil when
// there is none. Each method a Handle calls is a nil check that inlines;
// the work is in its *Slow twin.
type Watch struct {
	r       Reporter
	granted time.Time

	mu      sync.Mutex
	lost    bool // Lost was reported
	pending int  // Release calls between releasing and released
	freed   bool // a release answered Released
	// unsure: a release failed with an unknown outcome (its script may
	// have deleted the key), so later answers say nothing about a loss.
	unsure bool
}

// renewing reports, before a Renew is sent, whether the handle could still
// renew: not lost, not released, estimate running.
func (w *Watch) renewing(s *State) bool {
	return w != nil && s.CanRenew(s.Now())
}

// renewed reports a Renew's result; live is what renewing said before it.
func (w *Watch) renewed(s *State, live, ok bool, err error) {
	if w != nil {
		w.renewedSlow(s, live, ok, err)
	}
}

func (w *Watch) renewedSlow(s *State, live, ok bool, err error) {
	switch {
	case ok:
		w.r.Renewed(base.RenewRenewed, nil)
	case s.IsReleased():
		// Renewing a released lease is the caller's slip, not a renewal.
	case err != nil:
		w.r.Renewed(base.RenewError, err)
		if live && !s.CanRenew(s.Now()) {
			// The renewal was sent and failed closed (an error before
			// sending leaves the handle renewable).
			w.lose(base.LostRenewUncertain)
		}
	default:
		w.r.Renewed(base.RenewLost, nil)
		if live {
			w.lose(base.LostRenewRefused)
		} else {
			w.lose(base.LostExpired) // or lost before: reported then
		}
	}
}

// verified reports a Verify's result.
func (w *Watch) verified(s *State, ok bool, err error) {
	if w != nil && !ok && err == nil && !s.IsReleased() {
		w.lose(base.LostVerify)
	}
}

// releasing counts a Release about to be sent and reports whether the
// handle's estimate had already run out (or it was lost).
func (w *Watch) releasing(s *State) (gone bool) {
	return w != nil && w.releasingSlow(s)
}

func (w *Watch) releasingSlow(s *State) (gone bool) {
	gone = s.Remaining() == 0
	w.mu.Lock()
	w.pending++
	w.mu.Unlock()
	return gone
}

// released reports a Release's result: n is the script's answer (1
// released, 0 absent, -1 another owner's); gone is what releasing said.
func (w *Watch) released(s *State, gone bool, n int64, err error) {
	if w != nil {
		w.releasedSlow(s, gone, n, err)
	}
}

func (w *Watch) releasedSlow(s *State, gone bool, n int64, err error) {
	held := s.Now().Sub(w.granted)
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
		// if someone took the lease in between) is its echo. The last
		// call to settle judges the loss.
	default:
		lost = true
	}
	lost = lost && !w.unsure && !w.lost
	w.lost = w.lost || lost
	w.mu.Unlock()
	if err != nil {
		w.r.Released(0, held, err)
		return
	}
	w.r.Released(base.ReleaseResultOf(n), held, nil)
	if lost {
		switch {
		case gone:
			w.r.Lost(base.LostExpired)
		case n < 0:
			w.r.Lost(base.LostReleaseNotOwned)
		default:
			w.r.Lost(base.LostReleaseAbsent)
		}
	}
}

// lose reports a loss unless one was reported already, or a release with
// an unknown outcome may explain it.
func (w *Watch) lose(reason base.LostReason) {
	w.mu.Lock()
	report := !w.lost && !w.unsure
	w.lost = true
	w.mu.Unlock()
	if report {
		w.r.Lost(reason)
	}
}
