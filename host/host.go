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
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordhost/coordhost/config"
	"github.com/coordhost/coordhost/host/devredis"
	"github.com/hashicorp/hcl/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/rueidis"
)

// DefaultDrainTimeout bounds how long a replaced generation waits for its
// in-flight acquisitions before it is closed.
const DefaultDrainTimeout = 30 * time.Second

// ErrReload wraps a reload that failed; the previous generation stays.
var ErrReload = errors.New("host: reload failed, previous configuration kept")

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
	// (ServerHazards, logged as warnings): for short-lived commands that
	// would repeat it on every run. The daemon checks.
	SkipServerCheck bool
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
	life     context.Context // ends at Shutdown; bounds drains
	stop     context.CancelFunc
	gen      atomic.Pointer[generation]
	genNo    atomic.Int64
	closed   atomic.Bool
	drains   sync.WaitGroup
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
	return h, nil
}

// warnServerHazards logs every server setting that can break coordhost's
// guarantees (see ServerHazards). Dev mode's private server has no
// persistence by design and is not checked.
func (h *Host) warnServerHazards(ctx context.Context) {
	if h.dev != nil || h.opts.SkipServerCheck {
		return
	}
	hazards, err := ServerHazards(ctx, h.client)
	for _, hz := range hazards {
		h.log.Warn("redis setting weakens coordhost's guarantees", "hazard", hz)
	}
	if err != nil {
		h.log.Warn("could not check the redis settings coordhost relies on (appendonly, appendfsync, maxmemory-policy; see \"What the guarantees rest on\" in the package documentation of primitives/lock)", "err", err)
	}
}

// connect sets up the Redis client.
func (h *Host) connect(ctx context.Context, cfg *config.Config) error {
	if cfg.Redis != nil {
		h.keyPfx = cfg.Redis.KeyPrefix
	}
	if h.opts.Client != nil {
		h.client = h.opts.Client
		return nil
	}
	opt := rueidis.ClientOption{}
	if cfg.Redis == nil {
		d, err := devredis.Start(ctx, devredis.Options{})
		if err != nil {
			return err
		}
		h.dev = d
		h.log.Warn("dev mode: no redis block; started a private redis-server", "socket", d.Socket(), "pid", d.Pid())
		opt = UnixClientOption(d.Socket())
	} else {
		var err error
		if opt, err = clientOption(cfg.Redis); err != nil {
			return err
		}
	}
	c, err := rueidis.NewClient(opt)
	if err != nil {
		if h.dev != nil {
			h.dev.Stop()
		}
		return fmt.Errorf("host: connecting to Redis %v: %w", opt.InitAddress, err)
	}
	h.client, h.own = c, true
	return nil
}

// UnixClientOption returns rueidis options that dial the unix socket path
// (a single server: no cluster probe).
func UnixClientOption(path string) rueidis.ClientOption {
	return rueidis.ClientOption{
		InitAddress:       []string{path},
		ForceSingleClient: true,
		DialCtxFn: func(ctx context.Context, _ string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
			return d.DialContext(ctx, "unix", path)
		},
	}
}

