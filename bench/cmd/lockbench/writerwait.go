package main

// Section 8, second part: a writer's wait under a stream of overlapping
// readers, with the starvation bound 0, 200 ms and policies.Unbounded.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordhost/coordhost/policies"
	"github.com/coordhost/coordhost/policies/builtin"
	"github.com/coordhost/coordhost/primitives/rwlock"
	"github.com/redis/rueidis"
)

const (
	// wwHold is how long each reader of the stream holds (about: a reader
	// late for its slot on the grid holds 25–75 ms to get back on it).
	wwHold = 50 * time.Millisecond
	// wwSlack is the allowance on top of bound + reader lease.
	wwSlack = 30 * time.Millisecond
	// wwWriterHold is how long the writer holds once granted.
	wwWriterHold = 10 * time.Millisecond
	// wwControlLease is the readers' lease in the control, where only "at
	// least one reader live at all times" matters: it keeps one live
	// across a stall of a loaded machine shorter than 950 ms (as
	// primitives/rwlock's test does).
	wwControlLease = time.Second
	// wwSettle is the pause between rounds: the readers the writer held
	// off get back on their grid.
	wwSettle = 150 * time.Millisecond
)

// wwCase is one starvation bound.
type wwCase struct {
	label string
	bound time.Duration // policies.Unbounded for the control
}

func (c wwCase) control() bool { return c.bound == policies.Unbounded }

func wwCases() []wwCase {
	return []wwCase{{"bound 0 (strict writer preference)", 0}, {"bound 200 ms", 200 * time.Millisecond}, {"`policies.Unbounded` (reader preference, control)", policies.Unbounded}}
}

// wwResult is one case's rounds.
type wwResult struct {
	c      wwCase
	rounds int
	waits  []time.Duration // granted rounds
	// still counts the control's rounds still waiting when the patience
	// ran out (context deadline).
	still int
	// readersAtArrival: the fewest readers holding when a writer arrived
	// (0 = the stream had a gap then).
	readersAtArrival int64
	gapsAtArrival    int
	// overlaps counts rounds in which a reader was seen holding while the
	// writer held (checked on local counters at the grant and before the
	// release).
	overlaps     int
	readerGrants int64
	readerErrs   int64
	errs         int
	firstErr     error
}

// limit is the target for a bounded case.
func (r *wwResult) limit(lease time.Duration) time.Duration { return r.c.bound + lease + wwSlack }

