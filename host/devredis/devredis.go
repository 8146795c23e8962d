// Package devredis runs a private redis-server for dev mode: listening only
// on a unix socket in a fresh temporary directory, for one coordhost run.
// It is used by `coordhost serve` without a redis block and by
// `coordhost lock hold` without -redis.
package devredis

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Dev mode: a private redis-server that listens only on a unix socket in a
// fresh temporary directory, for one coordhost run or (dev-redis) until
// signalled.

const (
	// ServerEnv names an alternative redis-server binary.
	ServerEnv = "COORDHOST_REDIS_SERVER"
	// ReadyTimeout bounds the wait for a new server's first PONG.
	ReadyTimeout = 10 * time.Second
	// StopTimeout is how long a server gets to exit after SIGTERM
	// before SIGKILL.
	StopTimeout = 5 * time.Second
)

// Server is a running private redis-server.
type Server struct {
	cmd     *exec.Cmd
	dir     string // temporary directory: --dir, log, and by default the socket
	socket  string
	exited  chan struct{} // closed once the process has been reaped
	waitErr error         // set before exited is closed
	stopped bool
}

// Options configure Start.
type Options struct {
	// Server is the redis-server binary; "" means $COORDHOST_REDIS_SERVER
	// or redis-server from PATH.
	Server string
	// Socket is the unix socket path; "" means DIR/redis.sock in the
	// temporary directory.
	Socket string
	// Getenv reads the environment; nil means os.Getenv.
	Getenv func(string) string
}

// FindServer returns the redis-server binary dev mode runs.
func FindServer(getenv func(string) string) (string, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	if p := getenv(ServerEnv); p != "" {
		path, err := exec.LookPath(p)
		if err != nil {
			return "", fmt.Errorf("dev mode: %s=%q: %w", ServerEnv, p, err)
		}
		return path, nil
	}
	path, err := exec.LookPath("redis-server")
	if err != nil {
		return "", fmt.Errorf("dev mode needs redis-server on PATH (or %s); or point coordhost at a server (a redis block, or -redis ADDR): %w", ServerEnv, err)
	}
	return path, nil
}

// Start starts a private redis-server and waits until it answers
// PING. On error nothing is left behind. The caller must call Stop.
func Start(ctx context.Context, opt Options) (_ *Server, err error) {
	server := opt.Server
	if server == "" {
		if server, err = FindServer(opt.Getenv); err != nil {
			return nil, err
		}
	}
	socket := opt.Socket
	if socket != "" {
		if socket, err = filepath.Abs(socket); err != nil {
			return nil, fmt.Errorf("dev mode: socket path: %w", err)
		}
		if err := checkSocketPathFree(socket); err != nil {
			return nil, err
		}
	}
	dir, err := os.MkdirTemp("", "coordhost-redis-")
	if err != nil {
		return nil, fmt.Errorf("dev mode: %w", err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	if socket == "" {
		socket = filepath.Join(dir, "redis.sock")
	}
	if len(socket) > MaxSocketPath {
		return nil, fmt.Errorf("dev mode: unix socket path %q is too long (%d bytes, at most %d); set TMPDIR to a shorter directory", socket, len(socket), MaxSocketPath)
	}
	logFile, err := os.Create(filepath.Join(dir, "redis.log"))
	if err != nil {
		return nil, fmt.Errorf("dev mode: %w", err)
	}
	defer logFile.Close() // the child has its own copy
	cmd := exec.Command(server,
		"--port", "0",
		"--unixsocket", socket,
		"--unixsocketperm", "700",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--daemonize", "no",
	)
	cmd.Dir = dir
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	// Own process group: a terminal's ^C must not stop the server before
	// coordhost has released its lock; coordhost stops it at exit.
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("dev mode: starting %s: %w", server, err)
	}
	d := &Server{cmd: cmd, dir: dir, socket: socket, exited: make(chan struct{})}
	go func() {
		d.waitErr = cmd.Wait()
		close(d.exited)
	}()
	if err := d.waitReady(ctx); err != nil {
		d.kill()
		return nil, err
	}
	return d, nil
}

// checkSocketPathFree fails if path exists and is not a stale socket: a
// live server on it, or a file that is not a socket. redis-server would
// otherwise unlink it and take it over.
func checkSocketPathFree(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		if _, err := os.Stat(filepath.Dir(path)); err != nil {
			return fmt.Errorf("dev mode: socket directory: %w", err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("dev mode: %w", err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("dev mode: %s exists and is not a unix socket", path)
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("dev mode: a server is already listening on %s", path)
	}
	return nil
}

// waitReady polls the socket with PING until the server answers, exits,
// ctx ends or ReadyTimeout passes.
func (d *Server) waitReady(ctx context.Context) error {
	deadline := time.NewTimer(ReadyTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if Ping(d.socket) == nil {
			return nil
		}
		select {
		case <-d.exited:
			return fmt.Errorf("dev mode: redis-server exited before it was ready (%v)%s", d.waitErr, d.LogTail())
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-deadline.C:
			return fmt.Errorf("dev mode: redis-server did not answer on %s within %v%s", d.socket, ReadyTimeout, d.LogTail())
		case <-tick.C:
		}
	}
}

// Ping sends one PING over the unix socket and expects +PONG.
func Ping(socket string) error {
	c, err := net.DialTimeout("unix", socket, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := io.WriteString(c, "PING\r\n"); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "+PONG" {
		return fmt.Errorf("unexpected reply %q", line)
	}
	return nil
}

// LogTail returns the end of the server's log, formatted to follow an
// error message, or "".
func (d *Server) LogTail() string {
	b, err := os.ReadFile(filepath.Join(d.dir, "redis.log"))
	if err != nil || len(bytes.TrimSpace(b)) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 10 {
		lines = lines[len(lines)-10:]
	}
	return "; redis-server log:\n  " + strings.Join(lines, "\n  ")
}

// Socket returns the server's unix socket path.
func (d *Server) Socket() string { return d.socket }

// Pid returns the server's process id.
func (d *Server) Pid() int { return d.cmd.Process.Pid }

// Exited is closed when the server process has exited.
func (d *Server) Exited() <-chan struct{} { return d.exited }

// Stop shuts the server down (SIGTERM, then SIGKILL after
// StopTimeout), waits for it, and removes its temporary directory
// and socket. It is idempotent; it is not safe for concurrent use.
func (d *Server) Stop() error {
	if d.stopped {
		return nil
	}
	d.stopped = true
	var err error
	select {
	case <-d.exited:
		err = fmt.Errorf("dev mode: redis-server had exited (%v)", d.waitErr)
	default:
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		t := time.NewTimer(StopTimeout)
		select {
		case <-d.exited:
		case <-t.C:
			_ = d.cmd.Process.Kill()
			<-d.exited
			err = fmt.Errorf("dev mode: redis-server did not stop within %v; killed it", StopTimeout)
		}
		t.Stop()
	}
	d.cleanup()
	return err
}

// kill ends the server at once and cleans up; for failed starts.
func (d *Server) kill() {
	d.stopped = true
	_ = d.cmd.Process.Kill()
	<-d.exited
	d.cleanup()
}

func (d *Server) cleanup() {
	if !strings.HasPrefix(d.socket, d.dir+string(filepath.Separator)) {
		if fi, err := os.Lstat(d.socket); err == nil && fi.Mode().Type() == fs.ModeSocket {
			_ = os.Remove(d.socket)
		}
	}
	_ = os.RemoveAll(d.dir)
}

// MaxSocketPath is the longest unix socket path a sockaddr_un holds (108
// bytes with the terminating NUL on Linux).
const MaxSocketPath = 107
