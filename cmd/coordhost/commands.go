package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// command is one subcommand: its help (printed for -h and by `coordhost
// help NAME`) and its implementation.
type command struct {
	name    string // as typed after "coordhost": "serve", "lock hold"
	args    string // what follows name in the usage line
	summary string // one line for the list of commands
	about   string // what the command does, a paragraph or two
	// flags returns the command's flag set, with the definitions the
	// parser uses (values go to a throwaway destination); nil if the
	// command has none.
	flags func() *flag.FlagSet
	env   []string // "NAME  what it means" lines of the Environment section
	exit  string   // the Exit status paragraph
	run   func(ctx context.Context, args []string, e *env) int
}

// commandGroup is a word that only groups subcommands ("lock").
type commandGroup struct {
	name    string
	summary string
	subs    []string // full names of its commands, as in commands()
}

// Environment variables coordhost reads.
const (
	envRedisURL = "COORDHOST_REDIS_URL"
	envNoColor  = "NO_COLOR"
)

// apiEnvHelp returns the Environment lines of the commands with -server.
func apiEnvHelp() []string {
	return []string{
		envToken + "  with -server: a bearer token sent to the daemon",
		envTLSCert + "  with an https -server: a client certificate (PEM file) for mutual TLS, its key in " + envTLSKey,
		envTLSCA + "  with an https -server: the CAs (PEM file) the daemon's certificate must chain to (default: the system's)",
	}
}

const (
	noColorHelp  = envNoColor + "  no colors in diagnostics, even on a terminal"
	durationHelp = "as in 15s, 500ms or 2m"
	varHelp      = "set a variable of the configuration file, as `NAME=VALUE` (repeatable; a later value wins; list and object values are HCL, as in -var 'addrs=[\"a\"]')"
)

