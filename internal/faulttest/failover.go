package faulttest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/lock"
	"github.com/redis/rueidis"
)

// FailoverRun configures RunFailover: a measurement of what a failover
// does to fenced lock grants. Goroutines take fenced locks without pause,
// each grant on a lease key of its own (never released, so every
// acknowledged grant should still be held at the end) and a fencing
// counter shared by the grants of one resource; once FailoverAfter grants
// were acknowledged, Failover runs while the grants go on; after it
// returns, at least After more grants are taken. Then every acknowledged
// grant is checked on the deployment as it is now.
type FailoverRun struct {
	// Client returns a client of the deployment (a Sentinel client for a
	// real failover: it must follow the primary). RunFailover closes it.
	Client func() (rueidis.Client, error)
	// Failover forces the failover (SENTINEL FAILOVER, killing the
	// primary), or fakes one (FLUSHALL loses every write). It runs once,
	// while the grants go on, in the goroutine that called RunFailover:
	// it may call a test's t.Fatal, as the methods of
	// redistest.Sentinel do (the run then stops its grant goroutines on
	// the way out). An error ends the run with that error.
	Failover func(ctx context.Context) error
	// Lock configures the Locker: Prefix, Replicas, ReplicaTimeout.
	// Fencing is ignored: the harness names its own counters
	// (TryAcquireFenced).
	Lock lock.Options
	// Goroutines taking grants; 0 means 8.
	Goroutines int
	// FailoverAfter is how many acknowledged grants come before Failover
	// is called; 0 means 500.
	FailoverAfter int
	// After is how many acknowledged grants must follow Failover's
	// return (they draw tokens from the counters the failover left); 0
	// means 500.
	After int
	// Resources is the number of fencing counters the grants share (round
	// robin); 0 means 16.
	Resources int
	// TTL is every grant's lease, long enough to outlive the run; 0 means
	// 10 minutes.
	TTL time.Duration
	// OpTimeout bounds one acquire; 0 means 5s.
	OpTimeout time.Duration
	// CheckTimeout bounds the checks after the run, retried through
	// transport errors while the client finds the new primary; 0 means
	// 30s.
	CheckTimeout time.Duration
}

// FailoverGrant is one grant RunFailover saw acknowledged.
type FailoverGrant struct {
	Resource int
	Key      string // the lease key, Lock.Prefix included
	Token    string // the ownership token
	Fence    int64  // the fencing token
	// Phase places the attempt: 0 acknowledged before Failover was
	// called, 2 sent after it returned, 1 overlapping it.
	Phase int
	// At is when the acknowledgement arrived.
	At time.Time
}

// FailoverReport is what RunFailover measured.
type FailoverReport struct {
	Attempts int
	// Acked counts acknowledged grants, and by phase (FailoverGrant.Phase:
	// before Failover was called, overlapping it, after it returned).
	Acked                                int
	AckedBefore, AckedDuring, AckedAfter int
	// NotReplicated counts acquires refused with primitives.ErrNotReplicated
	// (granted, not confirmed, released); Aborted those cut short by ctx;
	// Failed counts the other errors, by message (the lease key replaced
	// with KEY, first 100 bytes) in Errors.
	NotReplicated int
	Aborted       int
	Failed        int
	Errors        map[string]int
	// Lost counts acknowledged grants whose key is gone, or holds another
	// token, after the run: the grantee believed it held a lock it did not.
	// LostBy counts them by phase; Losses holds up to 10 of them.
	Lost   int
	LostBy [3]int
	Losses []FailoverGrant
	// DuplicateTokens counts acknowledged grants whose fencing token an
	// earlier acknowledged grant of the same resource already had (a
	// counter that went back); Duplicates holds up to 10 such pairs.
	DuplicateTokens int
	Duplicates      [][2]FailoverGrant
	// FailoverAt is when Failover was called, FailoverTook how long it
	// ran.
	FailoverAt   time.Time
	FailoverTook time.Duration
	// LostFirst and LostLast are the earliest and the latest
	// acknowledgement (FailoverGrant.At) of a lost grant.
	LostFirst, LostLast time.Time
}

