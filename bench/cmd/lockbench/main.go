// Command lockbench compares coordhost's lock with peer libraries
// (bsm/redislock, redsync, rueidislock) and a raw rueidis baseline against
// one Redis server it starts itself, in one run, measures coordhost's
// hash-field lease on a second (Redis 8) server, measures read-write
// leases and semaphores against minimal raw scripts, a writer's wait
// under a reader stream and how soon countdown-latch waiters wake (next to
// blind polling), Redlock over three servers against redsync,
// rate limiters against go-redis/redis_rate, an envoy-style window and a
// raw script (decisions per second and precision), what consulting a
// retry policy costs (native, WebAssembly, plugin), and the coordhost
// daemon under load (Envoy RLS latency next to envoyproxy/ratelimit's
// service, lock cycles over its API, memory per session and stream), and
// coordhost's primitives on a 3-master Redis Cluster against the
// standalone server (commands per operation, redirections, the spread over
// the masters, throughput), and writes a Markdown report. See
// bench/README.md.
//
// Usage (from bench/, with $COORDHOST_REDIS7_SERVER or redis-server on PATH,
// and $COORDHOST_REDIS8_SERVER for section 5):
//
//	go run ./cmd/lockbench -out RESULTS.md
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

type options struct {
	out          string
	reps         int
	warm, dur    time.Duration
	concs        []int
	waiters      []int
	handoffs     int
	handoffWarm  int
	hold         time.Duration
	chainLimit   time.Duration
	crashReps    int
	patience     time.Duration
	maxTimeouts  int
	filler       int
	sections     string
	statsWaiters int   // the waiter count the commands-per-release target is judged at
	leaseWaiters []int // section 5
	prev         string
	prevLabel    string
	// section 6
	policyCalls int    // timed calls per native or wasm row, over all repetitions
	pluginCalls int    // the same for the plugin row
	policyLoads int    // Loads kept alive for the heap per Load
	pluginBin   string // a prebuilt example plugin; "" builds it
	// section 1's pinned 1-goroutine cells
	pinReps int
	pinDur  time.Duration
	// section 7
	setupDur   time.Duration // per cell
	setupRows  string        // comma-separated substrings of row names; "" = all
	setupCols  string        // comma-separated column numbers (1-based); "" = all
	cpuprofile string
	// sections 8 and 9 (rw.go, writerwait.go, redlock.go)
	primReps        int
	primDur         time.Duration
	wwReaders       int
	wwLease         time.Duration
	wwRounds        int
	wwControlRounds int
	wwControl       time.Duration
	s8Parts         string // section 8's parts: 1 throughput, 2 writer wait, 3 latch wake-up
	// section 8's latch wake-up (latchwake.go)
	lwRounds, lwWaiters, lwClients int
	lwPoll                         time.Duration
	lwCluster                      bool
	// section 10 (ratelimit.go)
	rlReps           int
	rlWarm, rlDur    time.Duration
	rlPrecDur        time.Duration
	rlPrecClients    int
	rlPrecGoroutines int
	// section 11 (daemon.go, daemonsec.go, rls.go, apilock.go, streams.go)
	dParts          string
	dReps           int
	rlsRates        []int
	rlsWarm, rlsDur time.Duration
	apiConc         int
	apiWarm, apiDur time.Duration
	memN            int
	memPerConn      int
	coordhostBin    string
	dPprof          string
	splice          bool
	envoyRLSBin     string
	envoyRLSVersion string
	// section 12 (cluster.go, scaleout.go, scalereport.go)
	cReps        int
	cWarm, cDur  time.Duration
	cKeys, cConc int
	cLease       bool
	cRows        string
}

// has reports whether section s is to run. -sections is a string of
// one-digit section numbers, optionally in comma-separated groups; "10",
// "11" and "12" are sections 10, 11 and 12 only as groups of their own
// ("1235896,10,11,12", or "11").
func (o options) has(s string) bool {
	for _, group := range strings.Split(o.sections, ",") {
		group = strings.TrimSpace(group)
		if group == "10" || group == "11" || group == "12" {
			if s == group {
				return true
			}
			continue
		}
		if len(s) == 1 && strings.Contains(group, s) {
			return true
		}
	}
	return false
}

