package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/bsm/redislock"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/lease"
	"github.com/coordhost/coordhost/primitives/lock"
	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"
)

// held is a granted lock of any implementation.
type held interface {
	Release(ctx context.Context) error
}

// impl is one lock implementation on its own client(s).
type impl interface {
	// TryLock makes one attempt and never waits.
	TryLock(ctx context.Context, key string, ttl time.Duration) (held, error)
	// Lock waits with the library's own blocking or retrying acquire until
	// it gets the lock or ctx ends.
	Lock(ctx context.Context, key string, ttl time.Duration) (held, error)
	Close()
}

// implConfig says how to build an instance.
type implConfig struct {
	addr string
	// ttl is the lease for implementations that fix it at construction
	// (rueidislock's KeyValidity).
	ttl time.Duration
	// crashHolder: the instance will take a lock and never release it;
	// implementations with automatic extension must not extend.
	crashHolder bool
	// count, when set, counts every command the instance sends (coordhost
	// only: its client is wrapped, see countingClient).
	count *cmdCounter
	// setup, when not the zero value, changes the rueidis client of the
	// implementations on rueidis (coordhost, raw rueidis) from the library
	// defaults; see setups.go.
	setup clientSetup
}

// kind describes one implementation row.
type kind struct {
	name string
	// blocking: has a waiting acquire (sections 2–4).
	blocking bool
	// scriptCmds are the commands its Lua scripts call inside Redis; INFO
	// commandstats counts them as well as the EVALSHA that ran the script.
	scriptCmds []string
	// note is what the row measures, for the report.
	note string
	// countsOnClient: sections 4 and 5 count its client-sent commands on
	// the client (implConfig.count) instead of subtracting scriptCmds from
	// the server's counts, because it also sends some of its scripts'
	// commands directly.
	countsOnClient bool
	new            func(implConfig) (impl, error)
}

// retryDelay is the tight fixed retry interval given to the polling peers
// (bsm/redislock, redsync) in the waiting sections.
const retryDelay = time.Millisecond