func commands() []*command {
	return []*command{
		{
			name:    "serve",
			args:    "[flags] FILE",
			summary: "run the daemon for the configuration FILE",
			about: `Runs coordhost for the configuration FILE (HCL, see examples/coordhost.hcl):
its Redis client, policies and named primitives, and one port (server.listen,
or -listen) serving the network API: the coordhost.v1 services over gRPC,
gRPC-Web and Connect (JSON too), Envoy's rate-limit service, grpc.health.v1,
server reflection, /livez, /readyz and /metrics; TLS and API tokens come
from FILE's server block. Redis and its credentials come from FILE's redis
block; without one, serve starts a private redis-server (dev mode) and says
so. SIGHUP reloads FILE with the same -var values: a bad file is logged and
the previous configuration keeps serving. SIGINT or SIGTERM stops it
gracefully (10s for requests, then 10s for acquisitions); a second signal
stops it at once.`,
			flags: func() *flag.FlagSet { return newServeFlags(&serveFlags{}) },
			env:   []string{noColorHelp},
			exit: `0 after a clean shutdown; 1 if FILE has errors, the host cannot start or the
shutdown was not clean; 2 for usage errors; 128+N if signal N came while it
was starting.`,
			run: runServe,
		},
		{
			name:    "validate",
			args:    "[flags] FILE",
			summary: "check a configuration FILE without connecting to anything",
			about: `Loads FILE exactly as serve would, without connecting to Redis or starting
plugins, and prints every mistake at once to stderr, each with its file,
line and source snippet; it prints "FILE: OK" when there is none.`,
			flags: func() *flag.FlagSet { return newValidateFlags(&validateFlags{}) },
			env:   []string{noColorHelp},
			exit:  `0 if FILE has no errors (warnings alone are fine); 1 if it has; 2 for usage errors.`,
			run:   runValidate,
		},
		{
			name:    "lock hold",
			args:    "[flags] NAME -- CMD [ARGS...]",
			summary: "run CMD while holding the lock NAME",
			about: `Acquires the lock NAME (waiting while another holder has it), runs CMD
while renewing the lock every ttl/3, and releases it when CMD exits. CMD gets
COORDHOST_LOCK_NAME (and COORDHOST_FENCING_TOKEN) in its environment. If the
lock is lost, CMD gets SIGTERM, and SIGKILL if it or anything in its process
group still runs 5s later. SIGINT, SIGTERM and SIGHUP are forwarded to CMD
(to its whole process group unless stdin is a terminal). Flags go before
"--", before or after NAME. With -server the daemon holds the lock while the
connection lasts; a broken connection loses it.`,
			flags: func() *flag.FlagSet { return newHoldFlags(&holdFlags{}) },
			env: append([]string{
				envRedisURL + "  the Redis server (as for -redis) when -redis is not given; keeps a password out of the command line",
				"COORDHOST_REDIS_SERVER  the redis-server binary for dev mode (default: redis-server on PATH)",
				noColorHelp,
			}, apiEnvHelp()...),
			exit: `CMD's exit status, or 128+N if signal N ended CMD (or coordhost, while it
waited for the lock); 1 if coordhost failed (Redis or the daemon, errors in
the -config FILE, not acquired within -wait or given up by the retry policy,
lock lost even if CMD exited 0); 2 for usage errors (and names or values the
daemon refuses); 126 if CMD could not be started; 127 if CMD was not found.`,
			run: runHold,
		},
		{
			name:    "rwlock hold",
			args:    "[flags] -config FILE NAME -- CMD [ARGS...]",
			summary: "run CMD while holding a read or write lease of the rwlock NAME",
			about: `Like lock hold, for the read-write lock NAME: takes a read lease (-read,
shared with other readers) or the write lease (-write, the default), waiting
while the other kind is held, and runs CMD under it. NAME is an rwlock block
of FILE: its ttl, prefix and policies apply, its starvation policy deciding
when a waiting writer holds new readers off. Flags go before "--", before or
after NAME.`,
			flags: func() *flag.FlagSet { return newHoldFlagsFor(rwlockHold, &holdFlags{}) },
			env: []string{
				envRedisURL + "  the Redis server (as for -redis) when -redis is not given; keeps a password out of the command line",
				"COORDHOST_REDIS_SERVER  the redis-server binary for dev mode (default: redis-server on PATH)",
				noColorHelp,
			},
			exit: `as for lock hold: CMD's exit status, or 128+N if signal N ended CMD (or
coordhost, while it waited); 1 if coordhost failed (Redis, errors in the
-config FILE, not acquired within -wait or given up by the retry policy, lease
lost even if CMD exited 0); 2 for usage errors; 126 if CMD could not be
started; 127 if CMD was not found.`,
			run: runRWLockHold,
		},
		{
			name:    "limit check",
			args:    "[flags] (-config FILE | -server URL) NAME",
			summary: "ask the rate limit NAME for permits once, and exit 0 if granted",
			about: `Asks the rate limit NAME, a rate_limit block of FILE, for -n permits
(default 1) once, without waiting or queueing, and prints one line to stdout:
"granted" or "refused", then rate_limit, n, remaining (permits left after
the decision), retry_after (when refused: how long until the permits are
back if nobody else takes them; 0 when they can never be granted),
reset_after (until more permits come back), limit and window, as key=value
fields with durations rounded up to the millisecond (no window with -server:
the daemon does not say it). Granted permits are consumed. With a partition
policy, -attr gives its attributes; a policy that gives no key fails the
check (it never guesses one). Flags go before or after NAME.`,
			flags: func() *flag.FlagSet { return newLimitCheckFlags(&limitCheckFlags{}) },
			env: append([]string{
				envRedisURL + "  the Redis server (as for -redis) when -redis is not given and FILE has no redis block",
				noColorHelp,
			}, apiEnvHelp()...),
			exit: `0 if the permits were granted; 1 if not; 2 for anything else (usage errors,
errors in FILE, an unknown NAME, Redis or daemon errors, a partition policy
that gave no key), so that a check that could not be made is never taken
for a refusal.`,
			run: runLimitCheck,
		},
		{
			name:    "dev-redis",
			args:    "[-socket PATH]",
			summary: "run a private redis-server on a unix socket",
			about: `Runs a private redis-server that listens only on a unix socket, until
SIGINT or SIGTERM; lock hold processes can share it with -redis PATH.`,
			flags: func() *flag.FlagSet { return newDevRedisFlags(new(string)) },
			env:   []string{"COORDHOST_REDIS_SERVER  the redis-server binary (default: redis-server on PATH)"},
			exit:  `0 after SIGINT or SIGTERM; 1 if redis-server cannot start or dies; 2 for usage errors.`,
			run:   runDevRedis,
		},
		{
			name:    "version",
			summary: "print coordhost's version",
			about:   `Prints the version of coordhost, the Go version and platform it was built with, and the rueidis version linked in.`,
			exit:    `0.`,
			run:     runVersion,
		},
	}
}

