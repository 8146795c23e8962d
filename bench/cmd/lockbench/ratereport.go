package main

// Section 10's report: decisions per second, the targets against the raw
// ceiling and redis_rate, and the precision table.

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/coordhost/coordhost/internal/ratetest"
)

// rlTargets are the issue's: at 64 goroutines every coordhost algorithm
// reaches this share of the raw ceiling and this multiple of redis_rate.
var rlTargets = []struct {
	peer string
	want float64
}{{rlRaw, 0.9}, {rlGCRA, 1.5}}

// rlTables are the throughput tables in report order.
var rlTables = []struct {
	regime string
	spread bool
}{{"grants", false}, {"grants", true}, {"refusals", false}, {"refusals", true}}

func rlTableLabel(regime string, spread bool) string {
	if spread {
		return regime + ", " + fmt.Sprint(rlKeys) + " keys"
	}
	return regime + ", hot key"
}

// rlRatio compares row with peer in one cell: the ratio of the medians and
// the median of the same-repetition ratios ("" when either is missing).
func (x *rlResults) rlRatio(row, peer, regime string, spread bool, conc int) (string, float64, float64) {
	a, b := x.tp[rlKey{row, regime, spread, conc}], x.tp[rlKey{peer, regime, spread, conc}]
	if a == nil || b == nil || median(b.rates) == 0 {
		return "", 0, 0
	}
	m := median(a.rates) / median(b.rates)
	_, pm := pairedOf(a.rates, b.rates)
	return fmt.Sprintf("%.2f / %.2f", m, pm), m, pm
}

// rlTargetRows writes the section's rows of the Targets table: one per
// coordhost algorithm and target, judged in all four tables at 64
// goroutines on both ratios.
func (r *report) rlTargetRows(w func(string, ...any)) {
	x := r.rl
	const conc = 64
	for _, row := range rlRows() {
		if !row.coordhost {
			continue
		}
		for _, t := range rlTargets {
			ok := true
			var parts []string
			for _, tb := range rlTables {
				s, m, pm := x.rlRatio(row.name, t.peer, tb.regime, tb.spread, conc)
				if s == "" {
					ok = false
					parts = append(parts, rlTableLabel(tb.regime, tb.spread)+": not measured")
					continue
				}
				if m < t.want || pm < t.want {
					ok = false
				}
				parts = append(parts, fmt.Sprintf("%s %s×", rlTableLabel(tb.regime, tb.spread), s))
			}
			w("| %d goroutines: %s ≥ %.1f× %s (section 10, every table) | ratio of medians / median same-repetition ratio: %s | %s |\n",
				conc, row.name, t.want, t.peer, strings.Join(parts, "; "), verdict(ok))
		}
	}
}

