package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/coordhost/coordhost/config"
	"github.com/coordhost/coordhost/host/devredis"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/lock"
	"github.com/redis/rueidis"
)

// Defaults of `lock hold`.
const (
	defaultTTL    = 15 * time.Second
	defaultPrefix = "coordhost:lock:"
	// minTTL is the shortest lease the lock accepts (leases are whole ms).
	minTTL = time.Millisecond
	// releaseTimeout bounds the release after CMD exits.
	releaseTimeout = 5 * time.Second
	// slowWaitNote is how long coordhost waits quietly before saying that it
	// is waiting for the lock.
	slowWaitNote = time.Second
)

// Environment variables coordhost sets for CMD.
const (
	envLockName     = "COORDHOST_LOCK_NAME"
	envFencingToken = "COORDHOST_FENCING_TOKEN"
)

// holdKind is what a hold command holds: a lock (`lock hold`) or a
// read-write lease (`rwlock hold`). The two share their flags, parsing and
// running but for these differences.
type holdKind struct {
	cmd   string // the command: "lock hold"
	noun  string // the block and thing held: "lock"
	aNoun string // noun with its article: "a lock"
	// rw: -read and -write; -config is required (the CLI reaches read-write
	// leases only through host, DESIGN.md §1), so -ttl, -prefix and
	// -fencing do not exist.
	rw bool
}

var (
	lockHold   = &holdKind{cmd: "lock hold", noun: "lock", aNoun: "a lock"}
	rwlockHold = &holdKind{cmd: "rwlock hold", noun: "rwlock", aNoun: "an rwlock", rw: true}
)

// holdConfig is a parsed `lock hold` or `rwlock hold` command line.
type holdConfig struct {
	kind      *holdKind
	redis     string               // the Redis address (-redis, else $COORDHOST_REDIS_URL); "" means dev mode
	redisFrom string               // where redis came from: "-redis" or "COORDHOST_REDIS_URL"
	redisOpt  rueidis.ClientOption // parsed from redis unless dev mode
	redisDesc string               // redis, for messages (never with a password)
	ttl       time.Duration
	wait      time.Duration
	prefix    string
	fencing   bool
	read      bool // rwlock hold -read: a shared lease (else the write lease)
	name      string
	argv      []string // CMD ARGS...

	// With -config: the file, its -var overrides, and the -attr partition
	// attributes. ttl and fencing are then the lock block's.
	configPath string
	load       config.LoadOptions
	attrs      map[string]string // also with -server

	// With -server (lock hold only): the daemon, and the session to attach
	// the grant to ("" for none). The daemon's lock block decides the rest.
	server  *apiTarget
	session string
}

// holdFlags are the flags of `lock hold`.
type holdFlags struct {
	redis, prefix, config string
	server, session       string
	ttl, wait             time.Duration
	fencing, read, write  bool
	vars, attrs           listFlag
}

// subject names what cfg holds in messages: `lock "job"`, `rwlock "job"
// read lease`.
func (cfg holdConfig) subject() string {
	if cfg.kind == nil || !cfg.kind.rw {
		return fmt.Sprintf("lock %q", cfg.name)
	}
	mode := "write"
	if cfg.read {
		mode = "read"
	}
	return fmt.Sprintf("rwlock %q %s lease", cfg.name, mode)
}

func newHoldFlags(f *holdFlags) *flag.FlagSet { return newHoldFlagsFor(lockHold, f) }

