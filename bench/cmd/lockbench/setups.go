package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/rueidis"
)

// ---- section 7: rueidis client set-ups (not in the default -sections) ----
//
// Section 7 measures what the rueidis client options do to coordhost's
// uncontended TryAcquire + Release cycle at 1, 8 and 64 goroutines, next to
// bsm/redislock and raw rueidis, all in the same run. Unlike section 1,
// every cell gets a fresh client, because a rueidis connection's path
// depends on its history (see the report's text): "fresh" cells use the
// client only at the cell's concurrency, "after concurrent use" cells first
// run 8 goroutines on it for a moment, as section 1's shared warm-up does.

// clientSetup is one way to configure the rueidis client.
type clientSetup struct {
	name string
	note string
	opt  func(*rueidis.ClientOption) // nil: library defaults
	// wrap, when set, wraps the new client (a prototype, see adaptive.go)
	wrap func(rueidis.Client) rueidis.Client
}

// Setups used by section 1's extra rows and by section 7.
var (
	setupDefault    = clientSetup{name: "default", note: "rueidis defaults: RESP3, client-side cache on (CLIENT TRACKING OPTIN on every connection), auto-pipelining, PipelineMultiplex 0 = log2(GOMAXPROCS) capped at 2 (2 pipelined connections here), ConnWriteTimeout 10 s"}
	setupSequential = clientSetup{
		name: "DisableAutoPipelining",
		note: "`DisableAutoPipelining: true`: every command borrows a connection from the pool (`BlockingPoolSize`, default 1024) and is written and read on the caller's goroutine",
		opt:  func(o *rueidis.ClientOption) { o.DisableAutoPipelining = true },
	}
)

// setupAdaptive is a prototype, not a rueidis option: see adaptive.go.
var setupAdaptive = clientSetup{
	name: "adaptive (prototype)",
	note: "not a rueidis option: `DisableAutoPipelining: true` plus a wrapper (bench/cmd/lockbench/adaptive.go) that marks a command `ToPipe()` when another command is in flight through the same client, so a lone caller's command goes on the caller's goroutine and concurrent ones are auto-pipelined",
	opt:  func(o *rueidis.ClientOption) { o.DisableAutoPipelining = true },
	wrap: newAdaptive,
}

func clientSetups() []clientSetup {
	return []clientSetup{
		setupDefault,
		{name: "DisableCache", note: "`DisableCache: true` (no CLIENT TRACKING; coordhost's waiters use their own dedicated connection either way)",
			opt: func(o *rueidis.ClientOption) { o.DisableCache = true }},
		setupSequential,
		{name: "DisableAutoPipelining+DisableCache", note: "both",
			opt: func(o *rueidis.ClientOption) { o.DisableAutoPipelining, o.DisableCache = true, true }},
		{name: "AlwaysPipelining", note: "`AlwaysPipelining: true`: every connection starts its background writer and reader at once",
			opt: func(o *rueidis.ClientOption) { o.AlwaysPipelining = true }},
		{name: "MaxFlushDelay 20µs", note: "`MaxFlushDelay: 20µs` (the value rueidis' docs suggest): the writer pauses after a flush when more than one command is in flight",
			opt: func(o *rueidis.ClientOption) { o.MaxFlushDelay = 20 * time.Microsecond }},
		{name: "PipelineMultiplex -1", note: "`PipelineMultiplex: -1`: one pipelined connection",
			opt: func(o *rueidis.ClientOption) { o.PipelineMultiplex = -1 }},
		{name: "PipelineMultiplex 2", note: "`PipelineMultiplex: 2`: four pipelined connections",
			opt: func(o *rueidis.ClientOption) { o.PipelineMultiplex = 2 }},
		{name: "ConnWriteTimeout -1", note: "`ConnWriteTimeout: -1`: no per-command socket deadline on the synchronous path, no background PING",
			opt: func(o *rueidis.ClientOption) { o.ConnWriteTimeout = -1 }},
		{name: "AlwaysRESP2+DisableCache", note: "`AlwaysRESP2: true` (needs `DisableCache`)",
			opt: func(o *rueidis.ClientOption) { o.AlwaysRESP2, o.DisableCache = true, true }},
		setupAdaptive,
	}
}

