package main

// Section 8: read-write leases and semaphores (issue 9 §6). Uncontended
// acquire + release cycles of rwlock read leases, rwlock write leases and
// semaphore permits, each next to a raw rueidis baseline that does the same
// in one minimal script per acquire and one ZREM per release; then a
// writer's wait under a stream of overlapping readers (writerwait.go), and
// how soon a countdown latch's waiters wake after its last count-down
// (latchwake.go).

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/rwlock"
	"github.com/coordhost/coordhost/primitives/semaphore"
	"github.com/redis/rueidis"
)

// semCapacity is the capacity every section-8 semaphore cycle asks for. Each
// goroutine has its own key, so it never fills.
const semCapacity = 8

// primRow is one row of sections 8 and 9: an implementation (impl, so that
// loopCycles drives it) and the baseline its ratios are taken against.
type primRow struct {
	name string
	// base is the row this one is compared with; "" for a baseline.
	base string
	note string
	new  func(addr string) (impl, error)
}

func rwRows() []primRow {
	return []primRow{
		{name: "coordhost rwlock read", base: "raw rueidis read script",
			note: "`rwlock.New(client, rwlock.Options{})` on a default rueidis client; `TryAcquireRead` + `Lease.Release` (the read script prunes expired owners and dead waiting-writer entries, refuses while a writer holds or waiting writers hold readers off, adds `r:<token>`, expires the key at its latest deadline; the release script checks the owner, re-expires the key and publishes on the lock's channel)",
			new:  func(a string) (impl, error) { return newRW(a, false) }},
		{name: "raw rueidis read script",
			note: "baseline: default rueidis client; one `EVALSHA`: `TIME`, `ZREMRANGEBYSCORE` (prune), `ZRANGE 0 0` (refuse if the first owner is a writer), `ZADD r:<token>`, `PEXPIREAT` at the latest deadline; release = a plain `ZREM key r:<token>`",
			new:  func(a string) (impl, error) { return newRawPrim(a, rawRead) }},
		{name: "coordhost rwlock write", base: "raw rueidis write script",
			note: "as the read row with `TryAcquireWrite` (the write script prunes, grants only to an empty set, adds `w:<token>`)",
			new:  func(a string) (impl, error) { return newRW(a, true) }},
		{name: "raw rueidis write script",
			note: "baseline: one `EVALSHA`: `TIME`, `ZREMRANGEBYSCORE`, `ZCARD` (refuse unless 0), `ZADD w:<token>`, `PEXPIREAT`; release = `ZREM`",
			new:  func(a string) (impl, error) { return newRawPrim(a, rawWrite) }},
		{name: "coordhost semaphore", base: "raw rueidis semaphore script",
			note: fmt.Sprintf("`semaphore.New(client, semaphore.Options{})` on a default rueidis client; `TryAcquire(ctx, key, %d, ttl)` + `Permit.Release` (the acquire runs on a fenced dedicated connection; the script counts live permits, checks the capacity stored in a companion key, prunes, adds the token, stores the capacity and expires both keys; the release script is owner-checked and publishes)", semCapacity),
			new:  func(a string) (impl, error) { return newSem(a) }},
		{name: "raw rueidis semaphore script",
			note: fmt.Sprintf("baseline: one `EVALSHA`: `TIME`, `ZREMRANGEBYSCORE`, `ZCARD` (refuse at capacity %d), `ZADD <token>`, `PEXPIREAT` at the latest deadline (no capacity key, no fencing); release = `ZREM`", semCapacity),
			new:  func(a string) (impl, error) { return newRawPrim(a, rawSem) }},
	}
}

// primResults are one section's throughput cells.
type primResults map[tpKey]*tpResult

// runPrimThroughput measures rows at o.concs goroutines on fresh instances
// (made by mk), o's prim reps × dur, rotating the order per repetition,
// after one untimed 8-goroutine pass. section names keys and log lines.
func runPrimThroughput(srv *server, o options, section string, rows []primRow, mk func(primRow) (impl, error)) primResults {
	res := primResults{}
	insts := make([]impl, len(rows))
	for i, row := range rows {
		im, err := mk(row)
		if err != nil {
			fatalf("%s: %s: %v", section, row.name, err)
		}
		insts[i] = im
		defer im.Close()
	}
	prefix := "bench:" + section + ":"
	for i, row := range rows {
		if s := loopCycles(nil, insts[i], prefix+row.name, 8, ctxBackground, 0, o.warm); s.err != nil {
			fatalf("%s: %s: warm-up: %v", section, row.name, s.err)
		}
	}
	for r := range o.primReps {
		for _, conc := range o.concs {
			for j := range rows {
				i := (j + r) % len(rows)
				s := loopCycles(srv, insts[i], prefix+rows[i].name, conc, ctxBackground, o.warm, o.primDur).tpSample
				resultFor(res, tpKey{rows[i].name, conc}).add(s)
				logf("%s rep %d/%d conc %2d %-30s %9.0f cycles/s  cpu/cycle redis %5.1fµs self %5.1fµs  errors %d",
					section, r+1, o.primReps, conc, rows[i].name, s.rate, s.serverCPU, s.clientCPU, s.errs)
			}
		}
	}
	return res
}

