package main

// Section 11: the daemon under load — running it and reporting it.

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"time"
)

// daemonResult is section 11.
type daemonResult struct {
	coordhostBin   string
	coordhostBuild time.Duration // 0 when -coordhost-bin
	envoyBin       string        // "" when envoyproxy/ratelimit was not measured
	envoyBuild     time.Duration
	envoyWhy       string // why it was not measured

	rlsServers []string
	rls        map[rlsKey][]rlsSample
	rlsCap     map[string][]rlsCapacity
	repLoads   []string // load average at the start of each RLS repetition
	lock       map[alKey][]alSample
	mem        *memResult

	loadStart, loadEnd string
	elapsed            time.Duration
}

// Part 1's service names.
const (
	dsCoordhost = "coordhost serve"
	dsEnvoy     = "envoyproxy/ratelimit"
)

func (o options) dPart(p string) bool { return strings.Contains(o.dParts, p) }

// sectionDaemon builds the binaries, starts coordhost (and, for part 1,
// envoyproxy/ratelimit) against srv and runs the parts -d-parts names.
func sectionDaemon(srv *server, o options) *daemonResult {
	x := &daemonResult{loadStart: loadAvg()}
	start := time.Now()
	var err error
	if x.coordhostBin, x.coordhostBuild, err = buildCoordhost(o); err != nil {
		fatalf("11: %v", err)
	}
	logf("11 coordhost binary %s (build %v)", x.coordhostBin, x.coordhostBuild.Round(time.Millisecond))
	if o.dPart("1") || o.dPart("2") {
		d, err := startCoordhost(x.coordhostBin, srv.addr, o.dPprof)
		if err != nil {
			fatalf("11: %v", err)
		}
		logf("11 coordhost serve pid %d on %s", d.pid(), d.addr)
		if o.dPart("1") {
			var targets []*rlsTarget
			t, err := newRLSTarget(dsCoordhost, d)
			if err != nil {
				fatalf("11: %v", err)
			}
			targets = append(targets, t)
			if e := startEnvoy(srv, o, x); e != nil {
				t, err := newRLSTarget(dsEnvoy, e)
				if err != nil {
					fatalf("11: %v", err)
				}
				targets = append(targets, t)
				defer e.stop()
			}
			for _, t := range targets {
				x.rlsServers = append(x.rlsServers, t.name)
			}
			x.rls, x.rlsCap = sectionRLS(srv, o, targets, &x.repLoads)
			for _, t := range targets {
				t.conn.Close()
			}
		}
		if o.dPart("2") {
			srv.mustDo("FLUSHALL")
			x.lock = sectionAPILock(srv, o, d)
		}
		d.stop()
	}
	if o.dPart("3") {
		srv.mustDo("FLUSHALL")
		x.mem = sectionStreams(srv, x.coordhostBin, o)
	}
	x.elapsed = time.Since(start)
	x.loadEnd = loadAvg()
	return x
}

// startEnvoy builds and starts envoyproxy/ratelimit, or records in x why
// it could not.
func startEnvoy(srv *server, o options, x *daemonResult) *child {
	if o.envoyRLSVersion == "none" && o.envoyRLSBin == "" {
		x.envoyWhy = "left out with -envoy-rls-version none"
		return nil
	}
	bin, took, err := buildEnvoyRLS(o)
	if err != nil {
		x.envoyWhy = err.Error()
		logf("11 envoyproxy/ratelimit not measured: %v", err)
		return nil
	}
	x.envoyBin, x.envoyBuild = bin, took
	logf("11 envoyproxy/ratelimit binary %s (build %v)", bin, took.Round(time.Millisecond))
	e, err := startEnvoyRLS(bin, srv.addr)
	if err != nil {
		x.envoyBin, x.envoyWhy = "", err.Error()
		logf("11 envoyproxy/ratelimit not measured: %v", err)
		return nil
	}
	logf("11 envoyproxy/ratelimit pid %d on %s", e.pid(), e.addr)
	return e
}

// ---- report ----

// rlsGoal is the goal: p99 ≤ 2 ms at 10k requests/s.
const (
	rlsGoalRate = 10000
	rlsGoalP99  = 2 * time.Millisecond
	memGoal     = 10 << 10 // bytes per session or stream
)

// medDur is the median of f over samples.
func medDur(ss []rlsSample, f func(rlsSample) time.Duration) time.Duration {
	v := make([]float64, len(ss))
	for i, s := range ss {
		v[i] = float64(f(s))
	}
	return time.Duration(median(v))
}

