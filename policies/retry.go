// Package policies defines the decisions coordhost consults at acquisition
// time. Policies are pure functions of their inputs: the caller passes time,
// the holder's remaining TTL and randomness in. This package depends on the
// standard library only.
package policies

import (
	"context"
	"time"
)

// RetryReason says why an attempt did not acquire.
type RetryReason int

const (
	// ReasonContended means another owner holds the resource.
	ReasonContended RetryReason = iota + 1
	// ReasonError means the attempt failed with a transient error.
	ReasonError
)

// String returns the reason's name.
func (r RetryReason) String() string {
	switch r {
	case ReasonContended:
		return "contended"
	case ReasonError:
		return "error"
	}
	return "RetryReason(0)"
}

// RetryRequest describes a failed attempt.
type RetryRequest struct {
	// Attempt counts failed attempts so far, starting at 1.
	Attempt int
	// Reason says why the attempt failed.
	Reason RetryReason
	// Elapsed is the time since the first attempt was sent.
	Elapsed time.Duration
	// HolderTTL is the holder's remaining TTL as reported by the server, or
	// a negative value when unknown (no holder, or the key never expires).
	HolderTTL time.Duration
	// Rand is a uniformly random value supplied by the caller, so the
	// policy itself stays deterministic.
	Rand uint64
}

// RetryAction is what a retry policy tells the waiter to do next.
type RetryAction int

const (
	// WaitForWake sleeps until a server notification (release, invalidation)
	// or the holder's expiry, but at most Delay; then re-attempts.
	WaitForWake RetryAction = iota
	// RetryAfter sleeps Delay, ignoring notifications, then re-attempts.
	RetryAfter
	// GiveUp stops waiting; the acquire fails with ErrNotAcquired.
	GiveUp
)

// String returns the action's name.
func (a RetryAction) String() string {
	switch a {
	case WaitForWake:
		return "wait-for-wake"
	case RetryAfter:
		return "retry-after"
	case GiveUp:
		return "give-up"
	}
	return "RetryAction(?)"
}

// RetryDecision is the answer of a RetryPolicy. The zero value means "wait
// for a wake-up with no bound of its own".
type RetryDecision struct {
	Action RetryAction
	// Delay bounds the sleep (WaitForWake) or sets it (RetryAfter). Zero
	// with WaitForWake means no bound other than the holder's expiry.
	Delay time.Duration
}

// RetryPolicy decides what a waiter does after a failed attempt.
// Implementations must be safe for concurrent use. ctx is the waiting
// caller's: an implementation that can block (a module call, an RPC) must
// return promptly once it is done; the caller then ignores the decision.
type RetryPolicy interface {
	DecideRetry(ctx context.Context, r RetryRequest) RetryDecision
}

// RetryFunc adapts a function to RetryPolicy.
type RetryFunc func(context.Context, RetryRequest) RetryDecision

// DecideRetry calls f(ctx, r).
func (f RetryFunc) DecideRetry(ctx context.Context, r RetryRequest) RetryDecision { return f(ctx, r) }
