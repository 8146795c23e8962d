package main

// Section 12: scale-out (issue 12 §4). The same operations at 64
// goroutines over the same key set, on the standalone Redis 7 server and
// on a 3-master Redis 7 cluster started beside it in the same run:
// throughput as a ratio, Redis commands per operation counted on every
// node (INFO commandstats) before and after each measured window, MOVED
// and ASK redirections (INFO errorstats), how keys, commands and CPU split
// over the masters, and what the cluster bus carries (CLUSTER INFO, and
// the bus sockets' byte counts from ss). Raw rueidis controls on the same
// clients separate the topology's cost from coordhost's, and the cost of
// the PUBLISH every release sends, which a cluster forwards to every
// other node. The hash-field lease needs Redis ≥ 7.4: it runs on a Redis 8
// pair (standalone + 3 masters) of its own when $COORDHOST_REDIS8_SERVER
// is set (scalereport.go has the report).

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordhost/coordhost/primitives/lease"
	"github.com/coordhost/coordhost/primitives/lock"
	"github.com/coordhost/coordhost/primitives/ratelimit"
	"github.com/coordhost/coordhost/primitives/rwlock"
	"github.com/coordhost/coordhost/primitives/semaphore"
	"github.com/redis/rueidis"
)

// c12Masters is the cluster's size.
const c12Masters = 3

// c12TTL is every grant's lease in section 12; never reached.
const c12TTL = 10 * time.Second

// c12Inst is one row's instance on one topology: op does one operation
// (acquire + release, or one rate-limit decision) on key i.
type c12Inst interface {
	op(ctx context.Context, i int) error
	close()
}

// c12Row is one row of section 12.
type c12Row struct {
	name string
	tag  string // the key prefix: "<tag>:order:<i>"
	// control: a raw rueidis baseline, measured with the same counts but
	// judged against no goal.
	control bool
	redis8  bool // needs hash-field expiry (Redis ≥ 7.4)
	// publishes: every operation's release PUBLISHes (what the cluster bus
	// carries).
	publishes bool
	note      string
	new       func(client rueidis.Client, keys []string) (c12Inst, error)
}

// c12 row names the report refers to.
const (
	c12LockRow   = "lock"
	c12RawDel    = "raw: SET NX + DEL"
	c12RawScript = "raw: SET NX + release script"
	c12RawPub    = "raw: SET NX + release script with PUBLISH"
)

func c12Rows() []c12Row {
	return []c12Row{
		{name: c12LockRow, tag: "lock", publishes: true,
			note: "`lock.New(client, lock.Options{})`: `TryAcquire` (a plain `SET NX GET PX`) + `Lock.Release` (`EVALSHA` of the release script: `GET`, `DEL`, `PUBLISH` on the key's channel)",
			new: func(c rueidis.Client, k []string) (c12Inst, error) {
				return newC12Lock(c, k, lock.Options{})
			}},
		{name: "lock, fenced", tag: "lockf", publishes: true,
			note: "`lock.Options{Fencing: true}`: every acquire is the acquire script (a counter key the Locker derives in the key's slot, `INCR`ed per grant) + the same release",
			new: func(c rueidis.Client, k []string) (c12Inst, error) {
				return newC12Lock(c, k, lock.Options{Fencing: true})
			}},
		{name: "rwlock read", tag: "rwr", publishes: true,
			note: "`rwlock.New(client, rwlock.Options{})`: `TryAcquireRead` + `Lease.Release` (scripts; the release publishes)",
			new:  func(c rueidis.Client, k []string) (c12Inst, error) { return newC12RW(c, k, false) }},
		{name: "rwlock write", tag: "rww", publishes: true,
			note: "as the read row with `TryAcquireWrite`",
			new:  func(c rueidis.Client, k []string) (c12Inst, error) { return newC12RW(c, k, true) }},
		{name: "semaphore", tag: "sem", publishes: true,
			note: fmt.Sprintf("`semaphore.New(client, semaphore.Options{})`: `TryAcquire(ctx, key, %d, ttl)` (on a fenced dedicated connection) + `Permit.Release` (the release script publishes)", semCapacity),
			new:  newC12Sem},
		{name: "rate limiter (fixed window)", tag: "rl",
			note: "`ratelimit.New(client, ratelimit.Options{})`, one `FixedWindow(key, {Limit: 10^9, Window: 1h})` per key, `TryAcquire(ctx, 1)`: every decision a grant on a window that exists already (the warm-up creates them; Redis 7.0 refuses the INCREX probe once, during the warm-up, and the script decides after it)",
			new:  newC12RL},
		{name: "lease (Redis 8)", tag: "lease", redis8: true, publishes: true,
			note: "`lease.New(client, lease.Options{})`: `TryAcquire(ctx, hashKey, \"holder\", ttl)` (on a fenced dedicated connection) + `Lease.Release` (the release script publishes), on the Redis 8 pair",
			new:  newC12Lease},
		{name: c12RawDel, tag: "rawd", control: true,
			note: "control, no coordhost: `SET key token NX PX` then a plain `DEL key`, two commands, through a default rueidis client on the same topology",
			new: func(c rueidis.Client, k []string) (c12Inst, error) {
				return &c12Raw{client: c, keys: k, mode: rawDelMode}, nil
			}},
		{name: c12RawScript, tag: "raws", control: true,
			note: "control: `SET NX PX`, then `EVALSHA` of an owner-checked release (`GET`, `DEL`), raw rueidis",
			new: func(c rueidis.Client, k []string) (c12Inst, error) {
				return &c12Raw{client: c, keys: k, mode: rawScriptMode}, nil
			}},
		{name: c12RawPub, tag: "rawp", control: true, publishes: true,
			note: "control: as the release-script row with `PUBLISH __coordhost:rel:<key> ''` in the script after the `DEL`, the lock release's shape; the difference between the two is what the PUBLISH costs",
			new: func(c rueidis.Client, k []string) (c12Inst, error) {
				return &c12Raw{client: c, keys: k, mode: rawPubMode}, nil
			}},
	}
}