func medF[T any](ss []T, f func(T) float64) float64 {
	v := make([]float64, len(ss))
	for i, s := range ss {
		v[i] = f(s)
	}
	return median(v)
}

// durRange is "a–b" over samples.
func durRange(ss []rlsSample, f func(rlsSample) time.Duration) string {
	v := make([]time.Duration, len(ss))
	for i, s := range ss {
		v[i] = f(s)
	}
	return dur(slices.Min(v)) + "–" + dur(slices.Max(v))
}

// perUnit is the per-unit delta between two stages, and its KB text.
func perUnit(a, b float64, n int) float64 { return (b - a) / float64(n) }

// kb writes a byte count in B, KB (1024) or MB (1024²).
func kb(bytes float64) string {
	switch a := math.Abs(bytes); {
	case a < 1024:
		return fmt.Sprintf("%.0f B", bytes)
	case a < 1<<20:
		return fmt.Sprintf("%.1f KB", bytes/1024)
	}
	return fmt.Sprintf("%.1f MB", bytes/(1<<20))
}

// memUnits are part 3's per-unit rows: what each step added, over how many.
type memUnit struct {
	label    string
	from, to string
	n        func(*memResult) int
	goal     bool // judged against memGoal
}

var memUnits = []memUnit{
	{"client connection (HTTP/2, one health check done)", stPre, stConns, func(m *memResult) int { return m.conns }, false},
	{"idle session (no stream)", stConns, stSessions, func(m *memResult) int { return m.n }, true},
	{"KeepAlive stream", stSessions, stKeep, func(m *memResult) int { return m.n }, true},
	{"Hold stream", stKeep, stHold, func(m *memResult) int { return m.n }, true},
	{"left after every stream was cancelled (vs. connections open)", stConns, stClosed, func(*memResult) int { return 1 }, false},
}

// memPer returns live heap (gctrace MB delta), heap in use, stacks and
// goroutines per unit u, ok false when a stage is missing.
func (m *memResult) per(u memUnit) (live, inuse, stack, gor float64, ok bool) {
	a, b := m.stage(u.from), m.stage(u.to)
	if a == nil || b == nil {
		return 0, 0, 0, 0, false
	}
	n := u.n(m)
	return perUnit(float64(a.liveMB)*(1<<20), float64(b.liveMB)*(1<<20), n), perUnit(a.heapInuse, b.heapInuse, n),
		perUnit(a.stackInuse, b.stackInuse, n), perUnit(a.goroutines, b.goroutines, n), true
}

// daemonTargets writes section 11's rows of the Targets table; each starts
// "section 11:" (-splice finds them by it).
func (r *report) daemonTargets(w func(string, ...any)) {
	x := r.daemon
	if x.rls != nil {
		for _, srv := range x.rlsServers {
			ss := x.rls[rlsKey{srv, rlsGoalRate}]
			if len(ss) == 0 {
				continue
			}
			p99 := medDur(ss, func(s rlsSample) time.Duration { return s.lat[1] })
			errs := 0
			for _, s := range ss {
				errs += s.errs
			}
			what := "the goal"
			if srv != dsCoordhost {
				what = "the same bar, for comparison"
			}
			capacity := ""
			if cs := x.rlsCap[srv]; len(cs) > 0 {
				capacity = fmt.Sprintf("; its closed-loop capacity on this machine: %s requests/s", num(medF(cs, func(c rlsCapacity) float64 { return c.rate })))
			}
			w("| section 11: %s ShouldRateLimit p99 ≤ 2 ms at %d requests/s, open loop (%s) | median p99 %s (per repetition %s), p50 %s; %d errors%s | %s |\n",
				srv, rlsGoalRate, what, dur(p99), durRange(ss, func(s rlsSample) time.Duration { return s.lat[1] }),
				dur(medDur(ss, func(s rlsSample) time.Duration { return s.lat[0] })), errs, capacity, verdict(errs == 0 && p99 <= rlsGoalP99))
		}
	}
	if m := x.mem; m != nil {
		for _, u := range memUnits {
			if !u.goal {
				continue
			}
			live, _, stack, gor, ok := m.per(u)
			if !ok {
				w("| section 11: ≤ 10 KB of heap per %s | not measured: %v | **MISS** |\n", u.label, m.err)
				continue
			}
			w("| section 11: ≤ 10 KB of heap per %s (%d on one daemon) | %s live heap (goroutine stacks besides: %s; %.2f goroutines each) | %s |\n",
				u.label, m.n, kb(live), kb(stack), gor, verdict(live <= memGoal))
			w("| section 11: same, heap + goroutine stack (stricter reading) | %s | %s |\n", kb(live+stack), verdict(live+stack <= memGoal))
			if u.from == stConns {
				w("| section 11: no goroutine per idle session | %.4f goroutines per session | %s |\n", gor, verdict(gor < 0.01))
			}
		}
	}
}

