package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/redis/rueidis"

	"github.com/coordhost/coordhost/host/devredis"
)

// testClient returns a client on the dev server's socket, closed at cleanup.
func testClient(t *testing.T, d *devredis.Server) rueidis.Client {
	t.Helper()
	opt, desc, err := unixClientOption(d.Socket())
	if err != nil {
		t.Fatal(err)
	}
	c, err := newRedisClient(context.Background(), opt, desc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func keyExists(t *testing.T, c rueidis.Client, key string) bool {
	t.Helper()
	n, err := c.Do(context.Background(), c.B().Exists().Key(key).Build()).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// runHoldAsync runs `coordhost lock hold args...` in process; the exit
// status arrives on the returned channel.
func runHoldAsync(te *testEnv, args ...string) <-chan int {
	done := make(chan int, 1)
	go func() { done <- run(context.Background(), append([]string{"lock", "hold"}, args...), te.env) }()
	return done
}

func awaitExit(t *testing.T, te *testEnv, done <-chan int, d time.Duration) int {
	t.Helper()
	select {
	case code := <-done:
		return code
	case <-time.After(d):
		t.Fatalf("lock hold did not return within %v; stderr:\n%s", d, te.errOut)
		return -1
	}
}

func TestHoldRunsCommand(t *testing.T) {
	t.Parallel()
	d := startTestDevRedis(t)
	c := testClient(t, d)
	sock := d.Socket()
	ctx := context.Background()

	// Exit status, environment, fencing tokens, custom prefix.
	for i, tc := range []struct {
		args   []string
		vars   map[string]string
		code   int
		stdout string
		stderr []string
	}{
		{
			args:   []string{"-redis", sock, "-fencing", "job", "--", "sh", "-c", `echo "$COORDHOST_LOCK_NAME $COORDHOST_FENCING_TOKEN"; exit 5`},
			code:   5,
			stdout: "job 1\n",
			stderr: []string{`coordhost: acquired lock "job" (fencing token 1); key "coordhost:lock:job", ttl 15s` + "\n", `coordhost: released lock "job"` + "\n"},
		},
		{
			args:   []string{"-redis", "unix://" + sock, "-fencing", "-ttl", "2s", "job", "--", "sh", "-c", `echo "$COORDHOST_FENCING_TOKEN"`},
			code:   0,
			stdout: "2\n",
			stderr: []string{`coordhost: acquired lock "job" (fencing token 2); key "coordhost:lock:job", ttl 2s` + "\n"},
		},
		{
			// Without -fencing an inherited token is removed.
			args:   []string{"-redis", sock, "-prefix", "app:", "other", "--", "sh", "-c", `echo "${COORDHOST_FENCING_TOKEN-unset} $COORDHOST_LOCK_NAME"; kill -TERM $$`},
			vars:   map[string]string{envFencingToken: "99", envLockName: "outer"},
			code:   128 + 15,
			stdout: "unset other\n",
			stderr: []string{`coordhost: acquired lock "other"; key "app:other", ttl 15s` + "\n", "coordhost: sh was ended by SIGTERM\n", `coordhost: released lock "other"` + "\n"},
		},
	} {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			te := newTestEnv(t, tc.vars)
			code := run(ctx, append([]string{"lock", "hold"}, tc.args...), te.env)
			if code != tc.code {
				t.Errorf("exit status %d, want %d", code, tc.code)
			}
			if te.out.String() != tc.stdout {
				t.Errorf("stdout = %q, want %q", te.out, tc.stdout)
			}
			for _, s := range tc.stderr {
				if !strings.Contains(te.errOut.String(), s) {
					t.Errorf("stderr does not contain %q:\n%s", s, te.errOut)
				}
			}
		})
	}
	for _, k := range []string{"coordhost:lock:job", "app:other"} {
		if keyExists(t, c, k) {
			t.Errorf("lock key %s still exists after the runs", k)
		}
	}
}

// TestHoldNameRejectedByLock: names the lock package refuses are usage
// errors, and CMD does not run.
func TestHoldNameRejectedByLock(t *testing.T) {
	t.Parallel()
	d := startTestDevRedis(t)
	ran := filepath.Join(t.TempDir(), "ran")
	te := newTestEnv(t, nil)
	code := run(context.Background(), []string{"lock", "hold", "-redis", d.Socket(), "__coordhost:x", "--", "touch", ran}, te.env)
	if code != exitUsage {
		t.Fatalf("exit status %d, want 2; stderr:\n%s", code, te.errOut)
	}
	if !strings.Contains(te.errOut.String(), `coordhost: lock hold: lock NAME "__coordhost:x": `) {
		t.Fatalf("stderr:\n%s", te.errOut)
	}
	if _, err := os.Stat(ran); err == nil {
		t.Fatal("CMD ran")
	}
}

func TestHoldKeyExistsWhileRunning(t *testing.T) {
	t.Parallel()
	d := startTestDevRedis(t)
	c := testClient(t, d)
	started := filepath.Join(t.TempDir(), "started")
	release := filepath.Join(t.TempDir(), "release")
	te := newTestEnv(t, nil)
	done := runHoldAsync(te, "-redis", d.Socket(), "-ttl", "300ms", "job", "--", "sh", "-c",
		"touch "+started+"; while [ ! -e "+release+" ]; do sleep 0.02; done")
	xtest.Eventually(t, 5*time.Second, "CMD to start", fileExists(started))
	// Longer than the ttl: the keep-alive must be renewing it.
	time.Sleep(700 * time.Millisecond)
	if !keyExists(t, c, "coordhost:lock:job") {
		t.Fatalf("lock key missing while CMD runs past its ttl; stderr:\n%s", te.errOut)
	}
	pttl, err := c.Do(context.Background(), c.B().Pttl().Key("coordhost:lock:job").Build()).AsInt64()
	if err != nil || pttl <= 0 || pttl > 300 {
		t.Fatalf("PTTL = %d, %v; want within (0, 300]", pttl, err)
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := awaitExit(t, te, done, 5*time.Second); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, te.errOut)
	}
	if keyExists(t, c, "coordhost:lock:job") {
		t.Fatal("lock key still exists after release")
	}
}

