package host

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coordhost/coordhost/config"
	"github.com/coordhost/coordhost/primitives/semaphore"
)

// ErrNoSemaphore means the configuration in use has no semaphore of that
// name (a reload may have removed it).
var ErrNoSemaphore = errors.New("host: no such semaphore")

// Semaphore is a configured counting semaphore, by name (a `semaphore`
// block): a family of semaphores, one per key (the name, or name "/"
// partition key when the block names a partition policy), each with the
// block's capacity and permits of the block's ttl. Every call uses the
// configuration in use at that moment: after a reload the same Semaphore
// follows the new settings (capacity, ttl, retry and partition policies
// among them), and a waiter blocked when the reload happened moves to the
// new generation's Semaphores. Permits already granted keep working across
// reloads. Safe for concurrent use.
type Semaphore struct {
	h    *Host
	name string
}

// namedSemaphore is one generation's instance of a configured semaphore.
type namedSemaphore = named[*config.Semaphore, *semaphore.Semaphores]

func (s *Semaphore) lookup(g *generation) *namedSemaphore { return g.semaphores[s.name] }

// Semaphore returns the configured semaphore name. The returned Semaphore
// follows reloads; it fails with ErrNoSemaphore if the configuration in use
// has no such semaphore.
func (h *Host) Semaphore(name string) (*Semaphore, error) {
	if h.closed.Load() {
		return nil, ErrClosed
	}
	g := h.gen.Load()
	if g.semaphores[name] == nil {
		return nil, fmt.Errorf("%w: no semaphore %q in %s", ErrNoSemaphore, name, g.cfg.Path)
	}
	return &Semaphore{h: h, name: name}, nil
}

// Name returns the configured name.
func (s *Semaphore) Name() string { return s.name }

// Capacity returns the configured capacity of the configuration in use,
// or 0 if it no longer has this semaphore.
func (s *Semaphore) Capacity() int {
	if n := current(s.h, s.lookup); n != nil {
		return n.cfg.Capacity
	}
	return 0
}

// TTL returns the configured permit lease of the configuration in use
// (semaphore.NoExpiry for ttl = "none"), or 0 if it no longer has this
// semaphore.
func (s *Semaphore) TTL() time.Duration {
	if n := current(s.h, s.lookup); n != nil {
		return n.cfg.TTL
	}
	return 0
}

// Key returns the key (below the semaphore's prefix) for attrs: the name,
// or name "/" partition key when a partition policy is configured. A
// partition failure, or an empty key, fails closed with an error wrapping
// policies.ErrPartition.
func (s *Semaphore) Key(ctx context.Context, attrs map[string]string) (string, error) {
	n := current(s.h, s.lookup)
	if n == nil {
		return "", fmt.Errorf("%w: %q", ErrNoSemaphore, s.name)
	}
	return n.key(ctx, attrs)
}

// Acquire waits for a permit of the semaphore for attrs, with the
// configured capacity and ttl, consulting the configured retry policy
// between attempts (semaphore.Semaphores.Acquire: woken by releases and at
// the earliest permit's expiry). It fails with an error matching
// primitives.ErrNotAcquired when the retry policy gives up, ctx.Err() when
// ctx ends, semaphore.ErrCapacityMismatch when live permits were taken
// with another capacity, policies.ErrPartition when the partition policy
// fails, ErrClosed once the Host is closed.
func (s *Semaphore) Acquire(ctx context.Context, attrs map[string]string) (*semaphore.Permit, error) {
	got, _, err := s.observe(ctx, attrs, true, 0, (*semaphore.Semaphores).Acquire)
	return got, err
}

// TryAcquire makes one attempt at a permit, as Acquire but never waiting:
// a full semaphore fails with an error matching primitives.ErrNotAcquired.
func (s *Semaphore) TryAcquire(ctx context.Context, attrs map[string]string) (*semaphore.Permit, error) {
	got, _, err := s.observe(ctx, attrs, false, 0, (*semaphore.Semaphores).TryAcquire)
	return got, err
}

// observe runs one acquisition for ttl (0: the configured ttl) and
// returns the permit and its key (below the prefix). It is counted once,
// across the generations it may move through
// (coordhost_semaphore_acquisitions_total,
// coordhost_semaphore_wait_duration_seconds). Renewals, releases and
// losses are reported by the Semaphores' observer (semaphoreObs).
func (s *Semaphore) observe(ctx context.Context, attrs map[string]string, waits bool, ttl time.Duration,
	fn func(*semaphore.Semaphores, context.Context, string, int, time.Duration) (*semaphore.Permit, error)) (*semaphore.Permit, string, error) {
	start := time.Now()
	var key string
	got, err := withNamed(s.h, "semaphore", s.name, ErrNoSemaphore, s.lookup, func(n *namedSemaphore) (*semaphore.Permit, error) {
		var err error
		if key, err = n.key(ctx, attrs); err != nil {
			return nil, err
		}
		return fn(n.prim, ctx, key, n.cfg.Capacity, cmp.Or(ttl, n.cfg.TTL))
	})
	s.h.metrics.semaphore.observeAcquire(ctx, s.name, waits, time.Since(start), err)
	return got, key, err
}

// newSemaphore builds one generation's Semaphores for the semaphore block
// sc, with its policies.
func (g *generation) newSemaphore(h *Host, sc *config.Semaphore) (*namedSemaphore, error) {
	opts := semaphore.Options{Prefix: h.keyPfx + sc.Prefix, Waiter: g.waiter, Logger: h.log,
		Observer: h.metrics.semaphore.observer(sc.Name), OnAbandon: h.metrics.semaphore.onAbandon(sc.Name),
		Replicas: sc.Replicas, ReplicaTimeout: sc.ReplicaTimeout}
	lp, err := g.policy(sc.Retry)
	if err != nil {
		return nil, fmt.Errorf("semaphore %q: %w", sc.Name, err)
	}
	if lp != nil {
		opts.Retry = lp.retry
	}
	n := &namedSemaphore{kind: "semaphore", name: sc.Name, cfg: sc}
	if lp, err := g.policy(sc.Partition); err != nil {
		return nil, fmt.Errorf("semaphore %q: %w", sc.Name, err)
	} else if lp != nil {
		n.partition = lp.partition
	}
	if n.prim, err = semaphore.New(h.client, opts); err != nil {
		return nil, fmt.Errorf("semaphore %q: %w", sc.Name, err)
	}
	return n, nil
}
