package main

// Section 11's processes: coordhost serve, built from the main module, and
// envoyproxy/ratelimit's service_cmd, built from the module proxy; both run
// as children of this program on loopback, against its Redis server.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// envoyRLSModule is envoyproxy/ratelimit's module; -envoy-rls-version
// picks the version `go install` builds its service_cmd at.
const (
	envoyRLSModule  = "github.com/envoyproxy/ratelimit"
	envoyRLSPkg     = envoyRLSModule + "/src/service_cmd"
	envoyRLSVersion = "v1.4.1-0.20260122083618-3fb702589d36"
)

// clockTick is the unit of utime and stime in /proc/<pid>/stat
// (sysconf(_SC_CLK_TCK), 100 on Linux/amd64; Go has no sysconf without cgo).
const clockTick = 10 * time.Millisecond

// procCPU is the CPU time (user + system, all threads) process pid has used
// so far, from /proc/<pid>/stat, in clockTick steps.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no ')'", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	// f[0] is field 3 (state): utime is field 14, stime field 15.
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return time.Duration(u+st) * clockTick, nil
}

// child is a server process of section 11.
type child struct {
	name  string
	cmd   *exec.Cmd
	done  chan struct{}
	addr  string // where its gRPC (h2c) service listens
	dir   string // removed on stop, when set
	pprof string // coordhost built for -d-pprof: its pprof listener
	once  sync.Once

	mu   sync.Mutex
	tail []string // its last lines of stderr, for errors
	gcs  []gcLine // coordhost under GODEBUG=gctrace=1: one per GC
	gcc  chan struct{}
}

// gcLine is one line of GODEBUG=gctrace=1.
type gcLine struct {
	n            int // the GC's number
	live, goalMB int // MB: heap marked live at the end of the GC; the next goal
	stacksMB     int
}

// gcRe matches gctrace's "gc 12 @1.234s 2%: ... 4->5->3 MB, 6 MB goal, 0 MB stacks".
var gcRe = regexp.MustCompile(`^gc (\d+) @.* (\d+)->(\d+)->(\d+) MB, (\d+) MB goal, (\d+) MB stacks`)

func (c *child) pid() int { return c.cmd.Process.Pid }

// cpu is the child's CPU time so far (0 when it cannot be read).
func (c *child) cpu() time.Duration {
	d, _ := procCPU(c.pid())
	return d
}

func (c *child) stop() {
	c.once.Do(func() {
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(5 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.done
		}
		if c.dir != "" {
			os.RemoveAll(c.dir)
		}
	})
}

func (c *child) lastLines() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.tail, " | ")
}

// scan reads the child's stderr line by line: it keeps the last lines,
// records gctrace lines and hands each line to match until match returns
// true.
func (c *child) scan(r io.Reader, match func(string) bool) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	matching := match != nil
	for sc.Scan() {
		line := sc.Text()
		c.mu.Lock()
		if m := gcRe.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[1])
			live, _ := strconv.Atoi(m[4])
			goal, _ := strconv.Atoi(m[5])
			stacks, _ := strconv.Atoi(m[6])
			c.gcs = append(c.gcs, gcLine{n: n, live: live, goalMB: goal, stacksMB: stacks})
			select {
			case c.gcc <- struct{}{}:
			default:
			}
		} else {
			c.tail = append(c.tail, line)
			if len(c.tail) > 8 {
				c.tail = c.tail[1:]
			}
		}
		c.mu.Unlock()
		if matching && match(line) {
			matching = false
		}
	}
}

// lastGC is the last gctrace line seen (n 0 for none).
func (c *child) lastGC() gcLine {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.gcs) == 0 {
		return gcLine{}
	}
	return c.gcs[len(c.gcs)-1]
}

// startChild starts cmd, registers it for cleanup and scans its stderr
// with match (see scan).
func startChild(name string, cmd *exec.Cmd, match func(string) bool) (*child, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{name: name, cmd: cmd, done: make(chan struct{}), gcc: make(chan struct{}, 1)}
	scanned := make(chan struct{})
	go func() {
		c.scan(stderr, match)
		close(scanned)
	}()
	go func() {
		<-scanned // Wait closes the pipe: read it all first
		_ = cmd.Wait()
		close(c.done)
	}()
	registerChild(c)
	return c, nil
}

var (
	childrenMu sync.Mutex
	children   []*child
)

func registerChild(c *child) {
	childrenMu.Lock()
	children = append(children, c)
	childrenMu.Unlock()
}

// stopChildren stops every child still running (fatal errors, Ctrl-C).
func stopChildren() {
	childrenMu.Lock()
	cs := children
	children = nil
	childrenMu.Unlock()
	for _, c := range cs {
		c.stop()
	}
}

