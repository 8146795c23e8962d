package main

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordhost/coordhost/host/devredis"
)

// The tests of package host/devredis (Start, Stop, sockets, bad starts)
// live here until that package has tests of its own; TestDevRedisCommand
// tests `coordhost dev-redis` itself.

// tempDirEntries lists the dev-mode directories in dir.
func tempDirEntries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		if strings.HasPrefix(e.Name(), "coordhost-redis-") {
			names = append(names, e.Name())
		}
	}
	return names
}

// privateTMPDIR points TMPDIR at a fresh directory so a test can check
// that dev mode leaves nothing behind in it.
func privateTMPDIR(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ch")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	t.Setenv("TMPDIR", dir)
	return dir
}

func TestDevRedisStartStop(t *testing.T) {
	tmp := privateTMPDIR(t)
	d := startTestDevRedis(t)
	if !strings.HasPrefix(d.Socket(), tmp+"/coordhost-redis-") {
		t.Fatalf("socket %s not in a fresh directory under TMPDIR %s", d.Socket(), tmp)
	}
	opt, _, err := unixClientOption(d.Socket())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c, err := newRedisClient(ctx, opt, d.Socket())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, c.B().Set().Key("k").Value("v").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	// Listens on the socket only: no TCP port.
	port, err := c.Do(ctx, c.B().ConfigGet().Parameter("port").Build()).AsStrMap()
	if err != nil {
		t.Fatal(err)
	}
	if port["port"] != "0" {
		t.Fatalf("port = %q, want 0", port["port"])
	}
	c.Close()

	pid := d.Pid()
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}
	if !processGone(pid) {
		t.Fatalf("redis-server %d still running after Stop", pid)
	}
	if left := tempDirEntries(t, tmp); len(left) != 0 {
		t.Fatalf("left behind in TMPDIR: %q", left)
	}
	if err := d.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}

func TestDevRedisExplicitSocket(t *testing.T) {
	tmp := privateTMPDIR(t)
	sockDir := t.TempDir()
	sock := filepath.Join(sockDir, "r.sock")
	server := redisServerBin(t)
	d, err := devredis.Start(context.Background(), devredis.Options{Server: server, Socket: sock})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	if d.Socket() != sock {
		t.Fatalf("socket %s, want %s", d.Socket(), sock)
	}
	if err := devredis.Ping(sock); err != nil {
		t.Fatal(err)
	}

	// A second server must not take over a live socket.
	_, err = devredis.Start(context.Background(), devredis.Options{Server: server, Socket: sock})
	if err == nil || !strings.Contains(err.Error(), "already listening on "+sock) {
		t.Fatalf("second server on the same socket: err = %v", err)
	}
	if err := devredis.Ping(sock); err != nil {
		t.Fatalf("first server broken by the second attempt: %v", err)
	}

	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket still there after Stop: %v", err)
	}
	if left := tempDirEntries(t, tmp); len(left) != 0 {
		t.Fatalf("left behind in TMPDIR: %q", left)
	}
}

func TestDevRedisStaleSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "r.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	d, err := devredis.Start(context.Background(), devredis.Options{Server: redisServerBin(t), Socket: sock})
	if err != nil {
		t.Fatalf("stale socket file: %v", err)
	}
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}
}

func TestDevRedisBadStarts(t *testing.T) {
	fakeDir := t.TempDir()
	writeScript := func(name, body string) string {
		p := filepath.Join(fakeDir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	regular := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(regular, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		opt  devredis.Options
		want string
	}{
		{"missing binary from env", devredis.Options{Getenv: func(k string) string {
			if k == devredis.ServerEnv {
				return "/nonexistent/redis-server"
			}
			return ""
		}}, `COORDHOST_REDIS_SERVER="/nonexistent/redis-server"`},
		{"server exits at once", devredis.Options{Server: writeScript("exits", "echo 'bad config' >&2; exit 1")},
			"redis-server exited before it was ready (exit status 1); redis-server log:\n  bad config"},
		{"socket is a regular file", devredis.Options{Server: writeScript("unused", "exit 1"), Socket: regular},
			"exists and is not a unix socket"},
		{"socket directory missing", devredis.Options{Server: writeScript("unused2", "exit 1"), Socket: "/nonexistent/dir/r.sock"},
			"socket directory"},
		{"socket path too long", devredis.Options{Server: writeScript("unused3", "exit 1"), Socket: "/tmp/" + strings.Repeat("s", 110)},
			"too long"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tmp := privateTMPDIR(t)
			d, err := devredis.Start(context.Background(), tc.opt)
			if err == nil {
				d.Stop()
				t.Fatal("start succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %q, want it to contain %q", err, tc.want)
			}
			if left := tempDirEntries(t, tmp); len(left) != 0 {
				t.Fatalf("left behind in TMPDIR: %q", left)
			}
		})
	}
}

// TestDevRedisStartCancelled: a server that never answers is killed when
// ctx ends, and its directory removed.
func TestDevRedisStartCancelled(t *testing.T) {
	tmp := privateTMPDIR(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	fake := filepath.Join(t.TempDir(), "silent-server")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho $$ > "+pidFile+".tmp; mv "+pidFile+".tmp "+pidFile+"\nexec sleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	go func() {
		for {
			if _, err := os.Stat(pidFile); err == nil {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		cancel(signalError{syscall.SIGINT})
	}()
	_, err := devredis.Start(ctx, devredis.Options{Server: fake})
	var se signalError
	if !errors.As(err, &se) || se.sig != syscall.SIGINT {
		t.Fatalf("err = %v, want the signal cause", err)
	}
	b, _ := os.ReadFile(pidFile)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if pid == 0 || !processGone(pid) {
		t.Fatalf("fake server (pid %d) still running", pid)
	}
	if left := tempDirEntries(t, tmp); len(left) != 0 {
		t.Fatalf("left behind in TMPDIR: %q", left)
	}
}

var startedRE = regexp.MustCompile(`started private redis-server on unix socket (\S+) \(pid (\d+)\)`)

// TestDevRedisCommand runs `coordhost dev-redis` as a real process and
// stops it with SIGTERM and SIGINT.
func TestDevRedisCommand(t *testing.T) {
	server := redisServerBin(t)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(signalName(sig), func(t *testing.T) {
			tmp := privateTMPDIR(t)
			sock := filepath.Join(t.TempDir(), "r.sock")
			p := startProc(t, []string{devredis.ServerEnv + "=" + server}, "dev-redis", "-socket", sock)
			m := waitOutput(t, 10*time.Second, p.stderr, startedRE)
			if m[1] != sock {
				t.Fatalf("socket %s, want %s", m[1], sock)
			}
			pid, _ := strconv.Atoi(m[2])
			if err := devredis.Ping(sock); err != nil {
				t.Fatal(err)
			}
			p.signal(t, sig)
			if code := p.wait(t, 10*time.Second); code != 0 {
				t.Fatalf("exit status %d; stderr:\n%s", code, p.stderr)
			}
			if !strings.Contains(p.stderr.String(), "got "+signalName(sig)+"; stopped redis-server") {
				t.Fatalf("stderr:\n%s", p.stderr)
			}
			if !processGone(pid) {
				t.Fatalf("redis-server %d still running", pid)
			}
			if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("socket left behind: %v", err)
			}
			if left := tempDirEntries(t, tmp); len(left) != 0 {
				t.Fatalf("left behind in TMPDIR: %q", left)
			}
		})
	}
}
