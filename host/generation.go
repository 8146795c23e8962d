package host

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/coordhost/coordhost/config"
	"github.com/coordhost/coordhost/policies"
	"github.com/coordhost/coordhost/policies/wasm"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/lock"
	"github.com/coordhost/coordhost/primitives/ratelimit"
	"github.com/hashicorp/hcl/v2"
)

// selfTestTimeout bounds the self-test of one generation's policies.
const selfTestTimeout = 10 * time.Second

// generation is one loaded configuration: its policies and primitives.
type generation struct {
	cfg        *config.Config
	runtime    *wasm.Runtime
	policies   map[string]*loadedPolicy // "kind.name"
	locks      map[string]*namedLock
	latches    map[string]*namedLatch
	rwlocks    map[string]*namedRWLock
	semaphores map[string]*namedSemaphore
	leases     map[string]*namedLease
	redlocks   map[string]*namedRedlock
	rateLimits map[string]*namedRateLimit
	waiter     *primitives.Waiter  // the one waiting connection every primitive of the generation shares
	limiters   *ratelimit.Limiters // every rate limit's limiters, sharing the INCREX probe
	auth       *authTable          // the network API's tokens (auth.go)

	mu       sync.Mutex
	inflight int
	idle     chan struct{} // closed when inflight drops to 0 after retiring
	retiring bool
}

// build loads every policy and creates every named primitive; on error it
// closes what it had started.
func (h *Host) build(ctx context.Context, cfg *config.Config) (_ *generation, err error) {
	g := &generation{cfg: cfg, policies: map[string]*loadedPolicy{}, locks: map[string]*namedLock{}, latches: map[string]*namedLatch{}, rwlocks: map[string]*namedRWLock{}, semaphores: map[string]*namedSemaphore{}, leases: map[string]*namedLease{}, redlocks: map[string]*namedRedlock{}, rateLimits: map[string]*namedRateLimit{}}
	g.auth = newAuthTable(cfg.Server)
	defer func() {
		if err != nil {
			g.close(context.WithoutCancel(ctx))
		}
	}()
	for _, p := range cfg.Policies {
		if p.Driver == config.DriverWasm && g.runtime == nil {
			dir := h.opts.WasmCacheDir
			if dir == "" {
				dir = defaultWasmCacheDir()
			}
			// The runtime allows what config allows; each module's
			// memory_pages limits it further.
			if g.runtime, err = wasm.NewRuntime(ctx, wasm.RuntimeOptions{CacheDir: dir, Logger: h.log, MemoryLimitPages: wasm.MaxMemoryLimitPages}); err != nil {
				return nil, fmt.Errorf("wasm runtime: %w", err)
			}
		}
		lp, err := loadPolicy(ctx, p, g.runtime, h.metrics, h.log)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", at(p.Range), err)
		}
		g.policies[string(p.Kind)+"."+p.Name] = lp
	}
	stctx, cancel := context.WithTimeout(ctx, selfTestTimeout)
	defer cancel()
	for name, lp := range g.policies {
		if err := lp.selfTest(stctx); err != nil {
			return nil, fmt.Errorf("%s: policy %s: self-test: %w", at(lp.cfg.Range), name, err)
		}
	}
	if g.waiter, err = primitives.NewWaiter(h.client, primitives.WaiterOptions{}); err != nil {
		return nil, err
	}
	for _, lc := range cfg.Locks {
		l, err := g.newLock(h, lc)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", at(lc.Range), err)
		}
		g.locks[lc.Name] = l
	}
	for _, lc := range cfg.Latches {
		l, err := g.newLatch(h, lc)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", at(lc.Range), err)
		}
		g.latches[lc.Name] = l
	}
	for _, rc := range cfg.RWLocks {
		l, err := g.newRWLock(h, rc)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", at(rc.Range), err)
		}
		g.rwlocks[rc.Name] = l
	}
	for _, sc := range cfg.Semaphores {
		l, err := g.newSemaphore(h, sc)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", at(sc.Range), err)
		}
		g.semaphores[sc.Name] = l
	}
	for _, lc := range cfg.Leases {
		l, err := g.newLease(h, lc)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", at(lc.Range), err)
		}
		g.leases[lc.Name] = l
	}
	for _, rc := range cfg.Redlocks {
		r, err := g.newRedlock(h, rc)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", at(rc.Range), err)
		}
		g.redlocks[rc.Name] = r
	}
	if g.limiters, err = ratelimit.New(h.client, ratelimit.Options{Prefix: h.keyPfx + config.RateLimitPrefix}); err != nil {
		return nil, err
	}
	for _, rc := range cfg.RateLimits {
		r, err := g.newRateLimit(h, rc)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", at(rc.Range), err)
		}
		g.rateLimits[rc.Name] = r
	}
	return g, nil
}