func groups() []*commandGroup {
	return []*commandGroup{
		{name: "lock", summary: "hold a Redis lock around a command", subs: []string{"lock hold"}},
		{name: "rwlock", summary: "hold a read or write lease of a Redis read-write lock around a command", subs: []string{"rwlock hold"}},
		{name: "limit", summary: "check a rate limit of a configuration file or a daemon", subs: []string{"limit check"}},
	}
}

// findCommand returns the command with the full name.
func findCommand(name string) *command {
	for _, c := range commands() {
		if c.name == name {
			return c
		}
	}
	return nil
}

func findGroup(name string) *commandGroup {
	for _, g := range groups() {
		if g.name == name {
			return g
		}
	}
	return nil
}

func isHelpArg(s string) bool {
	switch s {
	case "help", "-h", "-help", "--help":
		return true
	}
	return false
}

// run executes one command line (without the program name) and returns the
// exit status.
func run(ctx context.Context, args []string, e *env) int {
	if len(args) == 0 {
		fmt.Fprint(e.stderr, topHelp())
		return exitUsage
	}
	if isHelpArg(args[0]) {
		return e.help(args[1:])
	}
	if args[0] == "-version" || args[0] == "--version" {
		return runVersion(ctx, args[1:], e)
	}
	if g := findGroup(args[0]); g != nil {
		if len(args) < 2 {
			return e.usageErrorFor(g.name, "%s: missing subcommand (%s)", g.name, subNames(g))
		}
		if isHelpArg(args[1]) {
			fmt.Fprint(e.stdout, groupHelp(g))
			return exitOK
		}
		c := findCommand(g.name + " " + args[1])
		if c == nil {
			return e.usageErrorFor(g.name, "%s: unknown subcommand %q%s", g.name, args[1], didYouMean(args[1], subWords(g)...))
		}
		return c.run(ctx, args[2:], e)
	}
	if c := findCommand(args[0]); c != nil {
		return c.run(ctx, args[1:], e)
	}
	return e.usageErrorFor("", "unknown command %q%s", args[0], didYouMean(args[0], commandWords()...))
}

// help implements `coordhost help [COMMAND]`.
func (e *env) help(args []string) int {
	name := strings.Join(args, " ")
	switch {
	case name == "" || isHelpArg(name):
		fmt.Fprint(e.stdout, topHelp())
	case findCommand(name) != nil:
		fmt.Fprint(e.stdout, findCommand(name).help())
	case findGroup(name) != nil:
		fmt.Fprint(e.stdout, groupHelp(findGroup(name)))
	default:
		return e.usageErrorFor("", "help: unknown command %q%s", name, didYouMean(name, commandWords()...))
	}
	return exitOK
}

// printHelp prints c's help to stdout for -h and returns exitOK.
func (e *env) printHelp(name string) int {
	fmt.Fprint(e.stdout, findCommand(name).help())
	return exitOK
}

// subWords returns the last words of g's commands ("hold").
func subWords(g *commandGroup) []string {
	var words []string
	for _, s := range g.subs {
		words = append(words, s[len(g.name)+1:])
	}
	return words
}

