package main

// Section 10's limiters: coordhost's three algorithms, go-redis/redis_rate
// (GCRA), an envoyproxy/ratelimit-style fixed window and the raw EVALSHA
// ceiling, each behind rlDecider so one harness drives them all.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/coordhost/coordhost/primitives/ratelimit"
	"github.com/go-redis/redis_rate/v10"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// rlKeys is how many keys the spread cells use; key index rlKeys is the
// hot key (and the precision runs' key).
const rlKeys = 1000

// rlParams is one limit, given to every limiter in the shape it takes: a
// window limiter allows limit per window; a token bucket (coordhost's, and
// redis_rate's GCRA) holds bucket tokens and gains perPeriod every period.
type rlParams struct {
	limit     int64
	window    time.Duration
	bucket    int64
	perPeriod int64
	period    time.Duration
}

func (p rlParams) String() string {
	return fmt.Sprintf("%d per %v; bucket %d + %d per %v", p.limit, p.window, p.bucket, p.perPeriod, p.period)
}

// rlDecider is one limiter on its own client(s): decide asks for one permit
// on key index k (0 ≤ k ≤ rlKeys) of its key space.
type rlDecider interface {
	// decide returns whether the permit was granted and, when the limiter
	// reports it, the server time of the decision.
	decide(ctx context.Context, k int) (granted bool, server time.Time, err error)
	close()
}

// rlAlgo is what a row's limiter promises, which decides how section 10's
// precision table checks it.
type rlAlgo int

const (
	algoFixed   rlAlgo = iota // at most limit per window, windows from the first grant
	algoAligned               // at most limit per clock-aligned window (envoy)
	algoSliding               // at most limit in any interval of a window's length
	algoBucket                // at most bucket + perPeriod·⌈D/period⌉ in any interval D
)

// rlRow is one limiter of section 10.
type rlRow struct {
	name string
	algo rlAlgo
	// coordhost rows are judged against the targets and report server
	// time in the precision table.
	coordhost bool
	// top are the commands it sends (not those its scripts call): their
	// INFO commandstats time is the time Redis spends executing its
	// decisions.
	top  []string
	note string
	// new builds the limiter on a fresh client of its own for the keys
	// under prefix.
	new func(addr, prefix string, p rlParams) (rlDecider, error)
}

// Row names the report and the targets refer to.
const (
	rlFixed   = "coordhost fixed window"
	rlSliding = "coordhost sliding window"
	rlBucket  = "coordhost token bucket"
	rlGCRA    = "go-redis/redis_rate (GCRA)"
	rlEnvoy   = "envoy-style fixed window"
	rlRaw     = "raw EVALSHA ceiling"
	rlFloor   = "raw INCRBY floor"
)

// scriptCmds are how the script rows reach Redis.
var scriptCmds = []string{"evalsha", "eval"}

// rlSegments is the coordhost sliding window's segment count.
const rlSegments = 10