// pprofOverlay is the file -d-pprof adds to package main of cmd/coordhost
// with `go build -overlay`, in the temporary build only: net/http/pprof on
// its own listener, at $LOCKBENCH_PPROF_ADDR when set. The repository's
// daemon exposes no pprof.
const pprofOverlay = `package main

import (
	"net/http"
	_ "net/http/pprof"
	"os"
)

func init() {
	if a := os.Getenv("LOCKBENCH_PPROF_ADDR"); a != "" {
		go http.ListenAndServe(a, nil)
	}
}
`

// buildCoordhost returns -coordhost-bin, or `go build`s ./cmd/coordhost of
// the main module into a temporary directory (with pprofOverlay for
// -d-pprof).
func buildCoordhost(o options) (string, time.Duration, error) {
	if o.coordhostBin != "" {
		return o.coordhostBin, 0, nil
	}
	root, err := mainModuleDir()
	if err != nil {
		return "", 0, err
	}
	dir, err := os.MkdirTemp("", "lockbench-coordhost-")
	if err != nil {
		return "", 0, err
	}
	removeOnExit(dir)
	path := filepath.Join(dir, "coordhost")
	args := []string{"build", "-o", path}
	if o.dPprof != "" {
		src := filepath.Join(dir, "zz_lockbench_pprof.go")
		ov := filepath.Join(dir, "overlay.json")
		js := fmt.Sprintf(`{"Replace": {%q: %q}}`, filepath.Join(root, "cmd", "coordhost", "zz_lockbench_pprof.go"), src)
		if err := errors.Join(os.WriteFile(src, []byte(pprofOverlay), 0o644), os.WriteFile(ov, []byte(js), 0o644)); err != nil {
			return "", 0, err
		}
		args = append(args, "-overlay", ov)
	}
	t := time.Now()
	cmd := exec.Command("go", append(args, "./cmd/coordhost")...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", 0, fmt.Errorf("go build ./cmd/coordhost: %v: %s", err, lastLines(string(out), 5))
	}
	return path, time.Since(t), nil
}

// buildEnvoyRLS returns -envoy-rls-bin, or builds envoyproxy/ratelimit's
// service_cmd with `go install module/src/service_cmd@version` into a
// temporary directory (GOBIN): the module comes from the module proxy (or
// the module cache) and nothing of it enters this module's go.mod.
func buildEnvoyRLS(o options) (string, time.Duration, error) {
	if o.envoyRLSBin != "" {
		return o.envoyRLSBin, 0, nil
	}
	dir, err := os.MkdirTemp("", "lockbench-envoy-rls-")
	if err != nil {
		return "", 0, err
	}
	removeOnExit(dir)
	t := time.Now()
	cmd := exec.Command("go", "install", envoyRLSPkg+"@"+o.envoyRLSVersion)
	cmd.Dir = dir // outside any module
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", 0, fmt.Errorf("go install %s@%s: %v: %s", envoyRLSPkg, o.envoyRLSVersion, err, lastLines(string(out), 6))
	}
	return filepath.Join(dir, "service_cmd"), time.Since(t), nil
}

// daemonConfig is the HCL of section 11's coordhost: the Envoy domain
// "bench" whose remote_address descriptors share a fixed window of
// rlsLimit per minute (the same as envoyRLSConfig's), the lock "bench"
// partitioned by attribute k (part 2) and the lock "hold" for Hold
// streams (part 3; a long TTL, so that no renewal falls in the
// measurement).
func daemonConfig(redisAddr string) string {
	return fmt.Sprintf(`redis {
  addresses  = [%q]
  key_prefix = "ch:"
}
server {
  log_level = "info"
}
policy "partition" "k" {
  driver   = "builtin"
  template = "$${k}"
}
lock "bench" {
  ttl       = "10s"
  partition = policy.partition.k
}
lock "hold" {
  ttl       = "5m"
  partition = policy.partition.k
}
rate_limit "per_ip" {
  algorithm = "fixed_window"
  limit     = %d
  window    = "1m"
}
envoy_rate_limit "bench" {
  descriptor {
    entries    = [{ key = "remote_address" }]
    rate_limit = "per_ip"
  }
}
`, redisAddr, rlsLimit)
}

// envoyRLSConfig is envoyproxy/ratelimit's configuration of the same
// domain and limit.
func envoyRLSConfig() string {
	return fmt.Sprintf(`domain: bench
descriptors:
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unit: %d
`, rlsLimit)
}