func sectionRW(srv *server, o options) primResults {
	return runPrimThroughput(srv, o, "8", rwRows(), func(row primRow) (impl, error) { return row.new(srv.addr) })
}

// ---- coordhost rwlock and semaphore ----

type rwImpl struct {
	client rueidis.Client
	l      *rwlock.Locker
	write  bool
}

func newRW(addr string, write bool) (impl, error) {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		return nil, err
	}
	l, err := rwlock.New(client, rwlock.Options{})
	if err != nil {
		client.Close()
		return nil, err
	}
	return &rwImpl{client: client, l: l, write: write}, nil
}

// releaser is a coordhost handle: rwlock.Lease, semaphore.Permit,
// redlock.Lock.
type releaser interface {
	Release(ctx context.Context) (primitives.ReleaseResult, error)
}

type primHeld struct{ h releaser }

func (p primHeld) Release(ctx context.Context) error { return released(p.h.Release(ctx)) }

// released is a coordhost release's outcome as an error: nil only for
// primitives.Released.
func released(r primitives.ReleaseResult, err error) error {
	if err != nil {
		return err
	}
	if r != primitives.Released {
		return fmt.Errorf("release: %v", r)
	}
	return nil
}

func (i *rwImpl) TryLock(ctx context.Context, key string, ttl time.Duration) (held, error) {
	var l *rwlock.Lease
	var err error
	if i.write {
		l, err = i.l.TryAcquireWrite(ctx, key, ttl)
	} else {
		l, err = i.l.TryAcquireRead(ctx, key, ttl)
	}
	if err != nil {
		return nil, err
	}
	return primHeld{l}, nil
}

func (i *rwImpl) Lock(ctx context.Context, key string, ttl time.Duration) (held, error) {
	var l *rwlock.Lease
	var err error
	if i.write {
		l, err = i.l.AcquireWrite(ctx, key, ttl)
	} else {
		l, err = i.l.AcquireRead(ctx, key, ttl)
	}
	if err != nil {
		return nil, err
	}
	return primHeld{l}, nil
}

func (i *rwImpl) Close() {
	_ = i.l.Close()
	i.client.Close()
}

type semImpl struct {
	client rueidis.Client
	s      *semaphore.Semaphores
}

func newSem(addr string) (impl, error) {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		return nil, err
	}
	s, err := semaphore.New(client, semaphore.Options{})
	if err != nil {
		client.Close()
		return nil, err
	}
	return &semImpl{client: client, s: s}, nil
}

func (i *semImpl) TryLock(ctx context.Context, key string, ttl time.Duration) (held, error) {
	p, err := i.s.TryAcquire(ctx, key, semCapacity, ttl)
	if err != nil {
		return nil, err
	}
	return primHeld{p}, nil
}

func (i *semImpl) Lock(ctx context.Context, key string, ttl time.Duration) (held, error) {
	p, err := i.s.Acquire(ctx, key, semCapacity, ttl)
	if err != nil {
		return nil, err
	}
	return primHeld{p}, nil
}

func (i *semImpl) Close() {
	_ = i.s.Close()
	i.client.Close()
}

// ---- raw rueidis baselines ----

// The baselines' scripts: the least that keeps the same guarantees for an
// uncontended cycle (server-time deadlines, pruning of expired owners, the
// reader/writer exclusion or the capacity, a key that expires with its
// last owner), and nothing else: no argument checks, no waiting-writer
// entries, no capacity key, no tracking, no fencing. Each returns 1 when
// granted, 0 when refused.
const rawNow = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
`

const rawExpireLatest = `local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], last[2])
return 1`

var (
	rawReadScript = rueidis.NewLuaScript(rawNow + `local first = redis.call('ZRANGE', KEYS[1], 0, 0)
if first[1] and string.sub(first[1], 1, 2) == 'w:' then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
` + rawExpireLatest)
	rawWriteScript = rueidis.NewLuaScript(rawNow + `if redis.call('ZCARD', KEYS[1]) > 0 then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('PEXPIREAT', KEYS[1], now + tonumber(ARGV[2]))
return 1`)
	rawSemScript = rueidis.NewLuaScript(rawNow + `if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
