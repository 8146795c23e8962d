package ratelimit_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/ratetest"
	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives/ratelimit"
	"github.com/redis/rueidis"
)

// The precision harness measures what the package documentation promises,
// on grant instants in server time (Result.ServerTime), with every unknown
// outcome (an error) counted as a grant:
//
//   - load: 3 clients × 4 goroutines hammer one key for 5.5 s (1.5 s
//     under -short); they retry at once or after RetryAfter, or queue in
//     Acquire, and some ask for several permits. Then: the most grants in
//     any window, token-bucket excess over many spans, fixed windows one
//     by one, RetryAfter never longer than needed (no grant of as many
//     permits came before it ran out, within a tick), and a lower bound
//     on the total so a limiter that stops refilling fails.
//   - trials: one caller per key fills a small limiter and is refused;
//     "retry" trials come back RetryAfter+10ms later and must succeed;
//     "probe" trials ask every half millisecond around the instant
//     RetryAfter named, which brackets the true availability between the
//     last refusal and the first grant: a refusal after RetryAfter ran
//     out (it was early) fails without tolerance, a grant more than a
//     tick before (it was longer than needed) fails. For the sliding
//     window they also bracket it against an exact sliding log over the
//     fill's grants.

// spec is one limiter's parameters.
type spec struct {
	alg      ratelimit.Algorithm
	limit    int64
	window   time.Duration // sliding and fixed windows
	segments int           // sliding window
	per      int64         // token bucket: tokens per period
	period   time.Duration // token bucket
}

func (s spec) make(ls *ratelimit.Limiters, key string, queue int64) (*ratelimit.Limiter, error) {
	switch s.alg {
	case ratelimit.FixedWindowAlgorithm:
		return ls.FixedWindow(key, ratelimit.FixedWindowOptions{Limit: s.limit, Window: s.window, QueueLimit: queue})
	case ratelimit.SlidingWindowAlgorithm:
		return ls.SlidingWindow(key, ratelimit.SlidingWindowOptions{Limit: s.limit, Window: s.window, Segments: s.segments, QueueLimit: queue})
	default:
		return ls.TokenBucket(key, ratelimit.TokenBucketOptions{Limit: s.limit, TokensPerPeriod: s.per, Period: s.period, QueueLimit: queue})
	}
}

// seg is a sliding window's segment, as the script computes it (whole
// microseconds, rounded down); 0 for the other algorithms.
func (s spec) seg() time.Duration {
	if s.segments == 0 {
		return 0
	}
	return time.Duration(s.window.Microseconds()/int64(s.segments)) * time.Microsecond
}

// Parameters. Load: windows long enough that a round trip under -race
// (~0.1–1 ms) is small beside them, short enough that a run holds 25+
// windows. Trials: 50–60 ms windows, so 140 trials take about a second
// on 8 keys at once.
var (
	loadSliding  = spec{alg: ratelimit.SlidingWindowAlgorithm, limit: 40, window: 200 * time.Millisecond, segments: 10}
	loadBucket   = spec{alg: ratelimit.TokenBucketAlgorithm, limit: 20, per: 4, period: 40 * time.Millisecond}
	loadFixed    = spec{alg: ratelimit.FixedWindowAlgorithm, limit: 30, window: 200 * time.Millisecond}
	trialSliding = spec{alg: ratelimit.SlidingWindowAlgorithm, limit: 8, window: 60 * time.Millisecond, segments: 6}
	trialBucket  = spec{alg: ratelimit.TokenBucketAlgorithm, limit: 6, per: 2, period: 25 * time.Millisecond}
	trialFixed   = spec{alg: ratelimit.FixedWindowAlgorithm, limit: 8, window: 60 * time.Millisecond}
)

