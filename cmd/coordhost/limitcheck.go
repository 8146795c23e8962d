package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/coordhost/coordhost/config"
	coordhostv1 "github.com/coordhost/coordhost/gen/coordhost/v1"
)

// Exit statuses of `limit check`, a question whose answers are 0 and 1 (as
// for grep): every error, the command line's included, is exitUsage's 2,
// so that a script never takes a broken check for a refusal.
const (
	exitGranted    = exitOK      // the permits were granted
	exitRefused    = exitFailure // not granted
	exitCheckError = exitUsage   // anything else: usage, the file, Redis, the partition policy
)

// limitCheckArgs is a parsed `limit check` command line.
type limitCheckArgs struct {
	target hostTarget
	server *apiTarget // -server: the daemon asked instead (target is then unused)
	name   string
	n      int64
	attrs  map[string]string
}

// limitCheckFlags are the flags of `limit check`.
type limitCheckFlags struct {
	config, redis string
	server        string
	n             int64
	vars, attrs   listFlag
}

func newLimitCheckFlags(f *limitCheckFlags) *flag.FlagSet {
	fs := newFlagSet("limit check")
	fs.Var(newStringValue(&f.config, ""), "config", "NAME is a rate_limit block of the configuration `FILE` (required), and Redis is the file's redis block")
	fs.Var(newStringValue(&f.redis, ""), "redis", "the Redis server at `ADDR`, in place of the file's addresses, as for lock hold (default $"+envRedisURL+
		" when the file has no redis block)")
	fs.Var(&f.vars, "var", varHelp)
	fs.Var(&f.attrs, "attr", "a partition attribute `KEY=VALUE` for the rate limit's partition policy (repeatable), as in -attr tenant=acme")
	fs.Var(newStringValue(&f.server, ""), "server", "ask the coordhost daemon at `URL` (http:// or https://) instead, NAME being a "+
		"rate_limit block of its configuration")
	fs.Var(newInt64Value(&f.n, 1), "n", "ask for `N` permits; 0 asks whether one is available, consuming nothing (not with -server)")
	return fs
}

// int64Value is an int64 flag whose error says what it takes.
type int64Value struct{ n *int64 }

func newInt64Value(n *int64, def int64) int64Value {
	*n = def
	return int64Value{n}
}

func (v int64Value) String() string {
	if v.n == nil {
		return "0"
	}
	return strconv.FormatInt(*v.n, 10)
}

func (v int64Value) Set(s string) error {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return errors.New("want a whole number")
	}
	*v.n = n
	return nil
}

// parseLimitCheckArgs parses the arguments after `limit check`: flags and
// NAME, in any order. getenv supplies COORDHOST_REDIS_URL.
func parseLimitCheckArgs(args []string, getenv func(string) string) (limitCheckArgs, error) {
	var a limitCheckArgs
	var f limitCheckFlags
	fs := newLimitCheckFlags(&f)
	positional, err := parseInterspersed(fs, args)
	if err != nil {
		return a, err
	}
	switch {
	case len(positional) == 0:
		return a, errors.New("missing rate_limit NAME")
	case len(positional) > 1:
		return a, fmt.Errorf("unexpected argument %q: limit check takes one NAME", positional[1])
	case positional[0] == "":
		return a, errors.New("rate_limit NAME is empty")
	}
	a.name = positional[0]
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["server"] {
		return parseLimitCheckServer(a, f, set, getenv)
	}
	switch {
	case !set["config"]:
		return a, errors.New("missing -config FILE or -server URL: NAME is a rate_limit block of the file, or of the daemon's configuration")
	case f.config == "":
		return a, errors.New("-config FILE is empty")
	case f.n < 0:
		return a, fmt.Errorf("-n must not be negative, got %d", f.n)
	}
	a.n, a.target.configPath = f.n, f.config
	if a.target.load.Vars, err = parseVars(f.vars); err != nil {
		return a, err
	}
	if a.attrs, err = parseAttrs(f.attrs); err != nil {
		return a, err
	}
	t := &a.target
	t.redis, t.redisFrom, t.redisOpt, t.redisDesc, err = redisFromFlag(set["redis"], f.redis, getenv)
	return a, err
}

// parseLimitCheckServer finishes parsing a `limit check -server URL`
// command line.
func parseLimitCheckServer(a limitCheckArgs, f limitCheckFlags, set map[string]bool, getenv func(string) string) (limitCheckArgs, error) {
	if err := serverExcludes(set, fmt.Sprintf("rate_limit %q", a.name)); err != nil {
		return a, err
	}
	switch {
	case f.n < 0:
		return a, fmt.Errorf("-n must not be negative, got %d", f.n)
	case f.n == 0:
		// The API's cost 0 means 1: it has no question that consumes nothing.
		return a, errors.New("-n 0 cannot be used with -server: the daemon's Check always consumes the permits it grants")
	}
	t, err := parseAPITarget(f.server, getenv)
	if err != nil {
		return a, err
	}
	a.server, a.n = &t, f.n
	a.attrs, err = parseAttrs(f.attrs)
	return a, err
}