// String summarises the report in one line.
func (r FailoverReport) String() string {
	return fmt.Sprintf("%d attempts, %d grants acknowledged (%d before the failover, %d during, %d after), %d not replicated, %d failed, %d aborted; lost %d (%d/%d/%d), duplicate fencing tokens %d; failover took %v",
		r.Attempts, r.Acked, r.AckedBefore, r.AckedDuring, r.AckedAfter, r.NotReplicated, r.Failed, r.Aborted,
		r.Lost, r.LostBy[0], r.LostBy[1], r.LostBy[2], r.DuplicateTokens, r.FailoverTook.Round(time.Millisecond))
}

func (run *FailoverRun) defaults() {
	if run.Goroutines <= 0 {
		run.Goroutines = 8
	}
	if run.FailoverAfter <= 0 {
		run.FailoverAfter = 500
	}
	if run.After <= 0 {
		run.After = 500
	}
	if run.Resources <= 0 {
		run.Resources = 16
	}
	if run.TTL <= 0 {
		run.TTL = 10 * time.Minute
	}
	if run.OpTimeout <= 0 {
		run.OpTimeout = 5 * time.Second
	}
	if run.CheckTimeout <= 0 {
		run.CheckTimeout = 30 * time.Second
	}
}

// RunFailover runs the measurement described at FailoverRun. The keys it
// writes are under run.Lock.Prefix: "{rN}:fence" (the counter of resource
// N) and "{rN}:lease:SEQ" (one per attempt). It returns an error, with
// the report so far, when Failover fails, ctx ends first, or the checks
// cannot read the deployment within CheckTimeout.
func RunFailover(ctx context.Context, run FailoverRun) (FailoverReport, error) {
	run.defaults()
	rep := FailoverReport{Errors: map[string]int{}}
	client, err := run.Client()
	if err != nil {
		return rep, fmt.Errorf("faulttest: client: %w", err)
	}
	defer client.Close()
	opts := run.Lock
	opts.Fencing = false
	locker, err := lock.New(client, opts)
	if err != nil {
		return rep, fmt.Errorf("faulttest: %w", err)
	}
	defer locker.Close()

	var (
		mu       sync.Mutex
		grants   []FailoverGrant
		phase    atomic.Int32 // 0 before, 1 during, 2 after the failover
		seq      atomic.Int64
		after    atomic.Int64 // grants acknowledged in phase 2
		acked    atomic.Int64
		started  = make(chan struct{})
		stop     = make(chan struct{})
		stopOnce sync.Once
		start    sync.Once
	)
	halt := func() { stopOnce.Do(func() { close(stop) }) }
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()

	var wg sync.WaitGroup
	for range run.Goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case <-runCtx.Done():
					return
				default:
				}
				n := seq.Add(1)
				res := int(n % int64(run.Resources))
				leaseKey := fmt.Sprintf("{r%d}:lease:%d", res, n)
				counter := fmt.Sprintf("{r%d}:fence", res)
				ph := int(phase.Load())
				octx, ocancel := context.WithTimeout(runCtx, run.OpTimeout)
				lk, err := locker.TryAcquireFenced(octx, leaseKey, counter, run.TTL)
				at := time.Now()
				ocancel()
				mu.Lock()
				rep.Attempts++
				switch {
				case err == nil:
					// Before: the attempt ended before Failover was
					// called; after: it began after Failover returned;
					// during: it overlapped the failover.
					if p := int(phase.Load()); p > ph {
						ph = 1
					}
					grants = append(grants, FailoverGrant{Resource: res, Key: lk.Key(), Token: lk.Token(), Fence: lk.FencingToken(), Phase: ph, At: at})
				case errors.Is(err, primitives.ErrNotReplicated):
					rep.NotReplicated++
				case runCtx.Err() != nil || pastDeadline(runCtx):
					rep.Aborted++ // ctx ended: the caller's, not the deployment's doing
				default:
					rep.Failed++
					// The key would make every message unique.
					msg := strings.ReplaceAll(err.Error(), leaseKey, "KEY")
					if len(msg) > 100 {
						msg = msg[:100]
					}
					rep.Errors[msg]++
				}
				mu.Unlock()
				if err != nil {
					if runCtx.Err() == nil {
						time.Sleep(5 * time.Millisecond) // a failing deployment: do not spin
					}
					continue
				}
				if a := acked.Add(1); a >= int64(run.FailoverAfter) {
					start.Do(func() {
						phase.Store(1)
						close(started)
					})
				}
				if ph == 2 && after.Add(1) >= int64(run.After) {
					halt()
				}
			}
		}()
	}

	var runErr error
	select {
	case <-started:
		foStart := time.Now()
		runErr = run.Failover(runCtx)
		took := time.Since(foStart)
		phase.Store(2)
		mu.Lock()
		rep.FailoverAt, rep.FailoverTook = foStart, took
		mu.Unlock()
		if runErr != nil {
			runErr = fmt.Errorf("faulttest: failover: %w", runErr)
		} else if ctx.Err() != nil {
			runErr = ctx.Err()
		}
	case <-ctx.Done():
		runErr = ctx.Err()
	}
	if runErr == nil {
		select {
		case <-stop:
		case <-ctx.Done():
			runErr = fmt.Errorf("faulttest: %d of %d grants after the failover: %w", after.Load(), run.After, ctx.Err())
		}
	}
	halt()
	if runErr != nil {
		cancel() // otherwise in-flight attempts finish: none counts as failed
	}
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	for _, g := range grants {
		rep.Acked++
		switch g.Phase {
		case 0:
			rep.AckedBefore++
		case 1:
			rep.AckedDuring++
		default:
			rep.AckedAfter++
		}
	}
	rep.duplicates(grants)
	if runErr != nil {
		return rep, runErr
	}
	if err := rep.check(ctx, client, grants, run.CheckTimeout); err != nil {
		return rep, err
	}
	return rep, nil
}

