// Package redistest starts real Redis and Valkey servers on loopback for
// tests: a standalone server (Start), several independent servers (StartN),
// a cluster of masters with or without replicas (StartCluster,
// WithReplicas), or a primary with replicas watched by three Sentinels
// (StartSentinel), of any Kind in the fleet: Redis 7.0 (Debian bookworm),
// Redis 8.0 (Debian trixie), Redis 8.6 (Debian experimental) or Valkey 8.1
// (Debian trixie). Kinds lists them all for table tests; Kind.Has tells
// which Features each has (e.g. hash-field expiry).
//
// Both replicated topologies fail over on demand and report how long it
// took (FailoverTiming): Sentinel.Failover (SENTINEL FAILOVER),
// Sentinel.KillPrimary (SIGKILL, the sentinels promote a replica),
// Cluster.Failover (CLUSTER FAILOVER) and Cluster.KillMaster (SIGKILL, the
// cluster promotes a replica); Revive restarts what was killed as a
// replica. Each returns once the servers agree on the new shape, and the
// harness's view (Primary, Replicas, Servers, Replicas[i], Down) follows.
// A cluster also moves slots between masters as redis-cli --cluster
// reshard does, in steps that can stop midway (StartMigration, MoveKeys,
// Finish) or in one go (MigrateSlot); SlotOf and Owner say where a key
// lives.
// The sentinels run the kind's own redis-server (or valkey-server) with
// --sentinel; nothing else is installed.
//
// Every server runs as a child process with its own temporary directory,
// `--save ”` and `--appendonly no`, on a free 127.0.0.1 port, and is killed
// and reaped when the test that started it ends. It is meant for tests only;
// production packages never import it (make depcheck enforces that).
//
// Binaries: Redis 7.0 is $COORDHOST_REDIS7_SERVER, else `redis-server` on
// PATH; Redis 8.0 is $COORDHOST_REDIS8_SERVER, else
// <repo>/.cache/redis-8/bin/redis-server; Redis 8.6 is
// $COORDHOST_REDIS86_SERVER, else <repo>/.cache/redis-86/bin/redis-server;
// Valkey 8.1 is $COORDHOST_VALKEY8_SERVER, else
// <repo>/.cache/valkey-8/bin/valkey-server. `make redis` (run by `make test`)
// installs them all and writes those variables to .cache/redis-env.sh. A
// missing binary, or one that turns out to be another kind, fails the test;
// it never skips.
//
// Functions that take a testing.TB call t.Fatal on failure and must be called
// from the test's goroutine. Methods without one (Do, Pause, Resume, Stop, PID,
// Log) are safe for concurrent use.
package redistest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

const (
	// StartTimeout bounds how long a server may take to answer after start.
	StartTimeout = 10 * time.Second
	// CmdTimeout bounds one admin command sent with Cmd or MustCmd.
	CmdTimeout = 10 * time.Second
)

// Option configures Start, StartN, StartCluster and StartSentinel.
type Option func(*config)

type config struct {
	kind    Kind
	badKind string // why the options name no valid kind, if they do not
	args    []string
	// replicas is WithReplicas' n; hasReplicas tells whether it was given.
	replicas    int
	hasReplicas bool
	// sentinelConf, when set, is written to the server's directory as
	// sentinel.conf, and the server runs as a Sentinel on it.
	sentinelConf string
	// env is added to the server process's environment (Env).
	env []string
}

// WithKind selects the kind of server (the default is Redis70).
func WithKind(k Kind) Option {
	return func(c *config) {
		c.kind, c.badKind = k, ""
		if _, ok := k.info(); !ok {
			c.badKind = fmt.Sprintf("unknown server kind %v (want one of %v)", k, Kinds())
		}
	}
}