const (
	loadClients    = 3
	loadGoroutines = 4
	trialWorkers   = 8
	// minShare is the share of what the limit allows over a run that the
	// load must get: a limiter that stops refilling gets a few windows'
	// worth and fails.
	minShare = 0.9
	// retryLate is how long after RetryAfter a retry trial comes back, and
	// minRetryRate the share of retry trials that must then succeed.
	retryLate    = 10 * time.Millisecond
	minRetryRate = 0.99
	// tick rounds RetryAfter's comparison with grant instants: a fixed
	// window's counter expires in whole milliseconds, so its RetryAfter
	// ((PTTL+1) ms) may end up to 1 ms after the counter is gone.
	tick = time.Millisecond
	// probeEvery is the probe trials' spacing. A trial brackets the
	// instant the permits came back between its last refusal and its
	// first grant; whether they were back in time is decided by the
	// refusals, without slack (a refusal proves they were not back yet).
	// probeSlack bounds how late after that instant the first grant may
	// come in a trial whose bracket is that narrow: one spacing, a round
	// trip, and a scheduling delay of a goroutine on a loaded 2-core CI
	// machine under -race.
	probeEvery = 500 * time.Microsecond
	probeSlack = 10 * time.Millisecond
	// minSharp is the share of the probe trials asked for that must be
	// sharp (their last refusal and first grant within probeSlack) for the
	// sliding window's one-segment bound to count as measured: on a busy
	// machine a probe goroutine now and then waits tens of milliseconds
	// for a CPU (seen: 18 of 40 trials, at a load average of 8 on 2
	// cores), so stalled trials are made up for by up to as many more.
	minSharp = 0.75
)

func durations() (load time.Duration, retries, probes int) {
	if testing.Short() {
		return 1500 * time.Millisecond, 30, 40
	}
	return 5500 * time.Millisecond, 100, 40
}

// TestPrecision runs the harness for the three algorithms on Redis 7.0
// and on a 3-master Redis 8.0 cluster, in parallel (as far as -parallel
// lets) on separate keys: about 7.5 s each.
func TestPrecision(t *testing.T) {
	t.Run("redis7", func(t *testing.T) {
		t.Parallel()
		s := redistest.Start(t)
		clients := make([]rueidis.Client, loadClients)
		for i := range clients {
			clients[i] = s.Client(t)
		}
		for _, c := range [][2]spec{{loadSliding, trialSliding}, {loadBucket, trialBucket}, {loadFixed, trialFixed}} {
			t.Run(c[0].alg.String(), func(t *testing.T) {
				t.Parallel()
				precision(t, clients, "p7:"+c[0].alg.String()+":", c[0], c[1])
			})
		}
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		cl := redistest.StartCluster(t, 3, redistest.Version(8))
		clients := make([]rueidis.Client, loadClients)
		for i := range clients {
			clients[i] = cl.Client(t)
		}
		for _, c := range [][2]spec{{loadSliding, trialSliding}, {loadBucket, trialBucket}, {loadFixed, trialFixed}} {
			t.Run(c[0].alg.String(), func(t *testing.T) {
				t.Parallel()
				precision(t, clients, "pc:"+c[0].alg.String()+":", c[0], c[1])
			})
		}
	})
}