func (r *report) sectionDaemon(w func(string, ...any)) {
	x := r.daemon
	w("## 11. The daemon under load\n\n")
	w("`coordhost serve` built from this tree (`go build ./cmd/coordhost` of the main module into a temporary directory")
	if x.coordhostBuild > 0 {
		w(", %v", x.coordhostBuild.Round(100*time.Millisecond))
	} else {
		w("; here `-coordhost-bin %s`", x.coordhostBin)
	}
	w(") runs as a child process, `-listen 127.0.0.1:0`, cleartext HTTP/2 (h2c), against the Redis %s server above (`key_prefix = \"ch:\"`, the client cache on: the defaults); clients are grpc-go (`google.golang.org/grpc`) in this program. ", r.server.version)
	w("The Go program, the daemon(s) and Redis share the machine's %d CPUs. Load average over the section: %s at its start, %s at its end (readings taken while it runs include its own processes: the generator, the service and Redis keep several threads runnable during a cell); it took %v.\n\n", runtime.NumCPU(), x.loadStart, x.loadEnd, x.elapsed.Round(time.Second))
	if x.rls != nil {
		r.daemonRLS(w)
	}
	if x.lock != nil {
		r.daemonLock(w)
	}
	if x.mem != nil {
		r.daemonMem(w)
	}
}

