package main

// Section 10: rate limiters. Decisions per second of coordhost's fixed
// window, sliding window and token bucket next to go-redis/redis_rate
// (GCRA), an envoy-style fixed window and the raw EVALSHA ceiling, with a
// limit high enough that nearly every decision is a grant and one low
// enough that nearly every one is a refusal, on one hot key and spread
// over rlKeys keys; then each limiter's precision when several clients
// hammer one key (ratepeers.go has the limiters, ratereport.go the
// report).

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordhost/coordhost/internal/ratetest"
)

// rlRegime is one limit the throughput cells run under.
type rlRegime struct {
	name string
	p    rlParams
}

// rlRegimes: "grants" allows about 10^6 decisions per second per key, far
// more than one server answers, so every decision is a grant; "refusals"
// allows 10 per hour per key, exhausted by an untimed pass before the
// first cell, so every later decision is a refusal (what a limiter does
// under attack) — except after an envoy-style window's clock-aligned hour
// boundary, if the run crosses one.
var rlRegimes = []rlRegime{
	{name: "grants", p: rlParams{limit: 1_000_000, window: time.Second, bucket: 1_000_000, perPeriod: 1000, period: time.Millisecond}},
	{name: "refusals", p: rlParams{limit: 10, window: time.Hour, bucket: 10, perPeriod: 1, period: 6 * time.Minute}},
}

// rlPrecParams is the precision runs' limit: 100 per second for every
// limiter (buckets: 100 tokens, one back every 10 ms, as
// redis_rate.PerSecond(100) is).
var rlPrecParams = rlParams{limit: 100, window: time.Second, bucket: 100, perPeriod: 1, period: 10 * time.Millisecond}

// rlKey identifies one throughput cell.
type rlKey struct {
	row, regime string
	spread      bool
	conc        int
}

// rlTP is one cell's repetitions.
type rlTP struct {
	rates      []float64 // decisions/s
	grantShare []float64 // granted / decided
	serverCPU  []float64 // Redis CPU µs per decision
	clientCPU  []float64 // this process' CPU µs per decision
	cmdTime    []float64 // Redis' time executing the row's commands (INFO commandstats), µs per decision
	errs       int64
	first      error
}

type rlSample struct {
	rate, grantShare     float64
	serverCPU, clientCPU float64
	cmdTime              float64
	errs                 int64
	err                  error
}

func (t *rlTP) add(s rlSample) {
	t.rates = append(t.rates, s.rate)
	t.grantShare = append(t.grantShare, s.grantShare)
	t.serverCPU = append(t.serverCPU, s.serverCPU)
	t.clientCPU = append(t.clientCPU, s.clientCPU)
	t.cmdTime = append(t.cmdTime, s.cmdTime)
	t.errs += s.errs
	if s.err != nil && t.first == nil {
		t.first = s.err
	}
}

// rlPrec is one limiter's precision run.
type rlPrec struct {
	start, end time.Time // the client's clock: hammering began and was told to stop
	decisions  int64
	// client: every grant (and every error: an unknown outcome may have
	// consumed a permit) at the instant its reply arrived, on this
	// process' monotonic clock, the same for every limiter.
	client []ratetest.Grant
	// server: the coordhost rows' grants at Result.ServerTime, plus the
	// errors at the client's wall clock (no server time for those).
	server   []ratetest.Grant
	errs     int64
	firstErr error
}

// rlResults are section 10's measurements.
type rlResults struct {
	tp       map[rlKey]*rlTP
	prec     map[string]*rlPrec
	fastPath string // the coordhost fixed window's INCREX state after the run
}