// Version selects Redis by major version: 7 is WithKind(Redis70) (the
// default) and 8 is WithKind(Redis80). Use WithKind for Redis 8.6 and
// Valkey.
func Version(major int) Option {
	return func(c *config) {
		c.kind, c.badKind = kindOfMajor(major), ""
		if c.kind == 0 {
			c.badKind = fmt.Sprintf("unsupported Redis version %d (Version takes 7 or 8; use WithKind for %v)", major, Kinds())
		}
	}
}

// Args appends extra redis-server arguments, e.g. Args("--maxmemory", "10mb").
// They come after the package's own arguments, so they override them.
func Args(args ...string) Option {
	return func(c *config) { c.args = append(c.args, args...) }
}

// Env adds "NAME=value" entries to the environment of the server
// process, after the test binary's own (so they override it), e.g.
// Env("LD_PRELOAD=/tmp/shim.so") to run the server under a preloaded
// library. A Restart keeps them.
func Env(kv ...string) Option {
	return func(c *config) { c.env = append(c.env, kv...) }
}

// WithReplicas gives every master of StartCluster n replicas (0 to 5). Start
// and StartN refuse it; StartSentinel takes its replica count as an
// argument.
func WithReplicas(n int) Option {
	return func(c *config) { c.replicas, c.hasReplicas = n, true }
}

func newConfig(opts []Option) config {
	c := config{kind: Redis70}
	for _, o := range opts {
		o(&c)
	}
	return c
}

// Server is one running server process (redis-server or valkey-server).
type Server struct {
	// Addr is "127.0.0.1:port".
	Addr string
	// Port is the TCP port (the cluster bus, if enabled, is Port+10000).
	Port int
	// Kind is the kind of server.
	Kind Kind
	// Version is the server's own version from INFO server: redis_version
	// on Redis (e.g. "8.6.3"), valkey_version on Valkey (e.g. "8.1.1").
	Version string
	// RedisVersion is redis_version from INFO server: Version on Redis, and
	// the Redis version Valkey claims compatibility with ("7.2.4" on Valkey
	// 8.1), which is what a client that reads only redis_version sees.
	RedisVersion string
	// Dir is the server's working directory (a t.TempDir).
	Dir string

	bin  string
	args []string
	env  []string // added to the process environment (Env)

	mu    sync.Mutex
	proc  *process
	admin rueidis.Client
}

type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has been reaped
}

// Start starts a fresh standalone server and registers its shutdown with
// t.Cleanup. It fails the test if the binary is missing or the server does not
// answer within StartTimeout.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	cfg := newConfig(opts)
	noReplicas(t, "Start", cfg)
	return start(t, cfg)
}

// noReplicas fails t when cfg has WithReplicas, which fn does not take.
func noReplicas(t testing.TB, fn string, cfg config) {
	t.Helper()
	if cfg.hasReplicas {
		t.Fatalf("redistest: %s does not take WithReplicas (StartCluster does; StartSentinel takes a replica count)", fn)
	}
}

// StartN starts n independent servers (e.g. for Redlock).
func StartN(t testing.TB, n int, opts ...Option) []*Server {
	t.Helper()
	cfg := newConfig(opts)
	noReplicas(t, "StartN", cfg)
	out := make([]*Server, n)
	for i := range out {
		out[i] = start(t, cfg)
	}
	return out
}

// Has reports whether the server has feature f (Kind.Has of its kind).
func (s *Server) Has(f Feature) bool { return s.Kind.Has(f) }