// c12Keys is the row's key set: n keys "<tag>:order:<i>".
func c12Keys(tag string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = tag + ":order:" + strconv.Itoa(i)
	}
	return out
}

type c12Lock struct {
	l    *lock.Locker
	keys []string
}

func newC12Lock(c rueidis.Client, keys []string, o lock.Options) (c12Inst, error) {
	l, err := lock.New(c, o)
	if err != nil {
		return nil, err
	}
	return &c12Lock{l: l, keys: keys}, nil
}

func (x *c12Lock) op(ctx context.Context, i int) error {
	h, err := x.l.TryAcquire(ctx, x.keys[i], c12TTL)
	if err != nil {
		return err
	}
	return released(h.Release(ctx))
}

func (x *c12Lock) close() { _ = x.l.Close() }

type c12RW struct {
	l     *rwlock.Locker
	keys  []string
	write bool
}

func newC12RW(c rueidis.Client, keys []string, write bool) (c12Inst, error) {
	l, err := rwlock.New(c, rwlock.Options{})
	if err != nil {
		return nil, err
	}
	return &c12RW{l: l, keys: keys, write: write}, nil
}

func (x *c12RW) op(ctx context.Context, i int) error {
	var h *rwlock.Lease
	var err error
	if x.write {
		h, err = x.l.TryAcquireWrite(ctx, x.keys[i], c12TTL)
	} else {
		h, err = x.l.TryAcquireRead(ctx, x.keys[i], c12TTL)
	}
	if err != nil {
		return err
	}
	return released(h.Release(ctx))
}

func (x *c12RW) close() { _ = x.l.Close() }

type c12Sem struct {
	s    *semaphore.Semaphores
	keys []string
}

func newC12Sem(c rueidis.Client, keys []string) (c12Inst, error) {
	s, err := semaphore.New(c, semaphore.Options{})
	if err != nil {
		return nil, err
	}
	return &c12Sem{s: s, keys: keys}, nil
}

func (x *c12Sem) op(ctx context.Context, i int) error {
	p, err := x.s.TryAcquire(ctx, x.keys[i], semCapacity, c12TTL)
	if err != nil {
		return err
	}
	return released(p.Release(ctx))
}

func (x *c12Sem) close() { _ = x.s.Close() }

type c12Lease struct {
	ls   *lease.Leases
	keys []string
}

func newC12Lease(c rueidis.Client, keys []string) (c12Inst, error) {
	ls, err := lease.New(c, lease.Options{})
	if err != nil {
		return nil, err
	}
	return &c12Lease{ls: ls, keys: keys}, nil
}

func (x *c12Lease) op(ctx context.Context, i int) error {
	l, err := x.ls.TryAcquire(ctx, x.keys[i], leaseField, c12TTL)
	if err != nil {
		return err
	}
	return released(l.Release(ctx))
}

