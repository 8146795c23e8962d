package main

import (
	"cmp"
	"fmt"
	"maps"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/coordhost/coordhost/policies/plugin"
	"github.com/coordhost/coordhost/policies/wasm"
)

type report struct {
	opts    options
	start   time.Time
	elapsed time.Duration
	server  *server

	throughput map[tpKey]*tpResult
	pinned     map[pinKey]*tpResult // section 1, 1 goroutine, pinned placements
	handoff    map[hoKey]*hoResult
	crash      map[crKey]*crashResult

	server8 *server             // section 5's Redis 8 server
	lease   map[hoKey]*hoResult // section 5
	prev    *prevResults        // -prev
	policy  *policyResult       // section 6

	setups    map[setupKey]*setupResult // section 7
	setupRows []setupRow

	rw             primResults   // section 8, throughput
	writerWait     []*wwResult   // section 8, writer wait
	latchWake      *lwResults    // section 8, latch wake-up
	redlock        primResults   // section 9
	redlockServers []*server     // section 9's extra servers
	rl             *rlResults    // section 10
	daemon         *daemonResult // section 11
	scale          *c12Results   // section 12

	loadStart, loadEnd string // /proc/loadavg at the start and the end
}

// adminCmds are the benchmark's own commands, left out of the counts.
var adminCmds = map[string]bool{"info": true, "config|resetstat": true}

// cmdCounts splits commandstats into all calls and client-sent commands,
// per release (n handoffs).
type cmdCounts struct {
	all, client float64
	// serverClient is all calls minus the script-internal ones: the
	// client-sent count when the implementation sends none of its scripts'
	// commands directly (equal to client then).
	serverClient float64
	breakdown    string
}

// countCmds: stats is INFO commandstats over the window; sent, when not
// nil, is what the implementation's client sent over the same window, and
// is then the client-sent count.
func countCmds(stats, sent map[string]int64, k kind, n int) cmdCounts {
	inner := map[string]bool{}
	for _, c := range k.scriptCmds {
		inner[c] = true
	}
	var all, client int64
	type kv struct {
		name string
		n    int64
	}
	var parts []kv
	for name, calls := range stats {
		if adminCmds[name] {
			continue
		}
		all += calls
		if !inner[name] {
			client += calls
		}
		parts = append(parts, kv{name, calls})
	}
	slices.SortFunc(parts, func(a, b kv) int {
		if c := cmp.Compare(b.n, a.n); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			b.WriteString(", ")
		}
		mark := ""
		if inner[p.name] {
			mark = "*"
		}
		fmt.Fprintf(&b, "%s%s %.2f", p.name, mark, float64(p.n)/float64(n))
		if inner[p.name] && sent[p.name] > 0 {
			fmt.Fprintf(&b, " (%.2f sent directly)", float64(sent[p.name])/float64(n))
		}
	}
	c := cmdCounts{all: float64(all) / float64(n), client: float64(client) / float64(n), serverClient: float64(client) / float64(n), breakdown: b.String()}
	if sent != nil {
		var s int64
		for _, v := range sent {
			s += v
		}
		c.client = float64(s) / float64(n)
	}
	return c
}

// overlap lists the commands k's scripts call that its client also sent
// directly in the window.
func overlap(sent map[string]int64, k kind) []string {
	var out []string
	for _, c := range k.scriptCmds {
		if sent[c] > 0 {
			out = append(out, strings.ToUpper(c))
		}
	}
	return out
}

func (r *report) markdown() string {
	var b strings.Builder
	o := r.opts
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }

	w("# lockbench results\n\n")
	w("Written by `make bench` (`go run ./cmd/lockbench -out RESULTS.md` in `bench/`); see `bench/README.md`. Regenerate rather than edit.\n\n")
	w("| | |\n|---|---|\n")
	w("| date | %s |\n", r.start.UTC().Format("2006-01-02 15:04 MST"))
	w("| Go | %s %s/%s |\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	w("| GOMAXPROCS / CPUs | %d / %d |\n", runtime.GOMAXPROCS(0), runtime.NumCPU())
	if r.server != nil {
		w("| Redis | %s (`%s`), one server on 127.0.0.1 started by the program, `--save '' --appendonly no`; Go program and server share the CPUs |\n", r.server.version, r.server.bin)
	} else {
		w("| Redis | not started (no section that needs it was run) |\n")
	}
	if r.server8 != nil {
		w("| Redis, section 5 | %s (`%s`), a second server started the same way for section 5 only (hash-field expiry needs ≥ 7.4); the first one idles meanwhile |\n", r.server8.version, r.server8.bin)
	}
	w("| repetitions | throughput: %d × %v after %v warm-up per cell, median; handoff: %d handoffs per configuration after %d discarded; crash: %d per configuration",
		o.reps, o.dur, o.warm, o.handoffs, o.handoffWarm, o.crashReps)
	if r.policy != nil {
		w("; policy consult: %d timed + %d untimed calls per native/wasm row, %d + %d for the plugin, over %d repetitions, median", o.policyCalls, o.policyCalls, o.pluginCalls, o.pluginCalls, o.reps)
	}
	w(" |\n")
	w("| libraries | %s |\n", depVersions())
	w("| run time | %v |\n", r.elapsed.Round(time.Second))
	if r.loadStart != "" {
		w("| load average (1, 5, 15 min) | %s at the start, %s at the end (2 CPUs; other work on the machine counts too) |\n", r.loadStart, r.loadEnd)
	}
	w("\n")

	r.targets(w)
	if r.throughput != nil {
		r.sectionThroughput(w)
	}
	if r.handoff != nil {
		r.sectionHandoff(w)
	}
	if r.crash != nil {
		r.sectionCrash(w)
	}
	if r.handoff != nil {
		r.sectionCommands(w)
	}
	if r.lease != nil {
		r.sectionLease(w)
	}
	if r.rw != nil || r.writerWait != nil || r.latchWake != nil {
		r.sectionRW(w)
	}
	if r.redlock != nil {
		r.sectionRedlock(w)
	}
	if r.rl != nil {
		r.sectionRateLimit(w)
	}
	if r.daemon != nil {
		r.sectionDaemon(w)
	}
	if r.scale != nil {
		r.sectionScaleOut(w)
	}
	if r.policy != nil {
		r.sectionPolicy(w)
	}
	if r.setups != nil {
		r.sectionSetups(w)
	}
	w("## Implementations\n\n")
	for _, k := range append(kinds(), leaseKinds()...) {
		w("- **%s**: %s.\n", k.name, k.note)
	}
	return b.String()
}