func rlRows() []rlRow {
	return []rlRow{
		{name: rlFixed, algo: algoFixed, coordhost: true, top: scriptCmds,
			note: "`ratelimit.New(client, Options{Prefix})` on a default rueidis client, one `Limiters.FixedWindow(key, FixedWindowOptions{Limit, Window})` per key, `TryAcquire(ctx, 1)`. Redis 7.0 has no INCREX, so after the first call's probe (refused) every decision is the fixed-window script: `TIME`, `GET`, `PTTL`, then on a grant `INCRBY` (+ `PEXPIRE` when the counter is new); a refusal writes nothing",
			new:  newCoordhostRL(algoFixed)},
		{name: rlSliding, algo: algoSliding, coordhost: true, top: scriptCmds,
			note: fmt.Sprintf("as above with `SlidingWindow(key, SlidingWindowOptions{Limit, Window, Segments: %d})`: one script, `TIME`, `HGETALL` of the segment hash, then on a grant `HDEL` of ended segments, `HINCRBY` and `PEXPIRE`", rlSegments),
			new:  newCoordhostRL(algoSliding)},
		{name: rlBucket, algo: algoBucket, coordhost: true, top: scriptCmds,
			note: "as above with `TokenBucket(key, TokenBucketOptions{Limit: bucket, TokensPerPeriod, Period})`: one script, `TIME`, `HMGET tokens at` (+ `EXISTS` for a missing bucket), then on a grant `HSET` and `PEXPIRE`",
			new:  newCoordhostRL(algoBucket)},
		{name: rlGCRA, algo: algoBucket, top: scriptCmds,
			note: "`github.com/go-redis/redis_rate/v10` on a default go-redis v9 client (pool 10×GOMAXPROCS): `NewLimiter(rdb).Allow(ctx, key, Limit{Rate: perPeriod, Period: period, Burst: bucket})` — GCRA in one script (`EVALSHA`, `EVAL` on NOSCRIPT): `TIME`, `GET`, then on a grant `SET … EX`; the most-used Redis rate limiter for Go, and the GCRA the issue asks coordhost to beat",
			new:  newGCRA},
		{name: rlEnvoy, algo: algoAligned, top: []string{"incrby", "expire"},
			note: "what envoyproxy/ratelimit's Redis backend sends, written here on a default rueidis client: the key names the clock-aligned window (`<key>_<unix time / window × window>`, the client's clock), `INCRBY key 1` and `EXPIRE key <window s>` pipelined in one `DoMulti`, and the decision made on the client (over the limit when the new count exceeds it); every decision writes, refusals too",
			new:  newEnvoyRL},
		{name: rlRaw, algo: algoFixed, top: scriptCmds,
			note: "the minimal script making the fixed window's decision, written here on a default rueidis client: `GET`; over the limit, `PTTL` and refuse without writing; else `INCRBY`, `PTTL` and `PEXPIRE` when the counter is new; it answers granted, remaining and the window's time left, like coordhost's script, but checks no argument and reads no `TIME` (so it reports no server time): what the decision itself costs",
			new:  newRawRL(rawDecisionScript)},
		{name: rlFloor, algo: algoFixed, top: scriptCmds,
			note: "the least one script can do, for scale: `INCRBY KEYS[1] 1`, and `PEXPIRE KEYS[1] <window>` only when the count is new, decided on the client (granted when the count is ≤ the limit); refusals write too, and nothing says when to retry",
			new:  newRawRL(rawRLScript)},
	}
}

// ---- coordhost ----

type coordhostRL struct {
	client rueidis.Client
	ls     *ratelimit.Limiters
	lims   []*ratelimit.Limiter // by key index
}

func newCoordhostRL(algo rlAlgo) func(addr, prefix string, p rlParams) (rlDecider, error) {
	return func(addr, prefix string, p rlParams) (rlDecider, error) {
		client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
		if err != nil {
			return nil, err
		}
		ls, err := ratelimit.New(client, ratelimit.Options{Prefix: prefix})
		if err != nil {
			client.Close()
			return nil, err
		}
		d := &coordhostRL{client: client, ls: ls, lims: make([]*ratelimit.Limiter, rlKeys+1)}
		// Limiters send nothing when made: one per key up front keeps
		// the decision loop free of map look-ups and locks.
		for k := range d.lims {
			key := strconv.Itoa(k)
			var l *ratelimit.Limiter
			switch algo {
			case algoFixed:
				l, err = ls.FixedWindow(key, ratelimit.FixedWindowOptions{Limit: p.limit, Window: p.window})
			case algoSliding:
				l, err = ls.SlidingWindow(key, ratelimit.SlidingWindowOptions{Limit: p.limit, Window: p.window, Segments: rlSegments})
			default:
				l, err = ls.TokenBucket(key, ratelimit.TokenBucketOptions{Limit: p.bucket, TokensPerPeriod: p.perPeriod, Period: p.period})
			}
			if err != nil {
				d.close()
				return nil, err
			}
			d.lims[k] = l
		}
		return d, nil
	}
}

func (d *coordhostRL) decide(ctx context.Context, k int) (bool, time.Time, error) {
	res, err := d.lims[k].TryAcquire(ctx, 1)
	return res.Acquired, res.ServerTime, err
}

func (d *coordhostRL) close() {
	for _, l := range d.lims {
		if l != nil {
			_ = l.Close()
		}
	}
	d.client.Close()
}

// ---- go-redis/redis_rate (GCRA) ----

type gcraRL struct {
	rdb    *goredis.Client
	lim    *redis_rate.Limiter
	limit  redis_rate.Limit
	prefix string
	keys   []string
}

func newGCRA(addr, prefix string, p rlParams) (rlDecider, error) {
	rdb := goredis.NewClient(&goredis.Options{Addr: addr})
	d := &gcraRL{rdb: rdb, lim: redis_rate.NewLimiter(rdb), prefix: prefix,
		limit: redis_rate.Limit{Rate: int(p.perPeriod), Period: p.period, Burst: int(p.bucket)}}
	d.keys = make([]string, rlKeys+1)
	for k := range d.keys {
		d.keys[k] = prefix + strconv.Itoa(k)
	}
	return d, nil
}