func start(t testing.TB, cfg config) *Server {
	t.Helper()
	bin := serverBinary(t, cfg)
	s := &Server{Kind: cfg.kind, Dir: t.TempDir(), bin: bin, env: slices.Clone(cfg.env)}
	// Registered after TempDir, so it runs before the directory is removed.
	t.Cleanup(s.close)
	cluster := slices.Contains(cfg.args, "--cluster-enabled")
	var lead []string
	if cfg.sentinelConf != "" {
		// redis-server --sentinel wants its configuration file first, and
		// rewrites it as its state changes.
		conf := filepath.Join(s.Dir, "sentinel.conf")
		if err := os.WriteFile(conf, []byte(cfg.sentinelConf), 0o644); err != nil {
			t.Fatalf("redistest: %v", err)
		}
		lead = []string{conf, "--sentinel"}
	}

	var lastErr error
	for attempt := 0; attempt < 20; attempt++ {
		port, err := freePort(cluster)
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		s.Port = port
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		s.args = append(slices.Clone(lead),
			"--port", strconv.Itoa(port),
			"--bind", "127.0.0.1",
			"--dir", s.Dir,
			"--save", "",
			"--appendonly", "no",
			"--daemonize", "no",
			"--enable-debug-command", "yes",
		)
		s.args = append(s.args, cfg.args...)
		info, err := s.launch()
		if err == nil {
			if s.Version, s.RedisVersion, err = checkKind(cfg.kind, bin, info); err != nil {
				t.Fatalf("redistest: %v", err)
			}
			break
		}
		lastErr = err
		if !errors.Is(err, errAddrInUse) {
			t.Fatalf("redistest: %v", err)
		}
	}
	if s.Version == "" {
		t.Fatalf("redistest: no free port after 20 attempts: %v", lastErr)
	}

	s.newAdmin(t)
	return s
}

// newAdmin (re)creates the private admin client. It speaks RESP2, so INFO,
// CLUSTER INFO and CLIENT LIST come back as plain bulk strings (under RESP3
// they are verbatim strings, which rueidis returns with a "txt:" prefix).
func (s *Server) newAdmin(t testing.TB) {
	t.Helper()
	admin, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:       []string{s.Addr},
		ForceSingleClient: true,
		DisableCache:      true,
		DisableRetry:      true,
		AlwaysRESP2:       true,
		ClientName:        "redistest-admin",
	})
	if err != nil {
		t.Fatalf("redistest: admin client for %s: %v", s.Addr, err)
	}
	s.mu.Lock()
	old := s.admin
	s.admin = admin
	s.mu.Unlock()
	if old != nil {
		old.Close()
	}
}

var errAddrInUse = errors.New("address already in use")

// launch starts the process on s.Port and waits until it answers. It returns
// the server's INFO server reply.
func (s *Server) launch() (string, error) {
	logPath := filepath.Join(s.Dir, "server.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return "", err
	}
	offset, _ := logf.Seek(0, io.SeekEnd)
	cmd := exec.Command(s.bin, s.args...)
	cmd.Dir = s.Dir
	if len(s.env) > 0 {
		cmd.Env = append(os.Environ(), s.env...)
	}
	cmd.Stdout = logf
	cmd.Stderr = logf
	// Own process group (a terminal's ^C goes to the test binary only), and
	// killed by the kernel if the test binary dies without cleaning up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return "", fmt.Errorf("start %s: %w", s.bin, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	s.mu.Lock()
	s.proc = p
	s.mu.Unlock()

	info, err := waitReady(p, s.Addr)
	if err == nil {
		return info, nil
	}
	s.Stop()
	out := readFrom(logPath, offset)
	if strings.Contains(out, "Address already in use") || errors.Is(err, errAddrInUse) {
		return "", fmt.Errorf("%s: %w", s.Addr, errAddrInUse)
	}
	return "", fmt.Errorf("%s %s did not come up on %s: %v\n--- server log ---\n%s",
		s.bin, strings.Join(quoteArgs(s.args), " "), s.Addr, err, out)
}

// waitReady polls addr with INFO server until the server started as p answers,
// and returns the reply.
func waitReady(p *process, addr string) (string, error) {
	deadline := time.Now().Add(StartTimeout)
	var lastErr error
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			return "", fmt.Errorf("process exited: %v", p.cmd.ProcessState)
		default:
		}
		info, err := rawInfo(addr)
		if err == nil {
			if pid := infoField(info, "process_id"); pid != strconv.Itoa(p.cmd.Process.Pid) {
				// Someone else's server answers on this port.
				return "", fmt.Errorf("%w: pid %s answers on %s", errAddrInUse, pid, addr)
			}
			return info, nil
		}
		lastErr = err
		time.Sleep(10 * time.Millisecond)
	}
	return "", fmt.Errorf("no answer within %v: %v", StartTimeout, lastErr)
}