// ctxMode is how the loop makes the context of each call.
type ctxMode int

const (
	ctxBackground ctxMode = iota // context.Background(): Done() is nil
	ctxTimeout                   // context.WithTimeout(bg, 5s) per call: a deadline
	ctxCancel                    // context.WithCancel(bg) per call: Done() but no deadline
)

func (m ctxMode) String() string {
	return [...]string{"Background", "WithTimeout", "WithCancel"}[m]
}

// setupCol is one column of section 7.
type setupCol struct {
	conc    int
	ctx     ctxMode
	usedPar bool // run 8 goroutines on the client before the cell
	place   placement
}

func (c setupCol) label() string {
	s := fmt.Sprintf("%d g.", c.conc)
	if c.conc == 1 {
		if c.usedPar {
			s += ", used"
		} else {
			s += ", fresh"
		}
	}
	s += ", " + c.ctx.String()
	if c.place != placeFree {
		s += ", " + c.place.String()
	}
	return s
}

func setupCols() []setupCol {
	return []setupCol{
		{1, ctxBackground, false, placeFree},
		{1, ctxTimeout, false, placeFree},
		{1, ctxCancel, false, placeFree},
		{1, ctxBackground, true, placeFree},
		{1, ctxTimeout, true, placeFree},
		{1, ctxBackground, true, placeSame},
		{1, ctxBackground, true, placeSplit},
		{8, ctxBackground, false, placeFree},
		{64, ctxBackground, false, placeFree},
	}
}

// setupRow is one row of section 7: an implementation with a client set-up.
type setupRow struct {
	name  string
	kind  kind
	setup clientSetup
}

func setupRows(filter string) []setupRow {
	var rows []setupRow
	for _, s := range clientSetups() {
		rows = append(rows, setupRow{name: "coordhost, " + s.name, kind: kindByName("coordhost"), setup: s})
	}
	rows = append(rows,
		setupRow{name: "raw rueidis, default", kind: kindByName("raw rueidis"), setup: setupDefault},
		setupRow{name: "raw rueidis, DisableAutoPipelining", kind: kindByName("raw rueidis"), setup: setupSequential},
		setupRow{name: "raw rueidis, adaptive (prototype)", kind: kindByName("raw rueidis"), setup: setupAdaptive},
		setupRow{name: "bsm/redislock", kind: kindByName("bsm/redislock")},
	)
	if filter == "" {
		return rows
	}
	var out []setupRow
	for _, r := range rows {
		if matchesAny(r.name, filter) {
			out = append(out, r)
		}
	}
	return out
}

type setupKey struct {
	row string
	col int // index into setupCols()
}

// setupResult is one cell over the repetitions.
type setupResult struct {
	tpResult
	csw []float64
}

// sectionSetups runs section 7.
func sectionSetups(srv *server, o options) (map[setupKey]*setupResult, []setupRow) {
	rows := setupRows(o.setupRows)
	if len(rows) == 0 {
		fatalf("-setup-rows %q matches no row", o.setupRows)
	}
	cols := setupCols()
	pinErr := pinnable()
	if pinErr != nil {
		logf("7: placements not possible here (%v): the pinned columns are skipped", pinErr)
	}
	res := map[setupKey]*setupResult{}
	for r := range o.reps {
		for ci, col := range cols {
			if !colWanted(o.setupCols, ci) || (col.place != placeFree && pinErr != nil) {
				continue
			}
			for j := range rows {
				row := rows[(j+r)%len(rows)]
				s := runSetupCell(srv, row, col, o)
				t := resultFor(res, setupKey{row.name, ci})
				t.add(s.tpSample)
				t.csw = append(t.csw, s.csw)
				logf("7 rep %d/%d %-38s %-44s %9.0f cycles/s  cpu/cycle redis %5.1fµs self %5.1fµs  csw/cycle %.2f  errors %d",
					r+1, o.reps, col.label(), row.name, s.rate, s.serverCPU, s.clientCPU, s.csw, s.errs)
			}
		}
	}
	return res, rows
}

