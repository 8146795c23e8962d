package rwlock_test

// The measured starvation check (issue 9 §1): eight readers, each holding
// 50ms under a 100ms lease and re-acquiring at once, staggered on a fixed
// grid so that at least one reader is live at all times; a writer arrives
// once the stream runs. With bound 0 and 200ms its wait must be at most bound + the longest
// reader lease + 30ms; with reader preference (policies.Unbounded) it must
// still be waiting after 5s. No reader may hold while the writer holds,
// checked on the recorded intervals.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/policies"
	"github.com/coordhost/coordhost/policies/builtin"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/rwlock"
)

const (
	streamReaders = 8
	readerHold    = 50 * time.Millisecond
	// readerLease is the readers' lease in the bounded runs: the "longest
	// reader lease" of the limit. A reader that holds 50ms releases well
	// within it; the margin keeps a reader live across the scheduling
	// stalls of a loaded machine (a stall longer than lease - hold lets
	// every lease run out, and the writer in).
	readerLease = 100 * time.Millisecond
	// controlLease is the readers' lease in the control, where only "at
	// least one reader live at all times" matters.
	controlLease = time.Second
	// waitSlack is the allowance on top of bound + reader lease.
	waitSlack = 30 * time.Millisecond
)

// hold is one grant's certain holding interval: from the acquire's return
// to the call of the release that answered Released (local monotonic
// times), and the server's time of the grant.
type hold struct {
	who      string
	from, to time.Time
	granted  time.Time // server time of the grant
	released bool      // the release answered Released
}

// readerStream runs overlapping readers until stopped.
type readerStream struct {
	mu     sync.Mutex
	holds  []hold
	errs   []error
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func startReaders(t *testing.T, tg *target, key string, lease time.Duration) *readerStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	rs := &readerStream{cancel: cancel}
	lockers := make([]*rwlock.Locker, streamReaders)
	for i := range lockers {
		lockers[i] = newLocker(t, tg.client(t), rwlock.Options{})
	}
	// Reader i acquires at base + i*hold/8 + k*hold and holds until its
	// next grid point: readers whose holds simply followed each other
	// would fall into step after a stall of the process (all wake at
	// once), and then release together, leaving the lock empty for a
	// moment every cycle. A reader late for its slot (it waited for the
	// writer, or the process stood still) holds 25-75ms to get back on
	// the grid.
	base := time.Now().Add(10 * time.Millisecond)
	for i, l := range lockers {
		rs.wg.Add(1)
		go func() {
			defer rs.wg.Done()
			first := base.Add(time.Duration(i) * readerHold / streamReaders)
			slot := func(at time.Time) time.Time { // the first grid point at or after at
				k := (at.Sub(first) + readerHold - 1) / readerHold
				return first.Add(max(k, 0) * readerHold)
			}
			next := first
			for ctx.Err() == nil {
				time.Sleep(time.Until(next))
				r, err := l.AcquireRead(ctx, key, lease)
				if err != nil {
					if ctx.Err() == nil {
						rs.fail(fmt.Errorf("reader %d: %w", i, err))
					}
					return
				}
				h := hold{who: fmt.Sprintf("reader %d", i), from: time.Now(), granted: r.GrantedAt()}
				next = slot(h.from.Add(readerHold / 2))
				time.Sleep(time.Until(next))
				h.to = time.Now()
				res, err := r.Release(context.Background())
				h.released = res == primitives.Released && err == nil
				rs.mu.Lock()
				rs.holds = append(rs.holds, h)
				rs.mu.Unlock()
			}
		}()
	}
	return rs
}

func (rs *readerStream) fail(err error) {
	rs.mu.Lock()
	rs.errs = append(rs.errs, err)
	rs.mu.Unlock()
}

func (rs *readerStream) stop(t *testing.T) []hold {
	t.Helper()
	rs.cancel()
	rs.wg.Wait()
	for _, err := range rs.errs {
		t.Error(err)
	}
	return rs.holds
}

// coverageGaps returns the gaps in [from, to] during which no reader was
// certainly live: a reader whose release answered Released was live from
// its grant (server time, whole ms) to the call of that release. Gaps below
// a millisecond are the server clock's granularity, not gaps.
func coverageGaps(holds []hold, from, to time.Time) []string {
	slices.SortFunc(holds, func(a, b hold) int { return a.granted.Compare(b.granted) })
	var gaps []string
	reach := from
	for _, h := range holds {
		if !h.released || h.to.Before(from) {
			continue
		}
		if gap := h.granted.Sub(reach); gap > time.Millisecond && h.granted.Before(to) {
			gaps = append(gaps, fmt.Sprintf("%v from %v", gap, reach.Sub(from)))
		}
		if h.to.After(reach) {
			reach = h.to
		}
	}
	if gap := to.Sub(reach); gap > time.Millisecond {
		gaps = append(gaps, fmt.Sprintf("%v at the end", gap))
	}
	return gaps
}

// checkNoOverlap fails on any reader whose certain holding interval meets
// the writer's, and on any reader granted (server time) while the writer
// held.
func checkNoOverlap(t *testing.T, readers []hold, w hold) {
	t.Helper()
	for _, r := range readers {
		if r.released && w.released && r.from.Before(w.to) && w.from.Before(r.to) {
			t.Errorf("%s held [%v, %v] while the writer held [%v, %v]", r.who, r.from, r.to, w.from, w.to)
		}
		// Server time: a reader granted after the writer's grant and
		// before its release was sent (same machine, same clock; 1ms for
		// the server's millisecond granularity).
		if !r.granted.Before(w.granted) && r.granted.Before(w.to.Add(-time.Millisecond)) {
			t.Errorf("%s was granted at server time %v, while the writer held (granted %v, released after %v)", r.who, r.granted, w.granted, w.to)
		}
	}
}