// rawInfo sends INFO server over a fresh RESP2 connection.
func rawInfo(addr string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := io.WriteString(conn, "INFO server\r\n"); err != nil {
		return "", err
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if !strings.HasPrefix(line, "$") {
		return "", fmt.Errorf("INFO: %s", line) // e.g. -LOADING
	}
	n, err := strconv.Atoi(line[1:])
	if err != nil || n < 0 {
		return "", fmt.Errorf("INFO: bad reply %q", line)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return "", err
	}
	return string(buf), nil
}

// infoField returns the value of "name:value" in an INFO reply.
func infoField(info, name string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func readFrom(path string, offset int64) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if offset > int64(len(b)) {
		offset = 0
	}
	return string(b[offset:])
}

func quoteArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t'\"") {
			a = strconv.Quote(a)
		}
		out[i] = a
	}
	return out
}

// Client returns a new rueidis client for this server, closed at t.Cleanup.
// Each opt edits the ClientOption before the client is built; InitAddress is
// preset to Addr. On a cluster-enabled node rueidis builds a cluster client
// unless an opt sets ForceSingleClient.
func (s *Server) Client(t testing.TB, opts ...func(*rueidis.ClientOption)) rueidis.Client {
	t.Helper()
	return newClient(t, []string{s.Addr}, opts)
}

func newClient(t testing.TB, addrs []string, opts []func(*rueidis.ClientOption)) rueidis.Client {
	t.Helper()
	o := rueidis.ClientOption{InitAddress: slices.Clone(addrs)}
	for _, f := range opts {
		f(&o)
	}
	c, err := rueidis.NewClient(o)
	if err != nil {
		t.Fatalf("redistest: rueidis.NewClient(%v): %v", o.InitAddress, err)
	}
	t.Cleanup(c.Close)
	return c
}

// Do sends one command on the server's private admin connection (RESP2, no
// client cache, no retries, no cluster redirection) and returns the raw
// result. After Stop, or a Restart by someone else, the first command may
// fail with a connection error.
func (s *Server) Do(ctx context.Context, args ...string) rueidis.RedisResult {
	s.mu.Lock()
	admin := s.admin
	s.mu.Unlock()
	if admin == nil {
		return rueidis.RedisResult{} // unreachable after Start returned
	}
	return admin.Do(ctx, admin.B().Arbitrary(args...).Build())
}

// Cmd sends an admin command (DBSIZE, CLIENT KILL, INFO commandstats, CONFIG
// SET, DEBUG ...) with a CmdTimeout bound and returns the reply as text:
// strings as they are, integers in decimal, arrays one element per line
// (nested arrays as "[a b]"), so CONFIG GET maxmemory gives "maxmemory\n0".
// A nil reply returns rueidis.Nil; a server error returns that error.
func (s *Server) Cmd(t testing.TB, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), CmdTimeout)
	defer cancel()
	v, err := s.Do(ctx, args...).ToAny()
	if err != nil {
		return "", err
	}
	return format(v, "\n"), nil
}

// MustCmd is Cmd that fails the test on an error.
func (s *Server) MustCmd(t testing.TB, args ...string) string {
	t.Helper()
	out, err := s.Cmd(t, args...)
	if err != nil {
		t.Fatalf("redistest: %s %v: %v", s.Addr, args, err)
	}
	return out
}

// ClientField returns field (such as "id" or "sub") of the first
// connection CLIENT LIST shows with the name name (CLIENT SETNAME), and
// whether there is such a connection ("" for a field it lacks).
func (s *Server) ClientField(t testing.TB, name, field string) (string, bool) {
	t.Helper()
	for _, line := range strings.Split(s.MustCmd(t, "CLIENT", "LIST"), "\n") {
		if !strings.Contains(line, " name="+name+" ") {
			continue
		}
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, field+"="); ok {
				return v, true
			}
		}
		return "", true
	}
	return "", false
}

