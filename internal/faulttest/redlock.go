package faulttest

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// A Redlock's state is spread over several servers, each granting and
// expiring on its own, so no single server event linearizes a grant and a
// porcupine model of one key does not describe it. What Redlock promises
// is stated directly on the holders' own view instead: a holder relies on
// the lock from the moment its acquisition returns until it calls
// release, its validity runs out, or its handle finds the lock lost
// (renewal refused or unknown, Done closed); no two such intervals may
// overlap. Holds records those intervals from many goroutines on one
// monotonic clock and Overlaps sweeps them.

// Hold is one holder's reliance on a lock: From is when its acquisition
// returned the grant, To when it stopped relying on it (history time).
type Hold struct {
	Client   int
	Token    string
	From, To time.Duration
	// Renewals counts the renewals the holder got while it held.
	Renewals int
}

// HoldOverlap is two holds of one lock that overlap.
type HoldOverlap struct {
	A, B     Hold
	From, To time.Duration // the common interval
}

func (o HoldOverlap) String() string {
	return fmt.Sprintf("client %d (%s, %v–%v) and client %d (%s, %v–%v) both held the lock from %v to %v",
		o.A.Client, short(o.A.Token), o.A.From, o.A.To, o.B.Client, short(o.B.Token), o.B.From, o.B.To, o.From, o.To)
}

// Holds records the holds of one lock and counts operations. Safe for
// concurrent use.
type Holds struct {
	start time.Time
	ops   atomic.Int64
	mu    sync.Mutex
	holds []Hold
}

// NewHolds starts a record; times are measured from now.
func NewHolds() *Holds { return &Holds{start: time.Now()} }

// Since returns the history time of t.
func (h *Holds) Since(t time.Time) time.Duration { return t.Sub(h.start) }

// Now returns the current history time.
func (h *Holds) Now() time.Duration { return time.Since(h.start) }

// Op counts one operation (an acquisition attempt, a renewal, a release).
func (h *Holds) Op() { h.ops.Add(1) }

// Ops returns the number of operations counted.
func (h *Holds) Ops() int64 { return h.ops.Load() }

// Add records a hold.
func (h *Holds) Add(x Hold) {
	h.mu.Lock()
	h.holds = append(h.holds, x)
	h.mu.Unlock()
}

// All returns a copy of the holds, ordered by From.
func (h *Holds) All() []Hold {
	h.mu.Lock()
	out := slices.Clone(h.holds)
	h.mu.Unlock()
	slices.SortFunc(out, func(a, b Hold) int { return cmp.Compare(a.From, b.From) })
	return out
}

// Overlaps returns every pair of holds whose intervals intersect (a hold
// that ends exactly when another begins does not). A hold with To <= From
// (a grant given up at once) overlaps nothing.
func Overlaps(holds []Hold) []HoldOverlap {
	hs := slices.Clone(holds)
	slices.SortFunc(hs, func(a, b Hold) int { return cmp.Compare(a.From, b.From) })
	var out []HoldOverlap
	for i := range hs {
		if hs[i].To <= hs[i].From {
			continue
		}
		for j := i + 1; j < len(hs) && hs[j].From < hs[i].To; j++ {
			if hs[j].To <= hs[j].From {
				continue
			}
			out = append(out, HoldOverlap{A: hs[i], B: hs[j], From: hs[j].From, To: min(hs[i].To, hs[j].To)})
		}
	}
	return out
}
