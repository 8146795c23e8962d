package ratetest

import (
	"slices"
	"sort"
	"time"
)

// Refusal is one decision that granted nothing: At is the server time it
// was made at, N the permits asked for, RetryAfter what the limiter said.
type Refusal struct {
	At         time.Time
	N          int64
	RetryAfter time.Duration
}

// Overstated checks that no refusal's RetryAfter was longer than needed:
// a grant of at least r.N permits (to anyone) after r.At shows that r.N
// permits were available then, since other callers' grants only delay
// availability. For every refusal it takes the first such grant and
// measures how long before r.At+r.RetryAfter it came; it returns the most
// (positive: RetryAfter was that much too long; negative: the closest any
// grant came to the instant RetryAfter named), the refusal and grant it was
// found at, and false when no refusal was followed by such a grant. Pass
// only grants known to have happened, never unknown outcomes. It sorts
// grants.
func Overstated(grants []Grant, refusals []Refusal) (worst time.Duration, r Refusal, g Grant, found bool) {
	slices.SortFunc(grants, func(a, b Grant) int { return a.At.Compare(b.At) })
	for _, ref := range refusals {
		due := ref.At.Add(ref.RetryAfter)
		// Grants at the refusal's own instant are not known to come after it.
		i := sort.Search(len(grants), func(i int) bool { return grants[i].At.After(ref.At) })
		for ; i < len(grants); i++ {
			if grants[i].N < ref.N {
				continue
			}
			if d := due.Sub(grants[i].At); !found || d > worst {
				worst, r, g, found = d, ref, grants[i], true
			}
			break
		}
	}
	return worst, r, g, found
}

// SlidingAvailable returns when an exact sliding log would grant n more
// permits after grants: the earliest instant, not before the last grant,
// at which a grant of n keeps every half-open interval of length w within
// limit (a grant at g stops counting at g+w). n must not exceed limit. It
// sorts grants; with none it returns the zero time.
func SlidingAvailable(grants []Grant, limit int64, w time.Duration, n int64) time.Time {
	if len(grants) == 0 {
		return time.Time{}
	}
	slices.SortFunc(grants, func(a, b Grant) int { return a.At.Compare(b.At) })
	last := grants[len(grants)-1].At
	left := Total(grants)
	if left+n <= limit {
		return last
	}
	for _, g := range grants {
		left -= g.N
		if left+n <= limit {
			// Grants at the same instant as g stop counting with it.
			return latest(last, g.At.Add(w))
		}
	}
	return latest(last, grants[len(grants)-1].At.Add(w)) // unreachable: n <= limit
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// WindowGrant is a grant of a fixed-window limiter with the end of the
// window it was counted in, as the limiter reported it (its decision's
// server time plus ResetAfter); End is zero for an unknown outcome.
type WindowGrant struct {
	At  time.Time
	N   int64
	End time.Time
}

// Window is one fixed window found by FixedWindows.
type Window struct {
	Start, Last time.Time // first and last grant counted in it
	End         time.Time // the end its first grant reported
	N           int64     // permits counted in it, unknown outcomes included
	Unknown     int64     // of N, permits of unknown outcomes
}

// FixedWindows groups the grants of one fixed-window limiter of window
// length w into its windows: grants whose reported ends lie within w/2 of
// each other share a window (ends of one window differ by the rounding of
// the server's expiry, ends of consecutive windows by at least w). An
// unknown outcome counts in the window whose span [Start, End) holds its
// instant, else in the next window that starts (else in one of its own):
// wherever it might have been counted, it never lowers a window's count.
// It sorts grants.
func FixedWindows(grants []WindowGrant, w time.Duration) []Window {
	slices.SortFunc(grants, func(a, b WindowGrant) int { return a.At.Compare(b.At) })
	var (
		out     []Window
		pending Window // unknown outcomes not in a window yet
	)
	for _, g := range grants {
		var cur *Window
		if len(out) > 0 {
			cur = &out[len(out)-1]
		}
		if g.End.IsZero() {
			if cur != nil && g.At.Before(cur.End) {
				cur.N += g.N
				cur.Unknown += g.N
				cur.Last = latest(cur.Last, g.At)
			} else {
				if pending.N == 0 {
					pending.Start = g.At
				}
				pending.N += g.N
				pending.Unknown += g.N
				pending.Last = g.At
			}
			continue
		}
		if cur != nil && absDur(g.End.Sub(cur.End)) < w/2 {
			cur.N += g.N
			cur.Last = latest(cur.Last, g.At)
			continue
		}
		win := Window{Start: g.At, Last: g.At, End: g.End, N: g.N}
		if pending.N > 0 {
			win.Start = pending.Start
			win.N += pending.N
			win.Unknown = pending.Unknown
			pending = Window{}
		}
		out = append(out, win)
	}
	if pending.N > 0 {
		out = append(out, pending)
	}
	return out
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// ClockOffset estimates how far a server's clock is ahead of this
// process's (server minus local) from decisions whose server time lies
// between when they were sent and when their reply arrived, so that an
// unknown outcome (sent, no reply) can be placed on the server's clock.
// The zero value has no observations. Not safe for concurrent use.
type ClockOffset struct {
	lo, hi time.Duration
	n      int
}

// Observe records a decision sent at sent whose reply, made at server time
// server, arrived at got.
func (o *ClockOffset) Observe(sent, got, server time.Time) {
	lo, hi := server.Sub(got), server.Sub(sent)
	if o.n == 0 || lo > o.lo {
		o.lo = lo
	}
	if o.n == 0 || hi < o.hi {
		o.hi = hi
	}
	o.n++
}

// Bounds returns the offset's bounds so far, and false without
// observations. lo > hi means the clocks moved against each other (a step
// of either clock) during the observations.
func (o *ClockOffset) Bounds() (lo, hi time.Duration, ok bool) {
	return o.lo, o.hi, o.n > 0
}

// Place returns the server time at which a decision sent at sent, whose
// reply (if any) arrived by got, was made at the latest estimate: the
// middle of [sent+lo, got+hi] (of [sent, got] without observations).
func (o *ClockOffset) Place(sent, got time.Time) time.Time {
	lo, hi := o.lo, o.hi
	if o.n == 0 {
		lo, hi = 0, 0
	}
	from, to := sent.Add(lo), got.Add(hi)
	if to.Before(from) {
		from, to = to, from
	}
	return from.Add(to.Sub(from) / 2)
}