// newHoldFlagsFor returns the flags of k's command.
func newHoldFlagsFor(k *holdKind, f *holdFlags) *flag.FlagSet {
	fs := newFlagSet(k.cmd)
	fs.Var(newStringValue(&f.redis, ""), "redis", "the Redis server at `ADDR`: host:port, /path/to.sock, unix:///path/to.sock or "+
		"redis://[user:pass@]host:port[/db] (rediss:// for TLS), or through Sentinel "+
		"redis://S1:26379?addr=S2:26379&master_set=NAME; default $"+envRedisURL+", else dev mode (a private redis-server for this run). "+
		"With -config it replaces the file's addresses (and $"+envRedisURL+" applies only when the file has no redis block); the file's credentials apply unless ADDR has its own")
	n := k.noun
	fileSets := "ttl, fencing, prefix, replicas and policies apply (so -ttl, -fencing and -prefix are errors)"
	if k.rw {
		fs.Var(boolValue{&f.read}, "read", "take a read lease, shared with other readers")
		fs.Var(boolValue{&f.write}, "write", "take the write lease, exclusive (the default)")
		fileSets = "ttl, prefix, marker_ttl, replicas and policies (starvation, retry, partition) apply"
	} else {
		fs.Var(newDurationValue(&f.ttl, defaultTTL), "ttl", "lease time of the lock, `DURATION` "+durationHelp+"; renewed every ttl/3")
		fs.Var(newStringValue(&f.prefix, defaultPrefix), "prefix", "the `STRING` the lock's Redis key starts with; the key is STRING + NAME")
		fs.Var(boolValue{&f.fencing}, "fencing", "take a fencing token and pass it to CMD as "+envFencingToken)
	}
	fs.Var(newDurationValue(&f.wait, 0), "wait", "give up (exit 1) if the "+n+" is not acquired within `DURATION`, "+durationHelp+"; 0, the default, waits forever")
	required := ""
	if k.rw {
		required = " (required)"
	}
	fs.Var(newStringValue(&f.config, ""), "config", "NAME is "+k.aNoun+" block of the configuration `FILE`"+required+": its "+fileSets+
		", and Redis is the file's redis block")
	fs.Var(&f.vars, "var", "with -config: "+varHelp)
	with := "with -config"
	if !k.rw {
		with = "with -config or -server"
		fs.Var(newStringValue(&f.server, ""), "server", "take the lock through the coordhost daemon at `URL` (http:// or https://), "+
			"NAME being a lock block of its configuration")
		fs.Var(newStringValue(&f.session, ""), "session", "with -server: attach the lock to the daemon's session `ID` too")
	}
	fs.Var(&f.attrs, "attr", with+": a partition attribute `KEY=VALUE` for the "+n+"'s partition policy (repeatable), as in -attr tenant=acme")
	return fs
}

// parseHoldArgs parses the arguments after `lock hold`.
func parseHoldArgs(args []string, getenv func(string) string) (holdConfig, error) {
	return parseHoldArgsFor(lockHold, args, getenv)
}

// parseHoldArgsFor parses the arguments after k's command. Flags may come
// before and after NAME, but not after "--". getenv supplies
// COORDHOST_REDIS_URL. It returns flag.ErrHelp for -h/-help.
func parseHoldArgsFor(k *holdKind, args []string, getenv func(string) string) (holdConfig, error) {
	cfg := holdConfig{kind: k}
	var f holdFlags
	fs := newHoldFlagsFor(k, &f)

	before, after, hasSep := args, []string(nil), false
	if i := slices.Index(args, "--"); i >= 0 {
		before, after, hasSep = args[:i], args[i+1:], true
	}
	var positional []string
	rest := before
	for {
		if err := fs.Parse(rest); err != nil {
			return cfg, flagError(fs, err)
		}
		rest = fs.Args()
		if len(rest) == 0 {
			break
		}
		positional = append(positional, rest[0])
		rest = rest[1:]
	}

	switch {
	case len(positional) == 0:
		return cfg, fmt.Errorf("missing %s NAME", k.noun)
	case !hasSep && len(positional) == 1:
		return cfg, errors.New(`missing "--" and CMD after NAME`)
	case !hasSep:
		return cfg, fmt.Errorf(`missing "--" between NAME and CMD (got %q after NAME)`, positional[1])
	case len(positional) > 1:
		return cfg, fmt.Errorf("unexpected argument %q before --: only flags and NAME go there", positional[1])
	case len(after) == 0:
		return cfg, errors.New("missing CMD after --")
	case after[0] == "":
		return cfg, errors.New("CMD is an empty string")
	}
	cfg.name, cfg.argv = positional[0], after
	if cfg.name == "" {
		return cfg, fmt.Errorf("%s NAME is empty", k.noun)
	}
	cfg.ttl, cfg.wait, cfg.prefix, cfg.fencing, cfg.read, cfg.configPath = f.ttl, f.wait, f.prefix, f.fencing, f.read, f.config
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case f.read && f.write:
		return cfg, errors.New("-read and -write exclude each other: give one")
	case set["read"] && !f.read && !f.write:
		return cfg, errors.New("-read=false: give -write (the default) for the write lease")
	}
	if set["server"] {
		return parseHoldServer(cfg, f, set, getenv)
	}
	if set["session"] {
		return cfg, errors.New("-session needs -server URL")
	}
	if set["config"] {
		if cfg.configPath == "" {
			return cfg, errors.New("-config FILE is empty")
		}
		// The lock block decides these; a flag that silently lost to the
		// file, or silently won over it, would surprise someone.
		if err := blockSets(set, "-config", fmt.Sprintf("%s %q of the file", k.noun, cfg.name)); err != nil {
			return cfg, err
		}
		var err error
		if cfg.load.Vars, err = parseVars(f.vars); err != nil {
			return cfg, err
		}
		if cfg.attrs, err = parseAttrs(f.attrs); err != nil {
			return cfg, err
		}
	} else {
		if k.rw {
			return cfg, errors.New("missing -config FILE: NAME is an rwlock block of it")
		}
		if set["var"] {
			return cfg, errors.New("-var needs -config FILE")
		}
		if set["attr"] {
			return cfg, errors.New("-attr needs -config FILE or -server URL")
		}
	}
	switch {
	case k.rw:
		// No -ttl or -prefix: the block's apply.
	case cfg.ttl > lock.MaxTTL:
		return cfg, fmt.Errorf("-ttl must be at most %v (100 years), got %v", lock.MaxTTL, cfg.ttl)
	case cfg.ttl < minTTL:
		return cfg, fmt.Errorf("-ttl must be at least %v, got %v", minTTL, cfg.ttl)
	case cfg.prefix == "":
		return cfg, errors.New("-prefix must not be empty")
	}
	if cfg.wait < 0 {
		return cfg, fmt.Errorf("-wait must not be negative, got %v (0 waits forever)", cfg.wait)
	}
	var err error
	cfg.redis, cfg.redisFrom, cfg.redisOpt, cfg.redisDesc, err = redisFromFlag(set["redis"], f.redis, getenv)
	return cfg, err
}

