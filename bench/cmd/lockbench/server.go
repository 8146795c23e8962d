package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/rueidis"
)

// server is a redis-server this program starts and kills: the Redis 7
// server for sections 1–3, and a Redis 8 server for section 5 only.
//
// internal/redistest would be the natural way to start it, but every
// function there needs a testing.TB, which a main program cannot provide
// without faking the testing package; so the few lines it takes are
// repeated here with the same flags (--save ” --appendonly no, loopback,
// free port).
type server struct {
	bin     string
	addr    string
	port    int
	version string
	dir     string
	cmd     *exec.Cmd
	done    chan struct{}
	admin   rueidis.Client // RESP3, no client cache, no retries
	once    sync.Once
}

// redis7Binary is $COORDHOST_REDIS7_SERVER, else redis-server on PATH.
func redis7Binary() (string, error) {
	if b := os.Getenv("COORDHOST_REDIS7_SERVER"); b != "" {
		return b, nil
	}
	b, err := exec.LookPath("redis-server")
	if err != nil {
		return "", errors.New("$COORDHOST_REDIS7_SERVER is unset and redis-server is not on PATH (run `make redis`, then `. ./.cache/redis-env.sh`)")
	}
	return b, nil
}

// redis8Binary is $COORDHOST_REDIS8_SERVER (section 5: hash-field leases
// need Redis ≥ 7.4). No PATH fallback: the redis-server on PATH is the
// Redis 7 one.
func redis8Binary() (string, error) {
	if b := os.Getenv("COORDHOST_REDIS8_SERVER"); b != "" {
		return b, nil
	}
	return "", errors.New("$COORDHOST_REDIS8_SERVER is unset; section 5 needs it (run `make redis`, then `. ./.cache/redis-env.sh`), or leave 5 out of -sections")
}

// startServer starts bin on a free loopback port.
func startServer(bin string) (*server, error) {
	return startServerArgs(bin, false)
}

// startServerArgs starts bin on a free loopback port, with cluster mode
// on when cluster is set (section 12): its bus port, port + 10000, is
// free as well, and the cluster's config file lives in the server's
// directory.
func startServerArgs(bin string, cluster bool) (*server, error) {
	dir, err := os.MkdirTemp("", "lockbench-redis-")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range 10 {
		s, err := launch(bin, dir, cluster)
		if err == nil {
			return s, nil
		}
		lastErr = err
	}
	os.RemoveAll(dir)
	return nil, fmt.Errorf("start %s: %w", bin, lastErr)
}

func launch(bin, dir string, cluster bool) (*server, error) {
	pick := freePort
	if cluster {
		pick = clusterPort
	}
	port, err := pick()
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "server.log")
	args := []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--dir", dir,
		"--logfile", logPath,
	}
	if cluster {
		args = append(args, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000")
	}
	cmd := exec.Command(bin, args...)
	// Kill the server with us if we die without cleaning up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{bin: bin, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), port: port, dir: dir, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(s.done)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-s.done:
			b, _ := os.ReadFile(logPath)
			return nil, fmt.Errorf("redis-server exited: %s", lastLines(string(b), 5))
		default:
		}
		c, err := rueidis.NewClient(rueidis.ClientOption{
			InitAddress:  []string{s.addr},
			DisableCache: true,
			DisableRetry: true,
			// A cluster node's admin connection talks to that node
			// only (rueidis would otherwise make a cluster client).
			ForceSingleClient: true,
			// No background PING on an idle admin connection: section
			// 12 counts every command a node serves.
			Dialer: net.Dialer{KeepAlive: -1},
		})
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			info, err2 := c.Do(ctx, c.B().Info().Section("server").Build()).ToString()
			cancel()
			if err2 == nil && infoField(info, "process_id") == strconv.Itoa(cmd.Process.Pid) {
				s.admin = c
				s.version = infoField(info, "redis_version")
				return s, nil
			}
			c.Close()
			if err2 == nil {
				s.kill()
				return nil, fmt.Errorf("another server answers on %s", s.addr)
			}
			err = err2
		}
		if time.Now().After(deadline) {
			s.kill()
			return nil, fmt.Errorf("no answer on %s: %v", s.addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *server) kill() {
	if s.admin != nil {
		s.admin.Close()
	}
	_ = s.cmd.Process.Kill()
	<-s.done
}

// stop kills the server and removes its directory. Idempotent, so the
// signal handler and main may both call it.
func (s *server) stop() {
	s.once.Do(func() {
		s.kill()
		os.RemoveAll(s.dir)
	})
}

// do sends an admin command and returns the reply as text.
func (s *server) do(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := s.admin.Do(ctx, s.admin.B().Arbitrary(args...).Build()).ToAny()
	if err != nil {
		return "", err
	}
	return fmt.Sprint(v), nil
}

func (s *server) mustDo(args ...string) string {
	out, err := s.do(args...)
	if err != nil {
		fatalf("redis %v: %v", args, err)
	}
	return out
}

// fill writes n unrelated keys with a one-hour TTL, pipelined.
func (s *server) fill(n int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const batch = 1000
	for i := 0; i < n; i += batch {
		cmds := make(rueidis.Commands, 0, batch)
		for j := i; j < min(n, i+batch); j++ {
			cmds = append(cmds, s.admin.B().Set().Key("filler:"+strconv.Itoa(j)).Value("x").ExSeconds(3600).Build())
		}
		for _, r := range s.admin.DoMulti(ctx, cmds...) {
			if err := r.Error(); err != nil {
				return err
			}
		}
	}
	return nil
}

// commandStats parses INFO commandstats into command name → calls.
func (s *server) commandStats() (map[string]int64, error) {
	info, err := s.do("INFO", "commandstats")
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for line := range strings.Lines(info) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_")
		if !ok {
			continue
		}
		name, fields, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		for f := range strings.SplitSeq(fields, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("commandstats %q: %w", line, err)
				}
				out[name] = n
			}
		}
	}
	return out, nil
}

func infoField(info, name string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// usedCPU is INFO cpu's used_cpu_user + used_cpu_sys in info, in seconds.
func usedCPU(info string) float64 {
	u, _ := strconv.ParseFloat(infoField(info, "used_cpu_user"), 64)
	s, _ := strconv.ParseFloat(infoField(info, "used_cpu_sys"), 64)
	return u + s
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// clusterPort is a free loopback port whose cluster bus port (port +
// 10000) is free too, below the kernel's ephemeral range where it can
// (so that no outgoing connection takes the bus port meanwhile), else a
// kernel-chosen one with room above it.
func clusterPort() (int, error) {
	lo := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				lo = n
			}
		}
	}
	const bottom = 10000
	top := lo - 10000
	for i := range 400 {
		var p int
		if i < 200 && top-bottom >= 1000 {
			p = bottom + rand.IntN(top-bottom)
		} else {
			var err error
			if p, err = freePort(); err != nil {
				return 0, err
			}
		}
		if p+10000 <= 65535 && portsFree(p, p+10000) {
			return p, nil
		}
	}
	return 0, errors.New("no free port with a free cluster bus port")
}

// portsFree reports whether every port can be listened on now.
func portsFree(ports ...int) bool {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for _, p := range ports {
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			return false
		}
		ls = append(ls, l)
	}
	return true
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