func sectionRateLimit(srv *server, o options) *rlResults {
	res := &rlResults{tp: map[rlKey]*rlTP{}, prec: map[string]*rlPrec{}}
	rows := rlRows()
	ctx := context.Background()
	// One limiter per row and regime, each on its own fresh client.
	insts := map[string][]rlDecider{}
	for _, rg := range rlRegimes {
		ds := make([]rlDecider, len(rows))
		for i, row := range rows {
			d, err := row.new(srv.addr, fmt.Sprintf("bench:10:%d:%s:", i, rg.name), rg.p)
			if err != nil {
				fatalf("10: %s: %v", row.name, err)
			}
			ds[i] = d
			defer d.close()
		}
		insts[rg.name] = ds
	}
	// Untimed: connections, script caches, the fixed window's INCREX
	// probe; for the refusal regime, every key exhausted.
	for _, rg := range rlRegimes {
		for i, row := range rows {
			d := insts[rg.name][i]
			if s := loopDecisions(nil, d, nil, true, 8, 0, o.rlWarm); s.err != nil {
				fatalf("10: %s: warm-up: %v", row.name, s.err)
			}
			if rg.name == "refusals" {
				if err := rlExhaust(ctx, d); err != nil {
					fatalf("10: %s: exhausting the keys: %v", row.name, err)
				}
			}
		}
	}
	if c, ok := insts["grants"][0].(*coordhostRL); ok {
		res.fastPath = c.ls.FastPath().String()
	}
	for r := range o.rlReps {
		for _, rg := range rlRegimes {
			for _, spread := range []bool{false, true} {
				for _, conc := range o.concs {
					for j := range rows {
						i := (j + r) % len(rows)
						s := loopDecisions(srv, insts[rg.name][i], rows[i].top, spread, conc, o.rlWarm, o.rlDur)
						resultFor(res.tp, rlKey{rows[i].name, rg.name, spread, conc}).add(s)
						logf("10 rep %d/%d %-8s %-6s conc %2d %-28s %9.0f decisions/s  granted %5.1f%%  per decision: redis cpu %5.1fµs, commands %5.1fµs; self %5.1fµs  errors %d",
							r+1, o.rlReps, rg.name, keysLabel(spread), conc, rows[i].name, s.rate, 100*s.grantShare, s.serverCPU, s.cmdTime, s.clientCPU, s.errs)
					}
				}
			}
		}
	}
	if c, ok := insts["grants"][0].(*coordhostRL); ok {
		res.fastPath = c.ls.FastPath().String()
	}
	for i, row := range rows {
		p := rlPrecision(srv, row, i, o)
		res.prec[row.name] = p
		logf("10 precision %-28s %d decisions, %d grants in %v, errors %d", row.name, p.decisions, ratetest.Total(p.client), p.end.Sub(p.start).Round(time.Millisecond), p.errs)
	}
	return res
}

func keysLabel(spread bool) string {
	if spread {
		return "spread"
	}
	return "hot"
}

// rlExhaust takes every key's permits: decisions on each key until one is
// refused (at most a few more than the regime's bucket or limit).
func rlExhaust(ctx context.Context, d rlDecider) error {
	var wg sync.WaitGroup
	var firstErr atomic.Pointer[error]
	const workers = 32
	for w := range workers {
		wg.Go(func() {
			for k := w; k <= rlKeys; k += workers {
				for range 100 {
					ok, _, err := d.decide(ctx, k)
					if err != nil {
						firstErr.CompareAndSwap(nil, &err)
						return
					}
					if !ok {
						break
					}
				}
			}
		})
	}
	wg.Wait()
	if p := firstErr.Load(); p != nil {
		return *p
	}
	return nil
}

// loopDecisions runs conc goroutines deciding one permit at a time, for
// warm and then counted for dur. On the hot key every goroutine asks for
// the same key (index rlKeys); spread, goroutine g walks the keys 0 ..
// rlKeys-1 round-robin from key g·rlKeys/conc, so all of them are in use.
// srv, when set, is asked for its CPU time around the window, and for the
// time its commandstats count in the commands top.
func loopDecisions(srv *server, d rlDecider, top []string, spread bool, conc int, warm, dur time.Duration) rlSample {
	var count, granted, errs atomic.Int64
	var firstErr atomic.Pointer[error]
	var stop atomic.Bool
	var wg sync.WaitGroup
	ctx := context.Background()
	for g := range conc {
		wg.Go(func() {
			next := g * rlKeys / conc
			for !stop.Load() {
				k := rlKeys
				if spread {
					k = next
					next = (next + 1) % rlKeys
				}
				ok, _, err := d.decide(ctx, k)
				if err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, &err)
					time.Sleep(time.Millisecond) // never spin on a persistent error
					continue
				}
				if ok {
					granted.Add(1)
				}
				count.Add(1)
			}
		})
	}
	time.Sleep(warm)
	if srv != nil {
		srv.mustDo("CONFIG", "RESETSTAT")
	}
	r0, s0 := cpuNow(srv)
	c0, g0, t0 := count.Load(), granted.Load(), time.Now()
	time.Sleep(dur)
	c1, g1, t1 := count.Load(), granted.Load(), time.Now()
	r1, s1 := cpuNow(srv)
	var usec float64
	if srv != nil {
		usec = commandUsec(srv, top)
	}
	stop.Store(true)
	wg.Wait()
	out := rlSample{rate: float64(c1-c0) / t1.Sub(t0).Seconds(), errs: errs.Load()}
	if n := c1 - c0; n > 0 {
		out.grantShare = float64(g1-g0) / float64(n)
		out.serverCPU = float64((r1 - r0).Microseconds()) / float64(n)
		out.clientCPU = float64((s1 - s0).Microseconds()) / float64(n)
		out.cmdTime = usec / float64(n)
	}
	if p := firstErr.Load(); p != nil {
		out.err = *p
	}
	return out
}

