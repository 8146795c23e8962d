// Command coordhost is the command-line front end of coordhost.
//
// `coordhost serve -config FILE` runs the daemon (package host) for a
// configuration file; `coordhost validate FILE` checks one; `coordhost lock
// hold NAME -- CMD ARGS...` runs CMD while holding a Redis lock, given by
// flags or by a lock block of a configuration file; `coordhost dev-redis`
// runs a private redis-server. Run `coordhost help` for the usage.
//
// This package holds only flags, signals, exit codes and messages; the
// work is done by packages host, host/devredis, config and
// primitives/lock.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"syscall"
	"time"
)

// Exit statuses of coordhost itself. A child's status is passed through.
const (
	exitOK           = 0
	exitFailure      = 1   // coordhost's own errors: Redis, bad config file, lock not acquired, lock lost
	exitUsage        = 2   // bad command line
	exitCannotRun    = 126 // CMD was found but could not be started
	exitCmdNotFound  = 127 // CMD was not found
	exitSignalOffset = 128 // 128+N: CMD (or, while waiting, coordhost) was ended by signal N
)

// defaultGrace is how long a child gets between SIGTERM and SIGKILL after
// the lock was lost.
const defaultGrace = 5 * time.Second

const usageText = `Usage:
  coordhost serve -config FILE [-var NAME=VALUE]... [-listen ADDR]
  coordhost validate [-var NAME=VALUE]... FILE
  coordhost lock hold [flags] NAME -- CMD [ARGS...]
  coordhost dev-redis [-socket PATH]
  coordhost version
  coordhost help

serve runs the coordhost daemon for the configuration FILE (HCL; see
examples/coordhost.hcl): the Redis client, the policies and the named locks,
and an HTTP server on server.listen with /livez, /readyz and /metrics. It
prints the address it listens on, and logs to stderr as server.log_format
(text or json) at server.log_level says. Without a redis block in FILE it
starts a private redis-server (dev mode, see dev-redis) and says so.
SIGHUP reloads FILE (with the same -var values): a bad file is logged,
diagnostic by diagnostic, and the previous configuration keeps serving.
SIGINT or SIGTERM stops it gracefully: in-flight requests and acquisitions
get 10s each; a second signal stops it at once.
Exit status: 0 after a clean shutdown; 1 if FILE has errors (printed as
validate prints them), the host cannot start or the shutdown was not clean;
2 for usage errors; 128+N if signal N came while it was starting.

Flags for serve:
  -config FILE     the configuration file (required)
  -var NAME=VALUE  set variable NAME of FILE (repeatable; a later value wins;
                   list and object values are HCL, as in -var 'addrs=["a"]')
  -listen ADDR     host:port to listen on instead of server.listen; port 0
                   picks a free port

validate loads FILE exactly as serve would, without connecting to Redis or
starting plugins, and prints every mistake at once to stderr, each with its
file, line and source snippet. It prints "FILE: OK" when there is none.
Exit status: 0 if FILE has no errors (warnings alone are fine), 1 if it has,
2 for usage errors. FILE may also be given as -config FILE; -var as for serve.

lock hold acquires the lock NAME, waiting for it if another holder has it,
runs CMD while renewing the lock every ttl/3, and releases the lock when CMD
exits. CMD inherits stdin, stdout and stderr, and gets COORDHOST_LOCK_NAME
(and, with fencing, COORDHOST_FENCING_TOKEN) in its environment.
If the lock is lost while CMD runs, CMD is sent SIGTERM and, if still
running 5s later, SIGKILL. SIGINT, SIGTERM and SIGHUP sent to coordhost are
forwarded to CMD. Unless stdin is a terminal, CMD runs in its own process
group, and every signal coordhost sends goes to that whole group; on a
terminal, CMD shares coordhost's group and gets ^C from the terminal itself.

Flags for lock hold (they go before -- and may come before or after NAME):
  -redis ADDR      Redis server: host:port, /path/to.sock, unix:///path/to.sock
                   or redis://[user:pass@]host:port[/db] (rediss:// for TLS).
                   Without -redis (and without -config), coordhost starts a
                   private redis-server on a unix socket in a fresh temporary
                   directory for this run only, and removes it at exit (dev
                   mode).
  -ttl DURATION    lease time of the lock, renewed every ttl/3 (default 15s)
  -prefix STRING   prefix of the lock's Redis key (default "coordhost:lock:")
  -fencing         take a fencing token and pass it to CMD as
                   COORDHOST_FENCING_TOKEN
  -wait DURATION   give up if the lock is not acquired within this time
                   (default 0: wait forever)
  -config FILE     NAME is a lock "NAME" block of the configuration FILE: its
                   ttl, fencing, prefix, retry policy and partition policy
                   apply, so -ttl, -fencing and -prefix are errors. Redis is
                   the file's redis block; -redis ADDR replaces its addresses
                   (its key_prefix stays); with neither, dev mode as above.
  -var NAME=VALUE  with -config: set a variable of FILE (repeatable)
  -attr KEY=VALUE  with -config: a partition attribute (repeatable), passed to
                   the lock's partition policy, as in -attr tenant=acme

dev-redis runs a private redis-server listening only on the unix socket PATH
(default: in a fresh temporary directory) until it gets SIGINT or SIGTERM;
lock hold processes can then share it with -redis PATH.

Exit status of lock hold: CMD's exit status, or 128+N if CMD was ended by
signal N (or coordhost was, while waiting for the lock); 1 if coordhost
failed (Redis errors, errors in the -config FILE, lock not acquired within
-wait or given up by the retry policy, or lock lost while CMD still exited
0); 2 for usage errors; 126 if CMD could not be started; 127 if CMD was not
found.

Environment:
  COORDHOST_REDIS_SERVER  redis-server binary for dev mode (default: the
                          redis-server found on PATH)
  NO_COLOR                no colors in diagnostics, even on a terminal
`