func (r *report) daemonRLS(w func(string, ...any)) {
	o := r.opts
	x := r.daemon
	w("### Envoy RLS `ShouldRateLimit`, open loop\n\n")
	w("Both services decide the same thing on the same Redis: domain `bench`, one descriptor `remote_address` with %d distinct values (request i carries value i mod %d), each limited to %d per minute by a fixed window — coordhost's `rate_limit` (`algorithm = \"fixed_window\"`, Lua on Redis 7) behind an `envoy_rate_limit` block; envoyproxy/ratelimit's YAML `unit: minute, requests_per_unit: %d` (its `INCRBY` + `EXPIRE` in one pipeline) — so every request is under its limit (OVER_LIMIT answers are counted below). ",
		rlsAddresses, rlsAddresses, rlsLimit, rlsLimit)
	if x.envoyBin != "" {
		w("envoyproxy/ratelimit is `%s` at `%s`, built with `go install %s@%s` into a temporary directory (%v; from the module proxy or the module cache: none of its code or dependencies enters this repository or bench/go.mod) and run with its defaults (a radix pool of 10 Redis connections, no implicit pipelining, no local cache) except `USE_STATSD=false`, `LOG_LEVEL=warn`, loopback ports and its runtime directory. ",
			envoyRLSPkg, o.envoyRLSVersion, envoyRLSPkg, o.envoyRLSVersion, x.envoyBuild.Round(100*time.Millisecond))
	} else {
		w("**envoyproxy/ratelimit was not measured**: %s. ", x.envoyWhy)
	}
	w("The same generator drives both: go-control-plane's grpc-go client (`rlsv3.NewRateLimitServiceClient`) on one HTTP/2 connection per service, as Envoy's RLS filter uses one cluster connection. ")
	w("**Open loop**: request i is sent at start + i/rate on its own goroutine, whether or not earlier ones were answered, and its latency is taken from that *scheduled* instant (so a stalled server is charged for every request it delays — no coordinated omission); the pacer runs on a locked OS thread and sleeps with `clock_nanosleep` to absolute deadlines with 1 ns timer slack (Go's timers woke it 0.5 ms late at the median here). ")
	w("Per cell: %v of requests not measured, then %v measured (%s requests at 10k/s); %d repetitions, every rate and service in each, services alternating first; each request has a %v deadline (a miss is an error at its elapsed time). Cells: the median over the repetitions of each repetition's percentile; p99 also as its range. *from send*: the same percentile measured from the actual send, leaving out the generator's own lateness (*send lag*: scheduled → actual send, which the first columns include). CPU per request: the service's process (utime + stime from `/proc/<pid>/stat`, 10 ms ticks), Redis (`INFO cpu`), and this program (the generator and grpc-go client; getrusage). For coordhost also the bytes its Go runtime allocated per request and its garbage collections per second (`go_memstats_alloc_bytes_total`, `go_gc_duration_seconds_count` from its `/metrics`).\n\n",
		o.rlsWarm, o.rlsDur, num(float64(rlsGoalRate)*o.rlsDur.Seconds()), o.dReps, rlsTimeout)
	if len(x.repLoads) > 0 {
		w("Load average at the start of each repetition: %s.\n\n", strings.Join(x.repLoads, "; "))
	}
	if len(x.rlsCap) > 0 {
		w("**Capacity** first, in each repetition: the same client keeps %d requests in flight (closed loop, each sent as the previous one of its goroutine is answered) for %v after %v; what the service, Redis and the generator can answer together on this machine. Latency here is queueing at that concurrency, not a service level. Median [min–max] over the repetitions.\n\n", rlsCapConc, o.rlsDur, o.rlsWarm)
		w("| service | requests/s | p50 / p99 | CPU µs per request: service / Redis / generator | errors |\n|---|---:|---:|---:|---:|\n")
		for _, srv := range x.rlsServers {
			cs := x.rlsCap[srv]
			if len(cs) == 0 {
				continue
			}
			rates := make([]float64, len(cs))
			var errs int64
			for i, c := range cs {
				rates[i] = c.rate
				errs += c.errs
			}
			w("| %s | %s [%s–%s] | %s / %s | %.1f / %.1f / %.1f | %d |\n", srv, num(median(rates)), num(slices.Min(rates)), num(slices.Max(rates)),
				dur(time.Duration(medF(cs, func(c rlsCapacity) float64 { return float64(c.p50) }))), dur(time.Duration(medF(cs, func(c rlsCapacity) float64 { return float64(c.p99) }))),
				medF(cs, func(c rlsCapacity) float64 { return c.serverCPU }), medF(cs, func(c rlsCapacity) float64 { return c.redisCPU }),
				medF(cs, func(c rlsCapacity) float64 { return c.genCPU }), errs)
		}
		w("\n**Open loop** at fixed rates. *> 20 ms*: requests answered after %v or not at all, where Envoy (default timeout %v) would have given up and let the request through; a rate above a service's capacity makes its queue grow for the whole cell, so its percentiles then measure the cell's length and the %v deadline, not the service.\n\n", envoyRLSTimeout, envoyRLSTimeout, rlsTimeout)
	}
	w("| service | rate | p50 | p99 [range] | p99.9 | max | p50 / p99 from send | send lag p50 / p99 | CPU µs per request: service / Redis / generator | daemon: allocated per request, GCs/s | > 20 ms | errors / OVER_LIMIT |\n")
	w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, rate := range o.rlsRates {
		for _, srv := range x.rlsServers {
			ss := x.rls[rlsKey{srv, rate}]
			if len(ss) == 0 {
				continue
			}
			at := func(i int) func(rlsSample) time.Duration { return func(s rlsSample) time.Duration { return s.lat[i] } }
			sv := func(i int) func(rlsSample) time.Duration { return func(s rlsSample) time.Duration { return s.svc[i] } }
			lg := func(i int) func(rlsSample) time.Duration { return func(s rlsSample) time.Duration { return s.lag[i] } }
			errs, over, slow, n := 0, 0, 0, 0
			for _, s := range ss {
				errs += s.errs
				over += s.over
				slow += s.slow
				n += s.n
			}
			ag := "–"
			if a := medF(ss, func(s rlsSample) float64 { return s.allocPerReq }); a >= 0 {
				ag = fmt.Sprintf("%s, %.0f", kb(a), medF(ss, func(s rlsSample) float64 { return s.gcPerSec }))
			}
			w("| %s | %s/s | %s | %s [%s] | %s | %s | %s / %s | %s / %s | %.1f / %.1f / %.1f | %s | %s | %d / %d |\n",
				srv, num(float64(rate)), dur(medDur(ss, at(0))), dur(medDur(ss, at(1))), durRange(ss, at(1)), dur(medDur(ss, at(2))), dur(medDur(ss, at(3))),
				dur(medDur(ss, sv(0))), dur(medDur(ss, sv(1))), dur(medDur(ss, lg(0))), dur(medDur(ss, lg(1))),
				medF(ss, func(s rlsSample) float64 { return s.serverCPU }), medF(ss, func(s rlsSample) float64 { return s.redisCPU }),
				medF(ss, func(s rlsSample) float64 { return s.genCPU }), ag, pctOf(slow, n), errs, over)
		}
	}
	w("\n")
	var notes []string
	for _, srv := range x.rlsServers {
		for _, rate := range o.rlsRates {
			errs := 0
			var first error
			for _, s := range x.rls[rlsKey{srv, rate}] {
				errs += s.errs
				if first == nil {
					first = s.firstErr
				}
			}
			if errs > 0 {
				notes = append(notes, fmt.Sprintf("%s at %d/s: %d errors over the repetitions, the first: %v", srv, rate, errs, first))
			}
		}
	}
	for _, n := range notes {
		w("- %s\n", n)
	}
	if len(notes) > 0 {
		w("\n")
	}
	for _, srv := range x.rlsServers {
		cs := x.rlsCap[srv]
		if len(cs) == 0 {
			continue
		}
		rates := make([]float64, len(cs))
		for i, c := range cs {
			rates[i] = c.rate
		}
		cpu := medF(cs, func(c rlsCapacity) float64 { return c.serverCPU })
		red := medF(cs, func(c rlsCapacity) float64 { return c.redisCPU })
		gen := medF(cs, func(c rlsCapacity) float64 { return c.genCPU })
		w("- %s: at its capacity here, %s requests/s, a request cost %.0f µs of CPU in the service, %.0f in Redis and %.0f in the generator; %d requests/s at that cost would take %.1f CPUs (the machine has %d, shared with other work).\n",
			srv, num(median(rates)), cpu, red, gen, rlsGoalRate, (cpu+red+gen)*rlsGoalRate/1e6, runtime.NumCPU())
	}
	w("\n")
}

