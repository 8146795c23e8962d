// Command coordhost is the command-line front end of coordhost.
//
// `coordhost serve FILE` runs the daemon (package host) for a
// configuration file; `coordhost validate FILE` checks one; `coordhost lock
// hold NAME -- CMD ARGS...` runs CMD while holding a Redis lock, given by
// flags or by a lock block of a configuration file, or held by a daemon
// (-server URL); `coordhost limit check -config FILE NAME` asks a rate
// limit of a configuration file (or of a daemon, -server URL) for permits
// once; `coordhost dev-redis` runs a private redis-server. `coordhost help` lists the commands and
// `coordhost COMMAND -h` shows a command's own help (commands.go).
//
// This package holds only flags, signals, exit codes and messages; the
// work is done by packages host, host/devredis, config and
// primitives/lock, and, with -server, by the daemon through the
// coordhost.v1 API (gen/..., apiclient.go).
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
	exitUsage        = 2   // bad command line; every error of limit check (limitcheck.go)
	exitCannotRun    = 126 // CMD was found but could not be started
	exitCmdNotFound  = 127 // CMD was not found
	exitSignalOffset = 128 // 128+N: CMD (or, while waiting, coordhost) was ended by signal N
)

// defaultGrace is how long a child gets between SIGTERM and SIGKILL after
// the lock was lost.
const defaultGrace = 5 * time.Second

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
	// apiPing is how long a connection to the daemon (-server) may be
	// silent before a PING, and how long the PING may take; 0 means
	// defaultAPIPing.
	apiPing time.Duration
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
		apiPing:  defaultAPIPing,
	}
}

func main() {
	os.Exit(run(context.Background(), os.Args[1:], osEnv()))
}

// logf writes one "coordhost: ..." line to stderr. The whole line is
// escaped with safeText: whatever the arguments carry (a policy module's
// message, Redis error text, a value from a file) stays on this one line
// and cannot steer the terminal.
func (e *env) logf(format string, args ...any) {
	printLine(e.stderr, "coordhost: "+fmt.Sprintf(format, args...))
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