// TestHoldMutualExclusion runs several holders of one lock at once and
// checks from the children's own log that their sections never overlap
// and that fencing tokens grow in the order the sections ran.
func TestHoldMutualExclusion(t *testing.T) {
	t.Parallel()
	d := startTestDevRedis(t)
	logFile := filepath.Join(t.TempDir(), "log")
	const workers = 4
	var wg sync.WaitGroup
	codes := make([]int, workers)
	envs := make([]*testEnv, workers)
	for i := range workers {
		envs[i] = newTestEnv(t, nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i] = run(context.Background(), []string{"lock", "hold", "-redis", d.Socket(), "-fencing", "-ttl", "2s", "-wait", "20s", "shared", "--",
				"sh", "-c", fmt.Sprintf(`echo "enter %d $COORDHOST_FENCING_TOKEN" >> %s; sleep 0.1; echo "leave %d" >> %s`, i, logFile, i, logFile)}, envs[i].env)
		}()
	}
	wg.Wait()
	for i, code := range codes {
		if code != 0 {
			t.Fatalf("worker %d exit %d; stderr:\n%s", i, code, envs[i].errOut)
		}
	}
	b, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2*workers {
		t.Fatalf("log has %d lines, want %d:\n%s", len(lines), 2*workers, b)
	}
	lastToken := 0
	seen := map[string]bool{}
	for i := 0; i < len(lines); i += 2 {
		enter, leave := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		if len(enter) != 3 || enter[0] != "enter" || len(leave) != 2 || leave[0] != "leave" || enter[1] != leave[1] {
			t.Fatalf("sections overlap or are malformed at lines %d-%d:\n%s", i, i+1, b)
		}
		seen[enter[1]] = true
		tok, err := strconv.Atoi(enter[2])
		if err != nil || tok <= lastToken {
			t.Fatalf("fencing token %q after %d does not grow:\n%s", enter[2], lastToken, b)
		}
		lastToken = tok
	}
	if len(seen) != workers {
		t.Fatalf("not every worker ran:\n%s", b)
	}
}