// pctOf is k/n as a percentage.
func pctOf(k, n int) string {
	if n == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(k)/float64(n))
}

// alCycles is the cycles per second of each repetition.
func alCycles(ss []alSample) []float64 {
	out := make([]float64, len(ss))
	for i, s := range ss {
		out[i] = s.cycles
	}
	return out
}

func (r *report) daemonLock(w func(string, ...any)) {
	o := r.opts
	x := r.daemon
	w("### Lock acquire + release over the API, %d clients\n\n", o.apiConc)
	w("*API*: %d goroutines in this program share one grpc-go connection to the daemon (one client process); each loops `LockService.TryAcquire` (lock `bench`: `ttl = \"10s\"`, no fencing, a builtin template partition on attribute `k`) then `Release` by the grant id, and checks `RELEASE_RESULT_RELEASED`. *embedded*: section 1's `coordhost` row, `lock.Locker` (`primitives/lock`, Fencing off) on a default rueidis client in this program, `TryAcquire` + `Release`, on the same Redis. *distinct keys*: goroutine g on key `d<g>`; *hot key*: all on one key, where most attempts find it held (`ABORTED` over the API, `ErrNotAcquired` embedded) and a cycle is a granted attempt and its release. %d × %v after %v warm-up per cell, rows rotating, after an untimed 8-goroutine pass; median [min–max]; `× embedded` = ratio of the medians / median of the same-repetition ratios. CPU per granted cycle, median µs: the daemon (`/proc/<pid>/stat`), Redis (`INFO cpu`), this program (getrusage: the gRPC clients, or the embedded library).\n\n",
		o.apiConc, o.dReps, o.apiDur, o.apiWarm)
	w("| row | distinct keys: cycles/s | hot key: cycles/s (attempts/s) | CPU µs per cycle, distinct keys: daemon / Redis / this program | same, hot key | daemon: allocated per cycle, GCs/s (distinct keys) |\n|---|---:|---:|---:|---:|---:|\n")
	for _, row := range []string{alAPI, alEmbedded} {
		w("| %s |", row)
		for _, hot := range []bool{false, true} {
			ss := x.lock[alKey{row, hot}]
			if len(ss) == 0 {
				w(" – |")
				continue
			}
			rates := alCycles(ss)
			w(" %s [%s–%s]", num(median(rates)), num(slices.Min(rates)), num(slices.Max(rates)))
			if hot {
				w(" (%s)", num(medF(ss, func(s alSample) float64 { return s.attempts })))
			}
			if row == alAPI {
				if e := x.lock[alKey{alEmbedded, hot}]; len(e) > 0 {
					em := alCycles(e)
					_, paired := pairedOf(rates, em)
					w("<br>× embedded %.2f / %.2f", median(rates)/median(em), paired)
				}
			}
			w(" |")
		}
		for _, hot := range []bool{false, true} {
			ss := x.lock[alKey{row, hot}]
			if len(ss) == 0 {
				w(" – |")
				continue
			}
			w(" %.1f / %.1f / %.1f |", medF(ss, func(s alSample) float64 { return s.daemonCPU }),
				medF(ss, func(s alSample) float64 { return s.redisCPU }), medF(ss, func(s alSample) float64 { return s.selfCPU }))
		}
		if ss := x.lock[alKey{row, false}]; row == alAPI && len(ss) > 0 && medF(ss, func(s alSample) float64 { return s.allocPerCycle }) >= 0 {
			w(" %s, %.0f |\n", kb(medF(ss, func(s alSample) float64 { return s.allocPerCycle })), medF(ss, func(s alSample) float64 { return s.gcPerSec }))
		} else {
			w(" – |\n")
		}
	}
	w("\n")
	for _, row := range []string{alAPI, alEmbedded} {
		for _, hot := range []bool{false, true} {
			var errs int64
			var first error
			for _, s := range x.lock[alKey{row, hot}] {
				errs += s.errs
				if first == nil {
					first = s.err
				}
			}
			if errs > 0 {
				w("- %s, hot %v: %d failed cycles, first: %v\n", row, hot, errs, first)
			}
		}
	}
	w("\n")
}