func kinds() []kind {
	return []kind{
		{
			name: "coordhost", blocking: true, countsOnClient: true,
			scriptCmds: []string{"set", "get", "del", "pttl", "publish", "incr", "pexpire"},
			note:       "`lock.Locker` (Fencing off) on a default rueidis client (RESP3, auto-pipelining); TryAcquire/Acquire + Release; the first attempt of an acquire is a plain `SET NX GET PX` (since commits ffcbb96 and the SET NX GET change; before, it was the acquire script) that also answers contention in one round trip; a waiter that finds local waiters queued on its key joins them without an attempt; the acquire script (EVALSHA) runs for waiting attempts, Release is EVALSHA; Acquire waits on tracking invalidations + a timer at the holder's PTTL (default Exponential retry policy)",
			new:        func(c implConfig) (impl, error) { return newCoordhost(c, coordhostPlain) },
		},
		{
			name:       "coordhost (sequential set-up)",
			scriptCmds: []string{"set", "get", "del", "pttl", "publish", "incr", "pexpire"},
			note:       "the `coordhost` row on a rueidis client built with `DisableAutoPipelining: true` (the set-up bench/README.md recommends for one lock at a time): every command borrows a pooled connection and is written and read on the caller's goroutine, with no hand-off to rueidis' pipeline writer and reader goroutines; section 1 only",
			new: func(c implConfig) (impl, error) {
				c.setup = setupSequential
				return newCoordhost(c, coordhostPlain)
			},
		},
		{
			name:       "coordhost fencing",
			scriptCmds: []string{"set", "get", "del", "pttl", "publish", "incr", "pexpire"},
			note:       "as above with `Options.Fencing`: every acquire is the script (counter checks, `SET NX PX`, INCR of a counter key the Locker derives)",
			new:        func(c implConfig) (impl, error) { return newCoordhost(c, coordhostFencing) },
		},
		{
			name:       "coordhost TryAcquireFenced",
			scriptCmds: []string{"set", "get", "del", "pttl", "publish", "incr", "pexpire"},
			note:       "`Locker.TryAcquireFenced(ctx, \"{k}:lease\", \"{k}:fence\", ttl)` (Options.Fencing off; the caller names the counter key, same hash tag) + Release: the acquire script with counter checks and INCR, as `coordhost fencing`",
			new:        func(c implConfig) (impl, error) { return newCoordhost(c, coordhostNamedCounter) },
		},
		{
			name: "bsm/redislock", blocking: true,
			scriptCmds: []string{"set", "getrange", "get", "del", "pexpire", "pttl"},
			note:       "go-redis v9 client (defaults: RESP3, pool 10×GOMAXPROCS); Obtain (EVALSHA of its obtain script) + Release (EVALSHA); waiting = `RetryStrategy: LinearBackoff(1ms)`",
			new:        newBSM,
		},
		{
			name: "redsync", blocking: true,
			scriptCmds: []string{"get", "del"},
			note:       "one goredis/v9 pool on a default go-redis client; `NewMutex` per acquire; TryLock = SET NX + a goroutine and 2 timeout contexts per op, a *failed* attempt also runs the delete script (2 commands); Unlock = EVALSHA; waiting = `WithRetryDelay(1ms)`, unlimited tries",
			new:        newRedsync,
		},
		{
			name: "rueidislock", blocking: true,
			scriptCmds: []string{"set", "get", "del", "pexpireat"},
			note:       "`KeyMajority: 1` (one key, like the others; the default 2 writes 3 keys), KeyValidity = lease, its own rueidis client (one pipelined connection, OPTOUT tracking); TryWithContext/WithContext + cancel (cancel waits for the DEL); a goroutine + extension timer per lock; waiting = tracking invalidations only",
			new:        newRueidislock,
		},
		{
			name:       "raw rueidis",
			scriptCmds: []string{"get", "del"},
			note:       "baseline: default rueidis client, `SET key token NX PX` + owner-checked DEL via `rueidis.NewLuaScript` (EVALSHA)",
			new:        func(c implConfig) (impl, error) { return newRaw(c, false) },
		},
		{
			name:       "raw rueidis, Lua acquire",
			scriptCmds: []string{"set", "get", "pttl", "del"},
			note:       "second baseline, not a target: as raw rueidis but the acquire is a script like coordhost's unfenced acquire script (`SET NX PX`, on failure `GET` + `PTTL`) — the shape of every coordhost acquire before commit ffcbb96 — to separate the cost of a scripted acquire from the library's own overhead",
			new:        func(c implConfig) (impl, error) { return newRaw(c, true) },
		},
	}
}

// leaseField is the one field of the hash the section-5 chain passes around.
const leaseField = "holder"

// leaseKinds are section 5's rows, run on the Redis 8 server: coordhost's
// hash-field lease, and its lock on the same server for reference.
func leaseKinds() []kind {
	lk := kindByName("coordhost")
	lk.name = "coordhost lock (reference)"
	lk.note = "section 5 only: the `coordhost` row's lock, run on the Redis 8 server next to the lease for reference"
	return []kind{
		{
			name: "coordhost lease", blocking: true, countsOnClient: true,
			scriptCmds: []string{"hget", "pttl", "hpttl", "hset", "hpexpire", "hdel", "publish"},
			note:       "section 5 only: `lease.New(client, lease.Options{})` on a default rueidis client; `Acquire(ctx, hashKey, \"" + leaseField + "\", ttl)` + `Lease.Release` (EVALSHA each); a first attempt runs on a fenced dedicated connection (pooled; CLIENT INFO when a new one is opened), waiting attempts on the tracking connection, which tracks the whole hash; waiters also wake at the field's HPTTL",
			new:        newLease,
		},
		lk,
	}
}

func kindByName(name string) kind {
	for _, k := range kinds() {
		if k.name == name {
			return k
		}
	}
	panic("unknown kind " + name)
}

