package faulttest

import (
	"context"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/rueidis"
)

// Tap is a rueidis.Client that records, before sending each command, what
// Pick finds in its arguments ("" records nothing): e.g. the token of every
// acquire script call, so a test can settle unknown outcomes against a
// grant log. Only Do is tapped; dedicated connections are not. Safe for
// concurrent use.
type Tap struct {
	rueidis.Client
	Pick func(args []string) string

	mu   sync.Mutex
	sent []string
}

// Note records what Pick finds in cmd.
func (c *Tap) Note(cmd rueidis.Completed) {
	if s := c.Pick(cmd.Commands()); s != "" {
		c.mu.Lock()
		c.sent = append(c.sent, s)
		c.mu.Unlock()
	}
}

// Do notes cmd, then sends it.
func (c *Tap) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.Note(cmd)
	return c.Client.Do(ctx, cmd)
}

// Take returns what was recorded since the last Take.
func (c *Tap) Take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.sent
	c.sent = nil
	return out
}

// ScriptArgWithKey returns a Pick for Tap: ARGV[1] (copied) of an EVAL or
// EVALSHA whose keys include key, else "".
func ScriptArgWithKey(key string) func(args []string) string {
	return func(args []string) string {
		if len(args) < 3 || (args[0] != "EVALSHA" && args[0] != "EVAL") {
			return ""
		}
		n, err := strconv.Atoi(args[2])
		if err != nil || len(args) <= 3+n {
			return ""
		}
		for _, k := range args[3 : 3+n] {
			if k == key {
				return strings.Clone(args[3+n])
			}
		}
		return ""
	}
}