func (r *report) daemonMem(w func(string, ...any)) {
	m := r.daemon.mem
	w("### Sessions and streams on one daemon\n\n")
	w("A daemon of its own (same binary and configuration, started with `GODEBUG=gctrace=1`), on the same Redis. Steps, one after the other, each measured once it is done: %d client connections (grpc-go, each with one `grpc.health.v1` check done; %d streams at most on one, since Go's HTTP/2 server allows 250 at once); %d `CreateSession` (TTL 10 min, no stream: *idle sessions*); a `KeepAlive` stream on each session (one request sent and its response read; the stream stays open); %d `LockService.Hold` streams on distinct keys without a session (lock `hold`, `ttl = \"5m\"`: no renewal within the measurement; first response read, the stream stays open); then every stream's context cancelled. ",
		m.conns, m.perConn, m.n, m.n)
	w("The daemon exposes no pprof, and nothing was added to it: after each step this program drives two garbage collections in the daemon (`ShouldRateLimit` requests for an unconfigured domain, about 100 KB of garbage each, no Redis call) and takes the *live heap* the second one marked from its gctrace line (whole MB), then reads `/metrics`: `go_goroutines`, `go_memstats_heap_inuse_bytes` (spans in use, live objects plus free slots in them), `go_memstats_stack_inuse_bytes` and `process_resident_memory_bytes`.\n\n")
	if m.err != nil {
		w("**Part 3 stopped early**: %v\n\n", m.err)
	}
	if r.opts.dPprof != "" {
		w("**This run's daemons were built with `-d-pprof`**, which adds `net/http/pprof` (and the heap profiles taken after each step force a GC of their own): use it to see where the memory goes, not for these figures.\n\n")
	}
	w("| after | goroutines | live heap | heap in use | goroutine stacks | RSS | the step took |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range m.stages {
		w("| %s | %.0f | %d MB | %.1f MB | %.1f MB | %.1f MB | %v |\n", s.name, s.goroutines, s.liveMB, s.heapInuse/1e6, s.stackInuse/1e6, s.rss/1e6, s.took.Round(10*time.Millisecond))
	}
	w("\nPer unit (the difference between the steps, divided by the count; the live heap is in whole MB, so ±%s per unit at %d units):\n\n", kb(float64(1<<20)/float64(m.n)), m.n)
	w("| each | live heap | heap in use | goroutine stack | goroutines |\n|---|---:|---:|---:|---:|\n")
	for _, u := range memUnits {
		live, inuse, stack, gor, ok := m.per(u)
		if !ok {
			continue
		}
		if u.from == stConns && u.to == stClosed {
			w("| %s | %s | %s | %s | %.0f |\n", u.label, kb(live), kb(inuse), kb(stack), gor)
			continue
		}
		w("| %s | %s | %s | %s | %.2f |\n", u.label, kb(live), kb(inuse), kb(stack), gor)
	}
	w("\n")
}