func main() {
	var o options
	flag.StringVar(&o.out, "out", "RESULTS.md", "Markdown report to write")
	flag.IntVar(&o.reps, "reps", 5, "repetitions of each throughput measurement (median reported)")
	flag.DurationVar(&o.warm, "warm", 250*time.Millisecond, "warm-up before each throughput measurement")
	flag.DurationVar(&o.dur, "dur", 1500*time.Millisecond, "duration of each throughput measurement")
	flag.IntVar(&o.handoffs, "handoffs", 200, "measured handoffs per handoff configuration")
	flag.IntVar(&o.handoffWarm, "handoff-warm", 20, "handoffs discarded before measuring")
	flag.DurationVar(&o.hold, "hold", time.Millisecond, "how long each holder keeps the lock in the handoff chain")
	flag.DurationVar(&o.chainLimit, "chain-limit", 20*time.Second, "bound on one handoff configuration")
	flag.IntVar(&o.crashReps, "crash-reps", 10, "repetitions of each crash-handoff configuration")
	flag.DurationVar(&o.patience, "crash-patience", 2*time.Second, "crash handoff: how long after the TTL a waiter may take before the rep counts as a timeout")
	flag.IntVar(&o.maxTimeouts, "crash-max-timeouts", 3, "crash handoff: skip an implementation's remaining reps after this many timeouts")
	flag.IntVar(&o.filler, "filler", 10000, "unrelated keys with a 1h TTL for the second crash-handoff phase")
	flag.StringVar(&o.sections, "sections", "1235896,10,11,12", "sections to run: 1 throughput, 2 handoff latency + commands per release (4), 3 crash handoff, 5 hash-field lease handoff on Redis 8, 8 read-write leases, semaphores and countdown latches (throughput, writer wait, latch wake-up; -s8-parts), 9 Redlock over 3 servers, 10 rate limiters, 11 the daemon under load and 12 a 3-master cluster against the standalone server (each of 10, 11, 12 a comma-separated group of its own: \"89,10\", \"10\", \"12\"), 6 policy consult cost (no Redis), 7 rueidis client set-ups (not run by default, about 9 minutes)")
	flag.IntVar(&o.cReps, "c-reps", 3, "section 12: repetitions of each cell (median reported)")
	flag.DurationVar(&o.cWarm, "c-warm", 250*time.Millisecond, "section 12: warm-up before each cell, and the random part of each row's first, untimed warm-up on each topology (after a sweep over every key)")
	flag.DurationVar(&o.cDur, "c-dur", time.Second, "section 12: duration of each cell")
	flag.IntVar(&o.cKeys, "c-keys", 10000, "section 12: keys in each row's key set (uniform: goroutine g picks uniformly among the keys i ≡ g mod -c-conc)")
	flag.IntVar(&o.cConc, "c-conc", 64, "section 12: goroutines per cell")
	flag.BoolVar(&o.cLease, "c-lease", true, "section 12: run the hash-field lease row on a Redis 8 pair (standalone + 3-master cluster) of its own; needs $COORDHOST_REDIS8_SERVER, else the report says it was left out")
	flag.StringVar(&o.cRows, "c-rows", "", "section 12: only these semicolon-separated rows (exact names; a trailing * matches a prefix, e.g. 'lock;raw*')")
	flag.IntVar(&o.primReps, "prim-reps", 3, "sections 8 and 9: repetitions of each throughput cell (median reported)")
	flag.DurationVar(&o.primDur, "prim-dur", time.Second, "sections 8 and 9: duration of each throughput cell")
	flag.IntVar(&o.wwReaders, "ww-readers", 8, "section 8 writer wait: readers in the stream")
	flag.DurationVar(&o.wwLease, "ww-lease", 100*time.Millisecond, "section 8 writer wait: the readers' lease in the bounded cases (each holds about 50ms); the target is bound + this + 30ms")
	flag.IntVar(&o.wwRounds, "ww-rounds", 10, "section 8 writer wait: rounds per bounded case (bound 0, 200ms)")
	flag.IntVar(&o.wwControlRounds, "ww-control-rounds", 1, "section 8 writer wait: rounds of the policies.Unbounded control")
	flag.DurationVar(&o.wwControl, "ww-control", 3*time.Second, "section 8 writer wait: how long the control's writer waits before giving up")
	flag.StringVar(&o.s8Parts, "s8-parts", "123", "section 8: parts to run: 1 uncontended throughput, 2 writer wait under a reader stream, 3 countdown-latch wake-up")
	flag.IntVar(&o.lwRounds, "lw-rounds", 6, "section 8 latch wake-up: measured rounds per setup, after one discarded warm-up round")
	flag.IntVar(&o.lwWaiters, "lw-waiters", 100, "section 8 latch wake-up: waiters per round, spread over -lw-clients")
	flag.IntVar(&o.lwClients, "lw-clients", 4, "section 8 latch wake-up: waiting clients (each its own rueidis client, Waiter and Latches)")
	flag.DurationVar(&o.lwPoll, "lw-poll", 10*time.Millisecond, "section 8 latch wake-up: the polling baseline's interval between HMGETs")
	flag.BoolVar(&o.lwCluster, "lw-cluster", true, "section 8 latch wake-up: run the cluster row on a 3-master cluster of the Redis 7 binary started for it (a few seconds)")
	flag.IntVar(&o.rlReps, "rl-reps", 3, "section 10: repetitions of each decisions-per-second cell (median reported)")
	flag.DurationVar(&o.rlWarm, "rl-warm", 100*time.Millisecond, "section 10: warm-up before each decisions-per-second cell")
	flag.DurationVar(&o.rlDur, "rl-dur", 500*time.Millisecond, "section 10: duration of each decisions-per-second cell")
	flag.DurationVar(&o.rlPrecDur, "rl-prec-dur", 4500*time.Millisecond, "section 10: how long each limiter's precision run hammers its key")
	flag.IntVar(&o.rlPrecClients, "rl-prec-clients", 3, "section 10: limiter instances (clients) in each precision run")
	flag.IntVar(&o.rlPrecGoroutines, "rl-prec-goroutines", 4, "section 10: goroutines per client in each precision run")
	flag.StringVar(&o.dParts, "d-parts", "123", "section 11: parts to run: 1 Envoy RLS latency, 2 lock cycles over the API, 3 sessions and streams")
	flag.IntVar(&o.dReps, "d-reps", 3, "section 11: repetitions of each RLS and lock cell (median reported)")
	rates := flag.String("d-rates", "1000,2500,5000,10000", "section 11: comma-separated ShouldRateLimit request rates (per second)")
	flag.DurationVar(&o.rlsWarm, "d-rls-warm", 500*time.Millisecond, "section 11: open-loop requests sent and not measured before each RLS cell")
	flag.DurationVar(&o.rlsDur, "d-rls-dur", 3*time.Second, "section 11: measured open-loop requests per RLS cell, in time at its rate")
	flag.IntVar(&o.apiConc, "d-lock-conc", 64, "section 11: concurrent clients (goroutines) of the lock cells")
	flag.DurationVar(&o.apiWarm, "d-lock-warm", 250*time.Millisecond, "section 11: warm-up of each lock cell")
	flag.DurationVar(&o.apiDur, "d-lock-dur", 2*time.Second, "section 11: duration of each lock cell")
	flag.IntVar(&o.memN, "d-sessions", 10000, "section 11: sessions, KeepAlive streams and Hold streams opened on one daemon")
	flag.IntVar(&o.memPerConn, "d-streams-per-conn", 200, "section 11: most streams on one client connection (Go's HTTP/2 server allows 250 at once)")
	flag.StringVar(&o.coordhostBin, "coordhost-bin", "", "section 11: a prebuilt coordhost binary (default: go build ./cmd/coordhost of the main module into a temporary directory)")
	flag.BoolVar(&o.splice, "splice", false, "with -sections 11 or -sections 12 only: replace that section (its section, its Targets rows and a header row) in the existing -out report and keep the rest of it, instead of writing a report of that section alone")
	flag.StringVar(&o.dPprof, "d-pprof", "", "section 11: build the daemon with net/http/pprof added by `go build -overlay` (this build only; not with -coordhost-bin) and write CPU profiles of its first-repetition RLS and API lock cells and a heap profile after each step of part 3 into this `DIR`; for investigation, not for the report's figures")
	flag.StringVar(&o.envoyRLSBin, "envoy-rls-bin", "", "section 11: a prebuilt envoyproxy/ratelimit service_cmd (default: go install "+envoyRLSPkg+"@-envoy-rls-version into a temporary directory)")
	flag.StringVar(&o.envoyRLSVersion, "envoy-rls-version", envoyRLSVersion, "section 11: the version of "+envoyRLSModule+" to build; \"none\" leaves it out")
	flag.StringVar(&o.prev, "prev", "", "a previous RESULTS.md whose section 1 this run's is compared with (e.g. `git show HEAD:bench/RESULTS.md > /tmp/prev.md`)")
	flag.StringVar(&o.prevLabel, "prev-label", "", "how the report names -prev (default: its path and date)")
	flag.IntVar(&o.policyCalls, "policy-calls", 200_000, "section 6: individually timed calls per native or wasm row, split over -reps (and as many untimed ones for the allocation count)")
	flag.IntVar(&o.pluginCalls, "plugin-calls", 20_000, "section 6: the same for the plugin row")
	flag.IntVar(&o.policyLoads, "policy-loads", 8, "section 6: wasm Loads kept alive to measure the heap per Load and the instantiation time")
	flag.IntVar(&o.pinReps, "pin-reps", 3, "section 1: repetitions of each 1-goroutine cell with pinned placement (0 skips them)")
	flag.DurationVar(&o.pinDur, "pin-dur", 500*time.Millisecond, "section 1: duration of each 1-goroutine cell with pinned placement")
	flag.DurationVar(&o.setupDur, "setup-dur", time.Second, "section 7: duration of each cell")
	flag.StringVar(&o.setupRows, "setup-rows", "", "section 7: only these semicolon-separated rows (exact names; a trailing * matches a prefix, e.g. 'coordhost*'; bsm/redislock is the ratios' reference)")
	flag.StringVar(&o.setupCols, "setup-cols", "", "section 7: only these comma-separated column numbers (1 = 1 goroutine, fresh, Background … 7 = 64 goroutines)")
	flag.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.StringVar(&o.pluginBin, "plugin-bin", "", "section 6: a prebuilt example plugin (default: go build ./plugins/examples/plugin of the main module into a temporary directory)")
	flag.Parse()
	for f := range strings.SplitSeq(*rates, ",") {
		r, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || r < 1 || r > 1_000_000 {
			fatalf("-d-rates: %q is not a rate between 1 and 1000000", f)
		}
		o.rlsRates = append(o.rlsRates, r)
	}
	spliced := strings.TrimSpace(o.sections)
	if o.splice && spliced != "11" && spliced != "12" {
		fatalf("-splice works with -sections 11 or -sections 12 only")
	}
	if o.cReps < 1 || o.cDur <= 0 || o.cWarm < 0 || o.cKeys < 1 || o.cConc < 1 {
		fatalf("-c-reps, -c-dur, -c-keys and -c-conc must be positive, -c-warm not negative")
	}
	if o.dPprof != "" && o.coordhostBin != "" {
		fatalf("-d-pprof builds its own daemon: leave out -coordhost-bin")
	}
	if o.dReps < 1 || o.rlsDur <= 0 || o.apiConc < 1 || o.apiDur <= 0 || o.memN < 1 || o.memPerConn < 1 {
		fatalf("-d-reps, -d-rls-dur, -d-lock-conc, -d-lock-dur, -d-sessions and -d-streams-per-conn must be positive")
	}
	o.concs = []int{1, 8, 64}
	o.waiters = []int{1, 10, 100}
	o.statsWaiters = 100
	o.leaseWaiters = []int{1, 100}
	if o.primReps < 1 || o.wwReaders < 1 || o.wwRounds < 1 || o.wwControlRounds < 1 {
		fatalf("-prim-reps, -ww-readers, -ww-rounds and -ww-control-rounds must be positive")
	}
	if o.s8Parts == "" || strings.Trim(o.s8Parts, "123") != "" {
		fatalf("-s8-parts: %q is not a string of the digits 1, 2 and 3", o.s8Parts)
	}
	if o.lwRounds < 1 || o.lwWaiters < 1 || o.lwClients < 1 || o.lwClients > o.lwWaiters || o.lwPoll < time.Millisecond {
		fatalf("-lw-rounds, -lw-waiters and -lw-clients must be positive, -lw-clients at most -lw-waiters, -lw-poll at least 1ms")
	}
	if o.rlReps < 1 || o.rlDur <= 0 || o.rlPrecDur <= 0 || o.rlPrecClients < 1 || o.rlPrecGoroutines < 1 {
		fatalf("-rl-reps, -rl-dur, -rl-prec-dur, -rl-prec-clients and -rl-prec-goroutines must be positive")
	}
	if o.reps < 1 || o.handoffs < 1 || o.crashReps < 1 || o.policyCalls < 1 || o.pluginCalls < 1 || o.policyLoads < 1 {
		fatalf("-reps, -handoffs, -crash-reps, -policy-calls, -plugin-calls and -policy-loads must be positive")
	}
	var prev *prevResults
	if o.prev != "" {
		p, err := readPrev(o.prev)
		if err != nil {
			fatalf("-prev: %v", err)
		}
		prev = p
	}
	// Section 6 needs no Redis.
	needRedis := false
	for _, sec := range []string{"1", "2", "3", "5", "7", "8", "9", "10", "11", "12"} {
		needRedis = needRedis || o.has(sec)
	}
	var bin7 string
	var err error
	if needRedis {
		if bin7, err = redis7Binary(); err != nil {
			fatalf("%v", err)
		}
	}
	var bin8 string
	if o.has("5") {
		if bin8, err = redis8Binary(); err != nil {
			fatalf("%v", err)
		}
	}

	start := time.Now()
	var servers []*server
	var serversMu sync.Mutex
	stopAll := func() {
		serversMu.Lock()
		defer serversMu.Unlock()
		stopChildren()
		for _, s := range servers {
			s.stop()
		}
		removeTemps()
	}
	// track lists a server for stopAll (and for section 6 to stop).
	track := func(s *server) {
		serversMu.Lock()
		servers = append(servers, s)
		serversMu.Unlock()
	}
	var srv *server
	if needRedis {
		if srv, err = startServer(bin7); err != nil {
			fatalf("%v", err)
		}
		track(srv)
	}
	cleanup = stopAll
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sigc
		stopAll()
		fmt.Fprintf(os.Stderr, "lockbench: %v: servers stopped\n", s)
		os.Exit(130)
	}()
	if srv != nil {
		logf("redis %s (%s) on %s; GOMAXPROCS=%d", srv.version, srv.bin, srv.addr, runtime.GOMAXPROCS(0))
	} else {
		logf("no Redis needed; GOMAXPROCS=%d", runtime.GOMAXPROCS(0))
	}

	if o.cpuprofile != "" {
		f, err := os.Create(o.cpuprofile)
		if err != nil {
			fatalf("-cpuprofile: %v", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fatalf("-cpuprofile: %v", err)
		}
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
		}()
	}

	rep := &report{opts: o, start: start, server: srv, prev: prev, loadStart: loadAvg()}
	if o.has("1") {
		srv.mustDo("FLUSHALL")
		rep.throughput, rep.pinned = sectionThroughput(srv, o)
	}
	if o.has("7") {
		srv.mustDo("FLUSHALL")
		rep.setups, rep.setupRows = sectionSetups(srv, o)
	}
	if o.has("2") {
		srv.mustDo("FLUSHALL")
		rep.handoff = sectionHandoff(srv, o, kinds(), o.waiters, "2")
	}
	if o.has("3") {
		srv.mustDo("FLUSHALL")
		rep.crash = sectionCrash(srv, o)
	}
	if o.has("5") {
		// A second server, started only now so that it sits idle through
		// nothing else; the Redis 7 one stays up (idle) meanwhile.
		srv8, err := startServer(bin8)
		if err != nil {
			fatalf("%v", err)
		}
		track(srv8)
		logf("redis %s (%s) on %s for section 5", srv8.version, srv8.bin, srv8.addr)
		rep.server8 = srv8
		rep.lease = sectionHandoff(srv8, o, leaseKinds(), o.leaseWaiters, "5")
		srv8.stop()
	}
	if o.has("8") {
		if strings.Contains(o.s8Parts, "1") {
			srv.mustDo("FLUSHALL")
			rep.rw = sectionRW(srv, o)
		}
		if strings.Contains(o.s8Parts, "2") {
			srv.mustDo("FLUSHALL")
			rep.writerWait = sectionWriterWait(srv, o)
		}
		if strings.Contains(o.s8Parts, "3") {
			srv.mustDo("FLUSHALL")
			rep.latchWake = sectionLatchWake(srv, bin7, o, track)
		}
	}
	if o.has("9") {
		srv.mustDo("FLUSHALL")
		var extra []*server
		rep.redlock, extra = sectionRedlock(srv, bin7, o, track)
		rep.redlockServers = extra
		for _, s := range extra {
			s.stop()
		}
	}
	if o.has("10") {
		srv.mustDo("FLUSHALL")
		rep.rl = sectionRateLimit(srv, o)
	}
	if o.has("11") {
		srv.mustDo("FLUSHALL")
		rep.daemon = sectionDaemon(srv, o)
	}
	if o.has("12") {
		srv.mustDo("FLUSHALL")
		rep.scale = sectionScaleOut(srv, bin7, o, track)
	}
	if o.has("6") {
		// In-process only: stop the Redis server(s) first, so the section
		// has the CPUs to itself.
		serversMu.Lock()
		for _, s := range servers {
			s.stop()
		}
		serversMu.Unlock()
		rep.policy = sectionPolicy(o)
	}
	rep.elapsed = time.Since(start)
	rep.loadEnd = loadAvg()
	stopAll()
	cleanup = nil

	md := rep.markdown()
	if o.splice {
		old, err := os.ReadFile(o.out)
		if err != nil {
			fatalf("-splice: %v", err)
		}
		row := fmt.Sprintf("| section %s | from another run, spliced in with `-sections %s -splice`: %s, %s, in %v; load average %s at the start, %s at the end (the rest of this report is from the run above) |",
			spliced, spliced, start.UTC().Format("2006-01-02 15:04 MST"), runtime.Version(), rep.elapsed.Round(time.Second), rep.loadStart, rep.loadEnd)
		if md, err = spliceSection(string(old), md, spliced, row); err != nil {
			fatalf("-splice: %v", err)
		}
	}
	if err := os.WriteFile(o.out, []byte(md), 0o644); err != nil {
		fatalf("%v", err)
	}
	fmt.Print(md)
	logf("wrote %s in %v", o.out, rep.elapsed.Round(time.Second))
}

