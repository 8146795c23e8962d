package ratelimit

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coordhost/coordhost/primitives"
	"github.com/redis/rueidis"
)

// DefaultProbeInterval is how long Limiters keep using the Lua fixed
// window after the server refused INCREX, before trying INCREX again.
const DefaultProbeInterval = 5 * time.Minute

// FastPath says how a Limiters' fixed windows reach the server.
type FastPath int

const (
	// FastPathUnknown: no fixed window has consumed permits yet.
	FastPathUnknown FastPath = iota
	// FastPathIncrex: the server answers INCREX (Redis 8.8 or later).
	FastPathIncrex
	// FastPathLua: the server refused INCREX; the Lua script is used
	// until the next probe.
	FastPathLua
)

func (p FastPath) String() string {
	switch p {
	case FastPathUnknown:
		return "unknown"
	case FastPathIncrex:
		return "increx"
	case FastPathLua:
		return "lua"
	}
	return "FastPath(" + strconv.Itoa(int(p)) + ")"
}

// FastPath reports whether fixed windows use INCREX. Safe for concurrent
// use.
func (l *Limiters) FastPath() FastPath {
	if l == nil {
		return FastPathUnknown
	}
	l.fast.mu.Lock()
	defer l.fast.mu.Unlock()
	return l.fast.state
}

// fastPath is the INCREX state shared by a Limiters' fixed windows. While
// unknown, or once a refusal is older than interval, one call at a time
// tries INCREX (the probe) and the others use Lua, so a server without it
// costs at most one extra round trip per interval.
type fastPath struct {
	mu       sync.Mutex
	state    FastPath
	probing  bool
	refused  time.Time
	interval time.Duration
}

// try reports whether this call should send INCREX.
func (f *fastPath) try(now time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.state == FastPathIncrex:
		return true
	case f.probing:
		return false
	case f.state == FastPathLua && now.Sub(f.refused) < f.interval:
		return false
	}
	f.probing = true
	return true
}

// learn records what an INCREX told: has is whether the server took it;
// known false (a transport error) keeps the state as it was.
func (f *fastPath) learn(known, has bool, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.probing = false
	if !known {
		return
	}
	if has {
		f.state = FastPathIncrex
		return
	}
	f.state, f.refused = FastPathLua, now
}

// realErrors are the error codes that mean the server took INCREX as a
// command and refused to run it now (ACL, replica, memory, cluster state,
// a value of another type). Any other error reply to INCREX (unknown
// command, syntax error, a proxy's "unsupported command") means it is not
// supported there.
var realErrors = []string{"NOPERM", "READONLY", "OOM", "LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN",
	"CLUSTERDOWN", "NOAUTH", "WRONGPASS", "WRONGTYPE", "MOVED", "ASK", "NOREPLICAS", "MISCONF", "EXECABORT"}

// unsupported reports whether err is an error reply, and whether it says
// the server does not support INCREX.
func unsupported(err error) (redisErr, refused bool) {
	rerr, ok := rueidis.IsRedisErr(err)
	if !ok || rerr == nil {
		return false, false
	}
	msg := rerr.Error()
	for _, code := range realErrors {
		if strings.HasPrefix(msg, code+" ") || msg == code {
			return true, false
		}
	}
	// rueidis drops the ERR code word: "value is not an integer" is a
	// foreign value, not a missing command.
	return true, !strings.Contains(msg, "not an integer")
}

// increx consumes n permits of a fixed window with
// INCREX key BYINT n LBOUND 0 UBOUND limit PX window ENX, pipelined with the
// PTTL that RetryAfter needs (INCREX's reply has no expiry). ok false
// means the caller must use the script: the server refused INCREX, or the
// counter has no expiry (the script repairs that).
func (l *Limiter) increx(ctx context.Context, n int64) (res Result, ok bool, err error) {
	c := l.ls.client
	cmds := rueidis.Commands{
		c.B().Arbitrary("INCREX").Keys(l.key).Args("BYINT", strconv.FormatInt(n, 10), "LBOUND", "0", "UBOUND", l.limit, "PX", l.window, "ENX").Build(),
		c.B().Pttl().Key(l.key).Build(),
	}
	resps := c.DoMulti(ctx, cmds...)
	now := l.ls.clk.Now()
	vals, err := resps[0].ToArray()
	if err != nil {
		isRedis, refused := unsupported(err)
		l.ls.fast.learn(isRedis, !refused, now)
		if refused {
			return Result{}, false, nil
		}
		if isRedis {
			if strings.HasPrefix(err.Error(), "WRONGTYPE") || strings.Contains(err.Error(), "not an integer") {
				return Result{}, false, fmt.Errorf("%w: ratelimit: key %q: INCREX: %v", primitives.ErrWrongType, l.key, err)
			}
		}
		return Result{}, false, fmt.Errorf("ratelimit: key %q: INCREX: %w", l.key, err)
	}
	l.ls.fast.learn(true, true, now)
	if len(vals) != 2 {
		return Result{}, false, fmt.Errorf("ratelimit: key %q: INCREX answered %d values, want 2", l.key, len(vals))
	}
	// [value, increment applied]: n when granted, 0 when refused (no
	// SATURATE, so nothing in between).
	value, err1 := vals[0].AsInt64()
	applied, err2 := vals[1].AsInt64()
	if err1 != nil || err2 != nil || (applied != 0 && applied != n) {
		return Result{}, false, fmt.Errorf("ratelimit: key %q: INCREX answered an unreadable reply", l.key)
	}
	if value < 0 {
		// LBOUND 0 kept INCREX from adding to it: not a permit count.
		return Result{}, false, fmt.Errorf("%w: ratelimit: key %q: the counter holds %d, not a permit count", primitives.ErrWrongType, l.key, value)
	}
	pttl, err := resps[1].AsInt64()
	if err != nil {
		// The INCREX ran: its permits are consumed, but without PTTL
		// the result cannot say when to retry.
		return Result{}, false, fmt.Errorf("ratelimit: key %q: PTTL after INCREX: %w", l.key, err)
	}
	if pttl == -1 && applied == 0 {
		// A counter without expiry would refuse forever: the script
		// gives it one.
		return Result{}, false, nil
	}
	remaining := max(l.policy.Limit-value, 0)
	l.available.Store(remaining)
	res = Result{Acquired: applied == n, Remaining: remaining, Limit: l.policy.Limit, Window: l.policy.Window}
	if pttl >= 0 {
		// Redis expires a key once its time is strictly past the deadline.
		res.ResetAfter = time.Duration(pttl+1) * time.Millisecond
	}
	if !res.Acquired {
		// Without a PTTL the counter expired between the two commands: a
		// new window is open already. RetryAfter 0 would say "never".
		res.RetryAfter = max(res.ResetAfter, time.Millisecond)
	}
	return res, true, nil
}