// measurement is one writer's wait under a reader stream.
type measurement struct {
	took   time.Duration
	err    error
	stall  time.Duration // the longest the test process stood still meanwhile
	grants int           // reader grants in the run
	gaps   []string      // times no reader was live before the writer came
}

// stallWatch measures, until stop is called, the longest delay of a 1ms
// ticker: how long the test process (or its scheduler) stood still.
func stallWatch() (stop func() time.Duration) {
	done := make(chan struct{})
	result := make(chan time.Duration, 1)
	go func() {
		tk := time.NewTicker(time.Millisecond)
		defer tk.Stop()
		var worst time.Duration
		prev := time.Now()
		for {
			select {
			case <-done:
				result <- worst
				return
			case now := <-tk.C:
				worst = max(worst, now.Sub(prev)-time.Millisecond)
				prev = now
			}
		}
	}()
	return func() time.Duration { close(done); return <-result }
}

// measureWriter starts the reader stream on key, lets it run, then
// measures one writer's wait (given up after patience) with the given
// starvation policy and checks that no reader overlapped it.
func measureWriter(t *testing.T, tg *target, key string, lease time.Duration, policy policies.StarvationPolicy, patience time.Duration) measurement {
	t.Helper()
	rs := startReaders(t, tg, key, lease)
	xtest.Eventually(t, 10*time.Second, "the reader stream running", func() bool {
		rs.mu.Lock()
		defer rs.mu.Unlock()
		return len(rs.holds) >= 2*streamReaders
	})
	wl := newLocker(t, tg.client(t), rwlock.Options{Starvation: policy})
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	stalls := stallWatch()
	start := time.Now()
	w, err := wl.AcquireWrite(ctx, key, time.Second)
	m := measurement{took: time.Since(start), err: err, stall: stalls()}
	var wh hold
	if err == nil {
		wh = hold{who: "writer", from: time.Now(), granted: w.GrantedAt()}
		time.Sleep(10 * time.Millisecond)
		wh.to = time.Now()
		res, rerr := w.Release(context.Background())
		wh.released = res == primitives.Released && rerr == nil
		if !wh.released {
			t.Errorf("writer release: %v, %v", res, rerr)
		}
	}
	holds := rs.stop(t)
	m.grants = len(holds)
	m.gaps = coverageGaps(holds, start.Add(-2*readerHold), start)
	if err == nil {
		checkNoOverlap(t, holds, wh)
	}
	return m
}

// TestWriterStarvation: the measured check, on every server kind and a
// cluster. A round whose limit was exceeded while the test process stood
// still for longer than the slack (a loaded machine; the stall is
// measured) is measured again, at most twice, and says so.
func TestWriterStarvation(t *testing.T) {
	for _, f := range fleets() {
		t.Run(f.name, func(t *testing.T) {
			tg := f.start(t)
			for _, bound := range []time.Duration{0, 200 * time.Millisecond} {
				limit := bound + readerLease + waitSlack
				for round := range 3 {
					for try := 0; ; try++ {
						key := fmt.Sprintf("starve-%v-%d-%d", bound, round, try)
						m := measureWriter(t, tg, key, readerLease, builtin.WriterPreference{Bound: bound}, 10*time.Second)
						if m.err != nil {
							t.Fatalf("bound %v: %v", bound, m.err)
						}
						t.Logf("bound %v: writer waited %v (limit %v; %d reader grants; longest stall %v)",
							bound, m.took.Round(100*time.Microsecond), limit, m.grants, m.stall.Round(100*time.Microsecond))
						if len(m.gaps) > 0 {
							t.Logf("no reader was live before the writer came: %v", m.gaps)
						}
						if m.took <= limit {
							break
						}
						if m.stall <= waitSlack || try == 2 {
							t.Errorf("bound %v: the writer waited %v, more than bound + longest reader lease + %v = %v (longest stall of the test process %v)",
								bound, m.took, waitSlack, limit, m.stall)
							break
						}
						t.Logf("bound %v: over the limit during a %v stall of the test process: measuring again", bound, m.stall)
					}
				}
			}
		})
	}
}

// TestWriterStarvationControl: with reader preference the writer is still
// waiting after 5s. It runs alongside the other parallel tests (the fault
// runs); its readers' 1s lease keeps one live across a stall of the
// loaded machine shorter than 950ms.
func TestWriterStarvationControl(t *testing.T) {
	t.Parallel()
	tg := standalone(redistest.Redis70).start(t)
	// Unbounded given explicitly here; nil (the default) is the same.
	m := measureWriter(t, tg, "control", controlLease, builtin.WriterPreference{Bound: policies.Unbounded}, 5*time.Second)
	if !errors.Is(m.err, context.DeadlineExceeded) || m.took < 5*time.Second {
		t.Fatalf("with reader preference the writer got %v after %v (longest stall %v, gaps %v), want still waiting after 5s", m.err, m.took, m.stall, m.gaps)
	}
	t.Logf("reader preference: the writer was still waiting after %v (%d reader grants, longest stall %v)", m.took.Round(time.Millisecond), m.grants, m.stall)
}