// ---- section 1 ----

// tpKey identifies one throughput cell.
type tpKey struct {
	kind string
	conc int
}

// pinKey identifies one pinned 1-goroutine cell of section 1.
type pinKey struct {
	kind  string
	place placement
}

// pinWarm is the warm-up of a pinned cell: enough for the threads to have
// moved to their CPUs; the instances are warm already.
const pinWarm = 100 * time.Millisecond

// pinKinds are the rows section 1 also measures at 1 goroutine with pinned
// placements.
var pinKinds = []string{"coordhost", "coordhost (sequential set-up)", "bsm/redislock", "raw rueidis"}

func sectionThroughput(srv *server, o options) (map[tpKey]*tpResult, map[pinKey]*tpResult) {
	ks := kinds()
	res := map[tpKey]*tpResult{}
	insts := make([]impl, len(ks))
	for i, k := range ks {
		im, err := k.new(implConfig{addr: srv.addr, ttl: throughputTTL})
		if err != nil {
			fatalf("%s: %v", k.name, err)
		}
		insts[i] = im
		defer im.Close()
	}
	// One short untimed pass first: connections, script caches, pools.
	for i, k := range ks {
		if s := runThroughput(nil, insts[i], k.name, 8, 0, o.warm); s.err != nil {
			fatalf("%s: warm-up: %v", k.name, s.err)
		}
	}
	for r := range o.reps {
		for _, conc := range o.concs {
			// Rotate the order so no implementation always runs first.
			for j := range ks {
				i := (j + r) % len(ks)
				k := ks[i]
				s := runThroughput(srv, insts[i], k.name, conc, o.warm, o.dur)
				resultFor(res, tpKey{k.name, conc}).add(s)
				logf("1 rep %d/%d conc %2d %-30s %9.0f cycles/s  cpu/cycle redis %5.1fµs self %5.1fµs  errors %d",
					r+1, o.reps, conc, k.name, s.rate, s.serverCPU, s.clientCPU, s.errs)
			}
		}
	}
	return res, sectionPinned(srv, o, ks, insts)
}