func verdict(ok bool) string {
	if ok {
		return "**PASS**"
	}
	return "**MISS**"
}

func (r *report) targets(w func(string, ...any)) {
	if r.throughput == nil && r.handoff == nil && r.crash == nil && r.policy == nil && r.writerWait == nil && r.latchWake == nil && r.rl == nil && r.daemon == nil && r.scale == nil {
		return // e.g. section 7 alone: no targets
	}
	w("## Targets\n\n")
	w("A throughput target passes only if both the ratio of the medians and the median of the same-repetition ratios meet it (the machine's load drifts; pairs measured seconds apart cancel most of it). Crash handoff: every repetition must meet it.")
	if r.policy != nil {
		w(" Policy consult (section 6): latencies are the median over the repetitions of each repetition's percentile, measured per call with the clock read included; a wasm or plugin row whose policy failed even once (answered by the fallback) misses its target.")
	}
	w("\n\n")
	w("| target | measured | verdict |\n|---|---|---|\n")
	if r.throughput != nil {
		for _, t := range []struct {
			kind, peer string
			conc       int
			want       float64
		}{
			{"coordhost", "raw rueidis", 64, 0.9},
			{"coordhost", "bsm/redislock", 64, 2},
			{"coordhost", "redsync", 64, 2},
			{"coordhost TryAcquireFenced", "raw rueidis", 1, 0.8},
			{"coordhost TryAcquireFenced", "raw rueidis", 64, 0.8},
		} {
			c, p := r.tpMedian(t.kind, t.conc), r.tpMedian(t.peer, t.conc)
			ratio := 0.0
			if p > 0 {
				ratio = c / p
			}
			paired, pmed := r.pairedRatios(t.kind, t.peer, t.conc)
			w("| %d goroutine%s: %s ≥ %.1f× %s | medians %s vs %s cycles/s = %.3f×; same-repetition ratios %s | %s |\n",
				t.conc, plural(t.conc), t.kind, t.want, t.peer, num(c), num(p), ratio, paired, verdict(p > 0 && ratio >= t.want && pmed >= t.want))
			if t.conc == 64 && t.peer == "redsync" {
				r.sequentialTargets(w)
			}
		}
	}
	if r.handoff != nil {
		h := r.handoff[hoKey{"coordhost", 100}]
		ok := h != nil && !h.chain.timedOut && h.chain.errs == 0 && len(h.chain.lats) > 0 && pct(h.chain.lats, 99) <= 2*time.Millisecond
		meas := "not run"
		if h != nil {
			meas = fmt.Sprintf("p99 %s over %d handoffs", dur(pct(h.chain.lats, 99)), len(h.chain.lats))
			if h.chain.timedOut {
				meas += " (timed out)"
			}
		}
		w("| handoff p99 ≤ 2 ms with 100 waiters (coordhost) | %s | %s |\n", meas, verdict(ok))
	}
	if r.crash != nil {
		c := r.crash[crKey{"coordhost", phaseFilled}]
		ok := c != nil && c.timeouts == 0 && c.skipped == 0 && c.firstErr == nil && len(c.lats) == r.opts.crashReps && pct(c.lats, 100) <= 10*time.Millisecond
		meas := "not run"
		if c != nil {
			meas = fmt.Sprintf("max %s, p50 %s over %d reps", dur(pct(c.lats, 100)), dur(pct(c.lats, 50)), len(c.lats))
			if c.timeouts > 0 {
				meas += fmt.Sprintf(", %d timeouts", c.timeouts)
			}
		}
		w("| crash handoff ≤ 10 ms after the TTL with %d keys (coordhost, every rep) | %s | %s |\n", r.opts.filler, meas, verdict(ok))
	}
	if r.handoff != nil {
		h := r.handoff[hoKey{"coordhost", r.opts.statsWaiters}]
		if h != nil && h.stats != nil && !h.chain.timedOut {
			c := countCmds(h.stats, h.sent, kindByName("coordhost"), r.opts.handoffs)
			w("| ≤ 5 commands per release with %d local waiters (coordhost, client-sent) | %.2f client-sent (%.2f all calls incl. inside scripts) | %s |\n",
				r.opts.statsWaiters, c.client, c.all, verdict(c.client <= 5))
			w("| same, counting every call inside scripts too (stricter reading) | %.2f | %s |\n", c.all, verdict(c.all <= 5))
		} else {
			w("| ≤ 5 commands per release with %d local waiters | not measured (run timed out) | **MISS** |\n", r.opts.statsWaiters)
		}
	}
	if r.writerWait != nil {
		r.writerWaitTargets(w)
	}
	if r.latchWake != nil {
		r.latchWakeTargets(w)
	}
	if r.rl != nil {
		r.rlTargetRows(w)
	}
	if r.daemon != nil {
		r.daemonTargets(w)
	}
	if r.scale != nil {
		r.scaleTargets(w)
	}
	if r.policy != nil {
		r.policyTargets(w)
	}
	w("\n")
}

