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
	// what names the lock in messages: `lock "job"`.
	what string
	// skipForward lists signals not to forward (the child got them from
	// the terminal already).
	skipForward map[syscall.Signal]bool
}

// run starts cmd and waits for it to exit. While it runs, signals from
// s.signals are forwarded to it, and when lost is closed (the lock's Done
// channel) the child is stopped (see stopper): SIGTERM, and SIGKILL for
// whatever of its process group still runs after s.grace. If
// cmd.SysProcAttr puts the child in its own process group, signals go to
// the whole group. The error is non-nil only if the child could not be
// started.
func (s *supervisor) run(cmd *exec.Cmd, lost <-chan struct{}) (childResult, error) {
	if err := cmd.Start(); err != nil {
		return childResult{}, err
	}
	st := s.stopper(cmd)
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()

	var res childResult
	var killC <-chan time.Time
	defer st.stopTimer()
	for {
		select {
		case err := <-waited:
			res.status, res.signal = exitStatus(cmd.ProcessState, err)
			if res.lost {
				// The lock is gone: nothing the child left behind in its
				// group may keep working without it.
				st.finish()
			}
			return res, nil
		case <-lost:
			lost = nil
			res.lost = true
			killC = st.terminate(fmt.Sprintf("lost %s; stopping %s", s.what, cmd.Args[0]))
		case <-killC:
			killC = nil
			res.killed = true
			st.kill()
		case sig := <-s.signals:
			st.forward(sig)
		}
	}
}

// stopper stops a child after its lock was lost, the same way whichever
// way the loss was noticed: while the child runs (the lock's Done channel
// closed) or only after it exited (at that moment, or at release), when
// what it started in its process group may still run. It sends SIGTERM to
// the child (its whole process group if it has its own), and SIGKILL once
// the grace has passed to whatever still runs.
type stopper struct {
	s        *supervisor
	cmd      *exec.Cmd
	ownGroup bool
	termAt   time.Time   // when SIGTERM was sent; zero before
	timer    *time.Timer // fires at termAt + grace
	killed   bool        // SIGKILL was sent
}

func (s *supervisor) stopper(cmd *exec.Cmd) *stopper {
	return &stopper{s: s, cmd: cmd, ownGroup: cmd.SysProcAttr != nil && cmd.SysProcAttr.Setpgid}
}

// send sends sig to the child, or its group.
func (st *stopper) send(sig syscall.Signal) {
	if err := signalChild(st.cmd.Process, st.ownGroup, sig); err != nil {
		st.s.logf("sending %s to %s: %v", signalName(sig), st.cmd.Args[0], err)
	}
}

// forward passes a signal coordhost got on to the child, unless the
// terminal delivered it already.
func (st *stopper) forward(sig os.Signal) {
	if ss, ok := sig.(syscall.Signal); ok && !st.s.skipForward[ss] {
		st.send(ss)
	}
}

// terminate logs msg, sends SIGTERM and returns a channel that fires when
// the grace is over.
func (st *stopper) terminate(msg string) <-chan time.Time {
	st.s.logf("%s (SIGTERM now, SIGKILL in %v)", msg, st.s.grace)
	st.termAt = time.Now()
	st.send(syscall.SIGTERM)
	st.timer = time.NewTimer(st.s.grace)
	return st.timer.C
}

// kill sends SIGKILL to the child (or its group) that is still running
// after the grace.
func (st *stopper) kill() {
	st.s.logf("%s still running %v after SIGTERM; sending SIGKILL", st.cmd.Args[0], st.s.grace)
	st.killed = true
	st.send(syscall.SIGKILL)
}

func (st *stopper) stopTimer() {
	if st.timer != nil {
		st.timer.Stop()
	}
}

// finish runs after the child exited, its lock lost: if the child had its
// own process group and members of it still run, they get SIGTERM (unless
// the group had it already) and, once the grace since that SIGTERM has
// passed, SIGKILL. It returns when the group is gone or was killed.
// Signals coordhost gets meanwhile go to the group.
func (st *stopper) finish() {
	defer st.stopTimer()
	if !st.ownGroup || st.killed {
		// Without its own group the child's descendants cannot be told
		// apart from coordhost's; after SIGKILL nothing is left to wait for.
		return
	}
	pgid := st.cmd.Process.Pid
	if !groupAlive(pgid) {
		return
	}
	var deadline <-chan time.Time
	if st.termAt.IsZero() {
		deadline = st.terminate(fmt.Sprintf("lost %s; %s exited, but processes of its group still run: stopping them", st.s.what, st.cmd.Args[0]))
	} else {
		deadline = st.timer.C
	}
	// The group's members are not coordhost's children, so there is no
	// wait for them: poll. The group id stays reserved while any member
	// lives, so it is signalled only after a check that one does.
	poll := time.NewTicker(groupPollInterval)
	defer poll.Stop()
	for {
		select {
		case <-poll.C:
			if !groupAlive(pgid) {
				return
			}
		case <-deadline:
			if groupAlive(pgid) {
				st.s.logf("processes of %s's group still running %v after SIGTERM; sending SIGKILL", st.cmd.Args[0], st.s.grace)
				st.killed = true
				_ = signalChild(st.cmd.Process, true, syscall.SIGKILL)
			}
			return
		case sig := <-st.s.signals:
			if ss, ok := sig.(syscall.Signal); ok && groupAlive(pgid) {
				_ = signalChild(st.cmd.Process, true, ss)
			}
		}
	}
}

// stopLeftovers stops what cmd, which has exited, left running in its
// process group, for a lock found lost only after cmd exited: as run does
// for a lock lost while cmd runs.
func (s *supervisor) stopLeftovers(cmd *exec.Cmd) {
	s.stopper(cmd).finish()
}

// groupPollInterval is how often finish checks whether a process group
// is gone.
const groupPollInterval = 10 * time.Millisecond

// groupAlive reports whether the process group pgid has a member that has
// not exited. Members that exited but were not yet reaped by their parent
// count as gone (on Linux); exited members whose parent is coordhost (as
// when it runs as PID 1 in a container) are reaped here.
func groupAlive(pgid int) bool {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-pgid, &ws, syscall.WNOHANG, nil)
		if err != nil || pid <= 0 {
			break
		}
	}
	if err := syscall.Kill(-pgid, 0); err != nil {
		return false
	}
	return groupHasLiveMember(pgid)
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
