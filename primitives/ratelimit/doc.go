// Package ratelimit implements distributed rate limiters over a
// caller-owned rueidis.Client: fixed window, sliding window and token
// bucket, each deciding on the server's clock in one atomic script on one
// key.
//
// Make one Limiters per client with New and ask it for limiters; a Limiter
// is one key's limit as seen from this process. Any number of processes may
// hold a Limiter for the same key with the same options: they share one
// count in Redis. (Processes that disagree on the options each decide by
// their own; keep them equal.)
//
//	limiters, _ := ratelimit.New(client, ratelimit.Options{Prefix: "app:"})
//	lim, _ := limiters.SlidingWindow("api:alice", ratelimit.SlidingWindowOptions{
//		Limit: 100, Window: time.Minute, Segments: 10,
//	})
//	res, err := lim.TryAcquire(ctx, 1)
//
// # Algorithms
//
// A fixed window counts permits from the first one consumed until the
// window's length has passed, then starts again: at most Limit per window,
// but up to 2×Limit in an interval of one window's length that straddles
// two windows. It uses Redis 8.8's INCREX where the server has it (see
// Limiters.FastPath), a Lua script otherwise.
//
// A sliding window keeps one count per segment of the window, each dated
// forward to its segment's end, so no interval of the window's length ever
// holds more than Limit permits; a permit comes back at most one segment
// later than an exact sliding log would give it back.
//
// A token bucket holds up to Limit tokens and adds TokensPerPeriod at once
// after every whole Period, counted from its last refill (not from the
// latest request, so a busy bucket still refills on time): at most
// Limit + TokensPerPeriod×⌈D/Period⌉ permits in any interval of length D.
//
// # Decisions
//
// TryAcquire decides at once. Acquire queues in the Limiter when the
// permits are not there (up to the QueueLimit of the options, in
// QueueOrder) and retries when the server said enough permits would be
// back, never by polling. Allow, AllowN, Wait and WaitN are the shapes of
// golang.org/x/time/rate on top of them.
//
// Permits are consumed: nothing gives them back. A request for more
// permits than the limit can never succeed and is refused without
// RetryAfter and without an error. An error after the script was sent
// (lost reply, timeout, the caller's ctx ending, Close) leaves the outcome
// unknown: the server may have consumed the permits although the caller got
// no grant.
//
// # What the limits rest on
//
// Every deadline is server time, so client clocks do not matter. The
// limits hold while Redis keeps its writes: a key evicted under maxmemory,
// a restart without persistence or a failover that loses the latest writes
// resets that key's count, and the limiter then lets through up to a
// whole new limit (it fails open). Run the server with
// maxmemory-policy noeviction (or a volatile policy with room to spare) for
// limits you rely on.
package ratelimit
