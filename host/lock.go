package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coordhost/coordhost/config"
	"github.com/coordhost/coordhost/policies"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/lock"
)

// Errors of named locks.
var (
	// ErrNoLock means the configuration in use has no lock of that name
	// (a reload may have removed it).
	ErrNoLock = errors.New("host: no such lock")
	// ErrClosed means the Host was shut down.
	ErrClosed = errors.New("host: closed")
)

// Lock is a configured lock, by name. Every call uses the configuration in
// use at that moment: after a reload the same Lock follows the new
// settings, and a waiter blocked when the reload happened moves to the new
// generation's locker. Safe for concurrent use.
type Lock struct {
	h    *Host
	name string
}

// namedLock is one generation's instance of a configured lock.
type namedLock struct {
	cfg       *config.Lock
	locker    *lock.Locker
	partition policies.PartitionPolicy
}

// Name returns the configured name.
func (l *Lock) Name() string { return l.name }

// TTL returns the configured lease of the configuration in use, or 0 if it
// no longer has this lock.
func (l *Lock) TTL() time.Duration {
	if nl := l.h.gen.Load().locks[l.name]; nl != nil {
		return nl.cfg.TTL
	}
	return 0
}

// Fencing reports whether grants carry fencing tokens.
func (l *Lock) Fencing() bool {
	nl := l.h.gen.Load().locks[l.name]
	return nl != nil && nl.cfg.Fencing
}

// Key returns the key (below the lock's prefix) for attrs: the lock's name,
// or name "/" partition key when a partition policy is configured. A
// partition failure, or an empty key, fails closed with an error wrapping
// policies.ErrPartition.
func (l *Lock) Key(ctx context.Context, attrs map[string]string) (string, error) {
	nl := l.h.gen.Load().locks[l.name]
	if nl == nil {
		return "", fmt.Errorf("%w: %q", ErrNoLock, l.name)
	}
	return nl.key(ctx, attrs)
}

func (nl *namedLock) key(ctx context.Context, attrs map[string]string) (string, error) {
	name := nl.cfg.Name
	if nl.partition == nil {
		return name, nil
	}
	k, err := nl.partition.PartitionKey(ctx, policies.PartitionRequest{Kind: "lock", Name: name, Attributes: attrs})
	if err != nil {
		return "", fmt.Errorf("lock %q: %w", name, err)
	}
	if k == "" {
		// An empty key would put every caller on one key: refuse it.
		return "", fmt.Errorf("lock %q: %w: the partition policy returned an empty key", name, policies.ErrPartition)
	}
	return name + "/" + k, nil
}

// Acquire waits for the lock for the configured TTL, consulting the
// configured retry policy between attempts.
func (l *Lock) Acquire(ctx context.Context, attrs map[string]string) (*lock.Lock, error) {
	return l.observe(ctx, attrs, true, (*lock.Locker).Acquire)
}

// TryAcquire makes one attempt.
func (l *Lock) TryAcquire(ctx context.Context, attrs map[string]string) (*lock.Lock, error) {
	return l.observe(ctx, attrs, false, (*lock.Locker).TryAcquire)
}

type acquireFunc func(*lock.Locker, context.Context, string, time.Duration) (*lock.Lock, error)

// observe runs one acquisition and counts it, once, across the
// generations it may move through (coordhost_lock_acquisitions_total,
// coordhost_lock_wait_duration_seconds). The lock's renewals, releases and
// losses are reported by its Locker's observer (metrics.lockObserver).
func (l *Lock) observe(ctx context.Context, attrs map[string]string, waits bool, fn acquireFunc) (*lock.Lock, error) {
	start := time.Now()
	got, err := l.do(ctx, attrs, fn)
	l.h.metrics.observeAcquire(ctx, l.name, waits, time.Since(start), err)
	return got, err
}

func (l *Lock) do(ctx context.Context, attrs map[string]string, fn acquireFunc) (*lock.Lock, error) {
	for {
		if l.h.closed.Load() {
			return nil, fmt.Errorf("lock %q: %w", l.name, ErrClosed)
		}
		g := l.h.gen.Load()
		if !g.enter() {
			continue // a reload swapped g out just now
		}
		got, err := l.doIn(ctx, g, attrs, fn)
		g.exit()
		if errors.Is(err, primitives.ErrClosed) && l.h.gen.Load() != g && !l.h.closed.Load() {
			// A reload retired g while we waited: carry on in the new one.
			continue
		}
		return got, err
	}
}

func (l *Lock) doIn(ctx context.Context, g *generation, attrs map[string]string, fn acquireFunc) (*lock.Lock, error) {
	nl := g.locks[l.name]
	if nl == nil {
		return nil, fmt.Errorf("%w: %q", ErrNoLock, l.name)
	}
	key, err := nl.key(ctx, attrs)
	if err != nil {
		return nil, err
	}
	return fn(nl.locker, ctx, key, nl.cfg.TTL)
}