func (r *report) sectionRateLimit(w func(string, ...any)) {
	o := r.opts
	x := r.rl
	rows := rlRows()
	w("## 10. Rate limiters\n\n")
	w("Every limiter on its own fresh client, against the same Redis server in the same run. ")
	w("coordhost's fixed window used INCREX or Lua: `%s` (Redis %s has no INCREX: the first call's probe is refused and every decision runs the script).\n\n", x.fastPath, r.server.version)
	w("### Decisions per second\n\n")
	w("One decision = `TryAcquire(ctx, 1)` or the peer's equivalent for one permit; N goroutines deciding back to back on one client per row. *hot key*: every goroutine asks for the same key; *%d keys*: goroutine g walks keys 0…%d round-robin from key g·%d/N, so every key is in use. Limits: *grants* = %s (more than the server answers, so every decision is a grant); *refusals* = %s, every key exhausted by an untimed pass before the first cell, so (nearly) every decision is a refusal — what a limiter does under attack. Median of %d × %v after %v warm-up per cell, rows rotating, after one untimed 8-goroutine pass; [min–max] over the repetitions. coordhost rows: `× raw` and `× redis_rate` = the ratio of the medians / the median of the same-repetition ratios (cells seconds apart) to the raw EVALSHA ceiling and to go-redis/redis_rate. *granted* = the share of decisions granted, min–max over the row's cells.\n\n",
		rlKeys, rlKeys-1, rlKeys, rlRegimes[0].p, rlRegimes[1].p, o.rlReps, o.rlDur, o.rlWarm)
	var errNotes []string
	for _, tb := range rlTables {
		w("**%s**\n\n| limiter |", rlTableLabel(tb.regime, tb.spread))
		for _, c := range o.concs {
			w(" %d goroutine%s |", c, plural(c))
		}
		w(" granted |\n|---|")
		for range o.concs {
			w("---:|")
		}
		w("---:|\n")
		for _, row := range rows {
			w("| %s |", row.name)
			var shares []float64
			for _, c := range o.concs {
				t := x.tp[rlKey{row.name, tb.regime, tb.spread, c}]
				if t == nil || len(t.rates) == 0 {
					w(" – |")
					continue
				}
				shares = append(shares, t.grantShare...)
				w(" %s [%s–%s]", num(median(t.rates)), num(slices.Min(t.rates)), num(slices.Max(t.rates)))
				if row.coordhost {
					for _, peer := range []string{rlRaw, rlGCRA} {
						if s, _, _ := x.rlRatio(row.name, peer, tb.regime, tb.spread, c); s != "" {
							w("<br>× %s %s", map[string]string{rlRaw: "raw", rlGCRA: "redis_rate"}[peer], s)
						}
					}
				}
				w(" |")
				if t.errs > 0 {
					errNotes = append(errNotes, fmt.Sprintf("%s, %s, %d goroutines: %d failed decisions, first: %v", row.name, rlTableLabel(tb.regime, tb.spread), c, t.errs, t.first))
				}
			}
			if len(shares) > 0 {
				w(" %s |\n", pctRange(slices.Min(shares), slices.Max(shares)))
			} else {
				w(" – |\n")
			}
		}
		w("\n")
	}
	w("Cost per decision at 64 goroutines, median µs: Redis CPU (`INFO cpu`: commands, networking, everything) / Redis' time executing the row's own commands (`INFO commandstats` usec of `EVALSHA` + `EVAL`, or of `INCRBY` + `EXPIRE` for the envoy-style row; a script's time includes the commands it calls) / the benchmark process' CPU (getrusage). Redis runs commands on one thread, so its time per decision caps a key's — and here the server's — decisions per second.\n\n| limiter |")
	for _, tb := range rlTables {
		w(" %s |", rlTableLabel(tb.regime, tb.spread))
	}
	w("\n|---|")
	for range rlTables {
		w("---:|")
	}
	w("\n")
	for _, row := range rows {
		w("| %s |", row.name)
		for _, tb := range rlTables {
			if t := x.tp[rlKey{row.name, tb.regime, tb.spread, 64}]; t != nil && len(t.rates) > 0 {
				w(" %.1f / %.1f / %.1f |", median(t.serverCPU), median(t.cmdTime), median(t.clientCPU))
			} else {
				w(" – |")
			}
		}
		w("\n")
	}
	w("\n")
	for _, n := range errNotes {
		w("- errors: %s\n", n)
	}
	if len(errNotes) == 0 {
		w("No decision failed.\n")
	}
	w("\nTargets (from the issue; also in the Targets table at the top): at 64 goroutines every coordhost algorithm ≥ 0.9× the raw EVALSHA ceiling and ≥ 1.5× redis_rate, in every table, on both ratios.\n\n")
	w("| target |")
	for _, tb := range rlTables {
		w(" %s |", rlTableLabel(tb.regime, tb.spread))
	}
	w("\n|---|")
	for range rlTables {
		w("---|")
	}
	w("\n")
	for _, row := range rows {
		if !row.coordhost {
			continue
		}
		for _, t := range rlTargets {
			w("| %s ≥ %.1f× %s |", row.name, t.want, t.peer)
			for _, tb := range rlTables {
				s, m, pm := x.rlRatio(row.name, t.peer, tb.regime, tb.spread, 64)
				if s == "" {
					w(" – |")
					continue
				}
				w(" %s× %s |", s, verdict(m >= t.want && pm >= t.want))
			}
			w("\n")
		}
	}
	w("\n")
	r.rlPrecisionTable(w)
	for _, row := range rows {
		w("- **%s**: %s.\n", row.name, row.note)
	}
	w("- **rueidislimiter** (`github.com/redis/rueidis/rueidislimiter`) is not here: it is a module of its own (its own go.mod in the rueidis repository, not part of `github.com/redis/rueidis` v1.0.80), and the Go module proxy this machine reaches serves no version of it.\n\n")
}

func pctRange(a, b float64) string {
	if fmt.Sprintf("%.1f", 100*a) == fmt.Sprintf("%.1f", 100*b) {
		return fmt.Sprintf("%.1f%%", 100*a)
	}
	return fmt.Sprintf("%.1f–%.1f%%", 100*a, 100*b)
}

// rlIdeal is what an exact limiter of row's kind grants when hammered
// from p.start to p.end: the lower bound the total is compared with.
func rlIdeal(algo rlAlgo, p *rlPrec) (int64, string) {
	q := rlPrecParams
	d := p.end.Sub(p.start)
	switch algo {
	case algoBucket:
		n := int64(d / q.period)
		return q.bucket + q.perPeriod*n, fmt.Sprintf("%d + %d × ⌊D/%v⌋", q.bucket, q.perPeriod, q.period)
	case algoAligned:
		secs := int64(q.window / time.Second)
		windows := p.end.Unix()/secs - p.start.Unix()/secs + 1
		return q.limit * windows, fmt.Sprintf("%d × the %d clock-aligned windows D touched", q.limit, windows)
	}
	windows := int64((d + q.window - 1) / q.window)
	if algo == algoSliding {
		return q.limit * windows, fmt.Sprintf("%d × ⌈D/%v⌉, as an exact sliding log (with %d segments a permit may come back up to %v later)", q.limit, q.window, rlSegments, q.window/rlSegments)
	}
	return q.limit * windows, fmt.Sprintf("%d × ⌈D/%v⌉ (windows from the first grant)", q.limit, q.window)
}

