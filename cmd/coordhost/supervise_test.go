package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives"
)

// newSupervisor returns a supervisor whose messages go to the returned
// buffer and whose signals come from the returned channel.
func newSupervisor(grace time.Duration) (*supervisor, chan os.Signal, *xtest.SyncBuffer) {
	sigs := make(chan os.Signal, 4)
	log := &xtest.SyncBuffer{}
	return &supervisor{
		signals: sigs,
		grace:   grace,
		what:    `lock "job"`,
		logf:    func(f string, a ...any) { fmt.Fprintf(log, f+"\n", a...) },
	}, sigs, log
}

// shCmd returns `sh -c script` in its own process group, as coordhost runs
// CMD when stdin is not a terminal.
func shCmd(script string) *exec.Cmd {
	cmd := exec.Command("sh", "-c", script)
	cmd.SysProcAttr = childSysProcAttr(true)
	return cmd
}

// supervise runs cmd under s in a goroutine; the result arrives on the
// returned channel.
func supervise(t *testing.T, s *supervisor, cmd *exec.Cmd, lost <-chan struct{}) <-chan childResult {
	t.Helper()
	done := make(chan childResult, 1)
	errc := make(chan error, 1)
	go func() {
		res, err := s.run(cmd, lost)
		errc <- err
		done <- res
	}()
	t.Cleanup(func() {
		if cmd.Process != nil {
			_ = cmd.Process.Kill()
			if cmd.SysProcAttr != nil && cmd.SysProcAttr.Setpgid {
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			}
		}
	})
	return done
}

func awaitResult(t *testing.T, done <-chan childResult, d time.Duration) childResult {
	t.Helper()
	select {
	case res := <-done:
		return res
	case <-time.After(d):
		t.Fatalf("child did not finish within %v", d)
		return childResult{}
	}
}

func fileExists(path string) func() bool {
	return func() bool { _, err := os.Stat(path); return err == nil }
}