func (d *gcraRL) decide(ctx context.Context, k int) (bool, time.Time, error) {
	res, err := d.lim.Allow(ctx, d.keys[k], d.limit)
	if err != nil {
		return false, time.Time{}, err
	}
	return res.Allowed > 0, time.Time{}, nil
}

func (d *gcraRL) close() { _ = d.rdb.Close() }

// ---- envoy-style fixed window ----

type envoyRL struct {
	client rueidis.Client
	keys   []string
	limit  int64
	secs   int64 // the window in whole seconds
}

func newEnvoyRL(addr, prefix string, p rlParams) (rlDecider, error) {
	if p.window%time.Second != 0 {
		return nil, fmt.Errorf("envoy-style: window %v is not whole seconds", p.window)
	}
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		return nil, err
	}
	secs := int64(p.window / time.Second)
	d := &envoyRL{client: client, limit: p.limit, secs: secs, keys: make([]string, rlKeys+1)}
	for k := range d.keys {
		d.keys[k] = prefix + strconv.Itoa(k) + "_"
	}
	return d, nil
}

func (d *envoyRL) decide(ctx context.Context, k int) (bool, time.Time, error) {
	key := d.keys[k] + strconv.FormatInt(time.Now().Unix()/d.secs*d.secs, 10)
	c := d.client
	resps := c.DoMulti(ctx,
		c.B().Incrby().Key(key).Increment(1).Build(),
		c.B().Expire().Key(key).Seconds(d.secs).Build())
	n, err := resps[0].AsInt64()
	if err != nil {
		return false, time.Time{}, err
	}
	if err := resps[1].Error(); err != nil {
		return false, time.Time{}, err
	}
	return n <= d.limit, time.Time{}, nil
}

func (d *envoyRL) close() { d.client.Close() }

// ---- raw EVALSHA ceiling ----

// rawRLScript counts a permit and gives a new counter its window (a counter
// written by this script always has one, so PEXPIRE ... NX would do the
// same with one more call per decision).
var rawRLScript = rueidis.NewLuaScript(`local n = redis.call('INCRBY', KEYS[1], 1)
if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return n`)

// rawDecisionScript makes the fixed window's decision with nothing else:
// ARGV[1] permits, ARGV[2] limit, ARGV[3] window ms; {granted, remaining,
// pttl}.
var rawDecisionScript = rueidis.NewLuaScript(`local n, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
if used + n > limit then
  return {0, limit - used, redis.call('PTTL', KEYS[1])}
end
redis.call('INCRBY', KEYS[1], n)
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then redis.call('PEXPIRE', KEYS[1], ARGV[3]); ttl = tonumber(ARGV[3]) end
return {1, limit - used - n, ttl}`)

type rawRL struct {
	client   rueidis.Client
	script   *rueidis.Lua
	decision bool // rawDecisionScript's reply, not a count
	keys     []string
	limit    int64
	args     []string
}

func newRawRL(script *rueidis.Lua) func(addr, prefix string, p rlParams) (rlDecider, error) {
	return func(addr, prefix string, p rlParams) (rlDecider, error) {
		client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
		if err != nil {
			return nil, err
		}
		ms := strconv.FormatInt(p.window.Milliseconds(), 10)
		d := &rawRL{client: client, script: script, limit: p.limit, args: []string{ms}, keys: make([]string, rlKeys+1)}
		if script == rawDecisionScript {
			d.decision, d.args = true, []string{"1", strconv.FormatInt(p.limit, 10), ms}
		}
		for k := range d.keys {
			d.keys[k] = prefix + strconv.Itoa(k)
		}
		return d, nil
	}
}

func (d *rawRL) decide(ctx context.Context, k int) (bool, time.Time, error) {
	if d.decision {
		v, err := d.script.Exec(ctx, d.client, d.keys[k:k+1], d.args).ToArray()
		if err != nil {
			return false, time.Time{}, err
		}
		if len(v) != 3 {
			return false, time.Time{}, errors.New("raw: reply of another shape")
		}
		granted, err := v[0].AsInt64()
		return granted == 1, time.Time{}, err
	}
	n, err := d.script.Exec(ctx, d.client, d.keys[k:k+1], d.args).AsInt64()
	if err != nil {
		return false, time.Time{}, err
	}
	if n < 1 {
		return false, time.Time{}, errors.New("raw: count below 1")
	}
	return n <= d.limit, time.Time{}, nil
}

func (d *rawRL) close() { d.client.Close() }