// rlPrecision hammers one key of row's limiter from o.rlPrecClients
// clients × o.rlPrecGoroutines goroutines for o.rlPrecDur, recording every
// grant. Each client is a separate limiter instance (its own connection and,
// for coordhost, its own Limiters), as separate processes would be.
func rlPrecision(srv *server, row rlRow, idx int, o options) *rlPrec {
	ctx := context.Background()
	prefix := fmt.Sprintf("bench:10:prec:%d:", idx)
	ds := make([]rlDecider, o.rlPrecClients)
	for c := range ds {
		d, err := row.new(srv.addr, prefix, rlPrecParams)
		if err != nil {
			fatalf("10: precision: %s: %v", row.name, err)
		}
		defer d.close()
		// Connections and scripts ready, on another key than the
		// measured one.
		for range 3 {
			if _, _, err := d.decide(ctx, 0); err != nil {
				fatalf("10: precision: %s: warm-up: %v", row.name, err)
			}
		}
		ds[c] = d
	}
	type local struct {
		client, server []ratetest.Grant
		decisions      int64
		errs           int64
		first          error
	}
	n := o.rlPrecClients * o.rlPrecGoroutines
	locals := make([]local, n)
	var stop atomic.Bool
	begin := make(chan struct{})
	var wg sync.WaitGroup
	for g := range n {
		d := ds[g%len(ds)]
		l := &locals[g]
		wg.Go(func() {
			<-begin
			for !stop.Load() {
				ok, st, err := d.decide(ctx, rlKeys)
				at := time.Now()
				l.decisions++
				switch {
				case err != nil:
					l.errs++
					if l.first == nil {
						l.first = err
					}
					l.client = append(l.client, ratetest.Grant{At: at, N: 1})
					if row.coordhost {
						l.server = append(l.server, ratetest.Grant{At: at.Round(0), N: 1})
					}
					time.Sleep(time.Millisecond)
				case ok:
					l.client = append(l.client, ratetest.Grant{At: at, N: 1})
					if row.coordhost {
						l.server = append(l.server, ratetest.Grant{At: st, N: 1})
					}
				}
			}
		})
	}
	p := &rlPrec{start: time.Now()}
	close(begin)
	time.Sleep(o.rlPrecDur)
	p.end = time.Now()
	stop.Store(true)
	wg.Wait()
	for i := range locals {
		l := &locals[i]
		p.client = append(p.client, l.client...)
		p.server = append(p.server, l.server...)
		p.decisions += l.decisions
		p.errs += l.errs
		if p.firstErr == nil && l.first != nil {
			p.firstErr = l.first
		}
	}
	slices.SortFunc(p.client, func(a, b ratetest.Grant) int { return a.At.Compare(b.At) })
	slices.SortFunc(p.server, func(a, b ratetest.Grant) int { return a.At.Compare(b.At) })
	return p
}

// commandUsec is the time INFO commandstats counts in the commands names
// since the last CONFIG RESETSTAT, in µs. Reading it right after the
// window counts the decisions in flight then too: a few out of thousands.
func commandUsec(srv *server, names []string) float64 {
	info := srv.mustDo("INFO", "commandstats")
	var total float64
	for line := range strings.Lines(info) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_")
		if !ok {
			continue
		}
		name, fields, ok := strings.Cut(rest, ":")
		if !ok || !slices.Contains(names, name) {
			continue
		}
		for f := range strings.SplitSeq(fields, ",") {
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				u, err := strconv.ParseFloat(v, 64)
				if err != nil {
					fatalf("commandstats %q: %v", line, err)
				}
				total += u
			}
		}
	}
	return total
}
