package host

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/coordhost/coordhost/config"
	"github.com/coordhost/coordhost/policies"
	"github.com/coordhost/coordhost/primitives/redlock"
	"github.com/hashicorp/hcl/v2"
	"github.com/redis/rueidis"
)

// ErrNoRedlock means the configuration in use has no redlock of that name
// (a reload may have removed it).
var ErrNoRedlock = errors.New("host: no such redlock")

// Redlock is a configured redlock, by name: a lock held on a majority of
// the independent servers its block lists, each reached by a client the
// Host builds for it (never the redis block's client). Every call uses
// the configuration in use at that moment, as Lock does. Safe for
// concurrent use.
type Redlock struct {
	h    *Host
	name string
}

// namedRedlock is one generation's instance of a configured redlock.
type namedRedlock = named[*config.Redlock, *redlockNodes]

// redlockNodes is one generation's Group of a configured redlock. Its node
// clients belong to the Host (nodeClients), not to the generation: a lock
// granted before a reload still renews and releases through them after
// it.
type redlockNodes struct {
	*redlock.Group
}

// nodeClients are a Host's redlock node clients, by address and the
// options that reach it; generations share them. Closed at Shutdown.
type nodeClients struct {
	mu     sync.Mutex
	m      map[string]rueidis.Client
	closed bool
}

// get returns the client for o (built on first use). A client whose first
// dial failed is kept (it reconnects); the error is returned with it.
func (n *nodeClients) get(o rueidis.ClientOption, id string) (rueidis.Client, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, ErrClosed
	}
	if c := n.m[id]; c != nil {
		return c, nil
	}
	c, err := rueidis.NewClient(o)
	if c == nil {
		return nil, err
	}
	if n.m == nil {
		n.m = map[string]rueidis.Client{}
	}
	n.m[id] = c
	return c, err
}

// clients returns the clients built so far.
func (n *nodeClients) clients() []rueidis.Client {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]rueidis.Client, 0, len(n.m))
	for _, c := range n.m {
		out = append(out, c)
	}
	return out
}

// close closes every client. Idempotent.
func (n *nodeClients) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.closed = true
	for id, c := range n.m {
		c.Close()
		delete(n.m, id)
	}
}

func (r *Redlock) lookup(g *generation) *namedRedlock { return g.redlocks[r.name] }

// Redlock returns the configured redlock name. The returned Redlock
// follows reloads; it fails with ErrNoRedlock if the configuration in use
// has no such redlock.
func (h *Host) Redlock(name string) (*Redlock, error) {
	if h.closed.Load() {
		return nil, ErrClosed
	}
	g := h.gen.Load()
	if g.redlocks[name] == nil {
		return nil, fmt.Errorf("%w: no redlock %q in %s", ErrNoRedlock, name, g.cfg.Path)
	}
	return &Redlock{h: h, name: name}, nil
}

// Name returns the configured name.
func (r *Redlock) Name() string { return r.name }

// TTL returns the configured lease of the configuration in use, or 0 if it
// no longer has this redlock.
func (r *Redlock) TTL() time.Duration {
	if n := current(r.h, r.lookup); n != nil {
		return n.cfg.TTL
	}
	return 0
}

// Key returns the key (below the redlock's prefix) for attrs: the name, or
// name "/" partition key when a partition policy is configured. A
// partition failure, or an empty key, fails closed with an error wrapping
// policies.ErrPartition.
func (r *Redlock) Key(ctx context.Context, attrs map[string]string) (string, error) {
	n := current(r.h, r.lookup)
	if n == nil {
		return "", fmt.Errorf("%w: %q", ErrNoRedlock, r.name)
	}
	return n.key(ctx, attrs)
}

// Acquire waits for the redlock for the configured TTL, consulting the
// configured retry policy between attempts.
func (r *Redlock) Acquire(ctx context.Context, attrs map[string]string) (*redlock.Lock, error) {
	got, _, err := r.observe(ctx, attrs, true, 0, (*redlock.Group).Acquire)
	return got, err
}

// TryAcquire makes one attempt.
func (r *Redlock) TryAcquire(ctx context.Context, attrs map[string]string) (*redlock.Lock, error) {
	got, _, err := r.observe(ctx, attrs, false, 0, (*redlock.Group).TryAcquire)
	return got, err
}