// pairedRatios is the min–max of a/b over repetitions, each pair measured
// in the same repetition (seconds apart), which cancels slow drifts in
// machine load.
func (r *report) pairedRatios(a, b string, conc int) (string, float64) {
	ta, tb := r.throughput[tpKey{a, conc}], r.throughput[tpKey{b, conc}]
	if ta == nil || tb == nil {
		return "–", 0
	}
	var q []float64
	for i := range min(len(ta.rates), len(tb.rates)) {
		if tb.rates[i] > 0 {
			q = append(q, ta.rates[i]/tb.rates[i])
		}
	}
	if len(q) == 0 {
		return "–", 0
	}
	return fmt.Sprintf("%.2f–%.2f, median %.3f", slices.Min(q), slices.Max(q), median(q)), median(q)
}

// seqKind is the section-1 row with the client set-up recommended for
// sequential use.
const seqKind = "coordhost (sequential set-up)"

// sequentialTargets: the 1-goroutine target of the sequential set-up,
// unpinned (section 1's table) and with each pinned placement.
func (r *report) sequentialTargets(w func(string, ...any)) {
	const want = 1.0
	c, p := r.tpMedian(seqKind, 1), r.tpMedian("bsm/redislock", 1)
	if c == 0 || p == 0 {
		return
	}
	paired, pmed := r.pairedRatios(seqKind, "bsm/redislock", 1)
	w("| 1 goroutine: %s ≥ %.1f× bsm/redislock | medians %s vs %s cycles/s = %.3f×; same-repetition ratios %s | %s |\n",
		seqKind, want, num(c), num(p), c/p, paired, verdict(c/p >= want && pmed >= want))
	for _, pl := range []placement{placeSame, placeSplit} {
		a, b := r.pinned[pinKey{seqKind, pl}], r.pinned[pinKey{"bsm/redislock", pl}]
		if a == nil || b == nil {
			continue
		}
		c, p := median(a.rates), median(b.rates)
		paired, pmed := pairedOf(a.rates, b.rates)
		w("| same, pinned: program and Redis on %s | medians %s vs %s cycles/s = %.3f×; same-repetition ratios %s | %s |\n",
			map[placement]string{placeSame: "one CPU", placeSplit: "two CPUs"}[pl], num(c), num(p), c/p, paired, verdict(p > 0 && c/p >= want && pmed >= want))
	}
}

// pairedOf is pairedRatios for two series.
func pairedOf(a, b []float64) (string, float64) {
	var q []float64
	for i := range min(len(a), len(b)) {
		if b[i] > 0 {
			q = append(q, a[i]/b[i])
		}
	}
	if len(q) == 0 {
		return "–", 0
	}
	return fmt.Sprintf("%.2f–%.2f, median %.3f", slices.Min(q), slices.Max(q), median(q)), median(q)
}

// sectionSequential is section 1's comparison of the coordhost rows'
// client set-ups with bsm/redislock and raw rueidis, unpinned and pinned.
func (r *report) sectionSequential(w func(string, ...any)) {
	o := r.opts
	w("### 1 goroutine: client set-ups against bsm/redislock and raw rueidis\n\n")
	w("`coordhost` is on a default rueidis client (auto-pipelining), `%s` on one built with `DisableAutoPipelining: true` (see bench/README.md, \"Which rueidis client set-up\"). At 1 goroutine every cycle waits on thread wake-ups through the TCP loopback, and waking a thread on the other, idle vCPU of this VM costs far more than on the same one; left to the scheduler, the program's thread and Redis run now on one CPU, now on two, which is most of the spread of the 1-goroutine column above. So the rows are also measured with placement pinned (`sched_setaffinity` on every thread of the program and of Redis): *one CPU* = both on CPU 0, *two CPUs* = Redis on 0, the program on 1 (each: %d × %v after %v warm-up, on the instances above, rows rotating). Cells: median cycles/s [min–max]; × bsm/redislock and × raw rueidis as the ratio of the medians / the median of the same-repetition ratios.\n\n",
		seqKind, o.pinReps, o.pinDur, pinWarm)
	w("| implementation | 1 goroutine, unpinned | 1 goroutine, one CPU (pinned) | 1 goroutine, two CPUs (pinned) | 64 goroutines |\n|---|---:|---:|---:|---:|\n")
	get := func(kind string, col int) []float64 {
		switch col {
		case 0:
			if t := r.throughput[tpKey{kind, 1}]; t != nil {
				return t.rates
			}
		case 1, 2:
			if t := r.pinned[pinKey{kind, []placement{placeSame, placeSplit}[col-1]}]; t != nil {
				return t.rates
			}
		case 3:
			if t := r.throughput[tpKey{kind, 64}]; t != nil {
				return t.rates
			}
		}
		return nil
	}
	for _, kind := range pinKinds {
		w("| %s |", kind)
		for col := range 4 {
			a := get(kind, col)
			if len(a) == 0 {
				w(" – |")
				continue
			}
			cell := fmt.Sprintf("%s [%s–%s]", num(median(a)), num(slices.Min(a)), num(slices.Max(a)))
			for _, peer := range []string{"bsm/redislock", "raw rueidis"} {
				b := get(peer, col)
				if peer == kind || len(b) == 0 || median(b) == 0 {
					continue
				}
				_, pm := pairedOf(a, b)
				cell += fmt.Sprintf("; × %s %.2f / %.2f", strings.TrimSuffix(peer, "/redislock"), median(a)/median(b), pm)
			}
			w(" %s |", cell)
		}
		w("\n")
	}
	w("\n")
}