func TestExitStatusPropagation(t *testing.T) {
	t.Parallel()
	cases := []struct {
		script string
		status int
		sig    syscall.Signal
	}{
		{"exit 0", 0, 0},
		{"exit 3", 3, 0},
		{"exit 255", 255, 0},
		{"kill -TERM $$", 128 + 15, syscall.SIGTERM},
		{"kill -KILL $$", 128 + 9, syscall.SIGKILL},
		{"kill -INT $$", 128 + 2, syscall.SIGINT},
	}
	for _, tc := range cases {
		t.Run(tc.script, func(t *testing.T) {
			s, _, _ := newSupervisor(time.Second)
			res, err := s.run(shCmd(tc.script), nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.status != tc.status || res.signal != tc.sig || res.lost || res.killed {
				t.Fatalf("result = %+v, want status %d signal %v", res, tc.status, tc.sig)
			}
		})
	}
}

func TestSupervisorStartError(t *testing.T) {
	s, _, _ := newSupervisor(time.Second)
	cmd := exec.Command(filepath.Join(t.TempDir(), "missing"))
	if _, err := s.run(cmd, nil); err == nil {
		t.Fatal("run of a missing binary succeeded")
	}
}

// TestLostLockStopsChild: when the lock is lost the child (and its group)
// gets SIGTERM at once.
func TestLostLockStopsChild(t *testing.T) {
	t.Parallel()
	started := filepath.Join(t.TempDir(), "started")
	s, _, log := newSupervisor(10 * time.Second)
	lost := make(chan struct{})
	cmd := shCmd("touch " + started + "; sleep 30")
	done := supervise(t, s, cmd, lost)
	xtest.Eventually(t, 5*time.Second, "child to start", fileExists(started))
	t0 := time.Now()
	close(lost)
	res := awaitResult(t, done, 5*time.Second)
	if res.status != 143 || !res.lost || res.killed {
		t.Fatalf("result = %+v, want status 143, lost, not killed", res)
	}
	if d := time.Since(t0); d > 2*time.Second {
		t.Fatalf("child took %v to stop after SIGTERM", d)
	}
	if !strings.Contains(log.String(), `lost lock "job"; stopping sh (SIGTERM now, SIGKILL in 10s)`) {
		t.Fatalf("log = %q", log)
	}
}

// TestLostLockKillsAfterGrace: a child that ignores SIGTERM gets SIGKILL
// after the grace.
func TestLostLockKillsAfterGrace(t *testing.T) {
	t.Parallel()
	started := filepath.Join(t.TempDir(), "started")
	grace := 200 * time.Millisecond
	s, _, log := newSupervisor(grace)
	lost := make(chan struct{})
	cmd := shCmd("trap '' TERM; touch " + started + "; sleep 30")
	done := supervise(t, s, cmd, lost)
	xtest.Eventually(t, 5*time.Second, "child to start", fileExists(started))
	t0 := time.Now()
	close(lost)
	res := awaitResult(t, done, 5*time.Second)
	if res.status != 137 || res.signal != syscall.SIGKILL || !res.lost || !res.killed {
		t.Fatalf("result = %+v, want status 137 (SIGKILL), lost, killed", res)
	}
	if d := time.Since(t0); d < grace {
		t.Fatalf("SIGKILL came after %v, before the grace of %v", d, grace)
	}
	if !strings.Contains(log.String(), "sh still running 200ms after SIGTERM; sending SIGKILL") {
		t.Fatalf("log = %q", log)
	}
}

// leftoverCmd returns a shell, in its own process group, that runs setup,
// starts a grandchild ignoring SIGTERM, waits until it does, writes its
// pid to pidFile, and then runs script.
func leftoverCmd(pidFile, setup, script string) *exec.Cmd {
	return shCmd(setup + "; (trap '' TERM; : > " + pidFile + ".ready; exec sleep 30) & " +
		"while [ ! -e " + pidFile + ".ready ]; do sleep 0.01; done; " +
		"echo $! > " + pidFile + ".tmp; mv " + pidFile + ".tmp " + pidFile + "; " + script)
}

// readPid reads the pid that leftoverCmd wrote.
func readPid(t *testing.T, pidFile string) int {
	t.Helper()
	xtest.Eventually(t, 5*time.Second, "child to start", fileExists(pidFile))
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	return pid
}

// TestLostLockKillsLeftoverGroup: after a lost lock, members of the
// child's process group that outlive the child get the same treatment as
// the child: SIGTERM, and SIGKILL once the grace has passed.
func TestLostLockKillsLeftoverGroup(t *testing.T) {
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "pid")
	grace := 300 * time.Millisecond
	s, _, log := newSupervisor(grace)
	lost := make(chan struct{})
	// The shell exits 0 on SIGTERM; the grandchild ignores it.
	cmd := leftoverCmd(pidFile, "trap 'exit 0' TERM", "wait")
	done := supervise(t, s, cmd, lost)
	pid := readPid(t, pidFile)
	t0 := time.Now()
	close(lost)
	res := awaitResult(t, done, 5*time.Second)
	if res.status != 0 || !res.lost {
		t.Fatalf("result = %+v, want status 0 and lost", res)
	}
	if d := time.Since(t0); d < grace {
		t.Fatalf("run returned %v after SIGTERM, before the grace of %v", d, grace)
	}
	xtest.Eventually(t, 2*time.Second, fmt.Sprintf("grandchild %d to be gone", pid), func() bool { return processGone(pid) })
	want := "lost lock \"job\"; stopping sh (SIGTERM now, SIGKILL in 300ms)\n" +
		"processes of sh's group still running 300ms after SIGTERM; sending SIGKILL\n"
	if log.String() != want {
		t.Fatalf("log = %q, want %q", log, want)
	}
}

// TestLostLockGroupExitsInGrace: group members that do stop on SIGTERM
// are not waited for beyond their exit, and get no SIGKILL.
func TestLostLockGroupExitsInGrace(t *testing.T) {
	t.Parallel()
	started := filepath.Join(t.TempDir(), "started")
	s, _, log := newSupervisor(10 * time.Second)
	lost := make(chan struct{})
	cmd := shCmd("trap 'exit 0' TERM; sleep 30 & touch " + started + "; wait")
	done := supervise(t, s, cmd, lost)
	xtest.Eventually(t, 5*time.Second, "child to start", fileExists(started))
	close(lost)
	res := awaitResult(t, done, 5*time.Second)
	if res.status != 0 || !res.lost || res.killed || strings.Contains(log.String(), "SIGKILL;") {
		t.Fatalf("result = %+v; log:\n%s", res, log)
	}
}