// blockSets returns the error for the first of -ttl, -fencing and -prefix
// in set, given with flag (-config or -server), whose block (`lock "job"
// of the file`) sets it instead; nil for none.
func blockSets(set map[string]bool, flag, block string) error {
	for _, f := range []string{"ttl", "fencing", "prefix"} {
		if set[f] {
			return fmt.Errorf("-%s cannot be used with %s: %s sets it", f, flag, block)
		}
	}
	return nil
}

// serverExcludes returns the error for the first flag of the in-process
// form in set, given with -server: -config or -redis; -ttl, -fencing or
// -prefix, which block (`lock "job"`) of the daemon's configuration sets
// (lock hold's flags); -var. Nil for none.
func serverExcludes(set map[string]bool, block string) error {
	for _, other := range []string{"config", "redis"} {
		if set[other] {
			return fmt.Errorf("-server and -%s exclude each other: with -server the daemon's configuration and Redis apply", other)
		}
	}
	if err := blockSets(set, "-server", block+" of the daemon's configuration"); err != nil {
		return err
	}
	if set["var"] {
		return errors.New("-var cannot be used with -server: the daemon's configuration has its own values")
	}
	return nil
}

// parseHoldServer finishes parsing a `lock hold -server URL` command line:
// the lock block of the daemon's configuration decides the ttl, fencing,
// prefix and policies, and the daemon its Redis.
func parseHoldServer(cfg holdConfig, f holdFlags, set map[string]bool, getenv func(string) string) (holdConfig, error) {
	if err := serverExcludes(set, fmt.Sprintf("lock %q", cfg.name)); err != nil {
		return cfg, err
	}
	if set["session"] && f.session == "" {
		return cfg, errors.New("-session ID is empty")
	}
	if cfg.wait < 0 {
		return cfg, fmt.Errorf("-wait must not be negative, got %v (0 waits forever)", cfg.wait)
	}
	t, err := parseAPITarget(f.server, getenv)
	if err != nil {
		return cfg, err
	}
	cfg.server, cfg.session = &t, f.session
	cfg.attrs, err = parseAttrs(f.attrs)
	return cfg, err
}

// redisFromFlag picks the Redis server of a command line: -redis when
// given (flagSet, value), else $COORDHOST_REDIS_URL, else none (""). It
// returns the address, where it came from ("-redis" or the variable), its
// client options and its description for messages.
func redisFromFlag(flagSet bool, value string, getenv func(string) string) (addr, from string, opt rueidis.ClientOption, desc string, err error) {
	// A flag wins over the environment; an empty -redis is a mistake, not
	// a way to ask for dev mode.
	switch {
	case flagSet:
		addr, from = value, "-redis"
	case getenv(envRedisURL) != "":
		addr, from = getenv(envRedisURL), envRedisURL
	}
	if !flagSet && addr == "" {
		return "", "", opt, "", nil
	}
	opt, desc, err = parseRedisAddr(addr)
	if err != nil {
		return "", "", opt, "", fmt.Errorf("%s: %w", from, err)
	}
	if from == envRedisURL {
		desc += " (from " + envRedisURL + ")"
	}
	return addr, from, opt, desc, nil
}

