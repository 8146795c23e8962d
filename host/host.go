// Package host builds a running coordhost from a configuration: the Redis
// client, the policies (builtin, WASM, go-plugin) and the named primitives
// that consult them. It reloads the whole set atomically, and serves the
// operational endpoints (/livez, /readyz, /metrics).
//
// Within this module only cmd/coordhost imports host. Programs embed it to
// get named primitives from HCL (see the package example), or use the
// primitives directly.
package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordhost/coordhost/config"
	"github.com/coordhost/coordhost/host/devredis"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/rueidis"
)

// DefaultDrainTimeout bounds how long a replaced generation waits for its
// in-flight acquisitions before it is closed.
const DefaultDrainTimeout = 30 * time.Second

// Options configure New. The zero value is valid.
type Options struct {
	// Client, if not nil, is used instead of building one from the redis
	// block; the Host never closes it.
	Client rueidis.Client
	// Logger receives the host's logs; nil means slog.Default().
	Logger *slog.Logger
	// Registry receives the metrics; nil means a new registry (see
	// Host.Registry).
	Registry *prometheus.Registry
	// WasmCacheDir is the on-disk compilation cache of WASM policies; ""
	// means <user cache dir>/coordhost/wasm.
	WasmCacheDir string
	// Load are the options for re-reading the configuration on Reload.
	Load config.LoadOptions
	// DrainTimeout bounds the drain of a replaced generation; 0 means
	// DefaultDrainTimeout.
	DrainTimeout time.Duration
	// SkipServerCheck skips the check of the server's settings at New
	// and after each Reload (ServerHazards, logged as warnings): for
	// short-lived commands that would repeat it on every run. The daemon
	// checks.
	SkipServerCheck bool
	// WaitHeartbeat is how often a LatchService.Wait stream repeats the
	// count while it waits, so that proxies and load balancers in front
	// of the daemon see traffic on a long wait; 0 means
	// DefaultWaitHeartbeat, and anything shorter than
	// MinWaitHeartbeat means MinWaitHeartbeat.
	WaitHeartbeat time.Duration
}

// Host is a running configuration. Safe for concurrent use.
type Host struct {
	opts    Options
	log     *slog.Logger
	metrics *metrics
	client  rueidis.Client
	own     bool             // the Host built client and closes it
	dev     *devredis.Server // dev mode server, or nil
	keyPfx  string

	reloadMu sync.Mutex
	hazards  []string        // the server hazards last found (servercheck.go); guarded by reloadMu
	life     context.Context // ends at Shutdown; bounds drains
	stop     context.CancelFunc
	gen      atomic.Pointer[generation]
	genNo    atomic.Int64
	closed   atomic.Bool
	draining atomic.Bool // Drain: the server in front stops; streams ending now are not client disconnects
	drains   sync.WaitGroup
	nodes    nodeClients  // redlock node clients, shared by generations (redlock.go)
	holds    holdSet      // the API's Hold and Wait streams served here (holds.go)
	streams  streamCounts // open API streams per token (auth.go)
}

// New builds a Host from cfg: the Redis client (or opts.Client; or, without
// a redis block, a private redis-server in dev mode), every policy, loaded
// and self-tested, and the named locks. On error nothing is left running.
func New(ctx context.Context, cfg *config.Config, opts Options) (_ *Host, err error) {
	if cfg == nil {
		return nil, errors.New("host: nil config")
	}
	h := &Host{opts: opts, log: opts.Logger}
	if h.log == nil {
		h.log = slog.Default()
	}
	if h.opts.DrainTimeout <= 0 {
		h.opts.DrainTimeout = DefaultDrainTimeout
	}
	if h.opts.WaitHeartbeat <= 0 {
		h.opts.WaitHeartbeat = DefaultWaitHeartbeat
	}
	h.opts.WaitHeartbeat = max(h.opts.WaitHeartbeat, MinWaitHeartbeat)
	reg := opts.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	if h.metrics, err = newMetrics(reg); err != nil {
		return nil, err
	}
	h.life, h.stop = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			h.stop()
			h.closeClient()
			h.nodes.close()
			h.metrics.unregister()
		}
	}()
	if err := h.connect(ctx, cfg); err != nil {
		return nil, err
	}
	g, err := h.build(ctx, cfg)
	if err != nil {
		return nil, err
	}
	h.warnServerHazards(ctx)
	h.gen.Store(g)
	h.metrics.gen.Set(float64(h.genNo.Add(1)))
	h.metrics.ratelimit.gauges.host.Store(h)
	return h, nil
}