// TestLostAtReleaseStopsLeftovers: a lock found lost only after CMD exited
// (by the release) gets the lost-lock treatment for what CMD left running
// in its process group: SIGTERM, ignored here, then SIGKILL after the
// grace. Before, those processes were left running without the lock.
func TestLostAtReleaseStopsLeftovers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		result primitives.ReleaseResult
	}{
		{"not owned", primitives.NotOwned},
		{"already released", primitives.AlreadyReleased},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pidFile := filepath.Join(t.TempDir(), "pid")
			te := newTestEnv(t, nil)
			te.grace = 200 * time.Millisecond
			cfg := holdConfig{name: "job", ttl: defaultTTL}
			// CMD exits 0 at once and leaves a grandchild that ignores SIGTERM.
			cmd := leftoverCmd(pidFile, ":", "exit 0")
			l := newFakeLock(tc.result, nil)
			status := holdAndRun(context.Background(), l, func(context.Context) func() { return func() {} }, cmd, cfg, te.env, make(chan os.Signal))
			pid := readPid(t, pidFile)
			if status != exitFailure {
				t.Errorf("status %d, want %d", status, exitFailure)
			}
			xtest.Eventually(t, 5*time.Second, fmt.Sprintf("grandchild %d to be gone", pid), func() bool { return processGone(pid) })
			want := "coordhost: lock \"job\" was lost before sh exited (release found " + tc.result.String() + ")\n" +
				"coordhost: lost lock \"job\"; sh exited, but processes of its group still run: stopping them (SIGTERM now, SIGKILL in 200ms)\n" +
				"coordhost: processes of sh's group still running 200ms after SIGTERM; sending SIGKILL\n"
			if te.errOut.String() != want {
				t.Fatalf("stderr = %q, want %q", te.errOut, want)
			}
		})
	}
}

// TestReleasedKeepsLeftovers: a lock released normally leaves what CMD
// started in the background alone (as before).
func TestReleasedKeepsLeftovers(t *testing.T) {
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "pid")
	te := newTestEnv(t, nil)
	te.grace = 50 * time.Millisecond
	cmd := leftoverCmd(pidFile, ":", "exit 0")
	l := newFakeLock(primitives.Released, nil)
	if status := holdAndRun(context.Background(), l, func(context.Context) func() { return func() {} }, cmd, holdConfig{name: "job", ttl: defaultTTL}, te.env, make(chan os.Signal)); status != 0 {
		t.Fatalf("status %d; stderr:\n%s", status, te.errOut)
	}
	pid := readPid(t, pidFile)
	if processGone(pid) {
		t.Fatalf("grandchild %d was stopped; stderr:\n%s", pid, te.errOut)
	}
}

// TestSignalsForwarded: signals coordhost gets go to the child's group.
func TestSignalsForwarded(t *testing.T) {
	t.Parallel()
	started := filepath.Join(t.TempDir(), "started")
	s, sigs, _ := newSupervisor(10 * time.Second)
	argv := waitSignalCmd(started, 42)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	cmd.SysProcAttr = childSysProcAttr(true)
	done := supervise(t, s, cmd, nil)
	xtest.Eventually(t, 5*time.Second, "child to start", fileExists(started))
	sigs <- syscall.SIGINT
	res := awaitResult(t, done, 5*time.Second)
	if res.status != 42 || res.lost {
		t.Fatalf("result = %+v, want status 42", res)
	}
}