func (g *generation) policy(ref *config.PolicyRef) (*loadedPolicy, error) {
	if ref == nil {
		return nil, nil
	}
	lp := g.policies[string(ref.Kind)+"."+ref.Name]
	if lp == nil {
		return nil, fmt.Errorf("%w: %s", errNoPolicy, ref)
	}
	return lp, nil
}

func (g *generation) newLock(h *Host, lc *config.Lock) (*namedLock, error) {
	opts := lock.Options{Prefix: h.keyPfx + lc.Prefix, Fencing: lc.Fencing, FIFO: lc.FIFO, Observer: h.metrics.lockObserver(lc.Name),
		Replicas: lc.Replicas, ReplicaTimeout: lc.ReplicaTimeout}
	var part policies.PartitionPolicy
	if lp, err := g.policy(lc.Retry); err != nil {
		return nil, fmt.Errorf("lock %q: %w", lc.Name, err)
	} else if lp != nil {
		opts.Retry = lp.retry
	}
	if lp, err := g.policy(lc.Partition); err != nil {
		return nil, fmt.Errorf("lock %q: %w", lc.Name, err)
	} else if lp != nil {
		part = lp.partition
	}
	opts.Waiter = g.waiter
	lk, err := lock.New(h.client, opts)
	if err != nil {
		return nil, fmt.Errorf("lock %q: %w", lc.Name, err)
	}
	return &namedLock{kind: "lock", name: lc.Name, cfg: lc, prim: lk, partition: part}, nil
}

// enter counts an in-flight call; false once the generation is retiring.
func (g *generation) enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.retiring {
		return false
	}
	g.inflight++
	return true
}

func (g *generation) exit() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.inflight--
	if g.inflight == 0 && g.retiring && g.idle != nil {
		close(g.idle)
		g.idle = nil
	}
}

// drain stops new calls and waits for in-flight ones, bounded by ctx.
func (g *generation) drain(ctx context.Context) error {
	g.mu.Lock()
	g.retiring = true
	if g.inflight == 0 {
		g.mu.Unlock()
		return nil
	}
	idle := make(chan struct{})
	g.idle = idle
	g.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%d acquisitions still in flight: %w", g.inflightCount(), ctx.Err())
	}
}

func (g *generation) inflightCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.inflight
}

// closeLockers stops the primitives: their blocked waiters return
// ErrClosed (and a host.Lock moves them to the current generation).
func (g *generation) closeLockers() {
	for _, l := range g.locks {
		l.prim.Close()
	}
	for _, l := range g.latches {
		l.prim.Close()
	}
	for _, l := range g.rwlocks {
		l.prim.Close()
	}
	for _, l := range g.semaphores {
		l.prim.Close()
	}
	for _, l := range g.leases {
		l.prim.Close()
	}
	for _, r := range g.redlocks {
		r.prim.Close()
	}
	for _, r := range g.rateLimits {
		r.prim.Close()
	}
	if g.waiter != nil {
		g.waiter.Close()
	}
}

// close stops the primitives, then the policies and the wasm runtime.
func (g *generation) close(ctx context.Context) {
	g.closeLockers()
	var errs []error
	for _, lp := range g.policies {
		errs = append(errs, lp.close(ctx))
	}
	if g.runtime != nil {
		errs = append(errs, g.runtime.Close(ctx))
	}
	_ = errors.Join(errs...)
}

// at formats a configuration position as file:line for errors.
func at(r hcl.Range) string {
	if r.Filename == "" {
		return "config"
	}
	return fmt.Sprintf("%s:%d", r.Filename, r.Start.Line)
}