// readerStream: o.wwReaders readers on key, reader i acquiring on the grid
// base + i·hold/n + k·hold and holding until its next grid point, so that
// they overlap and at least one is live at all times (the shape of
// primitives/rwlock's starvation test).
type readerStream struct {
	holding atomic.Int64
	grants  atomic.Int64
	errs    atomic.Int64
	first   atomic.Pointer[error]
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

func startReaderStream(l *rwlock.Locker, key string, readers int, lease time.Duration) *readerStream {
	ctx, cancel := context.WithCancel(context.Background())
	rs := &readerStream{cancel: cancel}
	base := time.Now().Add(10 * time.Millisecond)
	for i := range readers {
		rs.wg.Go(func() {
			first := base.Add(time.Duration(i) * wwHold / time.Duration(readers))
			slot := func(at time.Time) time.Time {
				k := (at.Sub(first) + wwHold - 1) / wwHold
				return first.Add(max(k, 0) * wwHold)
			}
			next := first
			for ctx.Err() == nil {
				time.Sleep(time.Until(next))
				r, err := l.AcquireRead(ctx, key, lease)
				if err != nil {
					if ctx.Err() == nil {
						rs.errs.Add(1)
						rs.first.CompareAndSwap(nil, &err)
						time.Sleep(wwHold)
						next = slot(time.Now())
						continue
					}
					return
				}
				rs.holding.Add(1)
				rs.grants.Add(1)
				next = slot(time.Now().Add(wwHold / 2))
				time.Sleep(time.Until(next))
				rs.holding.Add(-1)
				if _, err := r.Release(context.Background()); err != nil {
					rs.errs.Add(1)
					rs.first.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	return rs
}

func (rs *readerStream) stop() {
	rs.cancel()
	rs.wg.Wait()
}

func sectionWriterWait(srv *server, o options) []*wwResult {
	var out []*wwResult
	for _, c := range wwCases() {
		out = append(out, runWriterWait(srv, o, c))
	}
	return out
}

func runWriterWait(srv *server, o options, c wwCase) *wwResult {
	newClient := func() rueidis.Client {
		cl, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.addr}})
		if err != nil {
			fatalf("8 writer wait: %v", err)
		}
		return cl
	}
	rc, wc := newClient(), newClient()
	defer rc.Close()
	defer wc.Close()
	readers, err := rwlock.New(rc, rwlock.Options{})
	if err != nil {
		fatalf("8 writer wait: %v", err)
	}
	defer readers.Close()
	writer, err := rwlock.New(wc, rwlock.Options{Starvation: builtin.WriterPreference{Bound: c.bound}})
	if err != nil {
		fatalf("8 writer wait: %v", err)
	}
	defer writer.Close()

	lease, rounds, patience := o.wwLease, o.wwRounds, 10*time.Second
	if c.control() {
		rounds, patience, lease = o.wwControlRounds, o.wwControl, wwControlLease
	}
	key := fmt.Sprintf("bench:ww:%d", c.bound)
	res := &wwResult{c: c, rounds: rounds, readersAtArrival: -1}
	rs := startReaderStream(readers, key, o.wwReaders, lease)
	defer rs.stop()
	// Let the stream run: every reader has held twice.
	for deadline := time.Now().Add(10 * time.Second); rs.grants.Load() < int64(2*o.wwReaders); {
		if time.Now().After(deadline) {
			fatalf("8 writer wait: the reader stream did not start (%d grants, %d errors)", rs.grants.Load(), rs.errs.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	g0 := rs.grants.Load()
	for round := range rounds {
		// Arrive at a different phase of the readers' grid each round.
		time.Sleep(wwSettle + time.Duration(round*7)%wwHold)
		n := rs.holding.Load()
		if res.readersAtArrival < 0 || n < res.readersAtArrival {
			res.readersAtArrival = n
		}
		if n == 0 {
			res.gapsAtArrival++
		}
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		start := time.Now()
		l, err := writer.AcquireWrite(ctx, key, time.Second)
		took := time.Since(start)
		cancel()
		if err != nil {
			if c.control() && errors.Is(err, context.DeadlineExceeded) {
				res.still++
			} else {
				res.errs++
				if res.firstErr == nil {
					res.firstErr = err
				}
			}
			logf("8 writer wait %-50s round %d/%d: no grant after %v (%v), %d readers holding at arrival", c.label, round+1, rounds, took.Round(time.Millisecond), err, n)
			continue
		}
		overlap := rs.holding.Load() > 0
		time.Sleep(wwWriterHold)
		overlap = overlap || rs.holding.Load() > 0
		if _, err := l.Release(context.Background()); err != nil {
			res.errs++
			if res.firstErr == nil {
				res.firstErr = err
			}
		}
		if overlap {
			res.overlaps++
		}
		res.waits = append(res.waits, took)
		logf("8 writer wait %-50s round %d/%d: waited %v, %d readers holding at arrival, overlap %v", c.label, round+1, rounds, took.Round(100*time.Microsecond), n, overlap)
	}
	res.readerGrants = rs.grants.Load() - g0
	res.readerErrs = rs.errs.Load()
	if p := rs.first.Load(); p != nil && res.firstErr == nil {
		res.firstErr = fmt.Errorf("reader: %w", *p)
	}
	return res
}

// wwOK is the verdict of a case: bounded cases, every round granted within
// the limit with no overlap; the control, every round still waiting.
func (r *wwResult) ok(lease time.Duration) bool {
	if r.errs > 0 || r.overlaps > 0 {
		return false
	}
	if r.c.control() {
		return r.still == r.rounds
	}
	return len(r.waits) == r.rounds && pct(r.waits, 100) <= r.limit(lease)
}

func (r *report) writerWaitTargets(w func(string, ...any)) {
	o := r.opts
	for _, c := range r.writerWait {
		if c.c.control() {
			w("| writer under the reader stream, %s: still waiting after %v in every round | %d of %d rounds still waiting", c.c.label, o.wwControl, c.still, c.rounds)
			if len(c.waits) > 0 {
				w("; granted in %d (max %s)", len(c.waits), dur(pct(c.waits, 100)))
			}
		} else {
			w("| writer under the reader stream, %s: wait ≤ bound + reader lease %v + %v = %v in every round | max %s, p50 %s over %d granted of %d rounds",
				c.c.label, o.wwLease, wwSlack, c.limit(o.wwLease), dur(pct(c.waits, 100)), dur(pct(c.waits, 50)), len(c.waits), c.rounds)
		}
		if c.overlaps > 0 {
			w("; **%d rounds with a reader holding while the writer held**", c.overlaps)
		}
		if c.errs > 0 {
			w("; %d errors, first: %v", c.errs, c.firstErr)
		}
		w(" | %s |\n", verdict(c.ok(o.wwLease)))
	}
}

func (r *report) sectionWriterWait(w func(string, ...any)) {
	o := r.opts
	w("### Writer wait under a reader stream\n\n")
	w("%d readers (one `rwlock.Locker` on one client) take read leases of %v on one key with `AcquireRead`, each on a fixed grid: reader i acquires at base + i·%v/%d + k·%v and holds until its next grid point (%v; 25–75 ms when it was late for its slot), then releases and re-acquires at once, so they overlap and at least one holds at all times. Once each has held twice, a writer (its own Locker and client, `Options.Starvation: builtin.WriterPreference{Bound: b}`) calls `AcquireWrite(ctx, key, 1s)`, holds %v and releases; rounds are %v + a varying phase apart. Wait = from just before `AcquireWrite` to its return. Bounded cases: %d rounds, given up after 10 s; the control (`policies.Unbounded`): %d round(s) with the readers' lease %v, given up after %v (the issue's test waits 5 s; `-ww-control`). Target per round: wait ≤ bound + the readers' lease + %v; the control must still be waiting when given up. *Readers at arrival*: the fewest readers holding when a writer arrived, over the rounds (0 = a gap in the stream). *Overlaps*: rounds in which a reader counted itself holding (local counter, between its grant and its release call) at the writer's grant or just before its release.\n\n",
		o.wwReaders, o.wwLease, wwHold, o.wwReaders, wwHold, wwHold, wwWriterHold, wwSettle, o.wwRounds, o.wwControlRounds, wwControlLease, o.wwControl, wwSlack)
	w("| starvation policy | rounds | wait p50 | p99 | max | limit | still waiting at give-up | readers at arrival (min) | reader grants | overlaps | verdict |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, c := range r.writerWait {
		p50, p99, mx, limit := "–", "–", "–", "–"
		if len(c.waits) > 0 {
			p50, p99, mx = dur(pct(c.waits, 50)), dur(pct(c.waits, 99)), dur(pct(c.waits, 100))
		}
		still := "–"
		if c.c.control() {
			still = fmt.Sprintf("%d of %d (after %v)", c.still, c.rounds, o.wwControl)
			if c.still == c.rounds {
				p50, p99, mx = "still waiting after "+o.wwControl.String(), "–", "–"
			}
		} else {
			limit = dur(c.limit(o.wwLease))
		}
		w("| %s | %d | %s | %s | %s | %s | %s | %d | %d | %d | %s |\n", c.c.label, c.rounds, p50, p99, mx, limit, still, c.readersAtArrival, c.readerGrants, c.overlaps, verdict(c.ok(o.wwLease)))
	}
	w("\n")
	for _, c := range r.writerWait {
		if c.errs > 0 || c.readerErrs > 0 {
			w("- errors, %s: %d writer, %d reader; first: %v\n", c.c.label, c.errs, c.readerErrs, c.firstErr)
		}
	}
	w("\n")
}