// ---- coordhost ----

// coordhostMode is which coordhost acquire a row measures.
type coordhostMode int

const (
	coordhostPlain        coordhostMode = iota // TryAcquire/Acquire, Fencing off
	coordhostFencing                           // TryAcquire/Acquire, Options.Fencing
	coordhostNamedCounter                      // TryAcquireFenced/AcquireFenced, caller-named counter
)

type coordhostImpl struct {
	client rueidis.Client
	locker *lock.Locker
	mode   coordhostMode
}

// newClient is a default rueidis client, wrapped to count commands when
// c.count is set.
func newClient(c implConfig) (client, inner rueidis.Client, err error) {
	inner, err = rueidis.NewClient(clientOption(c))
	if err != nil {
		return nil, nil, err
	}
	client = wrapClient(c, inner)
	if c.count != nil {
		return countingClient{Client: client, n: c.count}, inner, nil
	}
	return client, inner, nil
}

// clientOption is the rueidis client option for c: the library defaults,
// changed by c.setup when set.
func clientOption(c implConfig) rueidis.ClientOption {
	opt := rueidis.ClientOption{InitAddress: []string{c.addr}}
	if c.setup.opt != nil {
		c.setup.opt(&opt)
	}
	return opt
}

// wrapClient applies c.setup.wrap, if any, to a new client.
func wrapClient(c implConfig, client rueidis.Client) rueidis.Client {
	if c.setup.wrap != nil {
		return c.setup.wrap(client)
	}
	return client
}

func newCoordhost(c implConfig, mode coordhostMode) (impl, error) {
	client, inner, err := newClient(c)
	if err != nil {
		return nil, err
	}
	l, err := lock.New(client, lock.Options{Fencing: mode == coordhostFencing})
	if err != nil {
		inner.Close()
		return nil, err
	}
	return &coordhostImpl{client: inner, locker: l, mode: mode}, nil
}

// fencedKeys are the lease and counter keys TryAcquireFenced gets for key:
// one hash tag, so one cluster slot.
func fencedKeys(key string) (lease, counter string) {
	return "{" + key + "}:lease", "{" + key + "}:fence"
}

type coordhostHeld struct{ l *lock.Lock }

func (h coordhostHeld) Release(ctx context.Context) error {
	r, err := h.l.Release(ctx)
	if err != nil {
		return err
	}
	if r != primitives.Released {
		return fmt.Errorf("release: %v", r)
	}
	return nil
}

func (i *coordhostImpl) TryLock(ctx context.Context, key string, ttl time.Duration) (held, error) {
	var l *lock.Lock
	var err error
	if i.mode == coordhostNamedCounter {
		lk, ctr := fencedKeys(key)
		l, err = i.locker.TryAcquireFenced(ctx, lk, ctr, ttl)
	} else {
		l, err = i.locker.TryAcquire(ctx, key, ttl)
	}
	if err != nil {
		return nil, err
	}
	return coordhostHeld{l}, nil
}

func (i *coordhostImpl) Lock(ctx context.Context, key string, ttl time.Duration) (held, error) {
	var l *lock.Lock
	var err error
	if i.mode == coordhostNamedCounter {
		lk, ctr := fencedKeys(key)
		l, err = i.locker.AcquireFenced(ctx, lk, ctr, ttl)
	} else {
		l, err = i.locker.Acquire(ctx, key, ttl)
	}
	if err != nil {
		return nil, err
	}
	return coordhostHeld{l}, nil
}

func (i *coordhostImpl) Close() {
	_ = i.locker.Close()
	i.client.Close()
}

// ---- bsm/redislock ----

type bsmImpl struct {
	rdb    *goredis.Client
	client *redislock.Client
}

func newBSM(c implConfig) (impl, error) {
	rdb := goredis.NewClient(&goredis.Options{Addr: c.addr})
	return &bsmImpl{rdb: rdb, client: redislock.New(rdb)}, nil
}

