package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coordhost/coordhost/config"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/lease"
)

// ErrNoLease means the configuration in use has no lease block of that
// name (a reload may have removed it).
var ErrNoLease = errors.New("host: no such lease")

// Lease is a configured lease block, by name: named hash-field leases, as
// fields of one hash per key (the name, or name "/" partition key when the
// block names a partition policy), each field with its own expiry
// (primitives/lease). Every call uses the configuration in use at that
// moment: after a reload the same Lease follows the new settings (ttl,
// max_ttl, retry and partition policies among them), and a waiter blocked
// when the reload happened moves to the new generation's Leases. Leases
// already granted keep working across reloads. Safe for concurrent use.
//
// Serving leases needs hash-field expiry (HPEXPIRE, HPTTL: Redis 7.4 or
// newer, Valkey 9.0 or newer). A Host starts on an older server; every
// acquisition then fails with an error matching primitives.ErrUnsupported
// that says so, and writes nothing.
type Lease struct {
	h    *Host
	name string
}

// namedLease is one generation's instance of a configured lease block.
type namedLease = named[*config.Lease, *lease.Leases]

func (l *Lease) lookup(g *generation) *namedLease { return g.leases[l.name] }

// Lease returns the configured lease block name. The returned Lease
// follows reloads; it fails with ErrNoLease if the configuration in use
// has no such block.
func (h *Host) Lease(name string) (*Lease, error) {
	if h.closed.Load() {
		return nil, ErrClosed
	}
	g := h.gen.Load()
	if g.leases[name] == nil {
		return nil, fmt.Errorf("%w: no lease %q in %s", ErrNoLease, name, g.cfg.Path)
	}
	return &Lease{h: h, name: name}, nil
}

// Name returns the configured name.
func (l *Lease) Name() string { return l.name }

// TTL returns the configured ttl of the configuration in use: the lease
// of a request that asks for none (ttl 0). 0 if the configuration no
// longer has this block.
func (l *Lease) TTL() time.Duration {
	if n := current(l.h, l.lookup); n != nil {
		return n.cfg.TTL
	}
	return 0
}

// MaxTTL returns the configured max_ttl of the configuration in use: the
// longest lease a request may ask for (the ttl unless the block sets
// max_ttl). 0 if the configuration no longer has this block.
func (l *Lease) MaxTTL() time.Duration {
	if n := current(l.h, l.lookup); n != nil {
		return n.cfg.MaxTTL
	}
	return 0
}

// Key returns the hash key (below the block's prefix) for attrs: the
// name, or name "/" partition key when a partition policy is configured.
// A partition failure, or an empty key, fails closed with an error
// wrapping policies.ErrPartition.
func (l *Lease) Key(ctx context.Context, attrs map[string]string) (string, error) {
	n := current(l.h, l.lookup)
	if n == nil {
		return "", fmt.Errorf("%w: %q", ErrNoLease, l.name)
	}
	return n.key(ctx, attrs)
}

// TryAcquire makes one attempt at field of the hash for attrs and never
// waits: a field another owner holds fails with an error matching
// primitives.ErrNotAcquired. ttl is the lease: 0 means the configured
// ttl; otherwise at least 1ms (rounded up to whole milliseconds) and at
// most the configured max_ttl.
//
// Errors, all before anything is written: primitives.ErrInvalidOptions
// (a nil ctx), primitives.ErrInvalidKey (an empty field),
// primitives.ErrInvalidTTL (a negative ttl, one below 1ms, or one above
// max_ttl), policies.ErrPartition (the partition policy gave no key),
// primitives.ErrUnsupported (the server lacks hash-field expiry: Redis
// 7.4 or newer needed), lease.ErrHashHasTTL, primitives.ErrWrongType,
// lease.ErrNoClientPermission, ctx.Err(), ErrNoLease (removed by a
// reload), ErrClosed. Bad input is refused before the partition policy is
// asked. A lost reply is fenced and settled as lease.Leases.TryAcquire
// says.
func (l *Lease) TryAcquire(ctx context.Context, attrs map[string]string, field string, ttl time.Duration) (*lease.Lease, error) {
	got, _, err := l.observe(ctx, attrs, field, ttl, false, (*lease.Leases).TryAcquire)
	return got, err
}