func (x *c12Lease) close() { _ = x.ls.Close() }

// c12RLLimit is the fixed window's limit: far more than an hour of
// decisions, so every decision is a grant.
const c12RLLimit = 1_000_000_000

type c12RL struct {
	lims []*ratelimit.Limiter
}

func newC12RL(c rueidis.Client, keys []string) (c12Inst, error) {
	ls, err := ratelimit.New(c, ratelimit.Options{})
	if err != nil {
		return nil, err
	}
	x := &c12RL{}
	// Limiters send nothing when made: one per key up front.
	for _, k := range keys {
		l, err := ls.FixedWindow(k, ratelimit.FixedWindowOptions{Limit: c12RLLimit, Window: time.Hour})
		if err != nil {
			x.close()
			return nil, err
		}
		x.lims = append(x.lims, l)
	}
	return x, nil
}

func (x *c12RL) op(ctx context.Context, i int) error {
	res, err := x.lims[i].TryAcquire(ctx, 1)
	if err != nil {
		return err
	}
	if !res.Acquired {
		return errors.New("rate limiter: refused")
	}
	return nil
}

func (x *c12RL) close() {
	for _, l := range x.lims {
		_ = l.Close()
	}
}

type rawMode int

const (
	rawDelMode rawMode = iota
	rawScriptMode
	rawPubMode
)

// rawPubRelease is rawRelease (impls.go) with the lock release's PUBLISH.
var rawPubRelease = rueidis.NewLuaScript(`if redis.call("GET",KEYS[1]) == ARGV[1] then redis.call("DEL",KEYS[1]) redis.pcall("PUBLISH",ARGV[2],"") return 1 end return 0`)

type c12Raw struct {
	client rueidis.Client
	keys   []string
	mode   rawMode
}

func (x *c12Raw) op(ctx context.Context, i int) error {
	key, token := x.keys[i], rand.Text()
	err := x.client.Do(ctx, x.client.B().Set().Key(key).Value(token).Nx().PxMilliseconds(c12TTL.Milliseconds()).Build()).Error()
	if rueidis.IsRedisNil(err) {
		return errRawNotAcquired
	}
	if err != nil {
		return err
	}
	var n int64
	switch x.mode {
	case rawDelMode:
		n, err = x.client.Do(ctx, x.client.B().Del().Key(key).Build()).AsInt64()
	case rawScriptMode:
		n, err = rawRelease.Exec(ctx, x.client, []string{key}, []string{token}).AsInt64()
	default:
		n, err = rawPubRelease.Exec(ctx, x.client, []string{key}, []string{token, "__coordhost:rel:" + key}).AsInt64()
	}
	if err != nil {
		return err
	}
	if n != 1 {
		return errors.New("raw: not owned")
	}
	return nil
}

// close: the client is closed by its owner (sectionScaleOut).
func (x *c12Raw) close() {}

// ---- the runner ----

// c12Key identifies one cell: a row on one topology.
type c12Key struct {
	row, topo string
}

// c12Result is one cell's repetitions.
type c12Result struct {
	rates  []float64
	ops    []int64
	deltas []statsDelta // per repetition: the measured window
	warm   statsDelta   // the untimed warm-up (sweep + random)
	errs   int64
	first  error
	owners []int // the master of each key (cluster)
}

// c12Results is section 12's outcome.
type c12Results struct {
	cells   map[c12Key]*c12Result
	rows    []c12Row        // the rows that ran, in table order
	version map[bool]string // Redis version of the pair, by redis8
	bin     map[bool]string
	noR8    string // why the Redis 8 rows did not run, "" when they did
	// spread is every cluster master's DBSIZE after its rows (keys left:
	// fencing counters, rate-limit windows), by redis8.
	dbsize  map[bool][]int64
	load    []string // "row: load average" at the start of each row
	elapsed time.Duration
	// loadStart and loadEnd are the load averages at the section's start
	// and end.
	loadStart, loadEnd string
	setup              time.Duration // starting and joining the cluster(s)
}

