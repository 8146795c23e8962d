package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coordhost/coordhost/host/devredis"
	"github.com/coordhost/coordhost/internal/xtest"
)

// asMainEnv makes the test binary act as coordhost itself, so that tests
// can run the real command (real signals, real exit) as a subprocess.
const asMainEnv = "COORDHOST_TEST_AS_MAIN"

// waitSignalArg as the first argument makes the test binary a child that
// waits for SIGINT or SIGTERM (see waitSignalChild).
const waitSignalArg = "__coordhost_test_wait_signal"

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == waitSignalArg {
		os.Exit(waitSignalChild(os.Args[2:]))
	}
	if os.Getenv(asMainEnv) == "1" {
		os.Exit(run(context.Background(), os.Args[1:], osEnv()))
	}
	// Started with SIGINT ignored (a background job of a non-interactive
	// shell), the children the tests start would inherit that and
	// ignore the SIGINTs the tests send them. A signal the Go runtime
	// handles is reset to the default in children, so handle it, still
	// ignoring it here as before.
	if signal.Ignored(syscall.SIGINT) {
		signal.Notify(make(chan os.Signal, 1), syscall.SIGINT)
	}
	// A client whose connection failed (unreachable server, bad
	// credentials) leaves rueidis' reconnect backoff sleeping for a while
	// after Close: xtest.Main ignores it.
	xtest.Main(m)
}

// waitSignalChild is a CMD for tests: args are MARKER STATUS. It creates
// MARKER once it handles SIGINT and SIGTERM, and exits with STATUS when one
// arrives (99 if none comes within 30s). Unlike a shell script, it is one
// process, so no signal can get lost while it forks.
func waitSignalChild(args []string) int {
	if len(args) != 2 {
		return 98
	}
	status, err := strconv.Atoi(args[1])
	if err != nil {
		return 98
	}
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGINT, syscall.SIGTERM)
	if err := os.WriteFile(args[0], nil, 0o644); err != nil {
		return 98
	}
	select {
	case <-c:
		return status
	case <-time.After(30 * time.Second):
		return 99
	}
}

// waitSignalCmd returns the argv of a waitSignalChild.
func waitSignalCmd(marker string, status int) []string {
	return []string{os.Args[0], waitSignalArg, marker, strconv.Itoa(status)}
}

// testEnv is an env for in-process runs: captured output, no stdin, a
// given environment, and signals injected through sig.
type testEnv struct {
	*env
	out, errOut *xtest.SyncBuffer
	sig         chan os.Signal // send here to "signal" coordhost
	mu          sync.Mutex
	relay       chan<- os.Signal
	relayDone   chan struct{}
}

// newTestEnv returns an env whose getenv sees vars (and nothing else from
// the real environment except PATH and HOME).
func newTestEnv(t *testing.T, vars map[string]string) *testEnv {
	t.Helper()
	te := &testEnv{out: &xtest.SyncBuffer{}, errOut: &xtest.SyncBuffer{}, sig: make(chan os.Signal, 4)}
	base := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	for k, v := range vars {
		base = append(base, k+"="+v)
	}
	getenv := func(k string) string {
		for _, kv := range base {
			if rest, ok := strings.CutPrefix(kv, k+"="); ok {
				return rest
			}
		}
		return ""
	}
	te.env = &env{
		stdout:   te.out,
		stderr:   te.errOut,
		getenv:   getenv,
		environ:  func() []string { return append([]string(nil), base...) },
		grace:    defaultGrace,
		waitNote: 20 * time.Millisecond,
		notify: func(c chan<- os.Signal) {
			te.mu.Lock()
			defer te.mu.Unlock()
			te.relay = c
			te.relayDone = make(chan struct{})
			done := te.relayDone
			go func() {
				for {
					select {
					case s := <-te.sig:
						c <- s
					case <-done:
						return
					}
				}
			}()
		},
		stop: func(chan<- os.Signal) {
			te.mu.Lock()
			defer te.mu.Unlock()
			if te.relayDone != nil {
				close(te.relayDone)
				te.relayDone = nil
			}
		},
	}
	return te
}

// redisServerBin returns the redis-server the tests use: the one the
// project's redis setup names, else redis-server on PATH. Missing, it fails
// under CI=true and skips elsewhere.
func redisServerBin(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("COORDHOST_REDIS7_SERVER"); p != "" {
		return p
	}
	p, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("redis-server not found on PATH (CI=true: not skipping): %v", err)
		}
		t.Skipf("redis-server not found on PATH: %v", err)
	}
	return p
}

// startTestDevRedis starts a private server for a test, stopped at cleanup.
func startTestDevRedis(t testing.TB) *devredis.Server {
	t.Helper()
	d, err := devredis.Start(context.Background(), devredis.Options{Server: redisServerBin(t), Getenv: os.Getenv})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Stop() })
	return d
}

// processGone reports whether pid no longer exists (or is a zombie).
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// pid (comm) S ...: the state follows the last ')'.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] == 'Z'
	}
	return false
}

// proc is coordhost running as a subprocess (the test binary in
// asMainEnv mode).
type proc struct {
	cmd    *exec.Cmd
	stderr *xtest.SyncBuffer
	stdout *xtest.SyncBuffer
	waited bool
}

// startProc starts coordhost with args as a subprocess, with extra
// environment variables. It is killed at cleanup if the test did not wait.
func startProc(t *testing.T, extraEnv []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	// GORACE: a race-enabled binary otherwise sleeps 1s at exit.
	cmd.Env = append(append(os.Environ(), asMainEnv+"=1", "GORACE=atexit_sleep_ms=0"), extraEnv...)
	p := &proc{cmd: cmd, stderr: &xtest.SyncBuffer{}, stdout: &xtest.SyncBuffer{}}
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !p.waited {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return p
}

// wait waits for the subprocess and returns its exit status.
func (p *proc) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	p.waited = true
	errc := make(chan error, 1)
	go func() { errc <- p.cmd.Wait() }()
	select {
	case err := <-errc:
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("wait: %v", err)
		}
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(d):
		ps, _ := exec.Command("ps", "-eo", "pid,ppid,pgid,stat,args").CombinedOutput()
		_ = p.cmd.Process.Kill()
		t.Errorf("coordhost (pid %d) did not exit within %v; stderr:\n%s\nprocesses:\n%s", p.cmd.Process.Pid, d, p.stderr, ps)
		<-errc
		t.FailNow()
		return -1
	}
}

// signal sends sig to the subprocess.
func (p *proc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// waitOutput waits until buf matches re and returns the submatches.
func waitOutput(t *testing.T, d time.Duration, buf *xtest.SyncBuffer, re *regexp.Regexp) []string {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		if m := re.FindStringSubmatch(buf.String()); m != nil {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for output to match %s; output so far:\n%s", d, re, buf)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
