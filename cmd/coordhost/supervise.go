package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// childResult is how a supervised child ended.
type childResult struct {
	// status is the exit status coordhost passes on: the child's exit code,
	// or 128+N if signal N ended it.
	status int
	// signal is the signal that ended the child, or nil.
	signal syscall.Signal
	// lost is true if the lock was lost while the child ran (and so the
	// child was told to stop).
	lost bool
	// killed is true if the child had to be sent SIGKILL after the grace.
	killed bool
}

// supervisor runs one child process while a lock is held.
type supervisor struct {
	// signals delivers the signals coordhost received; each is forwarded to
	// the child.
	signals <-chan os.Signal
	// grace is the time between SIGTERM and SIGKILL after the lock is lost.
	grace time.Duration
	// logf prints a "coordhost: ..." line.
	logf func(format string, args ...any)
	// what names the lock in messages.
	what string
	// skipForward lists signals not to forward (the child got them from
	// the terminal already).
	skipForward map[syscall.Signal]bool
}

// run starts cmd and waits for it to exit. While it runs, signals from
// s.signals are forwarded to it, and when lost is closed (the lock's Done
// channel) the child is sent SIGTERM and, if it is still running after
// s.grace, SIGKILL. If cmd.SysProcAttr puts the child in its own process
// group, signals go to the whole group. The error is non-nil only if the
// child could not be started.
func (s *supervisor) run(cmd *exec.Cmd, lost <-chan struct{}) (childResult, error) {
	if err := cmd.Start(); err != nil {
		return childResult{}, err
	}
	ownGroup := cmd.SysProcAttr != nil && cmd.SysProcAttr.Setpgid
	send := func(sig syscall.Signal) {
		if err := signalChild(cmd.Process, ownGroup, sig); err != nil {
			s.logf("sending %s to %s: %v", signalName(sig), cmd.Args[0], err)
		}
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()

	var res childResult
	var killTimer *time.Timer
	var killC <-chan time.Time
	defer func() {
		if killTimer != nil {
			killTimer.Stop()
		}
	}()
	for {
		select {
		case err := <-waited:
			res.status, res.signal = exitStatus(cmd.ProcessState, err)
			if res.lost && ownGroup {
				// The lock is gone: make sure nothing the child left behind
				// in its group keeps working without it. Members had SIGTERM
				// already; the group outlives its leader only through them.
				_ = signalChild(cmd.Process, true, syscall.SIGKILL)
			}
			return res, nil
		case <-lost:
			lost = nil
			res.lost = true
			s.logf("lost lock %s; stopping %s (SIGTERM now, SIGKILL in %v)", s.what, cmd.Args[0], s.grace)
			send(syscall.SIGTERM)
			killTimer = time.NewTimer(s.grace)
			killC = killTimer.C
		case <-killC:
			killC = nil
			res.killed = true
			s.logf("%s still running %v after SIGTERM; sending SIGKILL", cmd.Args[0], s.grace)
			send(syscall.SIGKILL)
		case sig := <-s.signals:
			if ss, ok := sig.(syscall.Signal); ok && !s.skipForward[ss] {
				send(ss)
			}
		}
	}
}

// signalChild sends sig to p, or to p's whole process group if group is
// set (the child is its group's leader). A child that is already gone is
// not an error.
func signalChild(p *os.Process, group bool, sig syscall.Signal) error {
	var err error
	if group {
		// The group id is the child's pid, and stays reserved while any
		// member lives; it is signalled only before the child was reaped
		// or right after, on the lost-lock path.
		err = syscall.Kill(-p.Pid, sig)
	} else {
		err = p.Signal(sig)
	}
	if err == nil || errors.Is(err, syscall.ESRCH) || errors.Is(err, os.ErrProcessDone) {
		return nil
	}
	return err
}

// exitStatus maps a finished process to the status coordhost exits with:
// its exit code, or 128+N if signal N ended it.
func exitStatus(ps *os.ProcessState, waitErr error) (int, syscall.Signal) {
	if ps == nil {
		// Wait failed without a process state; should not happen after a
		// successful Start.
		return exitFailure, 0
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return exitSignalOffset + int(ws.Signal()), ws.Signal()
	}
	if code := ps.ExitCode(); code >= 0 {
		return code, 0
	}
	return exitFailure, 0
}

// signalName returns "SIGTERM" style names for messages.
func signalName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGQUIT:
		return "SIGQUIT"
	}
	return fmt.Sprintf("signal %d (%v)", int(sig), sig)
}
