package main

import (
	"context"
	"fmt"
	"time"
)

// crashTTL is the lease of the holder that never releases.
const crashTTL = 500 * time.Millisecond

type crashResult struct {
	lats     []time.Duration // successful reps: waiter's grant - (holder send + TTL)
	timeouts int
	skipped  int
	firstErr error
}

// runCrash: a holder (its own client) takes key with crashTTL and never
// releases nor renews; a waiter (another client) then calls Lock. The
// latency is from the holder's expiry, taken as the instant just before
// the holder's acquire was sent plus crashTTL (so it slightly overstates),
// to the moment the waiter's Lock returned. A rep that has not handed off
// `patience` after the expiry counts as a timeout; after maxTimeouts the
// remaining reps are skipped.
func runCrash(holder, waiter impl, name, phase string, reps int, patience time.Duration, maxTimeouts int) crashResult {
	var res crashResult
	for rep := range reps {
		if res.timeouts >= maxTimeouts {
			res.skipped = reps - rep
			break
		}
		key := fmt.Sprintf("bench:crash:%s:%s:%d", name, phase, rep)
		sent := time.Now()
		if _, err := holder.TryLock(context.Background(), key, crashTTL); err != nil {
			if res.firstErr == nil {
				res.firstErr = fmt.Errorf("holder: %w", err)
			}
			continue
		}
		expiry := sent.Add(crashTTL)
		ctx, cancel := context.WithDeadline(context.Background(), expiry.Add(patience))
		h, err := waiter.Lock(ctx, key, handoffTTL)
		got := time.Now()
		cancel()
		if err != nil {
			if got.After(expiry.Add(patience)) || ctx.Err() != nil {
				res.timeouts++
			} else if res.firstErr == nil {
				res.firstErr = fmt.Errorf("waiter: %w", err)
			}
			continue
		}
		res.lats = append(res.lats, got.Sub(expiry))
		_ = h.Release(context.Background())
	}
	return res
}
