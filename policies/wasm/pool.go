package wasm

import (
	"context"
	"log/slog"
	"sync/atomic"
)

// pool holds a Module's instances: idle ones, and one token per instance
// that may still be created, so that at most cap(tokens) exist at once.
// live + len(tokens) == cap(tokens) at rest. Whoever holds an instance
// hands it back with release (healthy) or discard (after a failure). Safe
// for concurrent use.
type pool struct {
	idle   chan *instance
	tokens chan struct{}
	done   chan struct{} // closed by close
	closed atomic.Bool

	// create makes an instance for a caller that holds a token (bounded by
	// ctx); destroy closes an instance, whose token the pool then returns.
	create  func(ctx context.Context) (*instance, error)
	destroy func(*instance)
	logger  *slog.Logger
}

// newPool returns an empty pool of at most n instances.
func newPool(n int, create func(context.Context) (*instance, error), destroy func(*instance), logger *slog.Logger) *pool {
	p := &pool{
		idle:    make(chan *instance, n),
		tokens:  make(chan struct{}, n),
		done:    make(chan struct{}),
		create:  create,
		destroy: destroy,
		logger:  logger,
	}
	for range n {
		p.tokens <- struct{}{}
	}
	return p
}

// size returns the most instances that may exist at once.
func (p *pool) size() int { return cap(p.tokens) }

// fill creates one instance and leaves it idle, for the first call. It
// needs a free slot; a failure is returned, not logged.
func (p *pool) fill(ctx context.Context) error {
	<-p.tokens
	in, err := p.create(ctx)
	if err != nil {
		p.tokens <- struct{}{}
		return err
	}
	p.release(in)
	return nil
}

// acquire takes an idle instance, or creates one if the pool has room, or
// waits for one until ctx ends (then it returns ctx's error).
func (p *pool) acquire(ctx context.Context) (*instance, error) {
	select {
	case in := <-p.idle:
		return in, nil
	default:
	}
	select {
	case in := <-p.idle:
		return in, nil
	case <-p.tokens:
		if p.closed.Load() {
			p.tokens <- struct{}{}
			return nil, ErrClosed
		}
		in, err := p.create(ctx)
		if err != nil {
			p.tokens <- struct{}{}
			if ctx.Err() != nil {
				return nil, ctx.Err() // the caller gave up; no fault of the module
			}
			p.logger.Warn("wasm policy: cannot create an instance", slog.Any("error", err))
			return nil, err
		}
		return in, nil
	case <-p.done:
		return nil, ErrClosed
	case <-ctx.Done(): // nil (never ready) for a context that cannot end
		return nil, ctx.Err()
	}
}

// release returns a healthy instance to the pool.
func (p *pool) release(in *instance) {
	if p.closed.Load() {
		p.discard(in)
		return
	}
	p.idle <- in // never blocks: at most cap(idle) instances exist
	if p.closed.Load() {
		p.drain()
	}
}

// discard closes an instance after a failure (or close) and frees its slot.
func (p *pool) discard(in *instance) {
	p.destroy(in)
	p.tokens <- struct{}{}
}

// drain discards the idle instances.
func (p *pool) drain() {
	for {
		select {
		case in := <-p.idle:
			p.discard(in)
		default:
			return
		}
	}
}

// close discards the idle instances, and those busy when they come back;
// acquire fails with ErrClosed from now on, also for callers waiting. It
// reports whether it closed the pool (false: it was closed already).
func (p *pool) close() bool {
	if !p.closed.CompareAndSwap(false, true) {
		return false
	}
	close(p.done)
	p.drain()
	return true
}
