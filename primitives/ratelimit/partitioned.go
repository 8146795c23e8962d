package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/coordhost/coordhost/primitives"
)

// Defaults of PartitionedOptions.
const (
	// DefaultIdleTimeout is how long a partition's limiter stays idle
	// before Partitioned closes and forgets it.
	DefaultIdleTimeout = time.Minute
	// DefaultMaxPartitions bounds the limiters a Partitioned holds at
	// once (about 1 KB each), so keys chosen by clients cannot grow it
	// without end.
	DefaultMaxPartitions = 100_000
)

// MaxPartitionKey is the longest partition key a Partitioned accepts, in
// bytes: keys chosen by clients (an API key, a header) must not make each
// limiter it holds arbitrarily large.
const MaxPartitionKey = 1024

// ErrTooManyPartitions: a Partitioned holds MaxPartitions limiters and
// every one of a sample of them has a call under way. Nothing was sent.
var ErrTooManyPartitions = errors.New("ratelimit: too many partitions")

// PartitionedOptions configure a Partitioned.
type PartitionedOptions struct {
	// New makes the limiter of a partition the first time the partition
	// is used (e.g. a TokenBucket whose key includes the partition). It
	// is called with the Partitioned's lock held: keep it quick and do not
	// call the Partitioned from it. Required.
	New func(partition string) (*Limiter, error)
	// IdleTimeout: a partition's limiter idle this long (see
	// Limiter.IdleDuration) is closed and forgotten; its state stays in
	// Redis. 0 means DefaultIdleTimeout.
	IdleTimeout time.Duration
	// MaxPartitions bounds the limiters held at once. A new partition
	// past it replaces the longest-idle of a sample of limiters (its count
	// stays in Redis); only when the sample is all busy is the call refused
	// with ErrTooManyPartitions. 0 means DefaultMaxPartitions.
	MaxPartitions int
}

// Partitioned is a family of limiters, one per partition key (a tenant, a
// client address, an API route), made on first use and closed once idle.
// Safe for concurrent use. It starts no goroutines: idle limiters are
// swept during calls.
type Partitioned struct {
	newFn   func(string) (*Limiter, error)
	idle    time.Duration
	maxN    int
	mu      sync.Mutex
	m       map[string]*Limiter
	swept   time.Time
	closed  bool
	clock   func() time.Time
	retired Statistics // counts of limiters already closed
}

// NewPartitioned returns an empty Partitioned. Errors wrap
// primitives.ErrInvalidOptions.
func NewPartitioned(o PartitionedOptions) (*Partitioned, error) {
	if o.New == nil {
		return nil, fmt.Errorf("%w: ratelimit: PartitionedOptions.New is nil", primitives.ErrInvalidOptions)
	}
	if o.IdleTimeout < 0 || o.MaxPartitions < 0 {
		return nil, fmt.Errorf("%w: ratelimit: PartitionedOptions IdleTimeout %v and MaxPartitions %d must not be negative", primitives.ErrInvalidOptions, o.IdleTimeout, o.MaxPartitions)
	}
	p := &Partitioned{newFn: o.New, idle: o.IdleTimeout, maxN: o.MaxPartitions, m: make(map[string]*Limiter), clock: time.Now}
	if p.idle == 0 {
		p.idle = DefaultIdleTimeout
	}
	if p.maxN == 0 {
		p.maxN = DefaultMaxPartitions
	}
	p.swept = p.clock()
	return p, nil
}

// TryAcquire is Limiter.TryAcquire on the partition's limiter.
// Errors also: ErrTooManyPartitions, those of PartitionedOptions.New,
// primitives.ErrClosed once the Partitioned is closed.
func (p *Partitioned) TryAcquire(ctx context.Context, partition string, n int64) (Result, error) {
	return p.run(ctx, partition, n, (*Limiter).tryAcquire)
}

// run finds the partition's limiter, marked under way, and runs decide
// on it.
func (p *Partitioned) run(ctx context.Context, partition string, n int64, decide func(*Limiter, context.Context, int64, bool) (Result, error)) (Result, error) {
	l, never, err := p.begin(ctx, partition, n)
	if err != nil {
		return Result{}, err
	}
	defer l.end()
	return decide(l, ctx, n, never)
}

// Acquire is Limiter.Acquire on the partition's limiter (queueing in it).
// Errors as TryAcquire.
func (p *Partitioned) Acquire(ctx context.Context, partition string, n int64) (Result, error) {
	return p.run(ctx, partition, n, (*Limiter).acquire)
}

