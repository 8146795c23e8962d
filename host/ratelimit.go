package host

import (
	"context"
	"errors"
	"fmt"

	"github.com/coordhost/coordhost/config"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/ratelimit"
)

// ErrNoRateLimit means the configuration in use has no rate limit of that
// name (a reload may have removed it).
var ErrNoRateLimit = errors.New("host: no such rate limit")

// RateLimit is a configured rate limit, by name (a `rate_limit` block): a
// family of limiters, one per key (the name, or name "/" partition key
// when the block names a partition policy), each with the block's
// algorithm, limit and queue. Every call uses the configuration in use at
// that moment: after a reload the same RateLimit decides with the new
// settings (a changed limit applies to the next decision; the counts in
// Redis carry over unless the algorithm changed, which starts from a full
// limit under keys of the new algorithm), and a call queued in Acquire
// when the reload happened queues again in the new generation. Safe for
// concurrent use.
//
// A limiter's key is redis.key_prefix + config.RateLimitPrefix +
// algorithm + ":" + the name, then "/" and the partition key when
// partitioned. Names contain no "/", so no partition key can reach
// another rate limit's keys, and two partition keys never share one.
type RateLimit struct {
	h    *Host
	name string
}

// namedRateLimit is one generation's instance of a configured rate limit.
type namedRateLimit = named[*config.RateLimit, *partitionedLimit]

// partitionedLimit is a rate limit's limiters, one per key, and the
// Policy they share. envoy holds the limiters of the Envoy rate-limit
// service's partitions (rls.go), under keys of their own.
type partitionedLimit struct {
	*ratelimit.Partitioned
	envoy  *ratelimit.Partitioned
	policy ratelimit.Policy
}

// Close closes both families of limiters.
func (p *partitionedLimit) Close() error {
	return errors.Join(p.Partitioned.Close(), p.envoy.Close())
}

func (r *RateLimit) lookup(g *generation) *namedRateLimit { return g.rateLimits[r.name] }

// RateLimit returns the configured rate limit name. The returned RateLimit
// follows reloads; it fails with ErrNoRateLimit if the configuration in use
// has no such rate limit, ErrClosed once the Host is closed.
func (h *Host) RateLimit(name string) (*RateLimit, error) {
	if h.closed.Load() {
		return nil, ErrClosed
	}
	g := h.gen.Load()
	if g.rateLimits[name] == nil {
		return nil, fmt.Errorf("%w: no rate_limit %q in %s", ErrNoRateLimit, name, g.cfg.Path)
	}
	return &RateLimit{h: h, name: name}, nil
}

// Name returns the configured name.
func (r *RateLimit) Name() string { return r.name }

// Policy returns the limit of the configuration in use (what
// RateLimit-Policy headers announce), or the zero Policy if it no longer
// has this rate limit.
func (r *RateLimit) Policy() ratelimit.Policy {
	if n := current(r.h, r.lookup); n != nil {
		return n.prim.policy
	}
	return ratelimit.Policy{}
}

// Key returns the key (below the rate limit's prefix and algorithm) for
// attrs: the name, or name "/" partition key when a partition policy is
// configured. A partition failure, or an empty key, fails closed with an
// error wrapping policies.ErrPartition.
func (r *RateLimit) Key(ctx context.Context, attrs map[string]string) (string, error) {
	n := current(r.h, r.lookup)
	if n == nil {
		return "", fmt.Errorf("%w: %q", ErrNoRateLimit, r.name)
	}
	return n.key(ctx, attrs)
}

// Statistics returns the counts of the configuration in use's limiters
// (ratelimit.Partitioned.Statistics: Granted and Rejected since the
// generation started, Queued and Available over the partitions held now),
// or zero if it no longer has this rate limit.
func (r *RateLimit) Statistics() ratelimit.Statistics {
	if n := current(r.h, r.lookup); n != nil {
		return n.prim.Statistics()
	}
	return ratelimit.Statistics{}
}

// TryAcquire decides once whether n permits are granted to the partition
// of attrs, and never waits (ratelimit.Limiter.TryAcquire): Acquired
// false with RetryAfter when they are not there, without RetryAfter when
// n exceeds the limit. n = 0 consumes nothing and reports whether a
// permit is available.
//
// Errors (nothing was sent for the first four): ratelimit.ErrInvalidPermits
// for n < 0; primitives.ErrInvalidOptions for a nil ctx; policies.ErrPartition
// when the partition policy refuses, fails or returns an empty key (the
// call fails closed); ratelimit.ErrTooManyPartitions; ErrNoRateLimit once
// a reload removed it; ErrClosed once the Host is closed;
// primitives.ErrWrongType when the key holds something else; ctx.Err() and
// transport errors, after which the permits may have been consumed.
func (r *RateLimit) TryAcquire(ctx context.Context, attrs map[string]string, n int64) (ratelimit.Result, error) {
	return r.observe(ctx, attrs, n, (*ratelimit.Partitioned).TryAcquire)
}

// Acquire is TryAcquire that queues in the partition's limiter (up to the
// block's queue limit, in its order) until the server says the permits are
// back (ratelimit.Limiter.Acquire). Not acquired, without an error, when
// the queue has no room (or, newest_first, a newer call took its place).
// A call queued when a reload retires its generation queues again in the
// new one; permits a retry under way then consumed are lost, never granted
// twice. Errors as TryAcquire.
func (r *RateLimit) Acquire(ctx context.Context, attrs map[string]string, n int64) (ratelimit.Result, error) {
	return r.observe(ctx, attrs, n, (*ratelimit.Partitioned).Acquire)
}