// Client returns the Redis client the Host uses.
func (h *Host) Client() rueidis.Client { return h.client }

// Registry returns the Prometheus registry of the Host's metrics.
func (h *Host) Registry() *prometheus.Registry { return h.metrics.reg }

// DevRedis returns the socket of the dev-mode redis-server, or "".
func (h *Host) DevRedis() string {
	if h.dev == nil {
		return ""
	}
	return h.dev.Socket()
}

// Config returns the configuration in use.
func (h *Host) Config() *config.Config { return h.gen.Load().cfg }

// Generation returns the number of the configuration in use: 1 after New,
// one more per successful reload.
func (h *Host) Generation() int64 { return h.genNo.Load() }

// Lock returns the configured lock name. The returned Lock follows
// reloads (see Lock); it fails with ErrNoLock if the configuration in use
// has no such lock.
func (h *Host) Lock(name string) (*Lock, error) {
	if h.closed.Load() {
		return nil, ErrClosed
	}
	g := h.gen.Load()
	if g.locks[name] == nil {
		return nil, fmt.Errorf("%w: no lock %q in %s", ErrNoLock, name, g.cfg.Path)
	}
	return &Lock{h: h, name: name}, nil
}

// Ready reports whether Redis answers and the policies are loaded.
func (h *Host) Ready(ctx context.Context) error {
	if h.closed.Load() {
		return ErrClosed
	}
	if err := h.client.Do(ctx, h.client.B().Ping().Build()).Error(); err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	if h.gen.Load() == nil {
		return errors.New("policies not loaded")
	}
	return nil
}

// Shutdown stops taking new work, waits (bounded by ctx) for in-flight
// calls, then closes everything the Host started, including generations
// that reloads replaced, and returns only when they are closed.
func (h *Host) Shutdown(ctx context.Context) error {
	if !h.closed.CompareAndSwap(false, true) {
		return nil
	}
	h.stop() // cuts the drains of replaced generations short
	// Holds release their grants while the client is still open; a Hold
	// stuck sending to a client that reads nothing is not waited for past
	// ctx (its release then fails, and the grant expires with its TTL).
	h.Drain()
	holdsDone := make(chan struct{})
	go func() { h.holds.wg.Wait(); close(holdsDone) }()
	select {
	case <-holdsDone:
	default:
		select {
		case <-holdsDone:
		case <-ctx.Done():
			h.log.Warn("shutdown: Hold streams still sending; closing without their releases")
		}
	}
	h.reloadMu.Lock()
	defer h.reloadMu.Unlock()
	g := h.gen.Load()
	g.closeLockers() // blocked waiters return now
	err := g.drain(ctx)
	g.close(context.WithoutCancel(ctx))
	h.drains.Wait()
	h.closeClient()
	h.nodes.close()
	h.metrics.unregister()
	return err
}

// Close is Shutdown without waiting. Idempotent.
func (h *Host) Close() error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := h.Shutdown(ctx)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// Drain tells the Host that the server in front of it is stopping: from
// now on, a stream that ends is the server's doing, not its client's, so
// it ends no session (release_on_disconnect applies to clients that go
// away, not to a daemon that restarts). Hold streams end at once, with
// Unavailable, releasing their grants, and new ones are refused. Call it
// before shutting the server down; Shutdown implies it. Safe for
// concurrent use.
func (h *Host) Drain() {
	h.draining.Store(true)
	h.holds.drain()
}