// duplicates counts the fencing tokens two acknowledged grants of one
// resource share.
func (r *FailoverReport) duplicates(grants []FailoverGrant) {
	type key struct {
		res   int
		fence int64
	}
	first := map[key]FailoverGrant{}
	for _, g := range grants {
		k := key{g.Resource, g.Fence}
		if f, ok := first[k]; ok {
			r.DuplicateTokens++
			if len(r.Duplicates) < 10 {
				r.Duplicates = append(r.Duplicates, [2]FailoverGrant{f, g})
			}
			continue
		}
		first[k] = g
	}
}

// check reads every acknowledged grant's key, in batches, retrying
// batches that fail with a transport error until timeout, and counts the
// grants whose key no longer holds their token.
func (r *FailoverReport) check(ctx context.Context, client rueidis.Client, grants []FailoverGrant, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	sorted := slices.Clone(grants)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Key < sorted[j].Key })
	const batch = 100
	for i := 0; i < len(sorted); i += batch {
		part := sorted[i:min(i+batch, len(sorted))]
		for {
			cmds := make(rueidis.Commands, len(part))
			for j, g := range part {
				cmds[j] = client.B().Get().Key(g.Key).Build()
			}
			res := client.DoMulti(ctx, cmds...)
			var transport error
			for _, rr := range res {
				if err := rr.Error(); err != nil && !rueidis.IsRedisNil(err) {
					transport = err
					break
				}
			}
			if transport == nil {
				for j, g := range part {
					v, err := res[j].ToString()
					if err != nil || v != g.Token {
						r.Lost++
						r.LostBy[min(max(g.Phase, 0), 2)]++
						if r.LostFirst.IsZero() || g.At.Before(r.LostFirst) {
							r.LostFirst = g.At
						}
						if g.At.After(r.LostLast) {
							r.LostLast = g.At
						}
						if len(r.Losses) < 10 {
							r.Losses = append(r.Losses, g)
						}
					}
				}
				break
			}
			if ctx.Err() != nil {
				return fmt.Errorf("faulttest: checking the grants: %w (last error: %v)", ctx.Err(), transport)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// ErrorSummary lists Errors, most frequent first, one per line.
func (r FailoverReport) ErrorSummary() string {
	type kv struct {
		msg string
		n   int
	}
	var all []kv
	for m, n := range r.Errors {
		all = append(all, kv{m, n})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].n > all[j].n || all[i].n == all[j].n && all[i].msg < all[j].msg })
	var b strings.Builder
	for _, e := range all {
		fmt.Fprintf(&b, "%6d %s\n", e.n, e.msg)
	}
	return b.String()
}

// pastDeadline reports whether ctx's deadline has passed, whether or not
// its timer has fired yet: rueidis fails a command from the deadline
// itself, and under load the timer that sets ctx.Err() can fire
// milliseconds later.
func pastDeadline(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}
