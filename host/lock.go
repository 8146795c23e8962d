package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coordhost/coordhost/config"
	"github.com/coordhost/coordhost/primitives/lock"
)

// Errors of named primitives.
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
type namedLock = named[*config.Lock, *lock.Locker]

func (l *Lock) lookup(g *generation) *namedLock { return g.locks[l.name] }

// Name returns the configured name.
func (l *Lock) Name() string { return l.name }

// TTL returns the configured lease of the configuration in use, or 0 if it
// no longer has this lock.
func (l *Lock) TTL() time.Duration {
	if n := current(l.h, l.lookup); n != nil {
		return n.cfg.TTL
	}
	return 0
}

// Fencing reports whether grants carry fencing tokens.
func (l *Lock) Fencing() bool {
	n := current(l.h, l.lookup)
	return n != nil && n.cfg.Fencing
}

// Key returns the key (below the lock's prefix) for attrs: the lock's name,
// or name "/" partition key when a partition policy is configured. A
// partition failure, or an empty key, fails closed with an error wrapping
// policies.ErrPartition.
func (l *Lock) Key(ctx context.Context, attrs map[string]string) (string, error) {
	n := current(l.h, l.lookup)
	if n == nil {
		return "", fmt.Errorf("%w: %q", ErrNoLock, l.name)
	}
	return n.key(ctx, attrs)
}

// Acquire waits for the lock for the configured TTL, consulting the
// configured retry policy between attempts.
func (l *Lock) Acquire(ctx context.Context, attrs map[string]string) (*lock.Lock, error) {
	lk, _, err := l.acquire(ctx, attrs, true, 0)
	return lk, err
}

// TryAcquire makes one attempt.
func (l *Lock) TryAcquire(ctx context.Context, attrs map[string]string) (*lock.Lock, error) {
	lk, _, err := l.acquire(ctx, attrs, false, 0)
	return lk, err
}

// acquire runs one acquisition for ttl (0: the configured TTL), waiting
// when waits, and returns the lock and its key (below the prefix). It is
// counted once, across the generations it may move through
// (coordhost_lock_acquisitions_total, coordhost_lock_wait_duration_seconds);
// the lock's renewals, releases and losses are reported by its Locker's
// observer (metrics.lockObserver).
func (l *Lock) acquire(ctx context.Context, attrs map[string]string, waits bool, ttl time.Duration) (*lock.Lock, string, error) {
	start := time.Now()
	var key string
	got, err := withNamed(l.h, "lock", l.name, ErrNoLock, l.lookup, func(n *namedLock) (*lock.Lock, error) {
		var err error
		if key, err = n.key(ctx, attrs); err != nil {
			return nil, err
		}
		t := ttl
		if t == 0 {
			t = n.cfg.TTL
		}
		if waits {
			return n.prim.Acquire(ctx, key, t)
		}
		return n.prim.TryAcquire(ctx, key, t)
	})
	l.h.metrics.observeAcquire(ctx, l.name, waits, time.Since(start), err)
	return got, key, err
}
