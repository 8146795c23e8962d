package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coordhost/coordhost/config"
	"github.com/coordhost/coordhost/primitives/latch"
)

// ErrNoLatch means the configuration in use has no latch of that name (a
// reload may have removed it).
var ErrNoLatch = errors.New("host: no such latch")

// Latch is a configured countdown latch, by name: a family of latches,
// one per key (the name, or name "/" partition key when the latch block
// names a partition policy). Every call uses the configuration in use at
// that moment, and the calls that take a generation address one
// generation of one latch by value, so they work across processes and
// across reloads: a Wait blocked when a reload happens moves to the new
// configuration's Latches (if the reload changed the latch's prefix, the
// generation is looked for under the new one, and is not found there).
//
// The retry policy of the block retries reads (Join, Count and a waiter's
// re-reads) after transient errors; writes (Create, Reset, CountDown,
// Delete) are never retried, since a retried write can take effect twice
// (package latch). Safe for concurrent use.
type Latch struct {
	h    *Host
	name string
}

// namedLatch is one generation's instance of a configured latch.
type namedLatch = named[*config.Latch, *latch.Latches]

func (l *Latch) lookup(g *generation) *namedLatch { return g.latches[l.name] }

// Latch returns the configured latch name. The returned Latch follows
// reloads; it fails with ErrNoLatch if the configuration in use has no
// such latch.
func (h *Host) Latch(name string) (*Latch, error) {
	if h.closed.Load() {
		return nil, ErrClosed
	}
	g := h.gen.Load()
	if g.latches[name] == nil {
		return nil, fmt.Errorf("%w: no latch %q in %s", ErrNoLatch, name, g.cfg.Path)
	}
	return &Latch{h: h, name: name}, nil
}

// Name returns the configured name.
func (l *Latch) Name() string { return l.name }

// Key returns the key (below the latch's prefix) for attrs: the latch's
// name, or name "/" partition key when a partition policy is configured.
// A partition failure, or an empty key, fails closed with an error
// wrapping policies.ErrPartition.
func (l *Latch) Key(ctx context.Context, attrs map[string]string) (string, error) {
	n := current(l.h, l.lookup)
	if n == nil {
		return "", fmt.Errorf("%w: %q", ErrNoLatch, l.name)
	}
	return n.key(ctx, attrs)
}

// Create starts the latch for attrs with count (latch.Latches.Create: it
// fails with latch.ErrExists where a latch is).
func (l *Latch) Create(ctx context.Context, attrs map[string]string, count int64) (*latch.Latch, error) {
	got, _, err := l.set(ctx, attrs, opCreate, count, (*latch.Latches).Create)
	return got, err
}

// Reset starts a new generation of the latch for attrs with count,
// replacing any (latch.Latches.Reset).
func (l *Latch) Reset(ctx context.Context, attrs map[string]string, count int64) (*latch.Latch, error) {
	got, _, err := l.set(ctx, attrs, opReset, count, (*latch.Latches).Reset)
	return got, err
}

// set runs a Create or Reset; ttl is the lifetime the write gave the key,
// as the configuration it ran in says (latch.NoExpiry for none).
func (l *Latch) set(ctx context.Context, attrs map[string]string, op latchOp, count int64,
	fn func(*latch.Latches, context.Context, string, int64) (*latch.Latch, error)) (_ *latch.Latch, ttl time.Duration, _ error) {
	got, err := withNamed(l.h, "latch", l.name, ErrNoLatch, l.lookup, func(n *namedLatch) (*latch.Latch, error) {
		key, err := n.key(ctx, attrs)
		if err != nil {
			return nil, err
		}
		switch ttl = n.cfg.TTL; ttl {
		case 0:
			ttl = latch.DefaultTTL
		case config.LatchNoExpiry:
			ttl = latch.NoExpiry
		}
		return fn(n.prim, ctx, key, count)
	})
	l.h.metrics.latch.observe(ctx, l.name, op, 0, err)
	return got, ttl, err
}

// Join returns the current generation of the latch for attrs
// (latch.Latches.Join: latch.ErrNotFound when there is none).
func (l *Latch) Join(ctx context.Context, attrs map[string]string) (*latch.Latch, error) {
	got, err := withNamed(l.h, "latch", l.name, ErrNoLatch, l.lookup, func(n *namedLatch) (*latch.Latch, error) {
		key, err := n.key(ctx, attrs)
		if err != nil {
			return nil, err
		}
		return n.prim.Join(ctx, key)
	})
	l.h.metrics.latch.observe(ctx, l.name, opJoin, 0, err)
	return got, err
}

// CountDown counts down generation of the latch for attrs
// (latch.Latch.CountDown: the remaining count, -1 when the generation is
// not current, latch.ErrCompleted when its count is already zero).
func (l *Latch) CountDown(ctx context.Context, attrs map[string]string, generation string) (int64, error) {
	n, err := onGeneration(l, ctx, attrs, generation, (*latch.Latch).CountDown)
	l.h.metrics.latch.observe(ctx, l.name, opCountDown, n, err)
	return n, err
}