// runHold implements `coordhost lock hold`.
func runHold(ctx context.Context, args []string, e *env) int {
	return runHoldKind(ctx, lockHold, args, e)
}

// runRWLockHold implements `coordhost rwlock hold`.
func runRWLockHold(ctx context.Context, args []string, e *env) int {
	return runHoldKind(ctx, rwlockHold, args, e)
}

// runHoldKind implements k's command.
func runHoldKind(ctx context.Context, k *holdKind, args []string, e *env) int {
	cfg, err := parseHoldArgsFor(k, args, e.getenv)
	if errors.Is(err, flag.ErrHelp) {
		return e.printHelp(k.cmd)
	}
	if err != nil {
		return e.usageErrorFor(k.cmd, "%s: %v", k.cmd, err)
	}
	// Find CMD before touching Redis: a typo must not take the lock.
	path, err := exec.LookPath(cfg.argv[0])
	if err != nil {
		e.logf("cannot run %s: %v", cfg.argv[0], err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return exitCmdNotFound
		}
		return exitCannotRun
	}

	sigs := make(chan os.Signal, 4)
	e.notify(sigs)
	defer e.stop(sigs)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stopRelay := relaySignalsToCancel(sigs, cancel)
	defer stopRelay()

	interrupted := func(what string) (int, bool) {
		if sig, ok := signalCause(ctx); ok {
			e.logf("interrupted by %s %s", signalName(sig), what)
			return exitSignalOffset + int(sig), true
		}
		return 0, false
	}

	if cfg.server != nil {
		return holdFromServer(ctx, cfg, path, e, sigs, stopRelay, interrupted)
	}
	if cfg.configPath != "" { // always for rwlock hold
		return holdFromConfig(ctx, cfg, path, e, sigs, stopRelay, interrupted)
	}

	opt, desc := cfg.redisOpt, cfg.redisDesc
	if cfg.redis == "" {
		d, err := devredis.Start(ctx, devredis.Options{Getenv: e.getenv})
		if err != nil {
			if code, ok := interrupted("while starting redis-server"); ok {
				return code
			}
			e.logf("%v", err)
			return exitFailure
		}
		defer func() {
			if err := d.Stop(); err != nil {
				e.logf("%v", err)
			}
		}()
		e.logf("dev mode: started private redis-server on unix socket %s (pid %d); it stops when coordhost exits", d.Socket(), d.Pid())
		e.logf("dev mode: this lock excludes nothing outside this run, since no other process uses this server; give -redis or $%s (for example the socket of `coordhost dev-redis`) to share a lock between processes", envRedisURL)
		opt, desc, err = unixClientOption(d.Socket())
		if err != nil {
			e.logf("%v", err)
			return exitFailure
		}
	}
	client, err := newRedisClient(ctx, opt, desc)
	if err != nil {
		if code, ok := interrupted("while connecting to Redis"); ok {
			return code
		}
		e.logf("%v", err)
		return exitFailure
	}
	defer client.Close()

	lk, err := lock.New(client, lock.Options{Prefix: cfg.prefix, Fencing: cfg.fencing})
	if err != nil {
		return e.usageErrorFor(k.cmd, "%s: %v", k.cmd, err)
	}
	defer lk.Close()
	acquire := func(ctx context.Context) (primitives.Lease, error) {
		return leaseOrNil(lk.Acquire(ctx, cfg.name, cfg.ttl))
	}
	return holdWithLock(ctx, acquire, cfg, path, e, sigs, stopRelay, interrupted)
}

// leaseOrNil converts an acquisition's result to an acquireFunc's, without
// the typed nil that would make a failed acquisition's lease non-nil.
func leaseOrNil[L primitives.Lease](l L, err error) (primitives.Lease, error) {
	if err != nil {
		return nil, err
	}
	return l, nil
}

// heldLock is what holdAndRun needs from a granted lock or lease.
type heldLock interface {
	Done() <-chan struct{}
	Release(ctx context.Context) (primitives.ReleaseResult, error)
}