// TestHoldLostLock simulates losing the lock from another client while CMD
// runs: CMD is stopped and coordhost reports the loss.
func TestHoldLostLock(t *testing.T) {
	t.Parallel()
	d := startTestDevRedis(t)
	c := testClient(t, d)
	ctx := context.Background()
	cases := []struct {
		name   string
		script string // gets the marker path as $1
		steal  func(key string) rueidis.Completed
		code   int
	}{
		{"key deleted", `touch "$1"; sleep 30`,
			func(key string) rueidis.Completed { return c.B().Del().Key(key).Build() }, 143},
		{"key taken over", `touch "$1"; sleep 30`,
			func(key string) rueidis.Completed {
				return c.B().Set().Key(key).Value("someone-else").Px(10 * time.Second).Build()
			}, 143},
		// CMD handles SIGTERM and exits 0: coordhost still fails, since
		// the work was not protected to its end.
		{"CMD exits 0 on SIGTERM", `trap 'exit 0' TERM; touch "$1"; sleep 30 & wait`,
			func(key string) rueidis.Completed { return c.B().Del().Key(key).Build() }, exitFailure},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := "lost" + strconv.Itoa(i)
			key := "coordhost:lock:" + name
			started := filepath.Join(t.TempDir(), "started")
			te := newTestEnv(t, nil)
			done := runHoldAsync(te, "-redis", d.Socket(), "-ttl", "600ms", name, "--", "sh", "-c", tc.script, "sh", started)
			xtest.Eventually(t, 5*time.Second, "CMD to start", fileExists(started))
			t0 := time.Now()
			if err := c.Do(ctx, tc.steal(key)).Error(); err != nil {
				t.Fatal(err)
			}
			code := awaitExit(t, te, done, 5*time.Second)
			if code != tc.code {
				t.Fatalf("exit status %d, want %d; stderr:\n%s", code, tc.code, te.errOut)
			}
			// Renewal runs every ttl/3 = 200ms; SIGTERM follows at once.
			if el := time.Since(t0); el > 2*time.Second {
				t.Fatalf("CMD stopped %v after the lock was lost", el)
			}
			if !strings.Contains(te.errOut.String(), "coordhost: lost lock "+strconv.Quote(name)+"; stopping sh (SIGTERM now, SIGKILL in 5s)") {
				t.Fatalf("stderr:\n%s", te.errOut)
			}
			if strings.Contains(te.errOut.String(), "released lock") {
				t.Fatalf("reported a release of a lost lock:\n%s", te.errOut)
			}
		})
	}
	// The other owner's key was not deleted by the release.
	if v, err := c.Do(ctx, c.B().Get().Key("coordhost:lock:lost1").Build()).ToString(); err != nil || v != "someone-else" {
		t.Fatalf("taken-over key = %q, %v", v, err)
	}
}

// TestHoldLostLockPausedServer: renewals that get no answer (server
// stopped with SIGSTOP) make the lock uncertain, and CMD is stopped. Uses
// a TCP server, so it also covers -redis host:port.
func TestHoldLostLockPausedServer(t *testing.T) {
	t.Parallel()
	redisServerBin(t) // skip/fail rule for a missing binary
	srv := redistest.Start(t)
	started := filepath.Join(t.TempDir(), "started")
	te := newTestEnv(t, nil)
	te.grace = 300 * time.Millisecond
	// CMD ignores SIGTERM: it must be killed after the grace.
	done := runHoldAsync(te, "-redis", srv.Addr, "-ttl", "900ms", "job", "--", "sh", "-c", `trap '' TERM; touch "$1"; sleep 30`, "sh", started)
	xtest.Eventually(t, 5*time.Second, "CMD to start", fileExists(started))
	srv.Pause()
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume()
		}
	}()
	xtest.Eventually(t, 5*time.Second, "the loss to be noticed", func() bool {
		return strings.Contains(te.errOut.String(), `lost lock "job"`)
	})
	xtest.Eventually(t, 5*time.Second, "SIGKILL", func() bool {
		return strings.Contains(te.errOut.String(), "sh still running 300ms after SIGTERM; sending SIGKILL")
	})
	srv.Resume()
	resumed = true
	if code := awaitExit(t, te, done, 10*time.Second); code != 137 {
		t.Fatalf("exit status %d, want 137; stderr:\n%s", code, te.errOut)
	}
}