func format(v any, sep string) string {
	switch v := v.(type) {
	case nil:
		return ""
	case string:
		return v
	case int64:
		return strconv.FormatInt(v, 10)
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case bool:
		if v {
			return "1"
		}
		return "0"
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = format(e, " ")
		}
		if sep == " " {
			return "[" + strings.Join(parts, sep) + "]"
		}
		return strings.Join(parts, sep)
	case map[string]any:
		keys := slices.Sorted(func(yield func(string) bool) {
			for k := range v {
				if !yield(k) {
					return
				}
			}
		})
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = k + " " + format(v[k], " ")
		}
		return strings.Join(parts, sep)
	case error:
		return v.Error()
	default:
		return fmt.Sprint(v)
	}
}

// PID returns the server process id, or 0 when it is stopped.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil || s.proc.exited() {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

// Log returns everything the server has logged so far (across restarts).
func (s *Server) Log() string {
	b, err := os.ReadFile(filepath.Join(s.Dir, "server.log"))
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// Pause stops the server process with SIGSTOP: connections stay open and
// nothing is answered until Resume. Admin commands time out meanwhile. It
// returns once every thread of the server is stopped (at most 5 s):
// kill(SIGSTOP) returns before that, and on a busy machine the server
// could run on for a while.
func (s *Server) Pause() {
	s.signal(syscall.SIGSTOP)
	if pid := s.PID(); pid != 0 {
		for end := time.Now().Add(5 * time.Second); !ProcessStopped(pid) && time.Now().Before(end); {
			time.Sleep(time.Millisecond)
		}
	}
}

// ProcessStopped reports whether every thread of process pid is stopped
// (state T in /proc/PID/task/TID/stat), as a SIGSTOP leaves it once the
// kernel has stopped them all: the kill returns before that. False when
// the process is gone or /proc cannot tell.
func ProcessStopped(pid int) bool {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, task := range tasks {
		stat, err := os.ReadFile(dir + "/" + task.Name() + "/stat")
		if err != nil {
			return false // a thread that just ended, or one starting
		}
		// "tid (comm) S ...": the state follows the last ')'.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 || i+2 >= len(stat) || stat[i+2] != 'T' {
			return false
		}
	}
	return true
}

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil && !s.proc.exited() {
		_ = s.proc.cmd.Process.Signal(sig)
	}
}

// Stop kills the server now (SIGKILL, also when paused) and reaps it. All data
// is lost. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if p == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Restart kills the server if it runs and starts it again on the same port
// with the same arguments and directory (a cluster node keeps its nodes.conf),
// waiting until it answers.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	var err error
	// The port was ours a moment ago; retry briefly if something grabbed it.
	for deadline := time.Now().Add(StartTimeout); ; {
		if _, err = s.launch(); err == nil || !errors.Is(err, errAddrInUse) || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("redistest: restart: %v", err)
	}
	// The old admin connection died with the process; start afresh rather
	// than fail the next command with EOF.
	s.newAdmin(t)
}

// addrsOf returns the servers' addresses, in order.
func addrsOf(ss []*Server) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.Addr
	}
	return out
}

// replicateOnRestart makes the server's next start (Restart) come up as a
// replica of primary, in place of any --replicaof it had.
func (s *Server) replicateOnRestart(primary *Server) {
	args := make([]string, 0, len(s.args)+3)
	for i := 0; i < len(s.args); i++ {
		if s.args[i] == "--replicaof" && i+2 < len(s.args) {
			i += 2
			continue
		}
		args = append(args, s.args[i])
	}
	s.args = append(args, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port))
}

