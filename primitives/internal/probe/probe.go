// Package probe asks a server which features it has, so a primitive can
// refuse clearly, before writing anything, on a server that lacks them.
package probe

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/coordhost/coordhost/primitives/internal/base"
	"github.com/coordhost/coordhost/primitives/internal/clock"
	"github.com/redis/rueidis"
)

// HasCommands reports whether the server knows every command in names
// (COMMAND INFO answers nil for an unknown command).
func HasCommands(ctx context.Context, c rueidis.Client, names ...string) (bool, error) {
	vals, err := c.Do(ctx, c.B().CommandInfo().CommandName(names...).Build()).ToArray()
	if err != nil {
		return false, err
	}
	for _, v := range vals {
		if v.IsNil() {
			return false, nil
		}
	}
	return len(vals) == len(names), nil
}

// Version names the server and its version, e.g. "Redis 7.0.15" or
// "Valkey 8.1.1" (Valkey also reports a Redis-compatible redis_version,
// which would mislead), or "an unknown server".
func Version(ctx context.Context, c rueidis.Client) string {
	info, err := c.Do(ctx, c.B().Info().Section("server").Build()).ToString()
	if err != nil {
		return "an unknown server"
	}
	var redis, valkey string
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "redis_version:"); ok {
			redis = v
		} else if v, ok := strings.CutPrefix(line, "valkey_version:"); ok {
			valkey = v
		}
	}
	switch {
	case valkey != "":
		return "Valkey " + valkey
	case redis != "":
		return "Redis " + redis
	}
	return "an unknown server"
}

// DefaultInterval is how long a Feature trusts its answer before it asks
// the server again (a server may be upgraded, or replaced by a failover).
const DefaultInterval = 5 * time.Minute

// Feature caches whether a server has a set of commands, and asks again
// once Interval has passed. A transport error is never cached. The zero
// value is not usable; set Commands. Safe for concurrent use.
type Feature struct {
	Commands []string      // every one must exist
	Interval time.Duration // 0 means DefaultInterval
	Clock    clock.Clock   // nil means the system clock

	mu      sync.Mutex
	known   bool
	has     bool
	version string // the server's name and version when it lacks them
	checked time.Time
}

// Forget drops the cached answer: the next Check asks the server (a script
// found the feature missing, e.g. after a failover).
func (f *Feature) Forget() {
	f.mu.Lock()
	f.known = false
	f.mu.Unlock()
}

// Check reports whether the server has every command, and when it has not,
// the server's name and version (for the error). It sends COMMAND INFO
// (and INFO server when a command is missing) at most once per Interval.
func (f *Feature) Check(ctx context.Context, c rueidis.Client) (has bool, version string, err error) {
	clk := clock.Or(f.Clock)
	interval := f.Interval
	if interval <= 0 {
		interval = DefaultInterval
	}
	f.mu.Lock()
	if f.known && clk.Now().Sub(f.checked) < interval {
		has, version = f.has, f.version
		f.mu.Unlock()
		return has, version, nil
	}
	f.mu.Unlock()
	has, err = HasCommands(ctx, c, f.Commands...)
	if err != nil {
		if rerr, ok := rueidis.IsRedisErr(err); ok && strings.HasPrefix(rerr.Error(), "NOPERM") {
			err = fmt.Errorf("%w: COMMAND INFO (ACL: +command|info): %w", base.ErrNoPermission, err)
		}
		return false, "", err
	}
	if !has {
		version = Version(ctx, c)
	}
	f.mu.Lock()
	f.known, f.has, f.version, f.checked = true, has, version, clk.Now()
	f.mu.Unlock()
	return has, version, nil
}

// Assume makes f answer has until the next Forget or re-probe (tests: a
// server that changed under a cached answer).
func (f *Feature) Assume(has bool, clk clock.Clock) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.known, f.has, f.version, f.checked = true, has, "", clock.Or(clk).Now()
}