// subNames lists subWords for messages: "hold".
func subNames(g *commandGroup) string { return strings.Join(subWords(g), ", ") }

// commandWords lists what may follow "coordhost": every command and group
// name, and every full subcommand name (so that "hold" suggests "lock
// hold").
func commandWords() []string {
	words := []string{"help"}
	for _, c := range commands() {
		words = append(words, c.name)
	}
	for _, g := range groups() {
		words = append(words, g.name)
	}
	return words
}

// helpWidth is the width help text is wrapped to.
const helpWidth = 80

func topHelp() string {
	var b strings.Builder
	b.WriteString("coordhost: distributed locks and coordination policies over Redis.\n\nUsage:\n")
	type line struct{ usage, summary string }
	var lines []line
	for _, c := range commands() {
		lines = append(lines, line{"coordhost " + c.name + " " + c.args, c.summary})
	}
	lines = append(lines, line{"coordhost help [COMMAND]", "show the help of a command"})
	for _, l := range lines {
		fmt.Fprintf(&b, "  %s\n      %s\n", strings.TrimSpace(l.usage), l.summary)
	}
	b.WriteString("\nRun 'coordhost COMMAND -h' for a command's flags, environment and exit\nstatus, as in 'coordhost lock hold -h'.\n")
	return b.String()
}

func groupHelp(g *commandGroup) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: coordhost %s SUBCOMMAND ...\n\n%s.\n\nSubcommands:\n", g.name, capitalize(g.summary))
	for _, s := range g.subs {
		c := findCommand(s)
		fmt.Fprintf(&b, "  coordhost %s %s\n      %s\n", c.name, c.args, c.summary)
	}
	fmt.Fprintf(&b, "\nRun 'coordhost %s -h' for its flags.\n", g.subs[0])
	return b.String()
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// help returns c's help text: usage, description, flags, environment and
// exit status.
func (c *command) help() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: %s\n\n%s\n", strings.TrimSpace("coordhost "+c.name+" "+c.args), strings.Join(wrap(c.about, helpWidth-4), "\n"))
	if c.flags != nil {
		b.WriteString("\nFlags:\n")
		writeFlags(&b, c.flags())
	}
	if len(c.env) > 0 {
		b.WriteString("\nEnvironment:\n")
		writeColumns(&b, c.env, "  ")
	}
	fmt.Fprintf(&b, "\n%s\n", strings.Join(wrap("Exit status: "+c.exit, helpWidth-4), "\n"))
	return b.String()
}

// writeFlags lists the flags of fs in name order: "-name ARG", then the
// usage text (flag.UnquoteUsage: a `back-quoted` word names the argument)
// and a non-zero default, wrapped to helpWidth.
func writeFlags(w io.Writer, fs *flag.FlagSet) {
	var rows []string
	fs.VisitAll(func(f *flag.Flag) {
		arg, usage := flag.UnquoteUsage(f)
		left := "-" + f.Name
		if arg != "" {
			left += " " + arg
		}
		if !isZeroDefault(f) {
			def := f.DefValue
			if _, ok := f.Value.(*stringValue); ok {
				def = strconv.Quote(def)
			}
			usage += " (default " + def + ")"
		}
		rows = append(rows, left+"  "+usage)
	})
	writeColumns(w, rows, "  ")
}

func isZeroDefault(f *flag.Flag) bool {
	switch f.DefValue {
	case "", "0", "0s", "false", "[]":
		return true
	}
	return false
}

// writeColumns writes rows of the form "LEFT  TEXT" (split at the first
// double space) as two columns: every LEFT padded to the widest, TEXT
// wrapped to helpWidth and indented under itself.
func writeColumns(w io.Writer, rows []string, indent string) {
	width := 0
	for _, r := range rows {
		left, _, _ := strings.Cut(r, "  ")
		width = max(width, utf8.RuneCountInString(left))
	}
	for _, r := range rows {
		left, text, _ := strings.Cut(r, "  ")
		pad := strings.Repeat(" ", width-utf8.RuneCountInString(left)+2)
		hang := indent + strings.Repeat(" ", width+2)
		lines := wrap(strings.TrimSpace(text), helpWidth-len(hang))
		fmt.Fprintf(w, "%s%s%s%s\n", indent, left, pad, lines[0])
		for _, l := range lines[1:] {
			fmt.Fprintf(w, "%s%s\n", hang, l)
		}
	}
}

