package host

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coordhost/coordhost/config"
	"github.com/coordhost/coordhost/policies"
	"github.com/coordhost/coordhost/primitives/rwlock"
)

// ErrNoRWLock means the configuration in use has no rwlock of that name (a
// reload may have removed it).
var ErrNoRWLock = errors.New("host: no such rwlock")

// RWLock is a configured read-write lease, by name (an `rwlock` block).
// Every call uses the configuration in use at that moment: after a reload
// the same RWLock follows the new settings (its starvation, retry and
// partition policies among them), and a waiter blocked when the reload
// happened moves to the new generation's Locker. Safe for concurrent use.
type RWLock struct {
	h    *Host
	name string
}

// namedRWLock is one generation's instance of a configured rwlock.
type namedRWLock = named[*config.RWLock, *rwlock.Locker]

func (l *RWLock) lookup(g *generation) *namedRWLock { return g.rwlocks[l.name] }

// RWLock returns the configured rwlock name. The returned RWLock follows
// reloads; it fails with ErrNoRWLock if the configuration in use has no
// such rwlock.
func (h *Host) RWLock(name string) (*RWLock, error) {
	if h.closed.Load() {
		return nil, ErrClosed
	}
	g := h.gen.Load()
	if g.rwlocks[name] == nil {
		return nil, fmt.Errorf("%w: no rwlock %q in %s", ErrNoRWLock, name, g.cfg.Path)
	}
	return &RWLock{h: h, name: name}, nil
}

// Name returns the configured name.
func (l *RWLock) Name() string { return l.name }

// TTL returns the configured lease of the configuration in use, or 0 if it
// no longer has this rwlock.
func (l *RWLock) TTL() time.Duration {
	if n := current(l.h, l.lookup); n != nil {
		return n.cfg.TTL
	}
	return 0
}

// Key returns the key (below the rwlock's prefix) for attrs: the name, or
// name "/" partition key when a partition policy is configured. A
// partition failure, or an empty key, fails closed with an error wrapping
// policies.ErrPartition.
func (l *RWLock) Key(ctx context.Context, attrs map[string]string) (string, error) {
	n := current(l.h, l.lookup)
	if n == nil {
		return "", fmt.Errorf("%w: %q", ErrNoRWLock, l.name)
	}
	return n.key(ctx, attrs)
}

// AcquireRead waits for a read lease for the configured TTL, consulting
// the configured retry policy between attempts.
func (l *RWLock) AcquireRead(ctx context.Context, attrs map[string]string) (*rwlock.Lease, error) {
	got, _, err := l.observe(ctx, attrs, rwlock.Read, true, 0, (*rwlock.Locker).AcquireRead)
	return got, err
}

// TryAcquireRead makes one attempt at a read lease.
func (l *RWLock) TryAcquireRead(ctx context.Context, attrs map[string]string) (*rwlock.Lease, error) {
	got, _, err := l.observe(ctx, attrs, rwlock.Read, false, 0, (*rwlock.Locker).TryAcquireRead)
	return got, err
}

// AcquireWrite waits for the write lease for the configured TTL,
// consulting the configured starvation policy (how long it lets new
// readers in) and retry policy while it waits.
func (l *RWLock) AcquireWrite(ctx context.Context, attrs map[string]string) (*rwlock.Lease, error) {
	got, _, err := l.observe(ctx, attrs, rwlock.Write, true, 0, (*rwlock.Locker).AcquireWrite)
	return got, err
}

// TryAcquireWrite makes one attempt at the write lease.
func (l *RWLock) TryAcquireWrite(ctx context.Context, attrs map[string]string) (*rwlock.Lease, error) {
	got, _, err := l.observe(ctx, attrs, rwlock.Write, false, 0, (*rwlock.Locker).TryAcquireWrite)
	return got, err
}

// observe runs one acquisition for ttl (0: the configured TTL) and
// returns the lease and its key (below the prefix). It is counted once,
// across the generations it may move through
// (coordhost_rwlock_acquisitions_total,
// coordhost_rwlock_wait_duration_seconds). Renewals, releases and losses
// are reported by the Locker's observer (rwlockObs).
func (l *RWLock) observe(ctx context.Context, attrs map[string]string, mode rwlock.Mode, waits bool, ttl time.Duration,
	fn func(*rwlock.Locker, context.Context, string, time.Duration) (*rwlock.Lease, error)) (*rwlock.Lease, string, error) {
	start := time.Now()
	var key string
	got, err := withNamed(l.h, "rwlock", l.name, ErrNoRWLock, l.lookup, func(n *namedRWLock) (*rwlock.Lease, error) {
		var err error
		if key, err = n.key(ctx, attrs); err != nil {
			return nil, err
		}
		return fn(n.prim, ctx, key, cmp.Or(ttl, n.cfg.TTL))
	})
	l.h.metrics.rwlock.observeAcquire(ctx, l.name, mode, waits, time.Since(start), err)
	return got, key, err
}

// newRWLock builds one generation's Locker for rc, with its policies.
func (g *generation) newRWLock(h *Host, rc *config.RWLock) (*namedRWLock, error) {
	opts := rwlock.Options{Prefix: h.keyPfx + rc.Prefix, MarkerTTL: rc.MarkerTTL, Waiter: g.waiter,
		Observer: h.metrics.rwlock.observer(rc.Name), Replicas: rc.Replicas, ReplicaTimeout: rc.ReplicaTimeout}
	var part policies.PartitionPolicy
	for _, ref := range []*config.PolicyRef{rc.Starvation, rc.Retry, rc.Partition} {
		lp, err := g.policy(ref)
		if err != nil {
			return nil, fmt.Errorf("rwlock %q: %w", rc.Name, err)
		}
		if lp == nil {
			continue
		}
		switch ref.Kind {
		case policies.KindStarvation:
			opts.Starvation = lp.starvation
		case policies.KindRetry:
			opts.Retry = lp.retry
		case policies.KindPartition:
			part = lp.partition
		}
	}
	l, err := rwlock.New(h.client, opts)
	if err != nil {
		return nil, fmt.Errorf("rwlock %q: %w", rc.Name, err)
	}
	return &namedRWLock{kind: "rwlock", name: rc.Name, cfg: rc, prim: l, partition: part}, nil
}