type bsmHeld struct{ l *redislock.Lock }

func (h bsmHeld) Release(ctx context.Context) error { return h.l.Release(ctx) }

func (i *bsmImpl) TryLock(ctx context.Context, key string, ttl time.Duration) (held, error) {
	l, err := i.client.Obtain(ctx, key, ttl, nil)
	if err != nil {
		return nil, err
	}
	return bsmHeld{l}, nil
}

func (i *bsmImpl) Lock(ctx context.Context, key string, ttl time.Duration) (held, error) {
	l, err := i.client.Obtain(ctx, key, ttl, &redislock.Options{RetryStrategy: redislock.LinearBackoff(retryDelay)})
	if err != nil {
		return nil, err
	}
	return bsmHeld{l}, nil
}

func (i *bsmImpl) Close() { _ = i.rdb.Close() }

// ---- redsync ----

type redsyncImpl struct {
	rdb *goredis.Client
	rs  *redsync.Redsync
}

func newRedsync(c implConfig) (impl, error) {
	rdb := goredis.NewClient(&goredis.Options{Addr: c.addr})
	return &redsyncImpl{rdb: rdb, rs: redsync.New(redsyncgoredis.NewPool(rdb))}, nil
}

type redsyncHeld struct{ m *redsync.Mutex }

func (h redsyncHeld) Release(ctx context.Context) error {
	ok, err := h.m.UnlockContext(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("redsync: unlock returned false")
	}
	return nil
}

func (i *redsyncImpl) TryLock(ctx context.Context, key string, ttl time.Duration) (held, error) {
	m := i.rs.NewMutex(key, redsync.WithExpiry(ttl), redsync.WithTries(1))
	if err := m.TryLockContext(ctx); err != nil {
		return nil, err
	}
	return redsyncHeld{m}, nil
}