// sectionPinned runs pinKinds at 1 goroutine with the program and Redis on
// one CPU, then on two, on the instances section 1 used (so with the same
// history: a default rueidis client has had concurrent use).
func sectionPinned(srv *server, o options, ks []kind, insts []impl) map[pinKey]*tpResult {
	if o.pinReps < 1 {
		return nil
	}
	if err := pinnable(); err != nil {
		logf("1: pinned cells skipped: %v", err)
		return nil
	}
	var idx []int
	for _, name := range pinKinds {
		for i, k := range ks {
			if k.name == name {
				idx = append(idx, i)
			}
		}
	}
	res := map[pinKey]*tpResult{}
	pid := srv.cmd.Process.Pid
	defer func() {
		if err := place(placeFree, pid); err != nil {
			fatalf("placement: %v", err)
		}
	}()
	for r := range o.pinReps {
		for _, pl := range []placement{placeSame, placeSplit} {
			if err := place(pl, pid); err != nil {
				fatalf("placement %v: %v", pl, err)
			}
			for j := range idx {
				i := idx[(j+r)%len(idx)]
				k := ks[i]
				s := runThroughput(srv, insts[i], k.name, 1, pinWarm, o.pinDur)
				resultFor(res, pinKey{k.name, pl}).add(s)
				logf("1 pinned rep %d/%d %-10s %-30s %9.0f cycles/s  cpu/cycle redis %5.1fµs self %5.1fµs  errors %d",
					r+1, o.pinReps, pl, k.name, s.rate, s.serverCPU, s.clientCPU, s.errs)
			}
		}
	}
	return res
}