// colWanted reports whether column ci (0-based) is in the -setup-cols list.
func colWanted(list string, ci int) bool {
	if list == "" {
		return true
	}
	for f := range strings.SplitSeq(list, ",") {
		if strings.TrimSpace(f) == strconv.Itoa(ci+1) {
			return true
		}
	}
	return false
}

// setupSample is a tpSample plus the voluntary context switches of this
// process per cycle (a thread that blocks: futex sleeps, epoll waits).
type setupSample struct {
	tpSample
	csw float64
}

func runSetupCell(srv *server, row setupRow, col setupCol, o options) setupSample {
	im, err := row.kind.new(implConfig{addr: srv.addr, ttl: throughputTTL, setup: row.setup})
	if err != nil {
		fatalf("%s: %v", row.name, err)
	}
	defer im.Close()
	if col.usedPar {
		if s := loopCycles(nil, im, "bench:setup:pre:"+row.name, 8, ctxBackground, 0, 200*time.Millisecond); s.err != nil {
			fatalf("%s: concurrent use: %v", row.name, s.err)
		}
	}
	if col.place != placeFree {
		if err := place(col.place, srv.cmd.Process.Pid); err != nil {
			fatalf("placement %v: %v", col.place, err)
		}
		defer func() {
			if err := place(placeFree, srv.cmd.Process.Pid); err != nil {
				fatalf("placement: %v", err)
			}
		}()
	}
	return loopCycles(srv, im, "bench:setup:"+row.name, col.conc, col.ctx, o.warm, o.setupDur)
}

// loopCycles runs conc goroutines, each on its own key under keyPrefix,
// looping TryLock + Release with a choice of context per call, and
// counts this process' voluntary context switches.
func loopCycles(srv *server, im impl, keyPrefix string, conc int, mode ctxMode, warm, dur time.Duration) setupSample {
	var count, errs atomic.Int64
	var firstErr atomic.Pointer[error]
	var stop atomic.Bool
	var wg sync.WaitGroup
	fail := func(err error) {
		errs.Add(1)
		firstErr.CompareAndSwap(nil, &err)
		time.Sleep(time.Millisecond) // never spin on a persistent error
	}
	bg := context.Background()
	for g := range conc {
		key := fmt.Sprintf("%s:%d:%d", keyPrefix, conc, g)
		wg.Go(func() {
			for !stop.Load() {
				ctx, cancel := bg, context.CancelFunc(func() {})
				switch mode {
				case ctxTimeout:
					ctx, cancel = context.WithTimeout(bg, 5*time.Second)
				case ctxCancel:
					ctx, cancel = context.WithCancel(bg)
				}
				h, err := im.TryLock(ctx, key, throughputTTL)
				if err != nil {
					cancel()
					fail(err)
					continue
				}
				err = h.Release(ctx)
				cancel()
				if err != nil {
					fail(err)
					continue
				}
				count.Add(1)
			}
		})
	}
	time.Sleep(warm)
	r0, s0 := cpuNow(srv)
	v0 := vcsw()
	c0, t0 := count.Load(), time.Now()
	time.Sleep(dur)
	c1, t1 := count.Load(), time.Now()
	v1 := vcsw()
	r1, s1 := cpuNow(srv)
	stop.Store(true)
	wg.Wait()
	out := setupSample{tpSample: tpSample{rate: float64(c1-c0) / t1.Sub(t0).Seconds(), errs: errs.Load()}}
	if n := c1 - c0; n > 0 {
		out.serverCPU = float64((r1 - r0).Microseconds()) / float64(n)
		out.clientCPU = float64((s1 - s0).Microseconds()) / float64(n)
		out.csw = float64(v1-v0) / float64(n)
	}
	if p := firstErr.Load(); p != nil {
		out.err = *p
	}
	return out
}

