package main

import (
	"context"
	"errors"
	"flag"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coordhost/coordhost/config"
	"github.com/coordhost/coordhost/host"
)

const (
	// shutdownTimeout bounds each step of a graceful shutdown: the HTTP
	// server's in-flight requests, then the host's in-flight acquisitions.
	shutdownTimeout = 10 * time.Second
	// reloadTimeout bounds one reload (policies loaded and self-tested).
	reloadTimeout = time.Minute
	// readHeaderTimeout bounds the reading of a request's headers.
	readHeaderTimeout = 10 * time.Second
	// maxHeaderBytes bounds a request's headers (HTTP/1.1), or its header
	// list (HTTP/2); net/http's default is 1 MiB.
	maxHeaderBytes = 64 << 10
)

// The server's keep-alive: an HTTP/2 connection silent for h2PingAfter
// gets a PING, and is closed when the answer takes longer than
// h2PingTimeout (a client gone without a FIN, a NAT that dropped the
// flow); a connection with no request in flight for idleTimeout is
// closed.
const (
	h2PingAfter   = 15 * time.Second
	h2PingTimeout = 10 * time.Second
	idleTimeout   = 2 * time.Minute
)

// keepalive is the server's keep-alive (tests shorten it).
type keepalive struct{ pingAfter, pingTimeout, idle time.Duration }

// newHTTPServer is the daemon's HTTP server for handler: HTTP/1.1, and
// HTTP/2 by ALPN with TLS (tlsOn) or cleartext (h2c) without, with the
// keep-alive ka.
func newHTTPServer(handler http.Handler, tlsOn bool, ka keepalive, errLog *log.Logger) *http.Server {
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	if tlsOn {
		protocols.SetHTTP2(true)
	} else {
		protocols.SetUnencryptedHTTP2(true)
	}
	return &http.Server{
		Protocols:         protocols,
		Handler:           handler,
		ReadHeaderTimeout: readHeaderTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		IdleTimeout:       ka.idle,
		HTTP2:             &http.HTTP2Config{SendPingTimeout: ka.pingAfter, PingTimeout: ka.pingTimeout},
		ErrorLog:          errLog,
	}
}

// serveArgs is a parsed `serve` command line.
type serveArgs struct {
	file   string
	listen string // -listen; "" means server.listen of the file
	load   config.LoadOptions
}

// serveFlags are the flags of `serve`.
type serveFlags struct {
	config    string
	vars      listFlag
	listen    string
	listenSet bool
}

func newServeFlags(f *serveFlags) *flag.FlagSet {
	fs := newFlagSet("serve")
	fs.Var(newStringValue(&f.config, ""), "config", "the configuration `FILE`, instead of the FILE argument")
	fs.Var(&f.vars, "var", varHelp)
	fs.Func("listen", "`ADDR` (host:port) to listen on instead of server.listen; port 0 picks a free port",
		func(s string) error { f.listen, f.listenSet = s, true; return nil })
	return fs
}

// parseServeArgs parses the arguments after `serve`: flags and one FILE,
// in any order; FILE may also be given as -config FILE.
func parseServeArgs(args []string) (serveArgs, error) {
	var sa serveArgs
	var f serveFlags
	fs := newServeFlags(&f)
	positional, err := parseInterspersed(fs, args)
	if err != nil {
		return sa, err
	}
	if sa.file, err = fileArg(positional, f.config, "serve"); err != nil {
		return sa, err
	}
	if f.listenSet {
		if err := checkListen(f.listen); err != nil {
			return sa, err
		}
		sa.listen = f.listen
	}
	if sa.load.Vars, err = parseVars(f.vars); err != nil {
		return sa, err
	}
	return sa, nil
}