// c12Loop runs op from conc goroutines until stop (or, with sweep, until
// each goroutine has visited every key of its share once, in order).
// Goroutine g owns the keys i ≡ g (mod conc), so no two goroutines ever
// contend, and picks among them uniformly at random (PCG seeded by g and
// seed).
func c12Loop(inst c12Inst, nkeys, conc int, seed uint64, dur time.Duration, sweep bool) (ops, errs int64, first error, elapsed time.Duration) {
	var count, nerr atomic.Int64
	var firstErr atomic.Pointer[error]
	var stop atomic.Bool
	var wg sync.WaitGroup
	ctx := context.Background()
	start := time.Now()
	for g := range conc {
		share := (nkeys - g + conc - 1) / conc
		if share <= 0 {
			continue
		}
		wg.Go(func() {
			rng := mrand.New(mrand.NewPCG(seed, uint64(g)))
			for n := 0; ; n++ {
				var j int
				if sweep {
					if n == share {
						return
					}
					j = n
				} else {
					if stop.Load() {
						return
					}
					j = rng.IntN(share)
				}
				if err := inst.op(ctx, g+j*conc); err != nil {
					nerr.Add(1)
					firstErr.CompareAndSwap(nil, &err)
					time.Sleep(time.Millisecond) // never spin on a persistent error
					continue
				}
				count.Add(1)
			}
		})
	}
	if !sweep {
		time.Sleep(dur)
		stop.Store(true)
	}
	wg.Wait()
	elapsed = time.Since(start)
	if p := firstErr.Load(); p != nil {
		first = *p
	}
	return count.Load(), nerr.Load(), first, elapsed
}

// c12Pair is one Redis version's standalone server and cluster.
type c12Pair struct {
	redis8 bool
	topos  []*topology // standalone, cluster
}

// sectionScaleOut runs section 12. std is the Redis 7 server the program
// started; the cluster(s) are started here and stopped at the end. track
// registers every server started, for the program's cleanup.
//
// Rows run one after the other, each with its own two clients, made
// before its warm-up and closed after its last cell: rueidis PINGs a
// connection that has been idle for a second (Dialer.KeepAlive), so the
// idle clients of other rows would add commands to a row's counts. Within
// a row the two topologies alternate, repetition by repetition, so the
// ratio of each repetition pairs cells measured seconds apart.
func sectionScaleOut(std *server, bin7 string, o options, track func(*server)) *c12Results {
	start := time.Now()
	selected, needR8 := 0, false
	for _, row := range c12Rows() {
		if o.cRows == "" || matchesAny(row.name, o.cRows) {
			selected++
			needR8 = needR8 || row.redis8
		}
	}
	if selected == 0 {
		fatalf("-c-rows %q matches no row of section 12", o.cRows)
	}
	res := &c12Results{cells: map[c12Key]*c12Result{}, version: map[bool]string{}, bin: map[bool]string{}, dbsize: map[bool][]int64{}}
	res.loadStart = loadAvg()
	var pairs []*c12Pair
	mk := func(redis8 bool, standalone *server, bin string) *c12Pair {
		cl, err := startCluster(bin, c12Masters, track)
		if err != nil {
			fatalf("12: %v", err)
		}
		p := &c12Pair{redis8: redis8, topos: []*topology{{name: "standalone", nodes: []*server{standalone}}, cl}}
		res.version[redis8], res.bin[redis8] = standalone.version, bin
		logf("12 redis %s: standalone %s, cluster %v", standalone.version, standalone.addr, cl.addrs())
		return p
	}
	setupStart := time.Now()
	pairs = append(pairs, mk(false, std, bin7))
	var bin8 string
	switch {
	case !needR8:
		res.noR8 = "not selected with -c-rows"
	case o.cLease:
		b, err := redis8Binary()
		if err != nil {
			res.noR8 = err.Error()
		} else {
			bin8 = b
		}
	default:
		res.noR8 = "left out with -c-lease=false"
	}
	if bin8 != "" {
		s8, err := startServer(bin8)
		if err != nil {
			fatalf("12: %v", err)
		}
		track(s8)
		pairs = append(pairs, mk(true, s8, bin8))
	}
	res.setup = time.Since(setupStart)

	snap := func(t *topology) topoStats {
		s, err := t.snapshot()
		if err != nil {
			fatalf("12: %v", err)
		}
		return s
	}
	for _, p := range pairs {
		for _, row := range c12Rows() {
			if row.redis8 != p.redis8 || o.cRows != "" && !matchesAny(row.name, o.cRows) {
				continue
			}
			res.rows = append(res.rows, row)
			res.load = append(res.load, row.name+": "+loadAvg())
			runC12Row(res, p, row, o, snap)
		}
		var sizes []int64
		for _, s := range p.topos[1].nodes {
			n, err := strconv.ParseInt(s.mustDo("DBSIZE"), 10, 64)
			if err != nil {
				fatalf("12: DBSIZE: %v", err)
			}
			sizes = append(sizes, n)
		}
		res.dbsize[p.redis8] = sizes
		// The clusters and the Redis 8 server go; the Redis 7 server
		// stays for the sections after this one.
		for _, t := range p.topos {
			for _, s := range t.nodes {
				if s != std {
					s.stop()
				}
			}
		}
	}
	res.loadEnd = loadAvg()
	res.elapsed = time.Since(start)
	return res
}