// wrap splits text into lines of at most width runes, at spaces.
func wrap(text string, width int) []string {
	width = max(width, 20)
	var lines []string
	line := ""
	for _, word := range strings.Fields(text) {
		switch {
		case line == "":
			line = word
		case utf8.RuneCountInString(line)+1+utf8.RuneCountInString(word) <= width:
			line += " " + word
		default:
			lines = append(lines, line)
			line = word
		}
	}
	return append(lines, line)
}

// usageErrorFor prints "coordhost: MSG" and where to find the usage of
// the command (or group) name ("" for coordhost itself) to stderr, and
// returns exitUsage.
func (e *env) usageErrorFor(name, format string, args ...any) int {
	e.logf(format, args...)
	if name == "" {
		printLine(e.stderr, "Run 'coordhost help' for usage.")
	} else {
		printLine(e.stderr, "Run 'coordhost "+name+" -h' for usage.")
	}
	return exitUsage
}

// didYouMean returns `; did you mean "X"?` for the candidate closest to
// word, or "" if none is close: a small edit distance (typos, swapped
// letters) or word being the start of it.
func didYouMean(word string, candidates ...string) string {
	if s := closest(word, candidates); s != "" {
		return fmt.Sprintf("; did you mean %q?", s)
	}
	return ""
}

// closest returns the candidate that word most likely misspells, or "".
// For a candidate of several words ("lock hold"), its last word counts
// too, so that "hodl" finds "lock hold".
func closest(word string, candidates []string) string {
	word = strings.ToLower(word)
	best, bestScore := "", 1<<30
	for _, c := range candidates {
		for _, form := range []string{c, c[strings.LastIndexByte(c, ' ')+1:]} {
			score := 1 << 30
			n := utf8.RuneCountInString(form)
			switch d := editDistance(word, form); {
			case d == 0:
				score = 0
			case d <= max(1, min(2, n/3)):
				score = 2 * d
			case utf8.RuneCountInString(word) >= 2 && strings.HasPrefix(form, word):
				score = 1
			}
			if score < bestScore {
				best, bestScore = c, score
			}
		}
	}
	return best
}