// env is what a run of the command reads and writes outside its arguments.
// Tests replace its fields; main uses the process's own.
type env struct {
	stdin          *os.File
	stdout, stderr io.Writer
	getenv         func(string) string
	environ        func() []string
	// notify starts relaying the signals coordhost handles to c; stop undoes it.
	notify func(c chan<- os.Signal)
	stop   func(c chan<- os.Signal)
	// grace is the time between SIGTERM and SIGKILL when the lock is lost.
	grace time.Duration
	// waitNote is how long lock hold waits quietly before it says that it
	// is waiting for the lock.
	waitNote time.Duration
}

func osEnv() *env {
	return &env{
		stdin:   os.Stdin,
		stdout:  os.Stdout,
		stderr:  os.Stderr,
		getenv:  os.Getenv,
		environ: os.Environ,
		// While waiting for the lock these signals cancel the wait; while
		// CMD runs they are forwarded to it.
		notify:   func(c chan<- os.Signal) { signal.Notify(c, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP) },
		stop:     func(c chan<- os.Signal) { signal.Stop(c) },
		grace:    defaultGrace,
		waitNote: slowWaitNote,
	}
}

func main() {
	os.Exit(run(context.Background(), os.Args[1:], osEnv()))
}

// logf writes one "coordhost: ..." line to stderr.
func (e *env) logf(format string, args ...any) {
	fmt.Fprintf(e.stderr, "coordhost: "+format+"\n", args...)
}

// usageError prints msg and a pointer to the usage to stderr and returns
// exitUsage.
func (e *env) usageError(format string, args ...any) int {
	fmt.Fprintf(e.stderr, "coordhost: "+format+"\n", args...)
	fmt.Fprintf(e.stderr, "Run 'coordhost help' for usage.\n")
	return exitUsage
}

// run executes one command line (without the program name) and returns the
// exit status.
func run(ctx context.Context, args []string, e *env) int {
	if len(args) == 0 {
		fmt.Fprint(e.stderr, usageText)
		return exitUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(e.stdout, usageText)
		return exitOK
	case "version", "-version", "--version":
		fmt.Fprintln(e.stdout, versionString())
		return exitOK
	case "lock":
		if len(args) < 2 {
			return e.usageError("lock: missing subcommand (hold)")
		}
		switch args[1] {
		case "hold":
			return runHold(ctx, args[2:], e)
		case "help", "-h", "-help", "--help":
			fmt.Fprint(e.stdout, usageText)
			return exitOK
		}
		return e.usageError("lock: unknown subcommand %q (want hold)", args[1])
	case "dev-redis":
		return runDevRedis(ctx, args[1:], e)
	case "serve":
		return runServe(ctx, args[1:], e)
	case "validate":
		return runValidate(ctx, args[1:], e)
	}
	return e.usageError("unknown command %q", args[0])
}

// versionString describes the build: module version (or "devel"), Go
// version and platform, and the rueidis version linked in.
func versionString() string {
	version, rueidisVersion := "devel", ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			version = v
		}
		for _, d := range bi.Deps {
			if d.Path == "github.com/redis/rueidis" {
				rueidisVersion = d.Version
			}
		}
	}
	s := fmt.Sprintf("coordhost %s (%s %s/%s", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	if rueidisVersion != "" {
		s += ", rueidis " + rueidisVersion
	}
	return s + ")"
}