// TestSkipForward: in the terminal case (child in coordhost's process
// group) SIGINT is not forwarded, since the terminal delivered it already;
// SIGTERM still is.
func TestSkipForward(t *testing.T) {
	t.Parallel()
	started := filepath.Join(t.TempDir(), "started")
	s, sigs, _ := newSupervisor(10 * time.Second)
	s.skipForward = map[syscall.Signal]bool{syscall.SIGINT: true}
	// exec: the shell becomes sleep, so the signal reaches it directly.
	cmd := exec.Command("sh", "-c", "touch "+started+"; exec sleep 30")
	done := supervise(t, s, cmd, nil)
	xtest.Eventually(t, 5*time.Second, "child to start", fileExists(started))
	sigs <- syscall.SIGINT
	select {
	case res := <-done:
		t.Fatalf("child ended after a skipped SIGINT: %+v", res)
	case <-time.After(200 * time.Millisecond):
	}
	sigs <- syscall.SIGTERM
	res := awaitResult(t, done, 5*time.Second)
	if res.status != 143 {
		t.Fatalf("result = %+v, want status 143", res)
	}
}

// fakeLock is a heldLock whose loss and release outcome the test controls.
type fakeLock struct {
	done     chan struct{}
	result   primitives.ReleaseResult
	err      error
	released chan struct{}
}

func newFakeLock(result primitives.ReleaseResult, err error) *fakeLock {
	return &fakeLock{done: make(chan struct{}), result: result, err: err, released: make(chan struct{}, 1)}
}

func (f *fakeLock) Done() <-chan struct{} { return f.done }

func (f *fakeLock) Release(context.Context) (primitives.ReleaseResult, error) {
	f.released <- struct{}{}
	return f.result, f.err
}

// TestHoldAndRun covers holdAndRun's bookkeeping with a fake lock: the
// keep-alive is started and stopped around CMD, the release outcome is
// reported, and a lost lock never ends in exit status 0.
func TestHoldAndRun(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		script  string
		result  primitives.ReleaseResult
		err     error
		lose    bool // close Done once CMD has started
		status  int
		message string
	}{
		{"released", "exit 0", primitives.Released, nil, false, 0, "coordhost: released lock \"job\"\n"},
		{"status passed on", "exit 7", primitives.Released, nil, false, 7, "coordhost: released lock \"job\"\n"},
		{"lost unnoticed, found at release", "exit 0", primitives.NotOwned, nil, false, exitFailure,
			"coordhost: lock \"job\" was lost before sh exited (release found NotOwned)\n"},
		{"expired unnoticed", "exit 3", primitives.AlreadyReleased, nil, false, 3,
			"coordhost: lock \"job\" was lost before sh exited (release found AlreadyReleased)\n"},
		{"release error keeps status", "exit 0", 0, errors.New("boom"), false, 0,
			"coordhost: releasing lock \"job\": boom (it expires within 15s)\n"},
		{"lost while running", `touch "$0"; sleep 30`, primitives.AlreadyReleased, nil, true, 143,
			"coordhost: lost lock \"job\"; stopping sh (SIGTERM now, SIGKILL in 5s)\ncoordhost: sh was ended by SIGTERM\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			marker := filepath.Join(t.TempDir(), "started")
			te := newTestEnv(t, nil)
			cfg := holdConfig{name: "job", ttl: defaultTTL}
			cmd := shCmd(tc.script)
			cmd.Args = append(cmd.Args, marker)
			l := newFakeLock(tc.result, tc.err)
			var started, stopped atomic.Int32
			keepAlive := func(context.Context) func() {
				started.Add(1)
				return func() { stopped.Add(1) }
			}
			if tc.lose {
				go func() {
					for {
						if _, err := os.Stat(marker); err == nil {
							close(l.done)
							return
						}
						time.Sleep(5 * time.Millisecond)
					}
				}()
			}
			status := holdAndRun(context.Background(), l, keepAlive, cmd, cfg, te.env, make(chan os.Signal))
			if status != tc.status {
				t.Errorf("status %d, want %d", status, tc.status)
			}
			if started.Load() != 1 || stopped.Load() != 1 {
				t.Errorf("keep-alive started %d and stopped %d times, want 1 and 1", started.Load(), stopped.Load())
			}
			select {
			case <-l.released:
			default:
				t.Error("lock not released")
			}
			if !strings.Contains(te.errOut.String(), tc.message) {
				t.Errorf("stderr = %q, want it to contain %q", te.errOut, tc.message)
			}
		})
	}
}