// runC12Row makes row's instances on both topologies of p, warms them up
// and measures o.cReps cells on each.
func runC12Row(res *c12Results, p *c12Pair, row c12Row, o options, snap func(*topology) topoStats) {
	keys := c12Keys(row.tag, o.cKeys)
	insts := make([]c12Inst, len(p.topos))
	clients := make([]rueidis.Client, len(p.topos))
	defer func() {
		for i := range p.topos {
			if insts[i] != nil {
				insts[i].close()
			}
			if clients[i] != nil {
				clients[i].Close()
			}
		}
	}()
	for ti, t := range p.topos {
		var err error
		if clients[ti], err = t.newClient(); err != nil {
			fatalf("12: %s on %s: %v", row.name, t.name, err)
		}
		if insts[ti], err = row.new(clients[ti], keys); err != nil {
			fatalf("12: %s on %s: %v", row.name, t.name, err)
		}
		owners, err := t.keyOwners(keys)
		if err != nil {
			fatalf("12: %v", err)
		}
		resultFor(res.cells, c12Key{row.name, t.name}).owners = owners
	}
	// The untimed warm-up: every goroutine visits each of its keys once
	// (so every rate-limit window, fencing counter and script cache
	// exists), then picks at random for -c-warm.
	for ti, t := range p.topos {
		a := snap(t)
		_, e1, f1, _ := c12Loop(insts[ti], o.cKeys, o.cConc, 0, 0, true)
		_, e2, f2, _ := c12Loop(insts[ti], o.cKeys, o.cConc, 1, o.cWarm, false)
		if e1+e2 > 0 {
			fatalf("12: %s on %s: warm-up: %d errors, the first: %v", row.name, t.name, e1+e2, cmp.Or(f1, f2))
		}
		r := res.cells[c12Key{row.name, t.name}]
		r.warm = diffStats(a, snap(t))
		m, k := r.warm.redirects()
		logf("12 warm-up %-42s %-10s %d commands, MOVED %d, ASK %d", row.name, t.name, r.warm.totalCalls(), m, k)
	}
	for rep := range o.cReps {
		for k := range p.topos {
			ti := (k + rep) % len(p.topos)
			t := p.topos[ti]
			seed := uint64(rep+2) << 8
			// Warm, quiesce, read every node, measure, quiesce, read
			// again: the counts cover exactly the operations counted.
			c12Loop(insts[ti], o.cKeys, o.cConc, seed, o.cWarm, false)
			a := snap(t)
			ops, errs, first, el := c12Loop(insts[ti], o.cKeys, o.cConc, seed+1, o.cDur, false)
			d := diffStats(a, snap(t))
			r := res.cells[c12Key{row.name, t.name}]
			rate := float64(ops) / el.Seconds()
			r.rates = append(r.rates, rate)
			r.ops = append(r.ops, ops)
			r.deltas = append(r.deltas, d)
			r.errs += errs
			if first != nil && r.first == nil {
				r.first = first
			}
			m, ask := d.redirects()
			redis := 0.0
			for _, c := range d.cpu {
				redis += c
			}
			n := float64(max(ops, 1))
			logf("12 rep %d/%d %-42s %-10s %9.0f ops/s  commands/op %5.2f  cpu/op redis %5.1fµs self %5.1fµs  MOVED %d ASK %d  errors %d",
				rep+1, o.cReps, row.name, t.name, rate, float64(d.totalCalls())/n, redis*1e6/n, float64(d.self.Microseconds())/n, m, ask, errs)
		}
	}
}

// matchesAny reports whether name is one of the semicolon-separated
// names of list (a trailing * matches a prefix): -setup-rows and -c-rows.
func matchesAny(name, list string) bool {
	for f := range strings.SplitSeq(list, ";") {
		f = strings.TrimSpace(f)
		if p, ok := strings.CutSuffix(f, "*"); (ok && strings.HasPrefix(name, p)) || (!ok && name == f) {
			return true
		}
	}
	return false
}
