// Package builtin holds coordhost's native policies.
package builtin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coordhost/coordhost/policies"
)

// Defaults of Exponential.
const (
	DefaultBackoffBase = 10 * time.Millisecond
	DefaultBackoffMax  = time.Second
)

// Exponential is a retry policy with exponential backoff and full jitter:
// after attempt n it waits for a wake-up, bounded by a uniformly random
// delay in [0, min(Max, Base·2^(n-1))]. The bound is a safety net against a
// lost notification, not the pace of retries: waiters normally wake on the
// server's notification or at the holder's expiry. The zero value uses
// DefaultBackoffBase and DefaultBackoffMax and never gives up. Safe for
// concurrent use.
type Exponential struct {
	Base time.Duration // first bound; 0 means DefaultBackoffBase
	Max  time.Duration // cap on the bound; 0 means DefaultBackoffMax
	// GiveUpAfter stops waiting once this much time has elapsed since the
	// first attempt; 0 means never (the caller's ctx decides).
	GiveUpAfter time.Duration
}

// Validate reports a negative duration or Max below Base.
func (e Exponential) Validate() error {
	if e.Base < 0 || e.Max < 0 || e.GiveUpAfter < 0 {
		return errors.New("exponential backoff: durations must not be negative")
	}
	if e.Base > 0 && e.Max > 0 && e.Max < e.Base {
		return fmt.Errorf("exponential backoff: max %v below base %v", e.Max, e.Base)
	}
	return nil
}

// DecideRetry implements policies.RetryPolicy.
func (e Exponential) DecideRetry(_ context.Context, r policies.RetryRequest) policies.RetryDecision {
	if e.GiveUpAfter > 0 && r.Elapsed >= e.GiveUpAfter {
		return policies.RetryDecision{Action: policies.GiveUp}
	}
	base, max := e.Base, e.Max
	if base <= 0 {
		base = DefaultBackoffBase
	}
	if max <= 0 {
		max = DefaultBackoffMax
	}
	if max < base {
		max = base
	}
	bound := base
	for i := 1; i < r.Attempt && bound < max; i++ {
		bound *= 2
	}
	if bound > max {
		bound = max
	}
	// Full jitter, but never zero: a zero Delay means "unbounded" to
	// WaitForWake.
	d := time.Duration(r.Rand%uint64(bound)) + 1
	if e.GiveUpAfter > 0 {
		if left := e.GiveUpAfter - r.Elapsed; d > left {
			d = left
		}
	}
	return policies.RetryDecision{Action: policies.WaitForWake, Delay: d}
}

// Constant waits for a wake-up bounded by a fixed Delay after every failed
// attempt. A zero Delay waits for a notification or the holder's expiry
// only. Safe for concurrent use.
type Constant struct {
	Delay       time.Duration
	GiveUpAfter time.Duration // 0 means never
}

// DecideRetry implements policies.RetryPolicy.
func (c Constant) DecideRetry(_ context.Context, r policies.RetryRequest) policies.RetryDecision {
	if c.GiveUpAfter > 0 && r.Elapsed >= c.GiveUpAfter {
		return policies.RetryDecision{Action: policies.GiveUp}
	}
	return policies.RetryDecision{Action: policies.WaitForWake, Delay: c.Delay}
}

// NoRetry gives up after the first failed attempt.
type NoRetry struct{}

// DecideRetry implements policies.RetryPolicy.
func (NoRetry) DecideRetry(context.Context, policies.RetryRequest) policies.RetryDecision {
	return policies.RetryDecision{Action: policies.GiveUp}
}