// observe runs one acquisition for ttl (0: the configured TTL) and
// returns the lock and its key (below the prefix). It is counted once,
// across the generations it may move through
// (coordhost_redlock_acquisitions_total,
// coordhost_redlock_wait_duration_seconds).
func (r *Redlock) observe(ctx context.Context, attrs map[string]string, waits bool, ttl time.Duration,
	fn func(*redlock.Group, context.Context, string, time.Duration) (*redlock.Lock, error)) (*redlock.Lock, string, error) {
	start := time.Now()
	var key string
	got, err := withNamed(r.h, "redlock", r.name, ErrNoRedlock, r.lookup, func(n *namedRedlock) (*redlock.Lock, error) {
		var err error
		if key, err = n.key(ctx, attrs); err != nil {
			return nil, err
		}
		return fn(n.prim.Group, ctx, key, cmp.Or(ttl, n.cfg.TTL))
	})
	r.h.metrics.redlock.observeAcquire(ctx, r.name, waits, time.Since(start), err)
	return got, key, err
}

// newRedlock builds a configured redlock: a client per node address (with
// the redis block's credentials and TLS unless the block names its own
// credentials) and the Group on them. A node that cannot be reached now
// is logged and kept: its client reconnects, and Redlock tolerates a
// minority of nodes down.
func (g *generation) newRedlock(h *Host, rc *config.Redlock) (*namedRedlock, error) {
	opts := redlock.Options{
		Prefix:      h.keyPfx + rc.Prefix,
		NodeTimeout: rc.NodeTimeout,
		Drift:       rc.Drift,
		DriftFactor: rc.DriftFactor,
		MaxTTL:      rc.MaxTTL,
		Observer:    h.metrics.redlock.observer(rc.Name, len(rc.Addresses)),
	}
	var part policies.PartitionPolicy
	if lp, err := g.policy(rc.Retry); err != nil {
		return nil, fmt.Errorf("redlock %q: %w", rc.Name, err)
	} else if lp != nil {
		opts.Retry = lp.retry
	}
	if lp, err := g.policy(rc.Partition); err != nil {
		return nil, fmt.Errorf("redlock %q: %w", rc.Name, err)
	} else if lp != nil {
		part = lp.partition
	}
	clients := make([]rueidis.Client, len(rc.Addresses))
	for i, addr := range rc.Addresses {
		o, id, err := redlockClientOption(g.cfg.Redis, rc, addr)
		if err != nil {
			return nil, fmt.Errorf("redlock %q node %d: %w", rc.Name, i, err)
		}
		c, err := h.nodes.get(o, id)
		if c == nil {
			return nil, fmt.Errorf("redlock %q node %d (%s): %w", rc.Name, i, addr, err)
		}
		if err != nil {
			h.log.Warn("redlock node unreachable; its client keeps trying", "redlock", rc.Name, "node", i, "address", addr, "error", err)
		}
		clients[i] = c
	}
	grp, err := redlock.New(clients, opts)
	if err != nil {
		return nil, fmt.Errorf("redlock %q: %w", rc.Name, err)
	}
	nodes := &redlockNodes{Group: grp}
	return &namedRedlock{kind: "redlock", name: rc.Name, cfg: rc, prim: nodes, partition: part}, nil
}

// redlockClientOption is the client of one node: a single server (no
// cluster discovery), kept even when the first dial fails; id names the
// address and every option that reaches it, for nodeClients.
func redlockClientOption(r *config.Redis, rc *config.Redlock, addr string) (rueidis.ClientOption, string, error) {
	base := &config.Redis{Addresses: []string{addr}, ClientCache: true}
	if r != nil {
		base.Username, base.Password, base.ClientCache, base.TLS = r.Username, r.Password, r.ClientCache, r.TLS
	}
	if rc.Username != "" || rc.Password != "" {
		base.Username, base.Password = rc.Username, rc.Password
	}
	if strings.HasPrefix(addr, "/") {
		base.TLS = nil // a unix socket is not dialled with TLS
	}
	id := fmt.Sprintf("%q %q %q %v", addr, base.Username, base.Password, base.ClientCache)
	if base.TLS != nil {
		t := *base.TLS
		t.Range = hcl.Range{}
		id += fmt.Sprintf(" %+v", t)
	}
	o, err := clientOption(base)
	o.ForceSingleClient = true
	return o, id, err
}