// ---- sections 2 and 4 ----

type hoKey struct {
	kind    string
	waiters int
}

type hoResult struct {
	chain chainResult
	stats map[string]int64 // INFO commandstats over the measured window
	// sent: the commands the implementation sent over the same window,
	// counted on its client (kinds with countsOnClient only).
	sent map[string]int64
}

// sectionHandoff runs the handoff chains of ks (blocking kinds only) on srv
// for each waiter count; section is "2" or "5" (keys and progress lines).
func sectionHandoff(srv *server, o options, ks []kind, waiters []int, section string) map[hoKey]*hoResult {
	res := map[hoKey]*hoResult{}
	for _, w := range waiters {
		for _, k := range ks {
			if !k.blocking {
				continue
			}
			var counter *cmdCounter
			if k.countsOnClient {
				counter = newCmdCounter()
			}
			im, err := k.new(implConfig{addr: srv.addr, ttl: handoffTTL, count: counter})
			if err != nil {
				fatalf("%s: %v", k.name, err)
			}
			r := &hoResult{}
			var statsErr error
			r.chain = runChain(im, chainConfig{
				key:     fmt.Sprintf("bench:handoff%s:%s:%d", section, k.name, w),
				waiters: w,
				warm:    o.handoffWarm,
				n:       o.handoffs,
				hold:    o.hold,
				limit:   o.chainLimit,
				atStart: func() {
					if counter != nil {
						counter.reset()
					}
					if _, err := srv.do("CONFIG", "RESETSTAT"); err != nil {
						statsErr = err
					}
				},
				atEnd: func() {
					if counter != nil {
						r.sent = counter.snapshot()
					}
					stats, err := srv.commandStats()
					if err != nil {
						statsErr = err
					}
					r.stats = stats
				},
			})
			im.Close()
			if statsErr != nil {
				fatalf("commandstats: %v", statsErr)
			}
			res[hoKey{k.name, w}] = r
			p50, p99, mx := pct(r.chain.lats, 50), pct(r.chain.lats, 99), pct(r.chain.lats, 100)
			logf("%s waiters %3d %-14s handoffs %d p50 %v p99 %v max %v errors %d timedOut %v", section, w, k.name, len(r.chain.lats), p50, p99, mx, r.chain.errs, r.chain.timedOut)
			if r.stats != nil && r.sent != nil {
				// Cross-check of the client-side count against the server's.
				c := countCmds(r.stats, r.sent, k, o.handoffs)
				logf("%s waiters %3d %-14s per release: client-sent %.2f (counted on the client), server all calls %.2f, server all minus script-internal %.2f", section, w, k.name, c.client, c.all, c.serverClient)
			}
		}
	}
	return res
}