// observe runs one decision and counts it once, across the generations it
// may move through (coordhost_ratelimit_decisions_total).
func (r *RateLimit) observe(ctx context.Context, attrs map[string]string, n int64,
	fn func(*ratelimit.Partitioned, context.Context, string, int64) (ratelimit.Result, error)) (ratelimit.Result, error) {
	res, err := r.decide(ctx, attrs, n, fn)
	r.h.metrics.ratelimit.observe(r.name, res, err)
	return res, err
}

func (r *RateLimit) decide(ctx context.Context, attrs map[string]string, n int64,
	fn func(*ratelimit.Partitioned, context.Context, string, int64) (ratelimit.Result, error)) (ratelimit.Result, error) {
	// Bad input is refused before the partition policy is asked.
	if ctx == nil {
		return ratelimit.Result{}, fmt.Errorf("%w: rate_limit %q: nil context", primitives.ErrInvalidOptions, r.name)
	}
	if n < 0 {
		return ratelimit.Result{}, fmt.Errorf("rate_limit %q: %w: %d", r.name, ratelimit.ErrInvalidPermits, n)
	}
	return withNamed(r.h, "rate_limit", r.name, ErrNoRateLimit, r.lookup, func(nr *namedRateLimit) (ratelimit.Result, error) {
		key, err := nr.key(ctx, attrs)
		if err != nil {
			return ratelimit.Result{}, err
		}
		res, err := fn(nr.prim.Partitioned, ctx, key, n)
		if err != nil {
			return res, fmt.Errorf("rate_limit %q: %w", r.name, err)
		}
		return res, nil
	})
}

// newRateLimit builds one generation's limiters for the rate_limit block
// rc: a Partitioned that makes each key's limiter on first use from the
// generation's Limiters. One limiter is made (and closed, unused) here for
// the block's Policy, so that options ratelimit refuses fail the
// generation instead of every call.
func (g *generation) newRateLimit(h *Host, rc *config.RateLimit) (*namedRateLimit, error) {
	n := &namedRateLimit{kind: "rate_limit", name: rc.Name, cfg: rc}
	if lp, err := g.policy(rc.Partition); err != nil {
		return nil, fmt.Errorf("rate_limit %q: %w", rc.Name, err)
	} else if lp != nil {
		n.partition = lp.partition
	}
	mk, err := limiterMaker(g.limiters, rc, "")
	if err != nil {
		return nil, fmt.Errorf("rate_limit %q: %w", rc.Name, err)
	}
	probe, err := mk(rc.Name)
	if err != nil {
		return nil, fmt.Errorf("rate_limit %q: %w", rc.Name, err)
	}
	probe.Close()
	p, err := ratelimit.NewPartitioned(ratelimit.PartitionedOptions{New: mk, IdleTimeout: rc.IdleTimeout})
	if err != nil {
		return nil, fmt.Errorf("rate_limit %q: %w", rc.Name, err)
	}
	emk, err := limiterMaker(g.limiters, rc, EnvoyKeySpace)
	if err != nil {
		return nil, fmt.Errorf("rate_limit %q: %w", rc.Name, err)
	}
	ep, err := ratelimit.NewPartitioned(ratelimit.PartitionedOptions{New: emk, IdleTimeout: rc.IdleTimeout})
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("rate_limit %q: %w", rc.Name, err)
	}
	n.prim = &partitionedLimit{Partitioned: p, envoy: ep, policy: probe.Policy()}
	h.metrics.ratelimit.declare(rc.Name)
	return n, nil
}

// limiterMaker returns the function that makes the limiter of a key (the
// name, or name "/" partition key) of the rate_limit block rc. The
// algorithm leads the key, so a reload that changes it never reads the
// other algorithm's state; space ("" or EnvoyKeySpace) comes before it.
func limiterMaker(ls *ratelimit.Limiters, rc *config.RateLimit, space string) (func(string) (*ratelimit.Limiter, error), error) {
	var order ratelimit.QueueOrder
	switch rc.QueueOrder {
	case config.OldestFirst, "":
		order = ratelimit.OldestFirst
	case config.NewestFirst:
		order = ratelimit.NewestFirst
	default:
		return nil, fmt.Errorf("%w: queue order %q", primitives.ErrInvalidOptions, rc.QueueOrder)
	}
	algo := space + string(rc.Algorithm) + ":"
	switch rc.Algorithm {
	case config.FixedWindow:
		o := ratelimit.FixedWindowOptions{Limit: rc.Limit, Window: rc.Window, QueueLimit: rc.QueueLimit, QueueOrder: order}
		return func(k string) (*ratelimit.Limiter, error) { return ls.FixedWindow(algo+k, o) }, nil
	case config.SlidingWindow:
		o := ratelimit.SlidingWindowOptions{Limit: rc.Limit, Window: rc.Window, Segments: rc.Segments, QueueLimit: rc.QueueLimit, QueueOrder: order}
		return func(k string) (*ratelimit.Limiter, error) { return ls.SlidingWindow(algo+k, o) }, nil
	case config.TokenBucket:
		o := ratelimit.TokenBucketOptions{Limit: rc.Limit, TokensPerPeriod: rc.TokensPerPeriod, Period: rc.Period, QueueLimit: rc.QueueLimit, QueueOrder: order}
		return func(k string) (*ratelimit.Limiter, error) { return ls.TokenBucket(algo+k, o) }, nil
	}
	return nil, fmt.Errorf("%w: algorithm %q", primitives.ErrInvalidOptions, rc.Algorithm)
}