func precision(t *testing.T, clients []rueidis.Client, prefix string, load, trial spec) {
	d, retries, probes := durations()
	ctx := xtest.Ctx(t, d+60*time.Second)
	lims := make([]*ratelimit.Limiter, len(clients))
	for i, c := range clients {
		ls, err := ratelimit.New(c, ratelimit.Options{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		if lims[i], err = load.make(ls, "load", 3); err != nil {
			t.Fatal(err)
		}
		defer lims[i].Close()
	}
	checkLoad(t, load, runLoad(ctx, lims, d))
	checkTrials(t, trial, runTrials(ctx, t, clients, prefix, trial, retries, probes), probes)
}

// Load roles, one goroutine of each per client.
const (
	eager    = iota // 1 permit, retries at once (0.2ms later)
	patient         // 1–3 permits, retries after RetryAfter
	queueing        // 1–2 permits through Acquire (queue of 3)
	mixed           // 1–2 permits, retries at once or after RetryAfter
)

type call struct {
	sent, got time.Time
	n         int64
	res       ratelimit.Result
}

type worker struct {
	lim       *ratelimit.Limiter
	role      int
	rng       *rand.Rand
	decisions int
	grants    []call
	unknown   []call
	errs      []error
	refusals  []ratetest.Refusal
	noRetry   int // refusals with RetryAfter 0 (never due: n <= limit here)
}

func runLoad(ctx context.Context, lims []*ratelimit.Limiter, d time.Duration) []*worker {
	stopAt := time.Now().Add(d)
	var (
		wg sync.WaitGroup
		ws []*worker
	)
	for ci, lim := range lims {
		for role := range loadGoroutines {
			w := &worker{lim: lim, role: role, rng: rand.New(rand.NewPCG(uint64(ci), uint64(role)))}
			ws = append(ws, w)
			wg.Add(1)
			go func() {
				defer wg.Done()
				w.run(ctx, stopAt)
			}()
		}
	}
	wg.Wait()
	return ws
}

func (w *worker) run(ctx context.Context, stopAt time.Time) {
	for time.Now().Before(stopAt) && ctx.Err() == nil {
		n := int64(1)
		switch w.role {
		case patient:
			n = 1 + w.rng.Int64N(3)
		case queueing, mixed:
			n = 1 + w.rng.Int64N(2)
		}
		sent := time.Now()
		var (
			res ratelimit.Result
			err error
		)
		if w.role == queueing {
			res, err = w.lim.Acquire(ctx, n)
		} else {
			res, err = w.lim.TryAcquire(ctx, n)
		}
		c := call{sent: sent, got: time.Now(), n: n, res: res}
		w.decisions++
		switch {
		case err != nil:
			w.unknown = append(w.unknown, c)
			w.errs = append(w.errs, err)
			sleep(ctx, time.Millisecond)
		case res.Acquired && res.ServerTime.IsZero():
			w.unknown = append(w.unknown, c) // granted, but when is unknown
		case res.Acquired:
			w.grants = append(w.grants, c)
		default:
			w.refusals = append(w.refusals, ratetest.Refusal{At: res.ServerTime, N: n, RetryAfter: res.RetryAfter})
			if res.RetryAfter <= 0 {
				w.noRetry++
			}
			if w.role == patient || w.role == queueing || (w.role == mixed && w.rng.IntN(2) == 0) {
				sleep(ctx, res.RetryAfter)
			} else {
				// "At once" is a fifth of a millisecond: enough to land
				// on every boundary of these windows (ms), without
				// spinning two cores that the rest of the suite shares.
				sleep(ctx, 200*time.Microsecond)
			}
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// loadRun is the merged record of a load.
type loadRun struct {
	known     []ratetest.Grant // grants with a server time
	all       []ratetest.Grant // known and unknown outcomes (placed by the clock offset)
	windows   []ratetest.WindowGrant
	refusals  []ratetest.Refusal
	decisions int
	unknown   int
	noRetry   int
	errs      []error
	first     time.Time
	span      time.Duration // server time from the first decision to the last
	// idle is the time within span in which no decision reached the
	// server for longer than idleGap (less idleGap each time): the load's
	// goroutines were all waiting for a CPU, and the limiter had no one
	// to grant to. The lower bound on grants counts span-idle.
	idle time.Duration
}

// idleGap is a pause between decisions that counts as the load stalling:
// with 12 goroutines, 3 of them retrying at once, decisions normally
// arrive every 0.1-0.5 ms.
const idleGap = 5 * time.Millisecond

// idleTime sums the gaps longer than idleGap between the sorted instants.
func idleTime(at []time.Time) time.Duration {
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	var idle time.Duration
	for i := 1; i < len(at); i++ {
		if gap := at[i].Sub(at[i-1]); gap > idleGap {
			idle += gap - idleGap
		}
	}
	return idle
}

func merge(ws []*worker) loadRun {
	var (
		r   loadRun
		off ratetest.ClockOffset
	)
	var (
		last time.Time
		all  []time.Time
	)
	see := func(at time.Time) {
		if r.first.IsZero() || at.Before(r.first) {
			r.first = at
		}
		if at.After(last) {
			last = at
		}
		all = append(all, at)
	}
	for _, w := range ws {
		r.decisions += w.decisions
		r.noRetry += w.noRetry
		r.errs = append(r.errs, w.errs...)
		for _, c := range w.grants {
			off.Observe(c.sent, c.got, c.res.ServerTime)
			g := ratetest.Grant{At: c.res.ServerTime, N: c.n}
			r.known = append(r.known, g)
			r.all = append(r.all, g)
			r.windows = append(r.windows, ratetest.WindowGrant{At: g.At, N: g.N, End: g.At.Add(c.res.ResetAfter)})
			see(g.At)
		}
		for _, f := range w.refusals {
			r.refusals = append(r.refusals, f)
			see(f.At)
		}
	}
	for _, w := range ws {
		for _, c := range w.unknown {
			at := off.Place(c.sent, c.got)
			r.unknown++
			r.all = append(r.all, ratetest.Grant{At: at, N: c.n})
			r.windows = append(r.windows, ratetest.WindowGrant{At: at, N: c.n})
		}
	}
	r.span = last.Sub(r.first)
	r.idle = idleTime(all)
	return r
}

func checkLoad(t *testing.T, s spec, ws []*worker) {
	t.Helper()
	r := merge(ws)
	known := ratetest.Total(r.known)
	t.Logf("load: %d decisions by %d goroutines over %v of server time: %d permits granted in %d grants, %d refusals, %d unknown outcomes",
		r.decisions, len(ws), r.span.Round(time.Millisecond), known, len(r.known), len(r.refusals), r.unknown)
	busy := r.span - r.idle
	t.Logf("load stalled (no decision for more than %v) for %v in all: the lower bound counts T = %v", idleGap, r.idle.Round(time.Microsecond), busy.Round(time.Millisecond))
	for i, err := range r.errs {
		if i < 5 {
			t.Logf("unknown outcome (counted as granted): %v", err)
		}
	}
	if len(r.refusals) == 0 || len(r.known) == 0 {
		t.Fatalf("no real load: %d grants, %d refusals", len(r.known), len(r.refusals))
	}
	if r.noRetry > 0 {
		t.Errorf("%d refusals of at most the limit came without a RetryAfter", r.noRetry)
	}

	// RetryAfter is never longer than needed: no grant of as many permits
	// came before it ran out (minus the fixed window's millisecond).
	worst, ref, g, found := ratetest.Overstated(r.known, r.refusals)
	if found {
		t.Logf("RetryAfter vs the next grant of as many permits: worst %v before it ran out (negative: after; tolerance %v)", worst, tick)
		if worst > tick {
			t.Errorf("RetryAfter too long: refused %d permits at %v with RetryAfter %v, yet %d were granted at %v (%v before)",
				ref.N, ref.At.Sub(r.first), ref.RetryAfter, g.N, g.At.Sub(r.first), worst)
		}
	}

	switch s.alg {
	case ratelimit.SlidingWindowAlgorithm:
		most, from := ratetest.MaxIn(r.all, s.window)
		seg := s.seg()
		allowed := float64(s.limit) * busy.Seconds() / (s.window + seg).Seconds()
		t.Logf("sliding window (limit %d per %v, segment %v): most in any %v: %d (at +%v); %d permits = %.1f%% of limit·T/(W+seg) = %.0f, %.1f%% of limit·T/W",
			s.limit, s.window, seg, s.window, most, from.Sub(r.first).Round(time.Millisecond), known,
			100*float64(known)/allowed, allowed, 100*float64(known)/(float64(s.limit)*busy.Seconds()/s.window.Seconds()))
		if most != s.limit {
			t.Errorf("the most permits in any %v are %d (unknown outcomes included), want exactly the limit %d", s.window, most, s.limit)
		}
		// A saturated sliding window gives its permits back one segment
		// after the window (the segment a permit is counted in ends up
		// to one segment after it): limit per W+seg is its full rate.
		if float64(known) < minShare*allowed {
			t.Errorf("only %d permits granted over %v (%v of it stalled), want at least %.0f%% of %.0f", known, r.span, r.idle, 100*minShare, allowed)
		}

	case ratelimit.TokenBucketAlgorithm:
		spans := int(r.span / s.period)
		excess, at := ratetest.BucketExcess(r.all, s.limit, s.per, s.period, spans)
		onePeriod, _ := ratetest.MaxIn(r.all, s.period)
		allowed := float64(s.limit + s.per*int64(busy/s.period))
		t.Logf("token bucket (%d, +%d per %v): worst excess over limit+per·⌈D/period⌉ for D = 1..%d periods: %d (at D=%v); most in one period %d; %d permits = %.1f%% of limit+per·⌊T/period⌋ = %.0f",
			s.limit, s.per, s.period, spans, excess, at, onePeriod, known, 100*float64(known)/allowed, allowed)
		if excess > 0 {
			t.Errorf("%d permits too many in an interval of %v (unknown outcomes included)", excess, at)
		}
		if float64(known) < minShare*allowed {
			t.Errorf("only %d permits granted over %v (%v of it stalled), want at least %.0f%% of %.0f", known, r.span, r.idle, 100*minShare, allowed)
		}

	case ratelimit.FixedWindowAlgorithm:
		checkFixedWindows(t, s, r)
		most, from := ratetest.MaxIn(r.all, s.window)
		allowed := float64(s.limit) * busy.Seconds() / s.window.Seconds()
		t.Logf("fixed window (limit %d per %v): most in any %v: %d (at +%v), bound 2×limit = %d; %d permits = %.1f%% of limit·T/W = %.0f",
			s.limit, s.window, s.window, most, from.Sub(r.first).Round(time.Millisecond), 2*s.limit, known, 100*float64(known)/allowed, allowed)
		if most > 2*s.limit {
			t.Errorf("%d permits in an interval of %v, more than twice the limit %d", most, s.window, s.limit)
		}
		if float64(known) < minShare*allowed {
			t.Errorf("only %d permits granted over %v (%v of it stalled), want at least %.0f%% of %.0f", known, r.span, r.idle, 100*minShare, allowed)
		}
	}
}

// checkFixedWindows checks each fixed window: at most the limit in it, and
// that the windows are what they claim (the ends the grants report put
// them W to W+1ms long, one after another), so grouping by reported end
// cannot hide an overfull window.
func checkFixedWindows(t *testing.T, s spec, r loadRun) {
	t.Helper()
	ws := ratetest.FixedWindows(r.windows, s.window)
	var most, fullest int64
	var lengthLo, lengthHi, gapLo time.Duration = 1 << 62, 0, 1 << 62
	for i, w := range ws {
		most = max(most, w.N)
		if w.N == s.limit {
			fullest++
		}
		if w.N > s.limit {
			t.Errorf("window %d (from +%v to +%v) counted %d permits (%d unknown), limit %d",
				i, w.Start.Sub(r.first), w.End.Sub(r.first), w.N, w.Unknown, s.limit)
		}
		if w.End.IsZero() {
			continue // only unknown outcomes after the last window
		}
		length := w.End.Sub(w.Start)
		lengthLo, lengthHi = min(lengthLo, length), max(lengthHi, length)
		// The counter's expiry is set in whole milliseconds when the first
		// grant runs, and ResetAfter is (PTTL+1) ms: W to W+1ms, plus a
		// margin for the script's own run time.
		if w.Unknown == 0 && (length < s.window || length > s.window+2*tick) {
			t.Errorf("window %d runs %v from its first grant, want %v to %v", i, length, s.window, s.window+2*tick)
		}
		if w.Last.After(w.End) {
			t.Errorf("window %d has a grant at +%v after its end +%v", i, w.Last.Sub(r.first), w.End.Sub(r.first))
		}
		if i > 0 && !ws[i-1].End.IsZero() {
			gap := w.Start.Sub(ws[i-1].End)
			gapLo = min(gapLo, gap)
			// The previous counter is gone at most a tick (and the
			// script's run time) before its reported end.
			if gap < -2*tick {
				t.Errorf("window %d starts at +%v, %v before window %d ends", i, w.Start.Sub(r.first), -gap, i-1)
			}
		}
	}
	t.Logf("fixed windows: %d, most in one %d (limit %d), %d full; lengths %v..%v; next window's first grant %v after the previous end (min)",
		len(ws), most, s.limit, fullest, lengthLo, lengthHi, gapLo)
}

// Trials.

type trialResult struct {
	n        int64
	probe    bool
	retryOK  bool
	retryErr string
	// probe trials, in server time
	refusedAt  time.Time // the fill's refusal
	retryAfter time.Duration
	due        time.Time // refusal + RetryAfter
	lastRefuse time.Time // the last refused probe (zero: none)
	firstGrant time.Time
	exact      time.Time // sliding: an exact sliding log's availability after the fill
	probes     int
	fillSpan   time.Duration // from the fill's first grant to its refusal
	fillLog    []string      // the fill's grants: server time + ResetAfter
}

// sharp reports whether a probe trial bracketed the instant its permits
// came back within probeSlack: its last refusal and first grant lie that
// close (a stalled probe goroutine brackets it loosely).
func (tr trialResult) sharp() bool {
	return tr.probe && !tr.lastRefuse.IsZero() && tr.firstGrant.Sub(tr.lastRefuse) <= probeSlack
}

// runTrials runs the retry trials and then the probe trials, 8 keys at a
// time. A probe trial whose probes stalled (see sharp) is made up for by
// another, up to probes more, so a busy machine does not leave the
// sliding window's bound unmeasured.
func runTrials(ctx context.Context, t *testing.T, clients []rueidis.Client, prefix string, s spec, retries, probes int) []trialResult {
	t.Helper()
	out := make([]trialResult, retries+2*probes)
	errs := make([]error, trialWorkers)
	var next, sharp atomic.Int64
	var wg sync.WaitGroup
	for wi := range trialWorkers {
		ls, err := ratelimit.New(clients[wi%len(clients)], ratelimit.Options{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(wi), 7))
			for {
				i := int(next.Add(1) - 1)
				if i >= len(out) || errs[wi] != nil || (i >= retries+probes && sharp.Load() >= int64(probes)) {
					return
				}
				lim, err := s.make(ls, fmt.Sprintf("trial:%d", i), 0)
				if err != nil {
					errs[wi] = err
					return
				}
				out[i], errs[wi] = oneTrial(ctx, lim, s, int64(1+i%3), i >= retries, rng)
				lim.Close()
				if errs[wi] != nil {
					errs[wi] = fmt.Errorf("trial %d: %w", i, errs[wi])
				}
				if out[i].sharp() {
					sharp.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	ran := out[:0]
	for _, tr := range out {
		if tr.n > 0 {
			ran = append(ran, tr)
		}
	}
	return ran
}

// oneTrial fills a fresh limiter with grants of n permits until refused,
// then retries once after RetryAfter+retryLate, or probes around the
// instant the permits should be back.
func oneTrial(ctx context.Context, lim *ratelimit.Limiter, s spec, n int64, probe bool, rng *rand.Rand) (trialResult, error) {
	tr := trialResult{n: n, probe: probe}
	// Start at a random phase of the segment, period or millisecond grid.
	phase := time.Millisecond
	switch s.alg {
	case ratelimit.SlidingWindowAlgorithm:
		phase = s.seg()
	case ratelimit.TokenBucketAlgorithm:
		phase = s.period
	}
	sleep(ctx, time.Duration(rng.Int64N(int64(phase))))

	var fill []ratetest.Grant
	var refused ratelimit.Result
	var recv time.Time
	for {
		res, err := lim.TryAcquire(ctx, n)
		if err != nil {
			return tr, err
		}
		if !res.Acquired {
			refused, recv = res, time.Now()
			break
		}
		fill = append(fill, ratetest.Grant{At: res.ServerTime, N: n})
		tr.fillLog = append(tr.fillLog, fmt.Sprintf("%v+%v", res.ServerTime.Format(stamp), res.ResetAfter))
		// The fill normally takes a few round trips; a slow one may see
		// permits come back meanwhile, but never without end.
		if len(fill) > 4*int(s.limit) {
			return tr, fmt.Errorf("still granting %d permits after %d grants over %v, limit %d",
				n, len(fill), fill[len(fill)-1].At.Sub(fill[0].At), s.limit)
		}
	}
	if refused.RetryAfter <= 0 || refused.ServerTime.IsZero() {
		return tr, fmt.Errorf("refused %d permits without RetryAfter or server time: %+v", n, refused)
	}
	tr.refusedAt, tr.retryAfter = refused.ServerTime, refused.RetryAfter
	tr.due = refused.ServerTime.Add(refused.RetryAfter)
	if len(fill) > 0 {
		tr.fillSpan = refused.ServerTime.Sub(fill[0].At)
	}
	// The local instant at which the server's clock shows x: the reply
	// arrived at recv, after the server decided at refused.ServerTime.
	local := func(x time.Time) time.Time { return recv.Add(x.Sub(refused.ServerTime)) }

	if !probe {
		sleep(ctx, time.Until(local(tr.due).Add(retryLate)))
		res, err := lim.TryAcquire(ctx, n)
		switch {
		case err != nil:
			tr.retryErr = err.Error()
		case !res.Acquired:
			tr.retryErr = fmt.Sprintf("refused %v after RetryAfter ran out (RetryAfter %v, then %+v)", res.ServerTime.Sub(tr.due), refused.RetryAfter, res)
		default:
			tr.retryOK = true
		}
		return tr, nil
	}

	from := tr.due
	if s.alg == ratelimit.SlidingWindowAlgorithm {
		tr.exact = ratetest.SlidingAvailable(fill, s.limit, s.window, n)
		if tr.exact.Before(from) {
			from = tr.exact
		}
	}
	sleep(ctx, time.Until(local(from).Add(-3*time.Millisecond)))
	giveUp := time.Now().Add(s.window + s.period + 100*time.Millisecond)
	for {
		res, err := lim.TryAcquire(ctx, n)
		if err != nil {
			return tr, err
		}
		tr.probes++
		if res.Acquired {
			tr.firstGrant = res.ServerTime
			return tr, nil
		}
		tr.lastRefuse = res.ServerTime
		if time.Now().After(giveUp) {
			return tr, fmt.Errorf("%d permits still refused %v after RetryAfter ran out", n, res.ServerTime.Sub(tr.due))
		}
		sleep(ctx, probeEvery)
	}
}

// stamp formats server instants in failure messages.
const stamp = "15:04:05.000000"

func checkTrials(t *testing.T, s spec, trs []trialResult, wantSharp int) {
	t.Helper()
	var retries, retryOK, probes int
	var (
		early, overstated, resol, worstLate time.Duration = -1 << 62, -1 << 62, 0, -1 << 62
		extraLo, extraHi, beyond            time.Duration = 1 << 62, -1 << 62, -1 << 62
		extraSum                            time.Duration
		sharp                               int
	)
	seg := s.seg()
	var fillSpan time.Duration
	for i, tr := range trs {
		fillSpan = max(fillSpan, tr.fillSpan)
		if !tr.probe {
			retries++
			if tr.retryOK {
				retryOK++
			} else {
				t.Logf("retry trial %d (%d permits): %s", i, tr.n, tr.retryErr)
			}
			continue
		}
		probes++
		// A refusal at or after the instant RetryAfter named: it was early.
		if !tr.lastRefuse.IsZero() {
			early = max(early, tr.lastRefuse.Sub(tr.due))
		}
		// A grant more than a tick before it: RetryAfter was too long.
		overstated = max(overstated, tr.due.Sub(tr.firstGrant))
		if !tr.lastRefuse.IsZero() {
			resol = max(resol, tr.firstGrant.Sub(tr.lastRefuse))
		}
		if !tr.lastRefuse.IsZero() && !tr.lastRefuse.Before(tr.due) {
			t.Errorf("probe trial %d (%d permits): refused at server time %v, %v after RetryAfter ran out (fill %v, refused at %v with RetryAfter %v)",
				i, tr.n, tr.lastRefuse.Format(stamp), tr.lastRefuse.Sub(tr.due), tr.fillLog, tr.refusedAt.Format(stamp), tr.retryAfter)
		}
		if tr.due.Sub(tr.firstGrant) > tick {
			t.Errorf("probe trial %d (%d permits): granted at server time %v, %v before RetryAfter ran out (fill %v, refused at %v with RetryAfter %v; tolerance %v)",
				i, tr.n, tr.firstGrant.Format(stamp), tr.due.Sub(tr.firstGrant), tr.fillLog, tr.refusedAt.Format(stamp), tr.retryAfter, tick)
		}
		if s.alg != ratelimit.SlidingWindowAlgorithm {
			continue
		}
		// Against an exact sliding log: never before it, never more than
		// a segment after it (decided by the refusals, exactly), and the
		// first grant within probeSlack of that when the probes were
		// dense enough to tell (a stalled probe goroutine brackets the
		// instant loosely and the trial tells nothing about the bound).
		extra := tr.firstGrant.Sub(tr.exact)
		beyond = max(beyond, tr.due.Sub(tr.exact.Add(seg)))
		if !tr.lastRefuse.IsZero() {
			worstLate = max(worstLate, tr.lastRefuse.Sub(tr.exact.Add(seg)))
		}
		conclusive := tr.sharp()
		if conclusive {
			sharp++
			extraLo, extraHi, extraSum = min(extraLo, extra), max(extraHi, extra), extraSum+extra
		}
		switch {
		case tr.firstGrant.Before(tr.exact):
			t.Errorf("probe trial %d (%d permits): granted %v before an exact sliding log would", i, tr.n, tr.exact.Sub(tr.firstGrant))
		case !tr.lastRefuse.IsZero() && !tr.lastRefuse.Before(tr.exact.Add(seg)):
			t.Errorf("probe trial %d (%d permits): refused %v after an exact sliding log would grant, more than a segment (%v)", i, tr.n, tr.lastRefuse.Sub(tr.exact), seg)
		case conclusive && extra > seg+probeSlack:
			t.Errorf("probe trial %d (%d permits): first grant %v after an exact sliding log's, more than a segment (%v) + %v", i, tr.n, extra, seg, probeSlack)
		}
		if tr.due.After(tr.exact.Add(seg)) {
			t.Errorf("probe trial %d (%d permits): RetryAfter ends %v after an exact sliding log's availability, more than a segment (%v)", i, tr.n, tr.due.Sub(tr.exact), seg)
		}
	}
	rate := float64(retryOK) / float64(retries)
	t.Logf("trials (%s, limit %d): retry at RetryAfter+%v succeeded %d/%d (%.1f%%); longest fill %v", s.alg, s.limit, retryLate, retryOK, retries, 100*rate, fillSpan)
	t.Logf("probe trials: %d; last refusal vs RetryAfter's end: worst %v (must be < 0); first grant before RetryAfter's end: worst %v (tolerance %v); probe resolution (first grant − last refusal) worst %v",
		probes, early, overstated, tick, resol)
	if s.alg == ratelimit.SlidingWindowAlgorithm && probes > 0 {
		t.Logf("sliding window vs an exact sliding log (segment %v): last refusal vs exact+segment: worst %v (must be < 0); RetryAfter's end vs exact+segment: worst %v (must be ≤ 0)",
			seg, worstLate, beyond)
		if sharp > 0 {
			t.Logf("%d of %d probe trials bracketed the instant within %v: first grant later than the exact log's by %v..%v (mean %v)",
				sharp, probes, probeSlack, extraLo, extraHi, extraSum/time.Duration(sharp))
		}
		if float64(sharp) < minSharp*float64(wantSharp) {
			t.Errorf("only %d of %d probe trials bracketed the instant within %v (probe goroutines stalled), want %.0f: the one-segment bound was not measured", sharp, probes, probeSlack, minSharp*float64(wantSharp))
		}
	}
	if rate < minRetryRate {
		t.Errorf("retry at RetryAfter+%v succeeded in %d of %d trials, want at least %.0f%%", retryLate, retryOK, retries, 100*minRetryRate)
	}
}