// runLimitCheck implements `coordhost limit check`: one decision
// (TryAcquire) of the file's rate_limit NAME, printed on one line of
// stdout; the exit status is the answer.
func runLimitCheck(ctx context.Context, args []string, e *env) int {
	const cmd = "limit check"
	a, err := parseLimitCheckArgs(args, e.getenv)
	if errors.Is(err, flag.ErrHelp) {
		return e.printHelp(cmd)
	}
	if err != nil {
		return e.usageErrorFor(cmd, "%s: %v", cmd, err)
	}
	if a.server != nil {
		return checkFromServer(ctx, a, e)
	}
	conf, diags := config.Load(a.target.configPath, a.target.load)
	if diags.HasErrors() {
		e.writeDiags(a.target.configPath, conf.Files(), diags)
		errs, _ := countDiags(diags)
		e.logf("%s: %s: %s", cmd, a.target.configPath, plural(errs, "error"))
		return exitCheckError
	}
	rc := conf.RateLimit(a.name)
	if rc == nil {
		names := make([]string, 0, len(conf.RateLimits))
		for _, r := range conf.RateLimits {
			names = append(names, strconv.Quote(r.Name))
		}
		sort.Strings(names)
		list := "it declares no rate_limit blocks"
		if len(names) > 0 {
			list = "it declares " + strings.Join(names, ", ")
		}
		return e.usageErrorFor(cmd, "%s: %s has no rate_limit %q (%s)", cmd, a.target.configPath, a.name, list)
	}
	if a.attrs != nil && rc.Partition == nil {
		return e.usageErrorFor(cmd, "%s: -attr given, but rate_limit %q has no partition policy to use it", cmd, a.name)
	}
	if conf.Redis == nil && a.target.redis == "" {
		// Dev mode would start a private server that forgets every count
		// when this command exits: every check would be a first one.
		return e.usageErrorFor(cmd, "%s: %s has no redis block: give -redis ADDR or $%s (a private dev-mode server would forget the counts when limit check exits)",
			cmd, a.target.configPath, envRedisURL)
	}
	e.writeDiags(a.target.configPath, conf.Files(), diags) // warnings

	h, stop, _, err := startHost(ctx, conf, a.target, e)
	if err != nil {
		e.logf("%s: %v", cmd, err)
		return exitCheckError
	}
	defer stop()
	rl, err := h.RateLimit(a.name)
	if err != nil {
		e.logf("%s: %v", cmd, err)
		return exitCheckError
	}
	res, err := rl.TryAcquire(ctx, a.attrs, a.n)
	if err != nil {
		e.logf("%s: %v", cmd, err) // err names the rate limit
		return exitCheckError
	}
	return e.decided(a, decision{acquired: res.Acquired, remaining: res.Remaining, retryAfter: res.RetryAfter,
		resetAfter: res.ResetAfter, limit: res.Limit, window: res.Window, hasWindow: true})
}

// decided prints the decision d on a's question and returns the exit status.
func (e *env) decided(a limitCheckArgs, d decision) int {
	printLine(e.stdout, checkLine(a.name, a.n, d))
	if d.acquired {
		return exitGranted
	}
	if a.n > d.limit {
		e.logf("limit check: %d permits exceed the limit %d of rate_limit %q: never granted", a.n, d.limit, a.name)
	}
	return exitRefused
}

// checkFromServer is `limit check -server URL NAME`: one
// RateLimitService.Check, which decides at once and consumes what it
// grants. Every error is exitCheckError.
func checkFromServer(ctx context.Context, a limitCheckArgs, e *env) int {
	const cmd = "limit check"
	api, err := newAPIClient(*a.server, e.apiPing)
	if err != nil {
		e.logf("%s: %v", cmd, err)
		return exitCheckError
	}
	defer api.close()
	cctx, cancel := context.WithTimeout(ctx, apiCallTimeout)
	defer cancel()
	resp, err := api.limit.Check(cctx, connect.NewRequest(&coordhostv1.CheckRateLimitRequest{Name: a.name, Attributes: a.attrs, Cost: a.n}))
	if err != nil {
		text := apiErrorText(api.url, err)
		if refusedArgs(err) {
			return e.usageErrorFor(cmd, "%s: rate_limit %q: %s", cmd, a.name, text)
		}
		e.logf("%s: rate_limit %q: %s", cmd, a.name, text)
		return exitCheckError
	}
	m := resp.Msg
	// The answer has no window: the line goes without it.
	return e.decided(a, decision{acquired: m.GetAllowed(), remaining: m.GetRemaining(), retryAfter: m.GetRetryAfter().AsDuration(),
		resetAfter: m.GetResetAfter().AsDuration(), limit: m.GetLimit()})
}

// decision is what limit check prints of a ratelimit.Result (which this
// package reaches through host only, DESIGN.md §1).
type decision struct {
	acquired                       bool
	remaining, limit               int64
	retryAfter, resetAfter, window time.Duration
	hasWindow                      bool // window is known (not from -server)
}

// checkLine is the one stdout line of a decision: "granted" or
// "refused", then key=value fields (durations in Go's notation, to the
// millisecond); window only when known.
func checkLine(name string, n int64, d decision) string {
	word := "refused"
	if d.acquired {
		word = "granted"
	}
	s := fmt.Sprintf("%s rate_limit=%q n=%d remaining=%d retry_after=%v reset_after=%v limit=%d",
		word, name, n, d.remaining, roundUp(d.retryAfter), roundUp(d.resetAfter), d.limit)
	if d.hasWindow {
		s += fmt.Sprintf(" window=%v", d.window)
	}
	return s
}

// roundUp rounds d up to the millisecond, so that a retry after the
// printed time is never early.
func roundUp(d time.Duration) time.Duration {
	if r := d % time.Millisecond; r != 0 {
		d += time.Millisecond - r
	}
	return d
}