// Count returns the count of generation of the latch for attrs
// (latch.Latch.Count: 0 once complete, -1 when not current and not known
// to have completed).
func (l *Latch) Count(ctx context.Context, attrs map[string]string, generation string) (int64, error) {
	n, err := onGeneration(l, ctx, attrs, generation, (*latch.Latch).Count)
	l.h.metrics.latch.observe(ctx, l.name, opCount, n, err)
	return n, err
}

// Wait waits until generation of the latch for attrs completes (true) or
// is replaced, deleted or expired (false), as latch.Latch.Wait, until ctx
// ends or the Host shuts down. A reload does not end it: it carries on in
// the new configuration.
func (l *Latch) Wait(ctx context.Context, attrs map[string]string, generation string) (bool, error) {
	start := time.Now()
	ok, err := onGeneration(l, ctx, attrs, generation, (*latch.Latch).Wait)
	l.h.metrics.latch.observeWait(ctx, l.name, ok, time.Since(start), err)
	return ok, err
}

// ErrLatchChanged means that a call on whatever generation a latch holds
// (Delete with no generation; LatchService's Join and Count read the
// current generation the same way) found that generation replaced before
// it could act on it, every time it tried: the latch is being reset
// faster than the call could catch up. Nothing was deleted; try again.
var ErrLatchChanged = errors.New("host: the latch changed under every attempt")

// latchAttempts bounds the read-then-write rounds of a call on whatever
// generation a latch holds.
const latchAttempts = 8

// Delete deletes the latch for attrs and wakes its waiters (they return
// false), and reports whether it deleted. With a generation, only while
// that generation is the latch's (latch.Latch.Delete); with "", whatever
// generation is there: it joins the latch and deletes the generation it
// found, again when another replaced it in between (then ErrLatchChanged
// after 8 rounds). No latch there: false, no error. Never retried: when
// the reply is lost the error matches primitives.ErrUncertain. Other
// errors as for Join.
func (l *Latch) Delete(ctx context.Context, attrs map[string]string, generation string) (bool, error) {
	var ok bool
	var err error
	if generation != "" {
		ok, err = onGeneration(l, ctx, attrs, generation, (*latch.Latch).Delete)
	} else {
		ok, err = withNamed(l.h, "latch", l.name, ErrNoLatch, l.lookup, func(n *namedLatch) (bool, error) {
			key, err := n.key(ctx, attrs)
			if err != nil {
				return false, err
			}
			for range latchAttempts {
				h, err := n.prim.Join(ctx, key)
				if errors.Is(err, latch.ErrNotFound) {
					return false, nil
				}
				if err != nil {
					return false, err
				}
				if ok, err := h.Delete(ctx); ok || err != nil {
					return ok, err
				}
			}
			return false, fmt.Errorf("%w: latch %q", ErrLatchChanged, key)
		})
	}
	n := int64(-1)
	if ok {
		n = 1
	}
	l.h.metrics.latch.observe(ctx, l.name, opDelete, n, err)
	return ok, err
}

// onGeneration runs fn on a handle for generation of the latch for attrs,
// in the configuration in use (and in the next one, when a reload closes
// this one's Latches under it).
func onGeneration[T any](l *Latch, ctx context.Context, attrs map[string]string, generation string,
	fn func(*latch.Latch, context.Context) (T, error)) (T, error) {
	return withNamed(l.h, "latch", l.name, ErrNoLatch, l.lookup, func(n *namedLatch) (T, error) {
		var zero T
		key, err := n.key(ctx, attrs)
		if err != nil {
			return zero, err
		}
		h, err := n.prim.Attach(key, generation)
		if err != nil {
			return zero, err
		}
		return fn(h, ctx)
	})
}

// newLatch builds one generation's Latches for the latch block lc.
func (g *generation) newLatch(h *Host, lc *config.Latch) (*namedLatch, error) {
	opts := latch.Options{Prefix: h.keyPfx + lc.Prefix, TTL: lc.TTL, RecheckInterval: lc.Recheck, Waiter: g.waiter}
	lp, err := g.policy(lc.Retry)
	if err != nil {
		return nil, fmt.Errorf("latch %q: %w", lc.Name, err)
	}
	if lp != nil {
		opts.Retry = lp.retry
	}
	n := &namedLatch{kind: "latch", name: lc.Name, cfg: lc}
	if lp, err := g.policy(lc.Partition); err != nil {
		return nil, fmt.Errorf("latch %q: %w", lc.Name, err)
	} else if lp != nil {
		n.partition = lp.partition
	}
	if n.prim, err = latch.New(h.client, opts); err != nil {
		return nil, fmt.Errorf("latch %q: %w", lc.Name, err)
	}
	h.metrics.latch.declare(lc.Name)
	return n, nil
}