func TestHoldWaitTimeout(t *testing.T) {
	t.Parallel()
	d := startTestDevRedis(t)
	c := testClient(t, d)
	ctx := context.Background()
	if err := c.Do(ctx, c.B().Set().Key("coordhost:lock:busy").Value("other").Px(30*time.Second).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	ran := filepath.Join(t.TempDir(), "ran")
	te := newTestEnv(t, nil)
	t0 := time.Now()
	code := run(ctx, []string{"lock", "hold", "-redis", d.Socket(), "-wait", "300ms", "busy", "--", "touch", ran}, te.env)
	if code != exitFailure {
		t.Fatalf("exit status %d, want 1; stderr:\n%s", code, te.errOut)
	}
	if el := time.Since(t0); el < 300*time.Millisecond || el > 3*time.Second {
		t.Fatalf("gave up after %v, want about 300ms", el)
	}
	if !strings.Contains(te.errOut.String(), "coordhost: waiting for lock \"busy\"\ncoordhost: lock \"busy\" not acquired within -wait 300ms\n") {
		t.Fatalf("stderr:\n%s", te.errOut)
	}
	if _, err := os.Stat(ran); err == nil {
		t.Fatal("CMD ran without the lock")
	}
}

func TestHoldInterruptedWhileWaiting(t *testing.T) {
	t.Parallel()
	d := startTestDevRedis(t)
	c := testClient(t, d)
	ctx := context.Background()
	if err := c.Do(ctx, c.B().Set().Key("coordhost:lock:busy").Value("other").Px(30*time.Second).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	ran := filepath.Join(t.TempDir(), "ran")
	te := newTestEnv(t, nil)
	done := runHoldAsync(te, "-redis", d.Socket(), "busy", "--", "touch", ran)
	waitOutput(t, 5*time.Second, te.errOut, regexp.MustCompile(`coordhost: waiting for lock "busy"`+"\n"))
	te.sig <- syscall.SIGINT
	if code := awaitExit(t, te, done, 5*time.Second); code != 130 {
		t.Fatalf("exit status %d, want 130; stderr:\n%s", code, te.errOut)
	}
	if !strings.Contains(te.errOut.String(), "coordhost: interrupted by SIGINT while waiting for lock \"busy\"\n") {
		t.Fatalf("stderr:\n%s", te.errOut)
	}
	if _, err := os.Stat(ran); err == nil {
		t.Fatal("CMD ran without the lock")
	}
	if v, _ := c.Do(ctx, c.B().Get().Key("coordhost:lock:busy").Build()).ToString(); v != "other" {
		t.Fatalf("holder's key = %q", v)
	}
}

func TestHoldRedisUnreachable(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{filepath.Join(t.TempDir(), "none.sock"), "127.0.0.1:1"} {
		te := newTestEnv(t, nil)
		code := run(context.Background(), []string{"lock", "hold", "-redis", addr, "job", "--", "true"}, te.env)
		if code != exitFailure {
			t.Fatalf("%s: exit status %d, want 1", addr, code)
		}
		if !strings.Contains(te.errOut.String(), "coordhost: connecting to Redis at ") {
			t.Fatalf("%s: stderr:\n%s", addr, te.errOut)
		}
	}
}

// TestHoldDevMode runs lock hold without -redis, in process and as a real
// process stopped by a signal, and checks that the private server and its
// directory are gone afterwards.
func TestHoldDevMode(t *testing.T) {
	server := redisServerBin(t)
	devRE := regexp.MustCompile(`coordhost: dev mode: started private redis-server on unix socket (\S+) \(pid (\d+)\)`)

	t.Run("in process", func(t *testing.T) {
		tmp := privateTMPDIR(t)
		te := newTestEnv(t, map[string]string{devredis.ServerEnv: server})
		code := run(context.Background(), []string{"lock", "hold", "-fencing", "job", "--", "sh", "-c", "exit 4"}, te.env)
		if code != 4 {
			t.Fatalf("exit status %d, want 4; stderr:\n%s", code, te.errOut)
		}
		m := devRE.FindStringSubmatch(te.errOut.String())
		if m == nil {
			t.Fatalf("no dev mode message; stderr:\n%s", te.errOut)
		}
		if !strings.Contains(te.errOut.String(), "this lock excludes nothing outside this run") {
			t.Errorf("dev mode does not say that the lock is private to this run; stderr:\n%s", te.errOut)
		}
		pid, _ := strconv.Atoi(m[2])
		if !processGone(pid) {
			t.Fatalf("redis-server %d still running", pid)
		}
		if left := tempDirEntries(t, tmp); len(left) != 0 {
			t.Fatalf("left behind: %q", left)
		}
	})

	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run("signal "+signalName(sig), func(t *testing.T) {
			tmp := privateTMPDIR(t)
			started := filepath.Join(t.TempDir(), "started")
			// The signal is forwarded to CMD, which exits 5.
			p := startProc(t, []string{devredis.ServerEnv + "=" + server, "TMPDIR=" + tmp},
				append([]string{"lock", "hold", "job", "--"}, waitSignalCmd(started, 5)...)...)
			xtest.Eventually(t, 10*time.Second, "CMD to start", fileExists(started))
			m := waitOutput(t, time.Second, p.stderr, devRE)
			pid, _ := strconv.Atoi(m[2])
			p.signal(t, sig)
			if code := p.wait(t, 10*time.Second); code != 5 {
				t.Fatalf("exit status %d, want 5; stderr:\n%s", code, p.stderr)
			}
			if !processGone(pid) {
				t.Fatalf("redis-server %d still running", pid)
			}
			if left := tempDirEntries(t, tmp); len(left) != 0 {
				t.Fatalf("left behind: %q", left)
			}
			if !strings.Contains(p.stderr.String(), "coordhost: released lock \"job\"\n") {
				t.Fatalf("stderr:\n%s", p.stderr)
			}
		})
	}

	t.Run("signal while starting", func(t *testing.T) {
		tmp := privateTMPDIR(t)
		// A server that never answers: coordhost is stuck in dev-mode
		// startup when the signal comes.
		pidFile := filepath.Join(t.TempDir(), "pid")
		fake := filepath.Join(t.TempDir(), "silent")
		if err := os.WriteFile(fake, []byte("#!/bin/sh\necho $$ > "+pidFile+".tmp; mv "+pidFile+".tmp "+pidFile+"\nexec sleep 30\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		p := startProc(t, []string{devredis.ServerEnv + "=" + fake, "TMPDIR=" + tmp}, "lock", "hold", "job", "--", "true")
		xtest.Eventually(t, 10*time.Second, "fake server to start", fileExists(pidFile))
		p.signal(t, syscall.SIGTERM)
		if code := p.wait(t, 10*time.Second); code != 143 {
			t.Fatalf("exit status %d, want 143; stderr:\n%s", code, p.stderr)
		}
		b, _ := os.ReadFile(pidFile)
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		if pid == 0 || !processGone(pid) {
			t.Fatalf("fake server %d still running", pid)
		}
		if left := tempDirEntries(t, tmp); len(left) != 0 {
			t.Fatalf("left behind: %q", left)
		}
	})
}

// redisCase is a `lock hold -wait 5s ARGS... job -- true` run with
// COORDHOST_REDIS_URL env, its exit status and a part of its stderr.
type redisCase struct {
	name string
	env  string // COORDHOST_REDIS_URL
	args []string
	code int
	want string
}

// runRedisCases runs each case in a subtest; stderr must hold want, and
// neither mention dev mode nor show the password s3cret.
func runRedisCases(t *testing.T, cases []redisCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			te := newTestEnv(t, map[string]string{envRedisURL: tc.env})
			args := append(append([]string{"lock", "hold", "-wait", "5s"}, tc.args...), "job", "--", "true")
			code := run(context.Background(), args, te.env)
			if code != tc.code || !strings.Contains(te.errOut.String(), tc.want) {
				t.Fatalf("exit status %d, want %d; stderr lacks %q:\n%s", code, tc.code, tc.want, te.errOut)
			}
			if strings.Contains(te.errOut.String(), "dev mode") || strings.Contains(te.errOut.String(), "s3cret") {
				t.Fatalf("stderr:\n%s", te.errOut)
			}
		})
	}
}