// startCoordhost starts `coordhost serve` on a free loopback port with
// daemonConfig; env is added to this program's environment. With
// pprofDir set (a binary built for -d-pprof) its pprof listens on another
// free port.
func startCoordhost(bin, redisAddr, pprofDir string, env ...string) (*child, error) {
	var pprofAddr string
	if pprofDir != "" {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		pprofAddr = "127.0.0.1:" + strconv.Itoa(port)
		env = append(env, "LOCKBENCH_PPROF_ADDR="+pprofAddr)
	}
	dir, err := os.MkdirTemp("", "lockbench-daemon-")
	if err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, "coordhost.hcl")
	if err := os.WriteFile(cfg, []byte(daemonConfig(redisAddr)), 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	cmd := exec.Command(bin, "serve", "-listen", "127.0.0.1:0", cfg)
	cmd.Env = append(os.Environ(), env...)
	addrc := make(chan string, 1)
	c, err := startChild("coordhost", cmd, func(line string) bool {
		// slog's text handler: `... msg=listening addr=127.0.0.1:N ...`
		if !strings.Contains(line, "msg=listening") {
			return false
		}
		for f := range strings.FieldsSeq(line) {
			if a, ok := strings.CutPrefix(f, "addr="); ok {
				addrc <- a
				return true
			}
		}
		return false
	})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	c.dir, c.pprof = dir, pprofAddr
	select {
	case c.addr = <-addrc:
	case <-c.done:
		return nil, fmt.Errorf("coordhost serve exited: %s", c.lastLines())
	case <-time.After(30 * time.Second):
		c.stop()
		return nil, fmt.Errorf("coordhost serve: no listening line in 30s: %s", c.lastLines())
	}
	return c, nil
}

// startEnvoyRLS starts envoyproxy/ratelimit's service on free loopback
// ports, on Redis redisAddr (tcp, its defaults otherwise: a radix pool of
// 10 connections, no implicit pipelining, no local cache), stats to its
// stdout (discarded; USE_STATSD=false), and waits until it answers.
func startEnvoyRLS(bin, redisAddr string) (*child, error) {
	dir, err := os.MkdirTemp("", "lockbench-envoy-rls-run-")
	if err != nil {
		return nil, err
	}
	cdir := filepath.Join(dir, "ratelimit", "config")
	if err := os.MkdirAll(cdir, 0o755); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(cdir, "bench.yaml"), []byte(envoyRLSConfig()), 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	var ports [3]int
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	cmd := exec.Command(bin)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"USE_STATSD=false",
		"LOG_LEVEL=warn",
		"REDIS_SOCKET_TYPE=tcp",
		"REDIS_URL="+redisAddr,
		"RUNTIME_ROOT="+dir,
		"RUNTIME_SUBDIRECTORY=ratelimit",
		"RUNTIME_WATCH_ROOT=false",
		"HOST=127.0.0.1", "PORT="+strconv.Itoa(ports[0]),
		"GRPC_HOST=127.0.0.1", "GRPC_PORT="+strconv.Itoa(ports[1]),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+strconv.Itoa(ports[2]),
	)
	c, err := startChild("envoyproxy/ratelimit", cmd, nil)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	c.dir = dir
	c.addr = "127.0.0.1:" + strconv.Itoa(ports[1])
	// Ready when a decision comes back.
	conn, err := grpc.NewClient(c.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		c.stop()
		return nil, err
	}
	defer conn.Close()
	rc := rlsv3.NewRateLimitServiceClient(conn)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := rc.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*rlcommon.RateLimitDescriptor{
			{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "ready"}}},
		}})
		cancel()
		if err == nil {
			return c, nil
		}
		select {
		case <-c.done:
			return nil, fmt.Errorf("envoyproxy/ratelimit exited: %s", c.lastLines())
		default:
		}
		if time.Now().After(deadline) {
			c.stop()
			return nil, fmt.Errorf("envoyproxy/ratelimit: no answer on %s in 30s: %v; %s", c.addr, err, c.lastLines())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// scrape reads the daemon's /metrics and returns the unlabelled samples
// whose names start with one of prefixes.
func scrape(addr string, prefixes ...string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %s", resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		name, val, ok := strings.Cut(line, " ")
		if !ok || strings.Contains(name, "{") {
			continue
		}
		for _, p := range prefixes {
			if strings.HasPrefix(name, p) {
				if v, err := strconv.ParseFloat(val, 64); err == nil {
					out[name] = v
				}
				break
			}
		}
	}
	return out, sc.Err()
}

// saveProfile fetches path (e.g. "heap?gc=1", "profile?seconds=5") from the
// child's pprof listener into file; a no-op for a child without one.
func (c *child) saveProfile(path, file string) {
	if c.pprof == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+c.pprof+"/debug/pprof/"+path, nil)
	if err == nil {
		var resp *http.Response
		if resp, err = http.DefaultClient.Do(req); err == nil {
			defer resp.Body.Close()
			var b []byte
			if b, err = io.ReadAll(resp.Body); err == nil && resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("%s: %s", resp.Status, b)
			}
			if err == nil {
				err = os.WriteFile(file, b, 0o644)
			}
		}
	}
	if err != nil {
		logf("11 -d-pprof %s: %v", path, err)
		return
	}
	logf("11 -d-pprof wrote %s", file)
}
