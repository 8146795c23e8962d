package main

import (
	"context"
	"errors"
	"flag"
	"os"
	"syscall"

	"github.com/coordhost/coordhost/host/devredis"
)

func newDevRedisFlags(socket *string) *flag.FlagSet {
	fs := newFlagSet("dev-redis")
	fs.Var(newStringValue(socket, ""), "socket", "the unix socket `PATH` to listen on (default: redis.sock in a fresh temporary directory, removed at exit)")
	return fs
}

// runDevRedis implements `coordhost dev-redis [-socket PATH]`: a private
// redis-server (package host/devredis) in the foreground until SIGINT,
// SIGTERM or SIGHUP.
func runDevRedis(ctx context.Context, args []string, e *env) int {
	socket := new(string)
	fs := newDevRedisFlags(socket)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return e.printHelp("dev-redis")
		}
		return e.usageErrorFor("dev-redis", "dev-redis: %v", flagError(fs, err))
	}
	if fs.NArg() > 0 {
		return e.usageErrorFor("dev-redis", "dev-redis: unexpected argument %q", fs.Arg(0))
	}

	sigs := make(chan os.Signal, 1)
	e.notify(sigs)
	defer e.stop(sigs)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stopRelay := relaySignalsToCancel(sigs, cancel)

	d, err := devredis.Start(ctx, devredis.Options{Socket: *socket, Getenv: e.getenv})
	stopRelay()
	if err != nil {
		if sig, ok := signalCause(ctx); ok {
			e.logf("dev mode: interrupted by %s while starting redis-server", signalName(sig))
			return exitSignalOffset + int(sig)
		}
		e.logf("%v", err)
		return exitFailure
	}
	e.logf("dev mode: started private redis-server on unix socket %s (pid %d); stop it with SIGINT or SIGTERM", d.Socket(), d.Pid())
	if sig, ok := signalCause(ctx); ok {
		// A signal came in right after the server was ready.
		_ = d.Stop()
		e.logf("dev mode: got %s; stopped redis-server", signalName(sig))
		return exitOK
	}
	select {
	case sig := <-sigs:
		if err := d.Stop(); err != nil {
			e.logf("%v", err)
			return exitFailure
		}
		name := "signal"
		if ss, ok := sig.(syscall.Signal); ok {
			name = signalName(ss)
		}
		e.logf("dev mode: got %s; stopped redis-server", name)
		return exitOK
	case <-d.Exited():
		tail := d.LogTail()
		err := d.Stop()
		e.logf("%v%s", err, tail)
		return exitFailure
	case <-ctx.Done():
		_ = d.Stop()
		return exitOK
	}
}