// runServe implements `coordhost serve`: the host (package host) behind an
// HTTP server, reloaded on SIGHUP and shut down gracefully on SIGINT or
// SIGTERM. It returns 0 after a clean shutdown, 1 if the configuration is
// bad or the host cannot start, 128+N if signal N interrupted the start.
func runServe(ctx context.Context, args []string, e *env) int {
	sa, err := parseServeArgs(args)
	if errors.Is(err, flag.ErrHelp) {
		return e.printHelp("serve")
	}
	if err != nil {
		return e.usageErrorFor("serve", "serve: %v", err)
	}
	cfg, diags := config.Load(sa.file, sa.load)
	if diags.HasErrors() {
		// No logger yet: its settings are in the file. Diagnostics as
		// `validate` prints them.
		e.writeDiags(sa.file, cfg.Files(), diags)
		errs, _ := countDiags(diags)
		e.logf("serve: %s: %s; not starting", sa.file, plural(errs, "error"))
		return exitFailure
	}
	log, handler := newLogger(e.stderr, cfg.Server)
	logDiags(log, cfg.Files(), diags) // warnings
	listen := cfg.Server.Listen
	if sa.listen != "" {
		listen = sa.listen
	}

	sigs := make(chan os.Signal, 4)
	e.notify(sigs)
	defer e.stop(sigs)

	// Listen first: a port in use fails before anything is started.
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		log.Error("cannot listen", "addr", listen, "err", err)
		return exitFailure
	}
	defer ln.Close() // after Serve it is closed already; harmless

	// The certificate next: a bad one fails before anything is started.
	var stls *host.ServerTLS
	if t := cfg.Server.TLS; t != nil {
		if stls, err = host.NewServerTLS(t, log); err != nil {
			log.Error("cannot load the TLS certificate", "err", err)
			return exitFailure
		}
	}

	log.Info("starting coordhost", "version", versionString(), "config", cfg.Path)
	startCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var hupWhileStarting atomic.Bool
	stopWatch := watchStartSignals(sigs, cancel, &hupWhileStarting)
	h, err := host.New(startCtx, cfg, host.Options{Logger: log, Load: sa.load})
	stopWatch()
	if err != nil {
		if sig, ok := signalCause(startCtx); ok {
			log.Warn("interrupted while starting", "signal", signalName(sig))
			return exitSignalOffset + int(sig)
		}
		log.Error("cannot start", "err", err)
		return exitFailure
	}
	if sig, ok := signalCause(startCtx); ok {
		// The signal came just as the host was ready.
		log.Info("shutting down", "signal", signalName(sig))
		_ = h.Close()
		return exitOK
	}

	if dev := h.DevRedis(); dev != "" && !log.Enabled(ctx, slog.LevelWarn) {
		// The host logged dev mode at WARN, below server.log_level; it
		// must still be said.
		e.logf("dev mode: %s has no redis block; started a private redis-server on unix socket %s", sa.file, dev)
	}
	// HTTP/1.1 and HTTP/2 on one port (cleartext h2c without a tls
	// block): gRPC clients need HTTP/2, curl and probes may use 1.1.
	srv := newHTTPServer(h.Handler(), stls != nil, keepalive{h2PingAfter, h2PingTimeout, idleTimeout}, slog.NewLogLogger(handler, slog.LevelWarn))
	served := make(chan error, 1)
	if stls != nil {
		srv.TLSConfig = stls.Config()
		go func() { served <- srv.ServeTLS(ln, "", "") }()
	} else {
		go func() { served <- srv.Serve(ln) }()
	}
	log.Info("network API", "tls", stls != nil, "mutual_tls", stls != nil && stls.MutualTLS(),
		"tokens", len(cfg.Server.Tokens), "metrics_open", !cfg.Server.Auth() || cfg.Server.MetricsOpen)
	if !cfg.Server.Auth() && (stls == nil || !stls.MutualTLS()) && !loopback(ln.Addr()) {
		log.Warn("the network API is open to every client that reaches it (no token blocks, no client_ca_file); see docs/security.md", "addr", ln.Addr().String())
	}
	log.Info("listening", "addr", ln.Addr().String(), "generation", h.Generation())

	r := newReloader(ctx, h, log)
	if hupWhileStarting.Load() {
		log.Info("got SIGHUP while starting; reloading configuration", "config", cfg.Path)
		if stls != nil {
			_ = stls.Reload()
		}
		r.request()
	}
	status := exitOK
loop:
	for {
		select {
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				log.Info("got SIGHUP; reloading configuration", "config", cfg.Path)
				if stls != nil {
					_ = stls.Reload() // logs either way; a bad certificate keeps the old one
				}
				r.request()
				continue
			}
			log.Info("shutting down", "signal", osSignalName(sig))
			break loop
		case err := <-served:
			log.Error("HTTP server failed; shutting down", "err", err)
			served <- err // for shutdown below
			status = exitFailure
			break loop
		case <-ctx.Done():
			log.Info("shutting down", "reason", context.Cause(ctx))
			break loop
		}
	}
	r.stop()
	if !shutdown(ctx, srv, served, h, log, sigs) {
		status = exitFailure
	}
	if status == exitOK {
		log.Info("stopped")
	}
	return status
}

