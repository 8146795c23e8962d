package main

import (
	"context"
	"sync/atomic"

	"github.com/redis/rueidis"
)

// adaptiveClient is a prototype, not part of coordhost: a wrapper around a
// client built with DisableAutoPipelining that sends a command on the
// caller's goroutine (a pooled connection, rueidis' synchronous path) when
// it is the only command in flight through the wrapper, and marks it
// ToPipe() — so rueidis auto-pipelines it on the shared connections — when
// others are. One client then behaves like DisableAutoPipelining for a
// sequential caller and like the default for concurrent ones.
type adaptiveClient struct {
	rueidis.Client
	inflight *atomic.Int64
}

func newAdaptive(c rueidis.Client) rueidis.Client {
	return adaptiveClient{Client: c, inflight: new(atomic.Int64)}
}

func (c adaptiveClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	if c.inflight.Add(1) > 1 {
		cmd = cmd.ToPipe()
	}
	defer c.inflight.Add(-1)
	return c.Client.Do(ctx, cmd)
}

func (c adaptiveClient) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	if c.inflight.Add(1) > 1 {
		for i := range multi {
			multi[i] = multi[i].ToPipe()
		}
	}
	defer c.inflight.Add(-1)
	return c.Client.DoMulti(ctx, multi...)
}