func (i *redsyncImpl) Lock(ctx context.Context, key string, ttl time.Duration) (held, error) {
	m := i.rs.NewMutex(key, redsync.WithExpiry(ttl), redsync.WithTries(math.MaxInt32), redsync.WithRetryDelay(retryDelay))
	if err := m.LockContext(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	return redsyncHeld{m}, nil
}

func (i *redsyncImpl) Close() { _ = i.rdb.Close() }

// ---- rueidislock ----

type rueidislockImpl struct {
	l rueidislock.Locker
}

func newRueidislock(c implConfig) (impl, error) {
	opt := rueidislock.LockerOption{
		ClientOption: rueidis.ClientOption{InitAddress: []string{c.addr}},
		KeyMajority:  1,
		KeyValidity:  c.ttl,
	}
	if c.crashHolder {
		// Never extend: the holder "crashes" right after acquiring.
		opt.ExtendInterval = time.Hour
	}
	l, err := rueidislock.NewLocker(opt)
	if err != nil {
		return nil, err
	}
	return &rueidislockImpl{l: l}, nil
}

type rueidislockHeld struct{ cancel context.CancelFunc }

func (h rueidislockHeld) Release(context.Context) error {
	h.cancel() // waits until the key is deleted
	return nil
}

// TryLock ignores ttl: rueidislock fixes the lease (KeyValidity) per Locker.
func (i *rueidislockImpl) TryLock(ctx context.Context, key string, _ time.Duration) (held, error) {
	_, cancel, err := i.l.TryWithContext(context.WithoutCancel(ctx), key)
	if err != nil {
		return nil, err
	}
	return rueidislockHeld{cancel}, nil
}

func (i *rueidislockImpl) Lock(ctx context.Context, key string, _ time.Duration) (held, error) {
	_, cancel, err := i.l.WithContext(ctx, key)
	if err != nil {
		return nil, err
	}
	return rueidislockHeld{cancel}, nil
}

func (i *rueidislockImpl) Close() { i.l.Close() }

// ---- raw rueidis baseline ----

var rawRelease = rueidis.NewLuaScript(`if redis.call("GET",KEYS[1]) == ARGV[1] then return redis.call("DEL",KEYS[1]) end return 0`)

// rawAcquire mirrors lua/lock_acquire.lua without fencing.
var rawAcquire = rueidis.NewLuaScript(`if not redis.call("SET",KEYS[1],ARGV[1],"NX","PX",ARGV[2]) then redis.call("GET",KEYS[1]) return {0, redis.call("PTTL",KEYS[1])} end return {1, ""}`)

var errRawNotAcquired = errors.New("raw: not acquired")

type rawImpl struct {
	client   rueidis.Client
	closer   rueidis.Client // the client itself when client is a wrapper
	scripted bool
}

func newRaw(c implConfig, scripted bool) (impl, error) {
	client, err := rueidis.NewClient(clientOption(c))
	if err != nil {
		return nil, err
	}
	return &rawImpl{client: wrapClient(c, client), closer: client, scripted: scripted}, nil
}

type rawHeld struct {
	client     rueidis.Client
	key, token string
}

func (h rawHeld) Release(ctx context.Context) error {
	n, err := rawRelease.Exec(ctx, h.client, []string{h.key}, []string{h.token}).AsInt64()
	if err != nil {
		return err
	}
	if n != 1 {
		return errors.New("raw: not owned")
	}
	return nil
}

func (i *rawImpl) TryLock(ctx context.Context, key string, ttl time.Duration) (held, error) {
	token := rand.Text()
	if i.scripted {
		vals, err := rawAcquire.Exec(ctx, i.client, []string{key}, []string{token, strconv.FormatInt(ttl.Milliseconds(), 10)}).ToArray()
		if err != nil {
			return nil, err
		}
		if ok, err := vals[0].AsInt64(); err != nil || ok != 1 {
			return nil, errRawNotAcquired
		}
		return rawHeld{client: i.client, key: key, token: token}, nil
	}
	err := i.client.Do(ctx, i.client.B().Set().Key(key).Value(token).Nx().PxMilliseconds(ttl.Milliseconds()).Build()).Error()
	if rueidis.IsRedisNil(err) {
		return nil, errRawNotAcquired
	}
	if err != nil {
		return nil, err
	}
	return rawHeld{client: i.client, key: key, token: token}, nil
}

func (i *rawImpl) Lock(context.Context, string, time.Duration) (held, error) {
	return nil, errors.New("raw baseline has no waiting acquire")
}

func (i *rawImpl) Close() { i.closer.Close() }

// ---- coordhost hash-field lease (section 5) ----

type leaseImpl struct {
	client rueidis.Client
	leases *lease.Leases
}

func newLease(c implConfig) (impl, error) {
	client, inner, err := newClient(c)
	if err != nil {
		return nil, err
	}
	ls, err := lease.New(client, lease.Options{})
	if err != nil {
		inner.Close()
		return nil, err
	}
	return &leaseImpl{client: inner, leases: ls}, nil
}

type leaseHeld struct{ l *lease.Lease }

func (h leaseHeld) Release(ctx context.Context) error {
	r, err := h.l.Release(ctx)
	if err != nil {
		return err
	}
	if r != primitives.Released {
		return fmt.Errorf("release: %v", r)
	}
	return nil
}

// TryLock takes field leaseField of the hash key.
func (i *leaseImpl) TryLock(ctx context.Context, key string, ttl time.Duration) (held, error) {
	l, err := i.leases.TryAcquire(ctx, key, leaseField, ttl)
	if err != nil {
		return nil, err
	}
	return leaseHeld{l}, nil
}

func (i *leaseImpl) Lock(ctx context.Context, key string, ttl time.Duration) (held, error) {
	l, err := i.leases.Acquire(ctx, key, leaseField, ttl)
	if err != nil {
		return nil, err
	}
	return leaseHeld{l}, nil
}

func (i *leaseImpl) Close() {
	_ = i.leases.Close()
	i.client.Close()
}