// TestHoldRedisURLFromEnv: COORDHOST_REDIS_URL gives lock hold its server
// and credentials without anything on the command line; -redis wins over
// it; with -config, the file's redis block wins over the environment (only
// -redis replaces its addresses, keeping its credentials unless the URL has
// its own), and the environment serves a file without a redis block. The server's default user may touch no keys, so a
// connection without the right credentials cannot take the lock.
func TestHoldRedisURLFromEnv(t *testing.T) {
	t.Parallel()
	redisServerBin(t)
	srv := redistest.Start(t)
	srv.MustCmd(t, "ACL", "SETUSER", "coord", "on", ">s3cret", "~*", "&*", "+@all")
	srv.MustCmd(t, "ACL", "SETUSER", "default", "resetkeys")
	good := "redis://coord:s3cret@" + srv.Addr
	withCreds := writeConfig(t, "redis {\n  addresses = [\"127.0.0.1:1\"]\n  username  = \"coord\"\n  password  = \"s3cret\"\n}\n"+goodConfig)
	withoutRedis := writeConfig(t, goodConfig)
	withSentinel := writeConfig(t, "redis {\n  sentinel {\n    master_set = \"orders\"\n    addresses  = [\"127.0.0.1:1\"]\n  }\n  username = \"coord\"\n  password = \"s3cret\"\n}\n"+goodConfig)
	cases := []redisCase{
		{"env alone", good, nil, 0, `coordhost: acquired lock "job"; key "coordhost:lock:job"`},
		{"-redis wins over a bad env", "redis://coord:wrong@127.0.0.1:1", []string{"-redis", good}, 0, `coordhost: acquired lock "job"`},
		{"-redis without credentials wins over env with them", good, []string{"-redis", srv.Addr}, exitFailure, "NOPERM"},
		{"env unreachable is named", "127.0.0.1:1", nil, exitFailure, "coordhost: connecting to Redis at 127.0.0.1:1 (from COORDHOST_REDIS_URL): "},
		{"-config: env ignored when the file has a redis block", good, []string{"-config", withCreds}, exitFailure, "COORDHOST_REDIS_URL ignored: "},
		{"-config without a redis block: env names the server", good, []string{"-config", withoutRedis}, 0, `key "t:job"`},
		{"-config: -redis keeps the file's credentials", "", []string{"-config", withCreds, "-redis", srv.Addr}, 0, `key "t:job"`},
		{"-config: -redis in place of a sentinel block is said", "", []string{"-config", withSentinel, "-redis", srv.Addr}, 0, `-redis replaces ` + withSentinel + `'s sentinel block: connecting to ` + srv.Addr + ` directly, not through Sentinel master set "orders"`},
		{"-config: -redis with its own credentials", "", []string{"-config", withCreds, "-redis", "redis://coord:wrong@" + srv.Addr}, exitFailure, "WRONGPASS"},
	}
	runRedisCases(t, cases)
}
