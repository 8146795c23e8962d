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
	"github.com/coordhost/coordhost/primitives"
	"github.com/redis/rueidis"
)

// hostShutdownTimeout bounds the shutdown of the host inside
// `lock hold -config` (and `rwlock hold -config`) after CMD exited and the
// lock was released.
const hostShutdownTimeout = 5 * time.Second

// holdFromConfig is `lock hold -config FILE NAME` (or `rwlock hold`): the
// lock is the file's `lock "NAME"` block (or `rwlock "NAME"`), served by a
// host.Host built from the file (its redis block, or -redis, or dev mode
// without either; its policies), so the lock's ttl, fencing, prefix, retry
// policy, starvation policy and partition policy (with the -attr
// attributes) are the file's.
func holdFromConfig(ctx context.Context, cfg holdConfig, path string, e *env, sigs <-chan os.Signal, stopRelay func(), interrupted func(string) (int, bool)) int {
	k := cfg.kind
	conf, diags := config.Load(cfg.configPath, cfg.load)
	if diags.HasErrors() {
		e.writeDiags(cfg.configPath, conf.Files(), diags)
		errs, _ := countDiags(diags)
		e.logf("%s: %s: %s", k.cmd, cfg.configPath, plural(errs, "error"))
		return exitFailure
	}
	var declared []string
	var partition *config.PolicyRef
	found := false
	if k.rw {
		for _, l := range conf.RWLocks {
			declared = append(declared, l.Name)
		}
		if rc := conf.RWLock(cfg.name); rc != nil {
			found, partition = true, rc.Partition
		}
	} else {
		for _, l := range conf.Locks {
			declared = append(declared, l.Name)
		}
		if lc := conf.Lock(cfg.name); lc != nil {
			found, partition = true, lc.Partition
		}
	}
	if !found {
		names := make([]string, 0, len(declared))
		for _, n := range declared {
			names = append(names, strconv.Quote(n))
		}
		sort.Strings(names)
		list := "it declares no " + k.noun + "s"
		if len(names) > 0 {
			list = "it declares " + strings.Join(names, ", ")
		}
		return e.usageErrorFor(k.cmd, "%s: %s has no %s %q (%s)", k.cmd, cfg.configPath, k.noun, cfg.name, list)
	}
	if cfg.attrs != nil && partition == nil {
		return e.usageErrorFor(k.cmd, "%s: -attr given, but %s %q has no partition policy to use it", k.cmd, k.noun, cfg.name)
	}
	e.writeDiags(cfg.configPath, conf.Files(), diags) // warnings

	h, stop, step, err := startHost(ctx, conf, hostTarget{configPath: cfg.configPath, load: cfg.load,
		redis: cfg.redis, redisFrom: cfg.redisFrom, redisOpt: cfg.redisOpt, redisDesc: cfg.redisDesc}, e)
	if err != nil {
		if code, ok := interrupted(step); ok {
			return code
		}
		e.logf("%v", err)
		return exitFailure
	}
	defer stop()
	var acquire acquireFunc
	if k.rw {
		hr, err := h.RWLock(cfg.name)
		if err != nil {
			e.logf("%v", err)
			return exitFailure
		}
		cfg.ttl = hr.TTL()
		get := hr.AcquireWrite
		if cfg.read {
			get = hr.AcquireRead
		}
		acquire = func(ctx context.Context) (primitives.Lease, error) { return leaseOrNil(get(ctx, cfg.attrs)) }
	} else {
		hl, err := h.Lock(cfg.name)
		if err != nil {
			e.logf("%v", err)
			return exitFailure
		}
		cfg.ttl, cfg.fencing = hl.TTL(), hl.Fencing()
		acquire = func(ctx context.Context) (primitives.Lease, error) { return leaseOrNil(hl.Acquire(ctx, cfg.attrs)) }
	}
	return holdWithLock(ctx, acquire, cfg, path, e, sigs, stopRelay, interrupted)
}

// hostTarget is what a one-shot command (lock hold -config, rwlock hold,
// limit check) needs besides the loaded file to start its host.Host.
type hostTarget struct {
	configPath string
	load       config.LoadOptions
	redis      string               // -redis, else $COORDHOST_REDIS_URL; "" for the file's redis block (or dev mode)
	redisFrom  string               // "-redis" or COORDHOST_REDIS_URL
	redisOpt   rueidis.ClientOption // parsed from redis
	redisDesc  string               // redis for messages, without a password
}

// startHost starts the host.Host of a one-shot command for conf: its
// redis block (or, without one, dev mode), or -redis in its place, with
// the block's key_prefix and credentials. It returns the function that
// shuts the host down (and closes the -redis client), or, on error, the
// step that failed for a message about an interruption.
func startHost(ctx context.Context, conf *config.Config, tg hostTarget, e *env) (_ *host.Host, stop func(), step string, _ error) {
	// A one-shot command is too short-lived to report the server's
	// settings on every run; `serve` does (host.ServerHazards).
	opts := host.Options{Logger: cliLogger(e.stderr), Load: tg.load, SkipServerCheck: true}
	if tg.redisFrom == envRedisURL && conf.Redis != nil {
		// An ambient variable must not move a lock that a file's redis
		// block places: a worker and `serve FILE` would then coordinate
		// on different servers. Only -redis replaces the file's block.
		e.logf("%s ignored: %s has a redis block (give -redis to replace its addresses)", envRedisURL, tg.configPath)
		tg.redis = ""
	}
	var client rueidis.Client
	if tg.redis != "" {
		// -redis replaces the addresses of the file's redis block; its
		// key_prefix still applies, and so do its credentials unless the
		// -redis URL names its own, and, for a Sentinel URL, its sentinel
		// block's credentials (a URL cannot name them). (TLS comes from a
		// rediss:// URL.)
		opt := tg.redisOpt
		if conf.Redis != nil && conf.Redis.Sentinel != nil && opt.Sentinel.MasterSet == "" {
			// Said, because a failover then no longer follows: the
			// command talks to one server, whichever role it has.
			e.logf("-redis replaces %s's sentinel block: connecting to %s directly, not through Sentinel master set %q", tg.configPath, tg.redisDesc, conf.Redis.Sentinel.MasterSet)
		}
		if conf.Redis != nil && opt.Username == "" && opt.Password == "" {
			opt.Username, opt.Password = conf.Redis.Username, conf.Redis.Password
		}
		if conf.Redis != nil && conf.Redis.Sentinel != nil && opt.Sentinel.MasterSet != "" {
			opt.Sentinel.Username, opt.Sentinel.Password = conf.Redis.Sentinel.Username, conf.Redis.Sentinel.Password
		}
		var err error
		if client, err = newRedisClient(ctx, opt, tg.redisDesc); err != nil {
			return nil, nil, "while connecting to Redis", err
		}
		opts.Client = client
	}
	h, err := host.New(ctx, conf, opts)
	if err != nil {
		if client != nil {
			client.Close()
		}
		return nil, nil, "while starting", err
	}
	return h, func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), hostShutdownTimeout)
		defer cancel()
		if err := h.Shutdown(sctx); err != nil {
			e.logf("shutting down: %v", err)
		}
		if client != nil {
			client.Close()
		}
	}, "", nil
}