// rlBound is the most a row's limiter may grant in an interval of the
// window's length, and what it rests on.
func rlBound(algo rlAlgo) (int64, string) {
	q := rlPrecParams
	switch algo {
	case algoSliding:
		return q.limit, "the limit"
	case algoBucket:
		k := int64((q.window + q.period - 1) / q.period)
		return q.bucket + q.perPeriod*k, fmt.Sprintf("%d + %d × ⌈%v/%v⌉", q.bucket, q.perPeriod, q.window, q.period)
	}
	return 2 * q.limit, "2 × limit: two windows meet in an interval"
}

// rlSpans is how many lengths (1..k periods) the bucket check sweeps.
func rlSpans(p *rlPrec) int {
	return max(1, min(1000, int(p.end.Sub(p.start)/rlPrecParams.period)))
}

func (r *report) rlPrecisionTable(w func(string, ...any)) {
	o := r.opts
	x := r.rl
	q := rlPrecParams
	w("### Precision: %d clients × %d goroutines on one key\n\n", o.rlPrecClients, o.rlPrecGoroutines)
	w("Each limiter in turn: %d instances (each its own client and connection, as separate processes would be) share one key, %d goroutines each deciding one permit back to back for D ≈ %v. Limit: %d per %v for the window limiters; %d tokens and %d back every %v for the token bucket and GCRA (redis_rate `Limit{Rate: %d, Period: %v, Burst: %d}`, the same as `PerSecond(100)`). Every grant is stamped when its reply arrived, on this process' monotonic clock (the same harness for every limiter), and every error counts as a grant (its outcome is unknown). `internal/ratetest.MaxIn` gives the most grants in any interval of %v; for the buckets `ratetest.BucketExcess` checks every length of 1…k periods against bucket + %d × ⌈D/%v⌉ (≤ 0 = kept). A reply stamped late can make an interval look fuller than the server saw it, so for coordhost the same figures are given on the server's clock too (`Result.ServerTime`: the `TIME` its script decided at). *total / ideal*: the grants against what an exact limiter of that kind grants when hammered for D (a lower-bound check: far below 1 means the limiter refuses permits it has).\n\n",
		o.rlPrecClients, o.rlPrecClients*o.rlPrecGoroutines, o.rlPrecDur, q.limit, q.window, q.bucket, q.perPeriod, q.period, q.perPeriod, q.period, q.bucket, q.window, q.perPeriod, q.period)
	w("| limiter | bound on any %v | decisions/s (granted) | total / ideal | most in any %v: client clock | server clock | bucket excess: client clock | server clock | errors |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n", q.window, q.window)
	var notes []string
	for _, row := range rlRows() {
		p := x.prec[row.name]
		if p == nil {
			continue
		}
		d := p.end.Sub(p.start)
		total := ratetest.Total(p.client)
		ideal, how := rlIdeal(row.algo, p)
		bound, why := rlBound(row.algo)
		most, _ := ratetest.MaxIn(slices.Clone(p.client), q.window)
		w("| %s | %d (%s) | %s (%.2f%%) | %d / %d = %.3f | %d %s |", row.name, bound, why,
			num(float64(p.decisions)/d.Seconds()), 100*float64(total)/float64(max(p.decisions, 1)),
			total, ideal, float64(total)/float64(max(ideal, 1)), most, keptWord(most <= bound))
		notes = append(notes, fmt.Sprintf("%s: ideal %s, D = %v", row.name, how, d.Round(time.Millisecond)))
		if row.coordhost {
			sm, _ := ratetest.MaxIn(slices.Clone(p.server), q.window)
			w(" %d %s |", sm, keptWord(sm <= bound))
		} else {
			w(" – |")
		}
		if row.algo == algoBucket {
			e, at := ratetest.BucketExcess(slices.Clone(p.client), q.bucket, q.perPeriod, q.period, rlSpans(p))
			w(" %s |", excessCell(e, at))
			if row.coordhost {
				e, at := ratetest.BucketExcess(slices.Clone(p.server), q.bucket, q.perPeriod, q.period, rlSpans(p))
				w(" %s |", excessCell(e, at))
			} else {
				w(" – |")
			}
		} else {
			w(" – | – |")
		}
		if p.errs > 0 {
			w(" %d (first: %v) |\n", p.errs, p.firstErr)
		} else {
			w(" 0 |\n")
		}
	}
	w("\nThe bucket excess is the largest of (most grants in an interval of k periods) − (bucket + %d × k) over k = 1…%d (every length up to D); ≤ 0 means the bound was kept at every length. Ideal totals: %s.\n\n", q.perPeriod, rlSpans(x.prec[rlBucket]), strings.Join(notes, "; "))
}

func keptWord(ok bool) string {
	if ok {
		return "kept"
	}
	return "**exceeded**"
}

func excessCell(e int64, at time.Duration) string {
	if e <= 0 {
		return fmt.Sprintf("%d kept", e)
	}
	return fmt.Sprintf("**+%d** at %v", e, at)
}