func (r *report) tpMedian(kind string, conc int) float64 {
	if t := r.throughput[tpKey{kind, conc}]; t != nil {
		return median(t.rates)
	}
	return 0
}

func (r *report) sectionThroughput(w func(string, ...any)) {
	o := r.opts
	w("## 1. Uncontended acquire + release\n\n")
	w("Cycles/s (one cycle = one non-waiting acquire + one release), N goroutines each on its own key, all on one client per implementation. Median of %d × %v; ratio vs the raw rueidis baseline; [min–max] over the repetitions.\n\n", o.reps, o.dur)
	w("Since commit ffcbb96, `coordhost` (Fencing off) sends a plain `SET NX GET PX` as the first attempt of an acquire (one round trip also when the key is held; the acquire script runs only for waiting attempts), so in this uncontended loop it sends the same number of commands as raw rueidis. `raw rueidis, Lua acquire` keeps the script-first shape every coordhost acquire had before (results from before the change: `git show d5f3721:bench/RESULTS.md`). Both fenced rows still run the script on every acquire.\n\n")
	w("| implementation |")
	concColumns(w, o.concs)
	var errNotes []string
	noisy := false
	for _, k := range kinds() {
		w("| %s |", k.name)
		for _, c := range o.concs {
			t := r.throughput[tpKey{k.name, c}]
			if t == nil {
				w(" – |")
				continue
			}
			m := median(t.rates)
			raw := r.tpMedian("raw rueidis", c)
			ratio := ""
			if raw > 0 {
				ratio = fmt.Sprintf(" (%.2f×)", m/raw)
			}
			lo, hi := slices.Min(t.rates), slices.Max(t.rates)
			mark := ""
			if hi > 1.5*lo {
				mark = " †"
				noisy = true
			}
			w(" %s%s [%s–%s]%s |", num(m), ratio, num(lo), num(hi), mark)
			if t.errs > 0 {
				errNotes = append(errNotes, fmt.Sprintf("%s at %d goroutines: %d failed cycles, first: %v", k.name, c, t.errs, t.first))
			}
		}
		w("\n")
	}
	if noisy {
		w("\n† the repetitions spread over more than 1.5×: other load on the machine, or (typically at 1 goroutine, where every cycle waits on thread wake-ups) scheduling luck on few CPUs. Compare rows within a column, not runs.\n")
	}
	w("\nCPU per cycle, median µs: Redis server (`INFO cpu`) / the benchmark process (getrusage, all goroutines and client libraries; the other implementations' idle clients add next to nothing). Shows where each implementation spends: server-side scripts vs client-side work.\n\n")
	w("| implementation |")
	concColumns(w, o.concs)
	for _, k := range kinds() {
		w("| %s |", k.name)
		for _, c := range o.concs {
			t := r.throughput[tpKey{k.name, c}]
			if t == nil {
				w(" – |")
				continue
			}
			w(" %.1f / %.1f |", median(t.serverCPU), median(t.clientCPU))
		}
		w("\n")
	}
	w("\n")
	for _, pl := range []placement{placeSame, placeSplit} {
		for _, kind := range pinKinds {
			if t := r.pinned[pinKey{kind, pl}]; t != nil && t.errs > 0 {
				errNotes = append(errNotes, fmt.Sprintf("%s, 1 goroutine pinned on %s: %d failed cycles, first: %v", kind, pl, t.errs, t.first))
			}
		}
	}
	for _, n := range errNotes {
		w("- errors: %s\n", n)
	}
	if len(errNotes) == 0 {
		w("No cycle failed.\n")
	}
	w("\n")
	if r.pinned != nil {
		r.sectionSequential(w)
	}
	if r.prev != nil {
		r.sectionPrev(w)
	}
}

func (r *report) sectionHandoff(w func(string, ...any)) {
	o := r.opts
	w("## 2. Handoff latency (release → next waiter's acquire returns)\n\n")
	w("One key, 1 holder + W waiting goroutines in one process sharing one client per implementation. Each new holder records the time, holds %v, notes the time just before calling Release, releases, then queues up again once someone else got the lock; latency = from just before Release to the moment the next waiting acquire returned. %d handoffs per cell after %d discarded. Lease %v (never reached). Cells: p50 / p99 (max).\n\n",
		o.hold, o.handoffs, o.handoffWarm, handoffTTL)
	w("| implementation |")
	for _, n := range o.waiters {
		w(" %d waiter%s |", n, plural(n))
	}
	w("\n|---|")
	for range o.waiters {
		w("---:|")
	}
	w("\n")
	var notes []string
	for _, k := range kinds() {
		if !k.blocking {
			continue
		}
		w("| %s |", k.name)
		for _, n := range o.waiters {
			h := r.handoff[hoKey{k.name, n}]
			if h == nil {
				w(" – |")
				continue
			}
			l := h.chain.lats
			cell := fmt.Sprintf("%s / %s (%s)", dur(pct(l, 50)), dur(pct(l, 99)), dur(pct(l, 100)))
			if h.chain.timedOut {
				cell += fmt.Sprintf(" **timed out after %v: %d handoffs**", o.chainLimit, len(l))
			}
			w(" %s |", cell)
			if h.chain.errs > 0 {
				notes = append(notes, fmt.Sprintf("%s, %d waiters: %d failed acquires/releases, first: %v", k.name, n, h.chain.errs, h.chain.firstErr))
			}
		}
		w("\n")
	}
	w("\n")
	for _, n := range notes {
		w("- errors: %s\n", n)
	}
	w("Waiting used: coordhost `Acquire` with its default retry policy (wakes on tracking invalidations and at the holder's PTTL); bsm/redislock `Obtain` with `LinearBackoff(%v)`; redsync `LockContext` with `WithRetryDelay(%v)` and unlimited tries; rueidislock `WithContext` (tracking invalidations). The polling peers are given a tighter retry than their defaults (redsync's default is 50–250 ms random, bsm's is no retry) so their latency is comparable; the price shows in section 4.\n\n", retryDelay, retryDelay)
}