func (s *Server) close() {
	s.mu.Lock()
	admin := s.admin
	s.admin = nil
	s.mu.Unlock()
	if admin != nil {
		admin.Close()
	}
	s.Stop()
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// freePort returns a port that is free on 127.0.0.1 now (and, for cluster
// nodes, whose bus port Port+10000 is free too). It prefers ports below the
// kernel's ephemeral range, so that no outgoing connection can take the port
// between Stop and Restart; it falls back to a kernel-chosen port.
func freePort(cluster bool) (int, error) {
	lo := ephemeralLow()
	top := lo
	if cluster {
		top = lo - 10000
	}
	const bottom = 10000
	if top-bottom >= 1000 {
		for range 200 {
			port := bottom + rand.IntN(top-bottom)
			if portsFree(port, cluster) {
				return port, nil
			}
		}
	}
	for range 200 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if port+10000 > 65535 && cluster {
			continue
		}
		if portsFree(port, cluster) {
			return port, nil
		}
	}
	return 0, errors.New("no free port found")
}

func portsFree(port int, cluster bool) bool {
	ports := []int{port}
	if cluster {
		ports = append(ports, port+10000)
	}
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

func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				return n
			}
		}
	}
	return 32768
}

// serverBinary resolves the server binary of cfg's kind, or fails t.
func serverBinary(t testing.TB, cfg config) string {
	t.Helper()
	if cfg.badKind != "" {
		t.Fatalf("redistest: %s", cfg.badKind)
	}
	bin, err := findServer(cfg.kind)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return bin
}

// StartForExamples starts a standalone server of the given major version
// for runnable examples, which cannot take a testing.TB: call it from
// TestMain and call stop after m.Run. The server runs as Start's do
// (loopback, no persistence, its own temporary directory).
func StartForExamples(major int) (addr string, stop func(), err error) {
	k := kindOfMajor(major)
	if k == 0 {
		return "", nil, fmt.Errorf("redistest: unsupported Redis version %d (want 7 or 8)", major)
	}
	bin, err := findServer(k)
	if err != nil {
		return "", nil, fmt.Errorf("redistest: %w", err)
	}
	port, err := freePort(false)
	if err != nil {
		return "", nil, fmt.Errorf("redistest: %w", err)
	}
	dir, err := os.MkdirTemp("", "coordhost-example-")
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("redistest: %s: %w", bin, err)
	}
	stop = func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); os.RemoveAll(dir) }
	addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for deadline := time.Now().Add(StartTimeout); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err := rawInfo(addr); err == nil {
			return addr, stop, nil
		}
	}
	stop()
	return "", nil, fmt.Errorf("redistest: example server %s on %s did not answer within %v", bin, addr, StartTimeout)
}

// repoRoot finds the directory holding go.mod, walking up from this source
// file (or, when paths are trimmed, from the working directory).
func repoRoot() (string, error) {
	var starts []string
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		starts = append(starts, filepath.Dir(file))
	}
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	for _, dir := range starts {
		for d := dir; ; d = filepath.Dir(d) {
			if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
				return d, nil
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	return "", errors.New("the repository root (go.mod) was not found")
}

// LingeringGoroutines names functions of goroutines that rueidis (v1.0.80)
// leaves behind for a bounded time after Client.Close: a 5 s delayed close of
// connections replaced by a cluster topology refresh or a redirect, and a
// delayed (up to ~1 s) lazy cluster refresh. They end by themselves, but
// later than goleak waits. Tests that restart or kill servers under a
// client should pass each to goleak.IgnoreAnyFunction in TestMain:
//
//	func TestMain(m *testing.M) {
//		var opts []goleak.Option
//		for _, f := range redistest.LingeringGoroutines() {
//			opts = append(opts, goleak.IgnoreAnyFunction(f))
//		}
//		goleak.VerifyTestMain(m, opts...)
//	}
func LingeringGoroutines() []string {
	return []string{
		"github.com/redis/rueidis.(*clusterClient)._refresh.func2",
		"github.com/redis/rueidis.(*clusterClient).redirectOrNew.func1",
		"github.com/redis/rueidis.(*call).DelayDo.func1",
		"github.com/redis/rueidis.(*standalone).redirectToPrimary.func1",
	}
}