// ---- section 3 ----

type crKey struct {
	kind, phase string
}

const (
	phaseEmpty  = "empty"
	phaseFilled = "filled"
)

func sectionCrash(srv *server, o options) map[crKey]*crashResult {
	res := map[crKey]*crashResult{}
	for _, phase := range []string{phaseEmpty, phaseFilled} {
		if phase == phaseFilled {
			if err := srv.fill(o.filler); err != nil {
				fatalf("filler: %v", err)
			}
		}
		logf("3 phase %s: DBSIZE %s", phase, srv.mustDo("DBSIZE"))
		for _, k := range kinds() {
			if !k.blocking {
				continue
			}
			holder, err := k.new(implConfig{addr: srv.addr, ttl: crashTTL, crashHolder: true})
			if err != nil {
				fatalf("%s: %v", k.name, err)
			}
			waiter, err := k.new(implConfig{addr: srv.addr, ttl: handoffTTL})
			if err != nil {
				fatalf("%s: %v", k.name, err)
			}
			r := runCrash(holder, waiter, k.name, phase, o.crashReps, o.patience, o.maxTimeouts)
			waiter.Close()
			holder.Close()
			res[crKey{k.name, phase}] = &r
			logf("3 %-6s %-14s n %d p50 %v max %v timeouts %d skipped %d err %v", phase, k.name, len(r.lats), pct(r.lats, 50), pct(r.lats, 100), r.timeouts, r.skipped, r.firstErr)
		}
	}
	return res
}

// ---- helpers ----

// pct is the nearest-rank percentile p (0 < p <= 100); 0 for no samples.
func pct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.999999) - 1
	return s[max(0, min(i, len(s)-1))]
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// cleanup stops the server on fatal errors.
var cleanup func()

var (
	tempsMu sync.Mutex
	temps   []string
)

// removeOnExit has dir removed when the program ends, also on fatal errors
// and Ctrl-C.
func removeOnExit(dir string) {
	tempsMu.Lock()
	temps = append(temps, dir)
	tempsMu.Unlock()
}

func removeTemps() {
	tempsMu.Lock()
	defer tempsMu.Unlock()
	for _, d := range temps {
		os.RemoveAll(d)
	}
	temps = nil
}

func fatalf(format string, args ...any) {
	if cleanup != nil {
		cleanup()
	}
	fmt.Fprintf(os.Stderr, "lockbench: "+format+"\n", args...)
	os.Exit(1)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}