// vcsw is this process' voluntary context switches so far.
func vcsw() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Nvcsw
}

func (r *report) sectionSetups(w func(string, ...any)) {
	o := r.opts
	cols := setupCols()
	w("## 7. rueidis client set-ups\n\n")
	w("coordhost's uncontended TryAcquire + Release (section 1's cycle) on rueidis clients configured in different ways, next to raw rueidis and bsm/redislock, in one run. Every cell gets a **new client**, because a rueidis connection's path depends on its history: a pipelined connection that has never had two commands in flight writes and reads on the caller's goroutine (`syncDo`), and switches for good to its background writer and reader goroutines the first time two commands overlap on it (or a call comes with a context that has a Done channel but no deadline). *fresh* cells use the client only at the cell's concurrency; *after concurrent use* cells first run 8 goroutines on it for 200 ms — what section 1's shared warm-up does. Contexts: *Background* = `context.Background()` for every call (section 1 uses this), *WithTimeout* = a new `context.WithTimeout(…, 5s)` per call, *WithCancel* = a new `context.WithCancel` per call. %d × %v per cell after %v warm-up, rows in rotating order; median [min–max] cycles/s, then the median of the same-repetition ratios to bsm/redislock.\n\n",
		o.reps, o.setupDur, o.warm)
	w("| row |")
	for _, c := range cols {
		w(" %s |", c.label())
	}
	w("\n|---|")
	for range cols {
		w("---:|")
	}
	w("\n")
	var errNotes []string
	for _, row := range r.setupRows {
		w("| %s |", row.name)
		for ci := range cols {
			t := r.setups[setupKey{row.name, ci}]
			if t == nil {
				w(" – |")
				continue
			}
			cell := fmt.Sprintf("%s [%s–%s]", num(median(t.rates)), num(slices.Min(t.rates)), num(slices.Max(t.rates)))
			if b := r.setups[setupKey{"bsm/redislock", ci}]; b != nil && row.name != "bsm/redislock" {
				var q []float64
				for i := range min(len(t.rates), len(b.rates)) {
					if b.rates[i] > 0 {
						q = append(q, t.rates[i]/b.rates[i])
					}
				}
				if len(q) > 0 {
					cell += fmt.Sprintf(" %.2f×", median(q))
				}
			}
			w(" %s |", cell)
			if t.errs > 0 {
				errNotes = append(errNotes, fmt.Sprintf("%s, %s: %d failed cycles, first: %v", row.name, cols[ci].label(), t.errs, t.first))
			}
		}
		w("\n")
	}
	w("\nCPU per cycle, median µs, Redis / this process, and this process' voluntary context switches per cycle (`getrusage` `ru_nvcsw`: a thread went to sleep — futex or epoll wait):\n\n")
	w("| row |")
	for _, c := range cols {
		w(" %s |", c.label())
	}
	w("\n|---|")
	for range cols {
		w("---:|")
	}
	w("\n")
	for _, row := range r.setupRows {
		w("| %s |", row.name)
		for ci := range cols {
			t := r.setups[setupKey{row.name, ci}]
			if t == nil {
				w(" – |")
				continue
			}
			w(" %.1f / %.1f, %.2f csw |", median(t.serverCPU), median(t.clientCPU), median(t.csw))
		}
		w("\n")
	}
	w("\n")
	for _, n := range errNotes {
		w("- errors: %s\n", n)
	}
	if len(errNotes) == 0 {
		w("No cycle failed.\n")
	}
	w("\nSet-ups:\n\n")
	for _, s := range clientSetups() {
		w("- **%s**: %s.\n", s.name, s.note)
	}
	w("\n")
}

// loadAvg is /proc/loadavg's first three fields, or "".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
