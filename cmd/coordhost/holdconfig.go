package main

import (
	"context"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/coordhost/coordhost/config"
	"github.com/coordhost/coordhost/host"
	"github.com/coordhost/coordhost/primitives/lock"
)

// hostShutdownTimeout bounds the shutdown of the host inside
// `lock hold -config` after CMD exited and the lock was released.
const hostShutdownTimeout = 5 * time.Second

// holdFromConfig is `lock hold -config FILE NAME`: the lock is the file's
// `lock "NAME"` block, served by a host.Host built from the file (its
// redis block, or -redis, or dev mode without either; its policies), so
// the lock's ttl, fencing, prefix, retry policy and partition policy
// (with the -attr attributes) are the file's.
func holdFromConfig(ctx context.Context, cfg holdConfig, path string, e *env, sigs <-chan os.Signal, stopRelay func(), interrupted func(string) (int, bool)) int {
	conf, diags := config.Load(cfg.configPath, cfg.load)
	if diags.HasErrors() {
		e.writeDiags(cfg.configPath, conf.Files(), diags)
		errs, _ := countDiags(diags)
		e.logf("lock hold: %s: %s", cfg.configPath, plural(errs, "error"))
		return exitFailure
	}
	lc := conf.Lock(cfg.name)
	if lc == nil {
		names := make([]string, 0, len(conf.Locks))
		for _, l := range conf.Locks {
			names = append(names, strconv.Quote(l.Name))
		}
		sort.Strings(names)
		declared := "it declares no locks"
		if len(names) > 0 {
			declared = "it declares " + strings.Join(names, ", ")
		}
		return e.usageErrorFor("lock hold", "lock hold: %s has no lock %q (%s)", cfg.configPath, cfg.name, declared)
	}
	if cfg.attrs != nil && lc.Partition == nil {
		return e.usageErrorFor("lock hold", "lock hold: -attr given, but lock %q has no partition policy to use it", cfg.name)
	}
	e.writeDiags(cfg.configPath, conf.Files(), diags) // warnings

	// One lock hold is too short-lived to report the server's settings on
	// every run; `serve` does (host.ServerHazards).
	opts := host.Options{Logger: cliLogger(e.stderr), Load: cfg.load, SkipServerCheck: true}
	if cfg.redisFrom == envRedisURL && conf.Redis != nil {
		// An ambient variable must not move a lock that a file's redis
		// block places: a worker and `serve FILE` would then coordinate
		// on different servers. Only -redis replaces the file's block.
		e.logf("%s ignored: %s has a redis block (give -redis to replace its addresses)", envRedisURL, cfg.configPath)
		cfg.redis = ""
	}
	if cfg.redis != "" {
		// -redis replaces the addresses of the file's redis block; its
		// key_prefix still applies, and so do its credentials unless the
		// -redis URL names its own. (TLS comes from a rediss:// URL.)
		opt := cfg.redisOpt
		if conf.Redis != nil && opt.Username == "" && opt.Password == "" {
			opt.Username, opt.Password = conf.Redis.Username, conf.Redis.Password
		}
		client, err := newRedisClient(ctx, opt, cfg.redisDesc)
		if err != nil {
			if code, ok := interrupted("while connecting to Redis"); ok {
				return code
			}
			e.logf("%v", err)
			return exitFailure
		}
		defer client.Close()
		opts.Client = client
	}
	h, err := host.New(ctx, conf, opts)
	if err != nil {
		if code, ok := interrupted("while starting"); ok {
			return code
		}
		e.logf("%v", err)
		return exitFailure
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), hostShutdownTimeout)
		defer cancel()
		if err := h.Shutdown(sctx); err != nil {
			e.logf("shutting down: %v", err)
		}
	}()
	hl, err := h.Lock(cfg.name)
	if err != nil {
		e.logf("%v", err)
		return exitFailure
	}
	cfg.ttl, cfg.fencing = hl.TTL(), hl.Fencing()
	acquire := func(ctx context.Context) (*lock.Lock, error) { return hl.Acquire(ctx, cfg.attrs) }
	return holdWithLock(ctx, acquire, cfg, path, e, sigs, stopRelay, interrupted)
}
