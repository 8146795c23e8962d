package main

import (
	"context"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// cmdCounter counts commands by name as Redis' INFO commandstats names them
// (lower case, "client|info" for container commands). Safe for concurrent
// use.
type cmdCounter struct {
	mu sync.Mutex
	n  map[string]int64
}

func newCmdCounter() *cmdCounter { return &cmdCounter{n: map[string]int64{}} }

// containers are the commands commandstats splits by subcommand.
var containers = map[string]bool{"client": true, "config": true, "script": true, "pubsub": true, "function": true, "object": true, "command": true}

// add must run before the command is handed to rueidis, which recycles it.
func (c *cmdCounter) add(cmds ...[]string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, args := range cmds {
		if len(args) == 0 {
			continue
		}
		name := strings.ToLower(args[0])
		if containers[name] && len(args) > 1 {
			name += "|" + strings.ToLower(args[1])
		}
		c.n[name]++
	}
}

func (c *cmdCounter) reset() {
	c.mu.Lock()
	clear(c.n)
	c.mu.Unlock()
}

func (c *cmdCounter) snapshot() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.n)
}

func completedArgs(cmds []rueidis.Completed) [][]string {
	out := make([][]string, len(cmds))
	for i, c := range cmds {
		out[i] = c.Commands()
	}
	return out
}

// countingClient is a rueidis.Client that counts every command sent through
// it, including on the connections it dedicates (coordhost's waiting
// connection and the lease's fenced connections). Commands rueidis sends
// on its own when it opens a connection (HELLO, CLIENT TRACKING for its
// cache) are not seen; none happen inside a measured window.
//
// Needed because coordhost sends SET directly (the first attempt of an
// unfenced acquire) and also calls it inside its acquire script, so
// subtracting the scripts' commands from the server's counts would not
// leave the client-sent ones.
type countingClient struct {
	rueidis.Client
	n *cmdCounter
}

func (c countingClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.n.add(cmd.Commands())
	return c.Client.Do(ctx, cmd)
}

func (c countingClient) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	c.n.add(completedArgs(cmds)...)
	return c.Client.DoMulti(ctx, cmds...)
}

func (c countingClient) DoCache(ctx context.Context, cmd rueidis.Cacheable, ttl time.Duration) rueidis.RedisResult {
	c.n.add(cmd.Commands())
	return c.Client.DoCache(ctx, cmd, ttl)
}

func (c countingClient) Receive(ctx context.Context, sub rueidis.Completed, fn func(rueidis.PubSubMessage)) error {
	c.n.add(sub.Commands())
	return c.Client.Receive(ctx, sub, fn)
}

func (c countingClient) Dedicated(fn func(rueidis.DedicatedClient) error) error {
	return c.Client.Dedicated(func(d rueidis.DedicatedClient) error {
		return fn(countingDedicated{DedicatedClient: d, n: c.n})
	})
}

func (c countingClient) Dedicate() (rueidis.DedicatedClient, func()) {
	d, cancel := c.Client.Dedicate()
	return countingDedicated{DedicatedClient: d, n: c.n}, cancel
}

type countingDedicated struct {
	rueidis.DedicatedClient
	n *cmdCounter
}

func (d countingDedicated) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	d.n.add(cmd.Commands())
	return d.DedicatedClient.Do(ctx, cmd)
}

func (d countingDedicated) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	d.n.add(completedArgs(cmds)...)
	return d.DedicatedClient.DoMulti(ctx, cmds...)
}

func (d countingDedicated) Receive(ctx context.Context, sub rueidis.Completed, fn func(rueidis.PubSubMessage)) error {
	d.n.add(sub.Commands())
	return d.DedicatedClient.Receive(ctx, sub, fn)
}