func clientOption(r *config.Redis) (rueidis.ClientOption, error) {
	if len(r.Addresses) == 1 && strings.HasPrefix(r.Addresses[0], "/") {
		o := UnixClientOption(r.Addresses[0])
		o.Username, o.Password, o.DisableCache = r.Username, r.Password, !r.ClientCache
		return o, nil
	}
	o := rueidis.ClientOption{
		InitAddress: r.Addresses, Username: r.Username, Password: r.Password,
		DisableCache: !r.ClientCache,
	}
	if r.TLS != nil && r.TLS.Enabled {
		tc := &tls.Config{ServerName: r.TLS.ServerName, InsecureSkipVerify: r.TLS.InsecureSkipVerify, MinVersion: tls.VersionTLS12}
		if r.TLS.CAFile != "" {
			pem, err := os.ReadFile(r.TLS.CAFile)
			if err != nil {
				return o, fmt.Errorf("host: redis tls ca_file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return o, fmt.Errorf("host: redis tls ca_file %s holds no PEM certificate", r.TLS.CAFile)
			}
			tc.RootCAs = pool
		}
		if r.TLS.CertFile != "" {
			cert, err := tls.LoadX509KeyPair(r.TLS.CertFile, r.TLS.KeyFile)
			if err != nil {
				return o, fmt.Errorf("host: redis tls certificate: %w", err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		o.TLSConfig = tc
	}
	return o, nil
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

// Reload re-reads the configuration file, builds a whole new generation
// aside (policies loaded and self-tested, locks created), swaps it in
// atomically and drains the old one in the background. Any error keeps
// the old generation; parse errors come back as hcl.Diagnostics inside
// the error (see ReloadError).
func (h *Host) Reload(ctx context.Context) error {
	// Shutdown cuts a reload short instead of waiting for it (plugin
	// starts can take seconds).
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(h.life, cancel)()
	h.reloadMu.Lock()
	defer h.reloadMu.Unlock()
	if h.closed.Load() {
		return ErrClosed
	}
	old := h.gen.Load()
	cfg, diags := config.Load(old.cfg.Path, h.opts.Load)
	if diags.HasErrors() {
		h.metrics.reloads.WithLabelValues("error").Inc()
		return &ReloadError{Diags: diags, Files: cfg.Files()}
	}
	if what := redisChange(old.cfg.Redis, cfg.Redis); what != "" {
		h.metrics.reloads.WithLabelValues("error").Inc()
		return fmt.Errorf("%w: the redis block's %s changed; restart coordhost to apply it", ErrReload, what)
	}
	if what := serverChange(old.cfg.Server, cfg.Server); what != "" {
		h.log.Warn("reload does not apply server settings; restart coordhost to apply them", "changed", what)
	}
	g, err := h.build(ctx, cfg)
	if err != nil {
		h.metrics.reloads.WithLabelValues("error").Inc()
		return fmt.Errorf("%w: %w", ErrReload, err)
	}
	h.gen.Store(g)
	n := h.genNo.Add(1)
	h.metrics.gen.Set(float64(n))
	h.metrics.reloads.WithLabelValues("ok").Inc()
	h.log.Info("configuration reloaded", "generation", n, "path", cfg.Path, "policies", len(cfg.Policies), "locks", len(cfg.Locks))
	h.drains.Add(1)
	go func() {
		defer h.drains.Done()
		h.retire(old)
	}()
	return nil
}

// ReloadError carries the diagnostics of a configuration that did not
// parse.
type ReloadError struct {
	Diags hcl.Diagnostics
	Files map[string]*hcl.File
}

func (e *ReloadError) Error() string {
	return fmt.Sprintf("%v: %s", ErrReload, e.Diags.Error())
}

func (e *ReloadError) Unwrap() error { return ErrReload }

// retire takes g out of service: its lockers close first, so blocked
// waiters move to the new generation; calls still in flight get up to
// DrainTimeout (less if the Host shuts down); then g closes.
func (h *Host) retire(g *generation) {
	g.closeLockers()
	ctx, cancel := context.WithTimeout(h.life, h.opts.DrainTimeout)
	defer cancel()
	if err := g.drain(ctx); err != nil {
		h.log.Warn("old configuration did not drain in time; closing it", "err", err)
	}
	g.close(context.Background())
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
	h.reloadMu.Lock()
	defer h.reloadMu.Unlock()
	g := h.gen.Load()
	g.closeLockers() // blocked waiters return now
	err := g.drain(ctx)
	g.close(context.WithoutCancel(ctx))
	h.drains.Wait()
	h.closeClient()
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

func (h *Host) closeClient() {
	if h.own && h.client != nil {
		h.client.Close()
	}
	if h.dev != nil {
		h.dev.Stop()
	}
}

// defaultWasmCacheDir is where compiled WASM policies are cached.
func defaultWasmCacheDir() string {
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "coordhost", "wasm")
	}
	return filepath.Join(os.TempDir(), "coordhost-wasm-cache")
}

// redisChange names what differs between two redis blocks, or "".
func redisChange(a, b *config.Redis) string {
	switch {
	case (a == nil) != (b == nil):
		return "presence (dev mode vs a server)"
	case a == nil:
		return ""
	case strings.Join(a.Addresses, ",") != strings.Join(b.Addresses, ","):
		return "addresses"
	case a.KeyPrefix != b.KeyPrefix:
		return "key_prefix"
	case a.Username != b.Username || a.Password != b.Password:
		return "credentials"
	case a.ClientCache != b.ClientCache:
		return "client_cache"
	case (a.TLS == nil) != (b.TLS == nil) || a.TLS != nil && (a.TLS.Enabled != b.TLS.Enabled ||
		a.TLS.CAFile != b.TLS.CAFile || a.TLS.CertFile != b.TLS.CertFile || a.TLS.KeyFile != b.TLS.KeyFile ||
		a.TLS.ServerName != b.TLS.ServerName || a.TLS.InsecureSkipVerify != b.TLS.InsecureSkipVerify):
		return "tls"
	}
	return ""
}

// serverChange names what differs between two server blocks, or "".
func serverChange(a, b config.Server) string {
	var changed []string
	if a.Listen != b.Listen {
		changed = append(changed, "listen")
	}
	if a.LogFormat != b.LogFormat {
		changed = append(changed, "log_format")
	}
	if a.LogLevel != b.LogLevel {
		changed = append(changed, "log_level")
	}
	return strings.Join(changed, ", ")
}