// begin finds or makes the partition's limiter and marks a call under way
// on it while p.mu is held, so a sweep cannot close it under the call.
func (p *Partitioned) begin(ctx context.Context, partition string, n int64) (*Limiter, bool, error) {
	if p == nil || p.newFn == nil {
		return nil, false, fmt.Errorf("%w: ratelimit: nil or zero Partitioned (use NewPartitioned)", primitives.ErrInvalidOptions)
	}
	// Bad arguments fail before a partition is made or one is evicted.
	if err := checkArgs(ctx, n); err != nil {
		return nil, false, err
	}
	if len(partition) > MaxPartitionKey {
		return nil, false, fmt.Errorf("%w: ratelimit: partition key of %d bytes is longer than MaxPartitionKey (%d)", primitives.ErrInvalidKey, len(partition), MaxPartitionKey)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, false, fmt.Errorf("%w: ratelimit: partitioned limiter was closed", primitives.ErrClosed)
	}
	now := p.clock()
	if now.Sub(p.swept) >= p.idle/2 {
		p.sweep(now)
	}
	l := p.m[partition]
	if l == nil {
		if len(p.m) >= p.maxN && !p.evict() {
			return nil, false, fmt.Errorf("%w: %d limiters are in use (PartitionedOptions.MaxPartitions)", ErrTooManyPartitions, len(p.m))
		}
		var err error
		if l, err = p.newFn(partition); err != nil {
			return nil, false, err
		}
		if l == nil {
			return nil, false, fmt.Errorf("%w: ratelimit: PartitionedOptions.New returned no limiter for %q", primitives.ErrInvalidOptions, partition)
		}
		p.m[partition] = l
	}
	never, err := l.checkCall(ctx, n)
	if err != nil {
		return nil, false, err
	}
	if err := l.begin(); err != nil {
		return nil, false, err
	}
	return l, never, nil
}

// evictSample is how many limiters evict looks at: enough to find an idle
// one among many busy ones, few enough that a flood of new partitions
// costs O(1) each.
const evictSample = 32

// evict makes room for one limiter: it closes the longest-idle of a
// sample of limiters (map order is random), idle for however short a
// time. Their counts stay in Redis, so nothing is granted twice; only
// this process forgets them. False when the whole sample is busy. p.mu
// held.
func (p *Partitioned) evict() bool {
	var (
		victim string
		most   time.Duration = -1
		seen   int
	)
	for k, l := range p.m {
		if d, idle := l.IdleDuration(); idle && d > most {
			victim, most = k, d
		}
		if seen++; seen == evictSample {
			break
		}
	}
	if most < 0 {
		return false
	}
	p.retire(p.m[victim])
	delete(p.m, victim)
	return true
}

// sweep closes the limiters idle for at least the idle timeout. p.mu held.
func (p *Partitioned) sweep(now time.Time) {
	p.swept = now
	for k, l := range p.m {
		if d, idle := l.IdleDuration(); idle && d >= p.idle {
			p.retire(l)
			delete(p.m, k)
		}
	}
}

// retire closes l and keeps its counts. p.mu held.
func (p *Partitioned) retire(l *Limiter) {
	l.Close()
	s := l.Statistics()
	p.retired.Granted += s.Granted
	p.retired.Rejected += s.Rejected
}

// Len returns the number of limiters held now.
func (p *Partitioned) Len() int {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.m)
}

// Statistics sums the statistics of every partition: Granted and Rejected
// since the Partitioned was made (closed limiters included), Queued and
// Available over the limiters held now.
func (p *Partitioned) Statistics() Statistics {
	if p == nil {
		return Statistics{}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.retired
	s.Available, s.Queued = 0, 0
	for _, l := range p.m {
		ls := l.Statistics()
		s.Available += ls.Available
		s.Queued += ls.Queued
		s.Granted += ls.Granted
		s.Rejected += ls.Rejected
	}
	return s
}

// Close closes every limiter (queued calls end with primitives.ErrClosed)
// and refuses later calls. Idempotent.
func (p *Partitioned) Close() error {
	if p == nil {
		return fmt.Errorf("%w: ratelimit: nil Partitioned", primitives.ErrInvalidOptions)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	for k, l := range p.m {
		p.retire(l)
		delete(p.m, k)
	}
	return nil
}
