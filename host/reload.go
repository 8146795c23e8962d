package host

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/coordhost/coordhost/config"
	"github.com/hashicorp/hcl/v2"
)

// ErrReload wraps a reload that failed; the previous generation stays.
var ErrReload = errors.New("host: reload failed, previous configuration kept")

// Reload re-reads the configuration file, builds a whole new generation
// aside (policies loaded and self-tested, locks created), swaps it in
// atomically and drains the old one in the background. Any error keeps
// the old generation; parse errors come back as hcl.Diagnostics inside
// the error (see ReloadError). After a swap it checks the Redis settings
// again, as New does, and logs the hazards that appeared or went away
// since the last check (ServerHazards).
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
	h.log.Info("configuration reloaded", "generation", n, "path", cfg.Path, "policies", len(cfg.Policies), "locks", len(cfg.Locks),
		"rwlocks", len(cfg.RWLocks), "semaphores", len(cfg.Semaphores), "leases", len(cfg.Leases), "latches", len(cfg.Latches),
		"redlocks", len(cfg.Redlocks), "rate_limits", len(cfg.RateLimits), "tokens", len(cfg.Server.Tokens))
	h.drains.Add(1)
	go func() {
		defer h.drains.Done()
		h.retire(old)
	}()
	h.recheckServerHazards(ctx)
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

// redisChange names what differs between two redis blocks, or "".
func redisChange(a, b *config.Redis) string {
	switch {
	case (a == nil) != (b == nil):
		return "presence (dev mode vs a server)"
	case a == nil:
		return ""
	case strings.Join(a.Addresses, ",") != strings.Join(b.Addresses, ","):
		return "addresses"
	case (a.Sentinel == nil) != (b.Sentinel == nil) || a.Sentinel != nil && (a.Sentinel.MasterSet != b.Sentinel.MasterSet ||
		strings.Join(a.Sentinel.Addresses, ",") != strings.Join(b.Sentinel.Addresses, ",") ||
		a.Sentinel.Username != b.Sentinel.Username || a.Sentinel.Password != b.Sentinel.Password):
		return "sentinel"
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
	// The listener's certificate files are re-read on SIGHUP (ServerTLS),
	// but which files, and whether there is TLS at all, is fixed at start.
	// Tokens and metrics_open apply at reload.
	if (a.TLS == nil) != (b.TLS == nil) || a.TLS != nil && (a.TLS.CertFile != b.TLS.CertFile ||
		a.TLS.KeyFile != b.TLS.KeyFile || a.TLS.ClientCAFile != b.TLS.ClientCAFile) {
		changed = append(changed, "tls")
	}
	return strings.Join(changed, ", ")
}