func (r *report) sectionCommands(w func(string, ...any)) {
	o := r.opts
	w("## 4. Redis commands per release\n\n")
	w("Measured in section 2's runs: the holder that completed handoff %d sends `CONFIG RESETSTAT` before it releases, the one that completed handoff %d sends `INFO commandstats`, so the window is exactly %d complete cycles of the chain (release, the next acquire, the waiters' attempts, and the previous holder re-queueing, whose first attempt fails by design). Values are per release. *All calls* sums every command INFO counts, including those a Lua script calls inside Redis; *client-sent* leaves out the commands the implementation's scripts call internally (marked * in the breakdown), i.e. EVALSHA/EVAL plus commands sent directly.\n\n",
		o.handoffWarm, o.handoffWarm+o.handoffs, o.handoffs)
	w("| implementation |")
	for _, n := range o.waiters {
		w(" %d waiter%s: client-sent (all) |", n, plural(n))
	}
	w(" breakdown at %d waiters |\n|---|", o.statsWaiters)
	for range o.waiters {
		w("---:|")
	}
	w("---|\n")
	for _, k := range kinds() {
		if !k.blocking {
			continue
		}
		w("| %s |", k.name)
		var breakdown string
		for _, n := range o.waiters {
			h := r.handoff[hoKey{k.name, n}]
			if h == nil || h.stats == nil {
				w(" – (timed out) |")
				continue
			}
			c := countCmds(h.stats, h.sent, k, o.handoffs)
			w(" %.2f (%.2f) |", c.client, c.all)
			if n == o.statsWaiters {
				breakdown = c.breakdown
			}
		}
		w(" %s |\n", breakdown)
	}
	w("\nScript-internal commands per implementation (from their Lua): ")
	var parts, notes []string
	for _, k := range kinds() {
		if !k.blocking {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s: %s", k.name, strings.Join(k.scriptCmds, ", ")))
		if k.countsOnClient {
			notes = append(notes, r.clientCountNote(k, r.handoff[hoKey{k.name, o.statsWaiters}]))
		}
	}
	w("%s.\n\n", strings.Join(parts, "; "))
	for _, n := range notes {
		w("%s ", n)
	}
	w("The other implementations send none of their scripts' commands directly, so for them all calls minus the script-internal ones is exactly what the client sent.\n\n")
}

// clientCountNote explains a kind whose client-sent figure is counted on
// its client, from what that client sent at the statsWaiters run.
func (r *report) clientCountNote(k kind, h *hoResult) string {
	how := "a wrapper around its rueidis client counts every command sent through it and through the connections it dedicates for waiting, over the same window as the server's counts"
	if h == nil || h.sent == nil {
		return fmt.Sprintf("%s: client-sent is counted on the client (%s).", k.name, how)
	}
	if ov := overlap(h.sent, k); len(ov) > 0 {
		return fmt.Sprintf("%s sends %s directly as well as inside its scripts (the first attempt of an unfenced lock acquire is a plain `SET NX GET PX`; the acquire script runs only for waiting attempts), so subtracting the script-internal commands from the server's counts would undercount: its client-sent figure is counted on the client instead (%s), and the breakdown shows how many of a starred command were sent directly.", k.name, strings.Join(ov, ", "), how)
	}
	return fmt.Sprintf("%s: client-sent is counted on the client (%s); it sent none of its scripts' commands directly in the window.", k.name, how)
}

func (r *report) sectionCrash(w func(string, ...any)) {
	o := r.opts
	w("## 3. Crash handoff (holder never releases)\n\n")
	w("A holder on its own client takes the key with a %v lease and never releases or renews it (rueidislock's holder has extension disabled); a waiter on another client then waits with its library's waiting acquire. Latency = waiter's acquire returned − (instant just before the holder's acquire was sent + %v), so it slightly overstates. %d reps per cell; a rep with no grant %v after the TTL is a timeout, and after %d timeouts the remaining reps are skipped. *Empty*: only the benchmark's keys; *%d keys*: plus `SET filler:i x EX 3600` for i < %d. Cells: p50 / max (reps measured).\n\n",
		crashTTL, crashTTL, o.crashReps, o.patience, o.maxTimeouts, o.filler, o.filler)
	w("| implementation | empty server | %d keys with long TTLs |\n|---|---:|---:|\n", o.filler)
	for _, k := range kinds() {
		if !k.blocking {
			continue
		}
		w("| %s |", k.name)
		for _, ph := range []string{phaseEmpty, phaseFilled} {
			c := r.crash[crKey{k.name, ph}]
			if c == nil {
				w(" – |")
				continue
			}
			cell := fmt.Sprintf("%s / %s (%d)", dur(pct(c.lats, 50)), dur(pct(c.lats, 100)), len(c.lats))
			if len(c.lats) == 0 {
				cell = "– (0)"
			}
			if c.timeouts > 0 {
				cell += fmt.Sprintf(" **%d timed out (> %v after TTL)**", c.timeouts, o.patience)
			}
			if c.skipped > 0 {
				cell += fmt.Sprintf(", %d skipped", c.skipped)
			}
			if c.firstErr != nil {
				cell += fmt.Sprintf(", error: %v", c.firstErr)
			}
			if len(c.lats) > 0 && slices.Min(c.lats) < 0 {
				cell += fmt.Sprintf(" **granted %s BEFORE the TTL ran out**", dur(-slices.Min(c.lats)))
			}
			w(" %s |", cell)
		}
		w("\n")
	}
	w("\n")
}

// depVersions lists the peer modules this binary was built with.
func depVersions() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown (no build info)"
	}
	want := []string{"github.com/bsm/redislock", "github.com/go-redsync/redsync/v4", "github.com/redis/go-redis/v9", "github.com/go-redis/redis_rate/v10", "github.com/redis/rueidis", "github.com/tetratelabs/wazero", "github.com/hashicorp/go-plugin", "google.golang.org/grpc"}
	var out []string
	for _, d := range bi.Deps {
		if slices.Contains(want, d.Path) {
			v := d.Version
			if d.Replace != nil {
				v += " => " + d.Replace.Path + " " + d.Replace.Version
			}
			out = append(out, "`"+d.Path+"` "+v)
		}
	}
	out = append(out, "coordhost from this tree (`replace => ../`)")
	return strings.Join(out, ", ")
}