` + rawExpireLatest)
)

type rawPrimMode int

const (
	rawRead rawPrimMode = iota
	rawWrite
	rawSem
)

type rawPrimImpl struct {
	client rueidis.Client
	mode   rawPrimMode
}

func newRawPrim(addr string, mode rawPrimMode) (impl, error) {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		return nil, err
	}
	return &rawPrimImpl{client: client, mode: mode}, nil
}

type rawPrimHeld struct {
	client      rueidis.Client
	key, member string
}

func (h rawPrimHeld) Release(ctx context.Context) error {
	n, err := h.client.Do(ctx, h.client.B().Zrem().Key(h.key).Member(h.member).Build()).AsInt64()
	if err != nil {
		return err
	}
	if n != 1 {
		return errors.New("raw: not owned")
	}
	return nil
}

func (i *rawPrimImpl) TryLock(ctx context.Context, key string, ttl time.Duration) (held, error) {
	ms := fmt.Sprint(ttl.Milliseconds())
	var n int64
	var err error
	var member string
	switch i.mode {
	case rawRead:
		member = "r:" + rand.Text()
		n, err = rawReadScript.Exec(ctx, i.client, []string{key}, []string{member, ms}).AsInt64()
	case rawWrite:
		member = "w:" + rand.Text()
		n, err = rawWriteScript.Exec(ctx, i.client, []string{key}, []string{member, ms}).AsInt64()
	default:
		member = rand.Text()
		n, err = rawSemScript.Exec(ctx, i.client, []string{key}, []string{member, ms, fmt.Sprint(semCapacity)}).AsInt64()
	}
	if err != nil {
		return nil, err
	}
	if n != 1 {
		return nil, errRawNotAcquired
	}
	return rawPrimHeld{client: i.client, key: key, member: member}, nil
}

func (i *rawPrimImpl) Lock(context.Context, string, time.Duration) (held, error) {
	return nil, errors.New("raw baseline has no waiting acquire")
}

func (i *rawPrimImpl) Close() { i.client.Close() }

// ---- report ----

// primTable writes a throughput table of rows: median [min–max] cycles/s
// per concurrency, and for rows with a base the ratio of the medians and
// the median (and range) of the same-repetition ratios.
func (r *report) primTable(w func(string, ...any), rows []primRow, res primResults) {
	o := r.opts
	w("| implementation |")
	concColumns(w, o.concs)
	var errNotes []string
	for _, row := range rows {
		w("| %s |", row.name)
		for _, c := range o.concs {
			t := res[tpKey{row.name, c}]
			if t == nil || len(t.rates) == 0 {
				w(" – |")
				continue
			}
			m := median(t.rates)
			w(" %s [%s–%s]", num(m), num(slices.Min(t.rates)), num(slices.Max(t.rates)))
			if b := res[tpKey{row.base, c}]; row.base != "" && b != nil && median(b.rates) > 0 {
				paired, _ := pairedOf(t.rates, b.rates)
				w("<br>%.3f× base; same-rep %s", m/median(b.rates), paired)
			}
			w(" |")
			if t.errs > 0 {
				errNotes = append(errNotes, fmt.Sprintf("%s at %d goroutines: %d failed cycles, first: %v", row.name, c, t.errs, t.first))
			}
		}
		w("\n")
	}
	w("\nCPU per cycle, median µs: Redis (`INFO cpu`) / the benchmark process (getrusage).\n\n| implementation |")
	concColumns(w, o.concs)
	for _, row := range rows {
		w("| %s |", row.name)
		for _, c := range o.concs {
			if t := res[tpKey{row.name, c}]; t != nil && len(t.rates) > 0 {
				w(" %.1f / %.1f |", median(t.serverCPU), median(t.clientCPU))
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
		w("No cycle failed.\n")
	}
	w("\n")
}

func (r *report) sectionRW(w func(string, ...any)) {
	o := r.opts
	w("## 8. Read-write leases, semaphores and countdown latches\n\n")
	if r.rw != nil {
		w("### Uncontended acquire + release\n\n")
		w("Cycles/s (one cycle = one non-waiting acquire + one release), N goroutines each on its own key, all on one client per row; every row has its own fresh client. Median of %d × %v after %v warm-up per cell, rows rotating, after one untimed 8-goroutine pass; [min–max] over the repetitions. Each coordhost row is compared with the raw rueidis baseline under it: the ratio of the medians, then the min–max and median of the ratios measured in the same repetition (seconds apart). Lease %v (never reached). No target: the issue asks for the numbers.\n\n",
			o.primReps, o.primDur, o.warm, throughputTTL)
		rows := rwRows()
		r.primTable(w, rows, r.rw)
		for _, row := range rows {
			w("- **%s**: %s.\n", row.name, row.note)
		}
		w("\n")
	}
	if r.writerWait != nil {
		r.sectionWriterWait(w)
	}
	if r.latchWake != nil {
		r.sectionLatchWake(w)
	}
}