// holdAndRun runs cmd while l is held: keepAlive(ctx) keeps the lease
// alive until the returned stop is called; if l.Done() closes, cmd is
// stopped; signals from sigs are forwarded to cmd. After cmd exits, l is
// released. It returns the exit status for coordhost.
func holdAndRun(ctx context.Context, l heldLock, keepAlive func(context.Context) (stop func()), cmd *exec.Cmd, cfg holdConfig, e *env, sigs <-chan os.Signal) int {
	kaCtx, kaCancel := context.WithCancel(context.WithoutCancel(ctx))
	defer kaCancel()
	stopKeepAlive := keepAlive(kaCtx)

	ttyGroup := cmd.SysProcAttr == nil || !cmd.SysProcAttr.Setpgid
	sup := &supervisor{
		signals: sigs,
		grace:   e.grace,
		logf:    e.logf,
		what:    cfg.subject(),
		// A child sharing coordhost's process group on a terminal gets the
		// terminal's ^C itself; forwarding it would deliver it twice.
		skipForward: map[syscall.Signal]bool{syscall.SIGINT: ttyGroup},
	}
	res, runErr := sup.run(cmd, l.Done())
	if runErr == nil && !res.lost {
		select {
		case <-l.Done():
			// Lost at about the moment CMD finished: it may not have been
			// protected to the end.
			e.logf("lost %s as %s exited", cfg.subject(), cmd.Args[0])
			res.lost = true
			sup.stopLeftovers(cmd)
		default:
		}
	}
	stopKeepAlive()

	status := res.status
	switch {
	case runErr != nil:
		e.logf("cannot start %s: %v", cmd.Args[0], runErr)
		status = exitCannotRun
		if errors.Is(runErr, exec.ErrNotFound) || errors.Is(runErr, os.ErrNotExist) {
			status = exitCmdNotFound
		}
	case res.signal != 0:
		e.logf("%s was ended by %s", cmd.Args[0], signalName(res.signal))
	}

	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer rcancel()
	rr, err := l.Release(rctx)
	switch {
	case err != nil:
		e.logf("releasing %s: %v (it expires within %v)", cfg.subject(), err, cfg.ttl)
	case rr == primitives.Released:
		e.logf("released %s", cfg.subject())
	case !res.lost:
		// Neither Done nor the supervisor saw it, but the lease was gone.
		e.logf("%s was lost before %s exited (release found %v)", cfg.subject(), cmd.Args[0], rr)
		res.lost = true
		if runErr == nil {
			sup.stopLeftovers(cmd)
		}
	}
	if res.lost && status == exitOK {
		status = exitFailure
	}
	return status
}

// buildChildCmd prepares CMD: inherited stdio, the environment plus
// COORDHOST_LOCK_NAME (and COORDHOST_FENCING_TOKEN), and its own process
// group unless stdin is a terminal.
func buildChildCmd(path string, cfg holdConfig, e *env, fencingToken string) *exec.Cmd {
	cmd := exec.Command(path, cfg.argv[1:]...)
	cmd.Args[0] = cfg.argv[0]
	cmd.Env = childEnv(e.environ(), cfg.name, fencingToken)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = e.stdin, e.stdout, e.stderr
	if e.stdin == nil {
		cmd.Stdin = nil // /dev/null
	}
	cmd.SysProcAttr = childSysProcAttr(!isTerminal(e.stdin))
	return cmd
}

// childEnv returns base without any inherited COORDHOST_LOCK_NAME and
// COORDHOST_FENCING_TOKEN (from an outer coordhost), and without
// COORDHOST_REDIS_URL and COORDHOST_TOKEN (a password and a token CMD has
// no business with), plus ours.
func childEnv(base []string, name, fencingToken string) []string {
	out := make([]string, 0, len(base)+2)
	for _, kv := range base {
		if strings.HasPrefix(kv, envLockName+"=") || strings.HasPrefix(kv, envFencingToken+"=") ||
			strings.HasPrefix(kv, envRedisURL+"=") || strings.HasPrefix(kv, envToken+"=") {
			continue
		}
		out = append(out, kv)
	}
	out = append(out, envLockName+"="+name)
	if fencingToken != "" {
		out = append(out, envFencingToken+"="+fencingToken)
	}
	return out
}

// noteAfter calls note once if d passes before the returned stop is
// called; stop waits until note has returned if it had started.
func noteAfter(d time.Duration, note func()) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			note()
		case <-done:
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		wg.Wait()
	}
}