// editDistance is the optimal string alignment distance between a and b:
// insertions, deletions, substitutions and swaps of adjacent runes.
func editDistance(a, b string) int {
	x, y := []rune(a), []rune(b)
	d := make([][]int, len(x)+1)
	for i := range d {
		d[i] = make([]int, len(y)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(x); i++ {
		for j := 1; j <= len(y); j++ {
			cost := 1
			if x[i-1] == y[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && x[i-1] == y[j-2] && x[i-2] == y[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(x)][len(y)]
}

// Flag values with errors that say what was expected. The flag package
// wraps a Set error as `invalid value "X" for flag -NAME: ERR`;
// flagError turns that into `-NAME "X": ERR`.

// durationValue is a time.Duration flag whose errors show what a duration
// looks like.
type durationValue struct{ d *time.Duration }

func newDurationValue(d *time.Duration, def time.Duration) durationValue {
	*d = def
	return durationValue{d}
}

func (v durationValue) String() string {
	if v.d == nil {
		return "0s"
	}
	return v.d.String()
}

func (v durationValue) Set(s string) error {
	d, err := parseDuration(s)
	if err != nil {
		return err
	}
	*v.d = d
	return nil
}

// parseDuration is time.ParseDuration with errors for people.
func parseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err == nil {
		return d, nil
	}
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, errors.New("empty; a duration looks like 5s, 500ms or 1m")
	}
	if _, nerr := strconv.ParseFloat(strings.TrimLeft(t, "+-"), 64); nerr == nil {
		return 0, errors.New("a duration needs a unit, like 5s, 500ms or 1m")
	}
	if strings.Contains(err.Error(), "unknown unit") {
		return 0, errors.New("unknown unit; a duration looks like 5s, 500ms, 1m or 1h30m (units ns, us, ms, s, m, h)")
	}
	if durationSyntax(t) {
		// Well formed, so time.ParseDuration's "invalid duration" means
		// it does not fit in an int64 of nanoseconds.
		return 0, errors.New("too long; durations go up to about 290 years (2562047h)")
	}
	return 0, errors.New("not a duration; a duration looks like 5s, 500ms, 1m or 1h30m")
}

// durationSyntax reports whether s is written like a duration: an
// optional sign, then one or more decimal numbers each followed by a unit
// time.ParseDuration knows.
func durationSyntax(s string) bool {
	s = strings.TrimLeft(s, "+-")
	if s == "" {
		return false
	}
	for s != "" {
		i := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
		if i <= 0 || strings.Trim(s[:i], ".") == "" {
			return false
		}
		s = s[i:]
		j := strings.IndexFunc(s, func(r rune) bool { return (r >= '0' && r <= '9') || r == '.' })
		if j < 0 {
			j = len(s)
		}
		switch s[:j] {
		case "ns", "us", "µs", "μs", "ms", "s", "m", "h":
		default:
			return false
		}
		s = s[j:]
	}
	return true
}

// boolValue is a bool flag whose error says what it takes.
type boolValue struct{ b *bool }

func (v boolValue) IsBoolFlag() bool { return true }

func (v boolValue) String() string {
	if v.b == nil {
		return "false"
	}
	return strconv.FormatBool(*v.b)
}

func (v boolValue) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return errors.New("want true or false, or the flag alone for true")
	}
	*v.b = b
	return nil
}

// stringValue is a string flag (its own type so that help quotes its
// default).
type stringValue struct{ s *string }

func newStringValue(s *string, def string) *stringValue {
	*s = def
	return &stringValue{s}
}

func (v *stringValue) String() string {
	if v == nil || v.s == nil {
		return ""
	}
	return *v.s
}

func (v *stringValue) Set(s string) error { *v.s = s; return nil }

// newFlagSet returns a flag set that reports errors instead of printing
// them.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// flagError rewrites the flag package's parse errors of fs: a bad value
// becomes `-NAME "VALUE": what is wrong`, and an unknown flag gets a
// suggestion. Other errors (and flag.ErrHelp) pass unchanged.
func flagError(fs *flag.FlagSet, err error) error {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return err
	}
	msg := err.Error()
	for _, prefix := range []string{"invalid value ", "invalid boolean value "} {
		rest, ok := strings.CutPrefix(msg, prefix)
		if !ok {
			continue
		}
		q, qerr := strconv.QuotedPrefix(rest)
		if qerr != nil {
			break
		}
		rest = rest[len(q):]
		if r, ok := strings.CutPrefix(rest, " for flag -"); ok {
			rest = r
		} else if r, ok := strings.CutPrefix(rest, " for -"); ok {
			rest = r
		} else {
			break
		}
		name, why, ok := strings.Cut(rest, ": ")
		if !ok {
			break
		}
		return fmt.Errorf("-%s %s: %s", name, q, why)
	}
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		var names []string
		fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
		if s := closest(strings.TrimLeft(name, "-"), names); s != "" {
			return fmt.Errorf("%s (did you mean -%s?)", msg, s)
		}
	}
	return err
}

// runVersion implements `coordhost version`.
func runVersion(_ context.Context, args []string, e *env) int {
	if len(args) > 0 {
		if isHelpArg(args[0]) {
			return e.printHelp("version")
		}
		return e.usageErrorFor("version", "version: unexpected argument %q", args[0])
	}
	fmt.Fprintln(e.stdout, versionString())
	return exitOK
}