// Acquire takes field of the hash for attrs, waiting while another owner
// holds it (woken by its release, and at its expiry at the latest) and
// consulting the configured retry policy between attempts, until ctx ends
// (the error matches ctx.Err()) or the retry policy gives up (an error
// matching primitives.ErrNotAcquired). ttl and the other errors are as in
// TryAcquire; a waiter that a reload moves to the new configuration gets
// its ttl (for ttl 0) and is held to its max_ttl.
func (l *Lease) Acquire(ctx context.Context, attrs map[string]string, field string, ttl time.Duration) (*lease.Lease, error) {
	got, _, err := l.observe(ctx, attrs, field, ttl, true, (*lease.Leases).Acquire)
	return got, err
}

// observe runs one acquisition and returns the lease and its hash key
// (below the prefix). It is counted once, across the generations it may
// move through (coordhost_lease_acquisitions_total,
// coordhost_lease_wait_duration_seconds).
func (l *Lease) observe(ctx context.Context, attrs map[string]string, field string, ttl time.Duration, waits bool,
	fn func(*lease.Leases, context.Context, string, string, time.Duration) (*lease.Lease, error)) (*lease.Lease, string, error) {
	start := time.Now()
	var key string
	got, err := withNamed(l.h, "lease", l.name, ErrNoLease, l.lookup, func(n *namedLease) (*lease.Lease, error) {
		if ctx == nil {
			return nil, fmt.Errorf("lease %q: %w: nil context", l.name, primitives.ErrInvalidOptions)
		}
		if field == "" {
			return nil, fmt.Errorf("lease %q: %w: field is empty", l.name, primitives.ErrInvalidKey)
		}
		ttl, err := leaseTTL(n.cfg, ttl)
		if err != nil {
			return nil, err
		}
		if key, err = n.key(ctx, attrs); err != nil {
			return nil, err
		}
		return fn(n.prim, ctx, key, field, ttl)
	})
	l.h.metrics.lease.observeAcquire(ctx, l.name, waits, time.Since(start), err)
	return got, key, err
}

// leaseTTL is the lease a request for ttl gets under block c: c.TTL for
// 0; ttl itself up to c.MaxTTL (the primitive refuses one below 1ms).
func leaseTTL(c *config.Lease, ttl time.Duration) (time.Duration, error) {
	switch {
	case ttl == 0:
		return c.TTL, nil
	case ttl < 0:
		return 0, fmt.Errorf("lease %q: %w: %v is negative (0 asks for the configured ttl, %v)", c.Name, primitives.ErrInvalidTTL, ttl, c.TTL)
	case ttl > c.MaxTTL:
		return 0, fmt.Errorf("lease %q: %w: %v is above the configured max_ttl, %v", c.Name, primitives.ErrInvalidTTL, ttl, c.MaxTTL)
	}
	return ttl, nil
}

// newLease builds one generation's Leases for the lease block lc, with its
// policies.
func (g *generation) newLease(h *Host, lc *config.Lease) (*namedLease, error) {
	opts := lease.Options{Prefix: h.keyPfx + lc.Prefix, Waiter: g.waiter, Replicas: lc.Replicas, ReplicaTimeout: lc.ReplicaTimeout}
	lp, err := g.policy(lc.Retry)
	if err != nil {
		return nil, fmt.Errorf("lease %q: %w", lc.Name, err)
	}
	if lp != nil {
		opts.Retry = lp.retry
	}
	n := &namedLease{kind: "lease", name: lc.Name, cfg: lc}
	if lp, err := g.policy(lc.Partition); err != nil {
		return nil, fmt.Errorf("lease %q: %w", lc.Name, err)
	} else if lp != nil {
		n.partition = lp.partition
	}
	if n.prim, err = lease.New(h.client, opts); err != nil {
		return nil, fmt.Errorf("lease %q: %w", lc.Name, err)
	}
	h.metrics.lease.declare(lc.Name)
	return n, nil
}
