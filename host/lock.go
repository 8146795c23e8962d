package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coordhost/coordhost/config"
	"github.com/coordhost/coordhost/policies"
	"github.com/coordhost/coordhost/primitives/lock"
)

// ErrRetired means the lock belongs to a configuration a reload replaced;
// get it again from Host.Lock.
var ErrRetired = errors.New("host: configuration replaced by a reload")

// Lock is a configured lock: its locker (with the configured retry policy),
// TTL and partition policy. Safe for concurrent use.
type Lock struct {
	name      string
	cfg       *config.Lock
	locker    *lock.Locker
	partition policies.PartitionPolicy
	gen       *generation
}

// Name returns the configured name.
func (l *Lock) Name() string { return l.name }

// TTL returns the configured lease.
func (l *Lock) TTL() time.Duration { return l.cfg.TTL }

// Fencing reports whether grants carry fencing tokens.
func (l *Lock) Fencing() bool { return l.cfg.Fencing }

// Key returns the key (below the lock's prefix) for attrs: the lock's name,
// or name "/" partition key when a partition policy is configured. A
// partition failure fails closed with an error wrapping
// policies.ErrPartition.
func (l *Lock) Key(attrs map[string]string) (string, error) {
	if l.partition == nil {
		return l.name, nil
	}
	k, err := l.partition.PartitionKey(policies.PartitionRequest{Kind: "lock", Name: l.name, Attributes: attrs})
	if err != nil {
		return "", fmt.Errorf("lock %q: %w", l.name, err)
	}
	return l.name + "/" + k, nil
}

// Acquire waits for the lock for the configured TTL, consulting the
// configured retry policy between attempts.
func (l *Lock) Acquire(ctx context.Context, attrs map[string]string) (*lock.Lock, error) {
	return l.do(ctx, attrs, l.locker.Acquire)
}

// TryAcquire makes one attempt.
func (l *Lock) TryAcquire(ctx context.Context, attrs map[string]string) (*lock.Lock, error) {
	return l.do(ctx, attrs, l.locker.TryAcquire)
}

func (l *Lock) do(ctx context.Context, attrs map[string]string, fn func(context.Context, string, time.Duration) (*lock.Lock, error)) (*lock.Lock, error) {
	if !l.gen.enter() {
		return nil, fmt.Errorf("lock %q: %w", l.name, ErrRetired)
	}
	defer l.gen.exit()
	key, err := l.Key(attrs)
	if err != nil {
		return nil, err
	}
	return fn(ctx, key, l.cfg.TTL)
}