// loopback reports whether a listener's address is on loopback.
func loopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// shutdown stops srv (in-flight requests may finish) and then h, each
// within shutdownTimeout; a second SIGINT or SIGTERM cuts both short. It
// reports whether everything stopped in time.
func shutdown(ctx context.Context, srv *http.Server, served <-chan error, h *host.Host, log *slog.Logger, sigs <-chan os.Signal) bool {
	force, forceCancel := context.WithCancel(context.WithoutCancel(ctx))
	defer forceCancel()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case sig := <-sigs:
				if sig == syscall.SIGHUP {
					continue
				}
				log.Warn("second signal; stopping without waiting", "signal", osSignalName(sig))
				forceCancel()
			case <-done:
				return
			}
		}
	}()
	defer func() { close(done); wg.Wait() }()

	ok := true
	// Streams the server's shutdown cuts are not clients going away: no
	// session ends with them.
	h.Drain()
	hctx, hcancel := context.WithTimeout(force, shutdownTimeout)
	if err := srv.Shutdown(hctx); err != nil {
		log.Warn("HTTP requests still running; closing their connections", "err", err)
		_ = srv.Close()
		ok = false
	}
	hcancel()
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		ok = false
	}
	hctx, hcancel = context.WithTimeout(force, shutdownTimeout)
	defer hcancel()
	if err := h.Shutdown(hctx); err != nil {
		log.Error("host did not shut down cleanly", "err", err)
		ok = false
	}
	return ok
}

// watchStartSignals turns SIGINT and SIGTERM from sigs into a cancellation
// (cause signalError) while the host starts, and records a SIGHUP in hup
// (the configuration is reloaded once the host runs). The returned stop
// ends the watch and waits for it.
func watchStartSignals(sigs <-chan os.Signal, cancel context.CancelCauseFunc, hup *atomic.Bool) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case sig := <-sigs:
				if sig == syscall.SIGHUP {
					hup.Store(true)
					continue
				}
				ss, ok := sig.(syscall.Signal)
				if !ok {
					ss = syscall.SIGTERM
				}
				cancel(signalError{ss})
				return
			case <-done:
				return
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		wg.Wait()
	}
}

// osSignalName names an os.Signal for logs.
func osSignalName(sig os.Signal) string {
	if ss, ok := sig.(syscall.Signal); ok {
		return signalName(ss)
	}
	return sig.String()
}

// reloader runs host reloads one at a time in the background; requests
// that come in while one runs are coalesced into one more.
type reloader struct {
	h      *host.Host
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	reqs   chan struct{}
	wg     sync.WaitGroup
}

func newReloader(ctx context.Context, h *host.Host, log *slog.Logger) *reloader {
	r := &reloader{h: h, log: log, reqs: make(chan struct{}, 1)}
	r.ctx, r.cancel = context.WithCancel(context.WithoutCancel(ctx))
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			select {
			case <-r.reqs:
				reload(r.ctx, h, log)
			case <-r.ctx.Done():
				return
			}
		}
	}()
	return r
}

// request asks for a reload; it never blocks.
func (r *reloader) request() {
	select {
	case r.reqs <- struct{}{}:
	default:
		r.log.Info("a reload is already pending")
	}
}

// stop cancels a running reload and waits for it.
func (r *reloader) stop() {
	r.cancel()
	r.wg.Wait()
}

// reload reloads the host's configuration file and logs the outcome:
// the host logs success with the new generation; a failure is logged here,
// one record per diagnostic, and the previous generation keeps serving.
func reload(ctx context.Context, h *host.Host, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, reloadTimeout)
	defer cancel()
	err := h.Reload(ctx)
	if err == nil {
		return
	}
	var re *host.ReloadError
	if errors.As(err, &re) {
		logDiags(log, re.Files, re.Diags)
		errs, _ := countDiags(re.Diags)
		log.Error("reload failed; still serving the previous configuration", "generation", h.Generation(), "errors", errs)
		return
	}
	log.Error("reload failed; still serving the previous configuration", "generation", h.Generation(), "err", err)
}