func num(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.1fk", v/1e3)
	case v >= 1e3:
		return fmt.Sprintf("%.2fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

func dur(d time.Duration) string {
	neg := ""
	if d < 0 {
		neg, d = "-", -d
	}
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%s%dµs", neg, d.Microseconds())
	case d < 100*time.Millisecond:
		return fmt.Sprintf("%s%.2fms", neg, float64(d)/1e6)
	case d < 10*time.Second:
		return fmt.Sprintf("%s%.0fms", neg, float64(d)/1e6)
	}
	return neg + d.Round(100*time.Millisecond).String()
}

// concColumns ends a table's header row after its first column: one
// column per goroutine count, then the separator row.
func concColumns(w func(string, ...any), concs []int) {
	for _, c := range concs {
		w(" %d goroutine%s |", c, plural(c))
	}
	w("\n|---|")
	for range concs {
		w("---:|")
	}
	w("\n")
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func (r *report) sectionLease(w func(string, ...any)) {
	o := r.opts
	w("## 5. Hash-field lease handoff (Redis %s)\n\n", r.server8.version)
	w("coordhost's `primitives/lease` on the Redis 8 server: one hash, one field (`%s`), 1 holder + W waiting goroutines in one process sharing one `lease.Leases` on one client, `Acquire(ctx, hash, %q, %v)` + `Lease.Release`. The chain is section 2's: each new holder records the time, holds %v, notes the time just before calling Release, releases, then queues up again once someone else got the field; latency = from just before Release to the moment the next waiting Acquire returned. %d handoffs per cell after %d discarded. The `coordhost` lock runs the same chain on the same server as a reference (its section-2 numbers are on Redis %s). Cells: p50 / p99 (max).\n\n",
		leaseField, leaseField, handoffTTL, o.hold, o.handoffs, o.handoffWarm, r.server.version)
	w("| implementation |")
	for _, n := range o.leaseWaiters {
		w(" %d waiter%s |", n, plural(n))
	}
	w("\n|---|")
	for range o.leaseWaiters {
		w("---:|")
	}
	w("\n")
	var notes []string
	for _, k := range leaseKinds() {
		w("| %s |", k.name)
		for _, n := range o.leaseWaiters {
			h := r.lease[hoKey{k.name, n}]
			if h == nil {
				w(" – |")
				continue
			}
			l := h.chain.lats
			cell := fmt.Sprintf("%s / %s (%s)", dur(pct(l, 50)), dur(pct(l, 99)), dur(pct(l, 100)))
			if h.chain.timedOut {
				cell += fmt.Sprintf(" **timed out after %v: %d handoffs**", o.chainLimit, len(l))
			}
			w(" %s |", cell)
			if h.chain.errs > 0 {
				notes = append(notes, fmt.Sprintf("%s, %d waiters: %d failed acquires/releases, first: %v", k.name, n, h.chain.errs, h.chain.firstErr))
			}
		}
		w("\n")
	}
	w("\n")
	for _, n := range notes {
		w("- errors: %s\n", n)
	}
	if len(notes) > 0 {
		w("\n")
	}

	w("Commands per release, measured in the same runs as section 4 does (`CONFIG RESETSTAT` on the Redis 8 server while the holder that completed handoff %d holds the field, `INFO commandstats` while the one that completed handoff %d does: %d complete chain cycles). *Client-sent* is counted on the client (a wrapper around the rueidis client counts every command sent through it and through the connections it dedicates); *all calls* is the server's count including the commands scripts call inside Redis; *server: all − script-internal* is the server-side estimate section 4 uses for the peers, as a cross-check of the client count.\n\n",
		o.handoffWarm, o.handoffWarm+o.handoffs, o.handoffs)
	w("| implementation |")
	for _, n := range o.leaseWaiters {
		w(" %d waiter%s: client-sent (all calls) [server: all − script-internal] |", n, plural(n))
	}
	last := o.leaseWaiters[len(o.leaseWaiters)-1]
	w(" sent by the client at %d waiters | all calls at %d waiters (* = inside scripts) |\n|---|", last, last)
	for range o.leaseWaiters {
		w("---:|")
	}
	w("---|---|\n")
	for _, k := range leaseKinds() {
		w("| %s |", k.name)
		var sent, breakdown string
		for _, n := range o.leaseWaiters {
			h := r.lease[hoKey{k.name, n}]
			if h == nil || h.stats == nil {
				w(" – (timed out) |")
				continue
			}
			c := countCmds(h.stats, h.sent, k, o.handoffs)
			w(" %.2f (%.2f) [%.2f] |", c.client, c.all, c.serverClient)
			if n == last {
				sent, breakdown = perRelease(h.sent, o.handoffs), c.breakdown
			}
		}
		w(" %s | %s |\n", sent, breakdown)
	}
	w("\nScript-internal commands (from the Lua): ")
	var parts []string
	for _, k := range leaseKinds() {
		parts = append(parts, fmt.Sprintf("%s: %s", k.name, strings.Join(k.scriptCmds, ", ")))
	}
	w("%s. A chain cycle includes the previous holder's re-queueing attempt, which fails by design.\n\n", strings.Join(parts, "; "))
}

// perRelease formats counts by name, divided by n, largest first.
func perRelease(m map[string]int64, n int) string {
	if m == nil {
		return "–"
	}
	names := slices.Collect(maps.Keys(m))
	slices.SortFunc(names, func(a, b string) int {
		if c := cmp.Compare(m[b], m[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, name := range names {
		if m[name] > 0 {
			parts = append(parts, fmt.Sprintf("%s %.2f", name, float64(m[name])/float64(n)))
		}
	}
	return strings.Join(parts, ", ")
}

// ---- section 6 ----

// consultOK reports whether every decision of row c came from its policy
// (no failure answered by a fallback).
func consultOK(c *consultResult) bool {
	return c != nil && len(c.p50) > 0 && c.failures == 0 && c.fallbacks == 0
}

func (r *report) policyTargets(w func(string, ...any)) {
	p := r.policy
	lat := func(key, what string, limit time.Duration) {
		c := p.row(key)
		if c == nil {
			w("| %s | not run | **MISS** |\n", what)
			return
		}
		m := medianDur(c.p50)
		meas := fmt.Sprintf("median %s (per-rep medians %s–%s)", ns(m), ns(slices.Min(c.p50)), ns(slices.Max(c.p50)))
		if c.failures+c.fallbacks > 0 {
			meas += fmt.Sprintf(", %d failures / %d fallbacks", c.failures, c.fallbacks)
		}
		w("| %s | %s | %s |\n", what, meas, verdict(consultOK(c) && m <= limit))
	}
	if t := p.row(rowTimer); t != nil {
		c := p.row(rowNative)
		what := "native `builtin.Exponential{}` ≤ 50 ns median per consult"
		if c != nil {
			m := medianDur(c.p50)
			w("| %s | median %s per individually timed call (the clock alone: %s; untimed loop: %.1f ns/call) | %s |\n",
				what, ns(m), ns(medianDur(t.p50)), median(c.mean), verdict(len(c.p50) > 0 && m <= 50*time.Nanosecond))
		} else {
			w("| %s | not run | **MISS** |\n", what)
		}
	}
	lat(rowWATNone, "wasm WAT ≤ 1 µs median without the deadline (`NoCallTimeout`)", time.Microsecond)
	lat(rowGoNone, "wasm Go ≤ 1 µs median without the deadline (`NoCallTimeout`)", time.Microsecond)
	lat(rowWATDeadline, fmt.Sprintf("wasm WAT ≤ 5 µs median with the %v deadline", wasm.DefaultCallTimeout), 5*time.Microsecond)
	lat(rowGoDeadline, fmt.Sprintf("wasm Go ≤ 5 µs median with the %v deadline", wasm.DefaultCallTimeout), 5*time.Microsecond)
	if c := p.row(rowGoDeadlinePar); c != nil {
		lat(rowGoDeadlinePar, fmt.Sprintf("same, Go, %d goroutines at once (stricter reading)", c.goroutines), 5*time.Microsecond)
	}
	for _, x := range []struct{ key, deadlineKey, name string }{{rowWATNone, rowWATDeadline, "WAT"}, {rowGoNone, rowGoDeadline, "Go"}} {
		c := p.row(x.key)
		what := fmt.Sprintf("zero allocations per wasm %s call without the deadline (< 0.01 per call, process-wide mallocs)", x.name)
		if c == nil || len(c.mallocs) == 0 {
			w("| %s | not run | **MISS** |\n", what)
			continue
		}
		var sum uint64
		for _, m := range c.mallocs {
			sum += m
		}
		per := float64(sum) / float64(c.untimed)
		meas := fmt.Sprintf("%.2f per call (%d mallocs in %d calls)", per, sum, c.untimed)
		if d := p.row(x.deadlineKey); d != nil && len(d.allocs) > 0 {
			meas += fmt.Sprintf("; with the deadline (no target): %.2f per call", median(d.allocs))
		}
		w("| %s | %s | %s |\n", what, meas, verdict(consultOK(c) && per < 0.01))
	}
	if c := p.row(rowPlugin); c != nil {
		m := medianDur(c.p99)
		meas := fmt.Sprintf("p99 %s (per-rep p99s %s–%s), median %s", ns(m), ns(slices.Min(c.p99)), ns(slices.Max(c.p99)), ns(medianDur(c.p50)))
		if c.failures+c.fallbacks > 0 {
			meas += fmt.Sprintf(", %d failures / %d fallbacks", c.failures, c.fallbacks)
		}
		w("| plugin p99 ≤ 500 µs per consult (default call timeout) | %s | %s |\n", meas, verdict(consultOK(c) && m <= 500*time.Microsecond))
	}
}

func (r *report) sectionPolicy(w func(string, ...any)) {
	o, p := r.opts, r.policy
	w("## 6. Policy consult cost\n\n")
	w("What one retry decision costs the waiter that asks for it: `DecideRetry` through the `policies.RetryPolicy` interface, as the lock calls it, cycling through 1024 varied requests (attempts 1–12, 1 in 8 with reason error, elapsed up to 2 s, the holder's TTL unknown in 1 in 4, random bits). No Redis: the servers are stopped before this section. ")
	w("In each of %d repetitions a row makes %d calls (the plugin %d), each timed on its own with `time.Now`/`time.Since` — so every latency includes about one clock read; the *clock only* row is that floor — and then as many calls in a loop without per-call timing, around which `runtime.ReadMemStats` gives the allocations (the process-wide `Mallocs` delta divided by the calls) and the wall clock the *untimed mean* per call. ",
		o.reps, max(o.policyCalls/o.reps, 1), max(o.pluginCalls/o.reps, 1))
	w("Rows run in a rotating order each repetition after an untimed warm-up; the plugin runs last and alone (its health pings and gRPC goroutines would otherwise count in the other rows' allocations). Cells: the median over the repetitions of each repetition's p50 and p99, and the min–max of the per-repetition p50s. The parallel row runs GOMAXPROCS goroutines at once on one module (its pool holds at most GOMAXPROCS instances); its latencies are pooled over the goroutines and its untimed mean is wall time × goroutines / calls, i.e. per call as one goroutine sees it.\n\n")
	w("| policy | call | goroutines | p50 | p99 | p50 per rep | untimed mean | allocs/call | failures / fallbacks |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, c := range p.rows {
		if len(c.p50) == 0 {
			continue
		}
		mean, allocs, fails := "–", "–", "–"
		if len(c.mean) > 0 {
			mean = ns(time.Duration(median(c.mean)))
			if median(c.mean) < 100 {
				mean = fmt.Sprintf("%.1f ns", median(c.mean))
			}
			allocs = fmt.Sprintf("%.2f", median(c.allocs))
		}
		if c.key != rowTimer && c.key != rowNative {
			fails = fmt.Sprintf("%d / %d", c.failures, c.fallbacks)
		}
		w("| %s | %s | %d | %s | %s | %s–%s | %s | %s | %s |\n", c.policy, c.call, c.goroutines,
			ns(medianDur(c.p50)), ns(medianDur(c.p99)), ns(slices.Min(c.p50)), ns(slices.Max(c.p50)), mean, allocs, fails)
	}
	if c := p.row(rowGoDeadlinePar); c != nil && len(c.rates) > 0 {
		s := p.row(rowGoDeadline)
		w("\nParallel row: %s decisions/s over its %d goroutines while timed (median over repetitions)", num(median(c.rates)), c.goroutines)
		if s != nil && len(s.rates) > 0 {
			w(", against %s/s from one goroutine", num(median(s.rates)))
		}
		w(".")
	}
	w(" The wasm modules were loaded with `FallbackRetry: builtin.Exponential{}` (what the host passes) and configs `%s` (WAT: the delay in ms) and `%s` (Go); a failed call would be answered by the fallback and show in the last column. The plugin is the example plugin", watConfig, goConfig)
	if p.built {
		w(", built by this run with `go build %s` from the main module", pluginPkg)
	} else {
		w(" given with `-plugin-bin`")
	}
	w(", sha256 `%s…` computed at run time, launched with `plugin.Options` defaults (health ping every %v, `CallTimeout` %v); its allocations are the host process's only.\n\n", p.pluginSum[:12], plugin.DefaultHealthInterval, plugin.DefaultCallTimeout)

	w("**Instantiation and memory per instance.** The Loads use the default `CallTimeout` (the interruptible runtime). *Load, empty cache*: `Runtime.Load` on a new runtime whose on-disk compilation cache is empty (compile + the first instance, which `Load` creates and configures); *new runtime, disk cache*: the same on a second new runtime reading that cache; then %d more Loads on one runtime, each kept open (the compiled code is shared): *Load* is their median wall time and *instantiate + configure* their median [min–max] `Module.Stats().InstantiateTime` — `Load` creates exactly one instance, so that is one `InstantiateModule` (a Go guest's runtime initialisation runs in it), the ABI checks and `policy_configure`. ", o.policyLoads)
	w("Heap figures are Go heap deltas read with `runtime.ReadMemStats` after two `runtime.GC` calls, as *live* bytes (`HeapAlloc`: the objects still reachable) and, in parentheses, bytes *in use* (`HeapInuse`: the spans holding them, free room included); the instance's linear memory is on the Go heap (wazero allocates it with `make`), compiled machine code is mmapped outside it and not counted. ")
	w("*Heap per Load*: before and after those %d Loads, divided by %d — the decoded module, the pool and its one instance. ", o.policyLoads, o.policyLoads)
	w("*Heap per extra instance*: one more module, loaded with `NoCallTimeout` (with a deadline every call starts a watchdog goroutine, and the goroutine descriptors the Go runtime keeps for reuse would count as instance memory; the deadline's own per-instance state is a timer and a context) and with GOMAXPROCS raised to 8 for the Load (the pool is sized by GOMAXPROCS) and while 8 goroutines call it until the pool holds 8 instances (the OS preempts threads inside calls, so the pool grows); after − before, divided by the instances added; GOMAXPROCS is restored afterwards.\n\n")
	w("| module | size | Load, empty cache | Load, new runtime, disk cache | Load (median of %d) | instantiate + configure | heap per Load: live (in use) | heap per extra instance: live (in use) |\n|---|---:|---:|---:|---:|---:|---:|---:|\n", o.policyLoads)
	for _, in := range p.inst {
		extra := fmt.Sprintf("%s (%s)", bytesStr(in.liveInst), bytesStr(in.inuseInst))
		if in.forced < in.forcedCap {
			extra += fmt.Sprintf(", only %d of %d instances were created", in.forced, in.forcedCap)
		} else {
			extra += fmt.Sprintf(", %d instances", in.forced)
		}
		w("| %s | %s | %s | %s | %s | %s [%s–%s] | %s (%s) | %s |\n", in.name, bytesStr(float64(in.size)), ns(in.loadCold), ns(in.loadDisk),
			ns(medianDur(in.loads)), ns(medianDur(in.inst)), ns(slices.Min(in.inst)), ns(slices.Max(in.inst)), bytesStr(in.liveLoad), bytesStr(in.inuseLoad), extra)
	}
	w("\n")
}
