// Package e2e tests the coordhost daemon end to end: each test starts a real
// `coordhost serve` child process (built once by TestMain) on a loopback
// port with its own Redis, and drives it with clients nobody here wrote:
// grpcurl, grpc-health-probe, envoyproxy/ratelimit's client_cmd, curl and
// Python's grpcio (Debian's). `make clients` (scripts/test-clients.sh)
// installs them and writes their paths to .cache/clients-env.sh, which `make
// test` sources. Under CI=true a missing client fails its test; elsewhere
// the test is skipped with a message saying how to get it.
//
// The helpers are meant for every service's tests:
//
//	d := startDaemon(t, rateLimitHCL)        // coordhost serve + its own Redis
//	var resp coordhostv1.CreateSessionResponse
//	d.grpcurlOK(t, "coordhost.v1.SessionService/CreateSession", `{"ttl":"30s"}`, &resp)
//	st := d.grpcurlErr(t, method, badReq)    // google.rpc.Status JSON, details resolved
//	ka := d.grpcurlStream(t, "coordhost.v1.SessionService/KeepAlive")
//	ka.Send(t, &coordhostv1.KeepAliveRequest{SessionId: id})
//	ka.Recv(t, &kaResp)
//	ka.Kill()                                // SIGKILL: the client vanishes
//	hold := d.grpcurlServerStream(t, "coordhost.v1.LockService/Hold", req)
//	r := d.curl(t, "POST", "/coordhost.v1.RateLimitService/Check", body)
//	steps := d.python(t, "session")          // scenario_session in testdata/coordhost_client.py
//	d.rlsCheck(t, "edge", "generic_key=checkout,user=alice") // "OK" or "OVER_LIMIT"
//
// Requests are a proto.Message (sent as protojson), a JSON string, or any
// value encoding/json takes; responses decode into a proto.Message with
// protojson (an unknown field fails: the API moved under the test) or into
// anything else with encoding/json. grpcurl's exit code is 64 + the gRPC
// code of an error status.
package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
)

const (
	// startTimeout bounds a daemon's start, until it logs "listening".
	startTimeout = 20 * time.Second
	// stopTimeout bounds a daemon's graceful stop after SIGTERM.
	stopTimeout = 15 * time.Second
	// clientTimeout bounds one run of a client program.
	clientTimeout = 30 * time.Second
)

var (
	// tmpDir holds what TestMain makes for the whole run.
	tmpDir string
	// coordhostBin is the daemon binary TestMain builds (with -race when
	// the tests run with -race), in .cache/e2e.
	coordhostBin string
)

func TestMain(m *testing.M) {
	xtest.Main(m,
		xtest.Before(func() error {
			var err error
			if tmpDir, err = os.MkdirTemp("", "coordhost-e2e-"); err != nil {
				return err
			}
			// Under the repository's .cache (git-ignored), where go build
			// leaves an up-to-date binary alone: a run after the first
			// links nothing.
			name := "coordhost"
			args := []string{"build"}
			if raceEnabled {
				name, args = "coordhost-race", append(args, "-race")
			}
			coordhostBin, err = filepath.Abs(filepath.Join("..", "..", ".cache", "e2e", name))
			if err != nil {
				return err
			}
			args = append(args, "-o", coordhostBin)
			cmd := exec.Command("go", append(args, "./cmd/coordhost")...)
			cmd.Dir = filepath.Join("..", "..")
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("e2e: go %s: %v\n%s", strings.Join(args, " "), err, out)
			}
			return nil
		}),
		xtest.After(func() {
			if tmpDir != "" {
				os.RemoveAll(tmpDir)
			}
		}))
}

// daemon is one running `coordhost serve` child process.
type daemon struct {
	// Addr is its host:port on 127.0.0.1; URL is "http://" + Addr.
	Addr, URL string
	// Redis is the server it uses (started for it unless withRedis).
	Redis *redistest.Server
	// Config is the path of its HCL file.
	Config string

	cmd  *exec.Cmd
	log  *xtest.SyncBuffer
	done chan struct{} // closed once the process has been reaped
	err  error         // cmd.Wait's error, once done
}

// daemonOption configures startDaemon.
type daemonOption func(*daemonConfig)

type daemonConfig struct {
	redis *redistest.Server
	kind  redistest.Kind
}

// withRedis runs the daemon on an existing server (several daemons on one
// Redis, or a server the test restarts).
func withRedis(s *redistest.Server) daemonOption {
	return func(c *daemonConfig) { c.redis = s }
}

// withRedisKind starts the daemon's server of that kind (default Redis 7.0).
func withRedisKind(k redistest.Kind) daemonOption {
	return func(c *daemonConfig) { c.kind = k }
}

// startDaemon starts `coordhost serve -listen 127.0.0.1:0` on a config made
// of a redis block (key_prefix "e2e:") naming its server, a server block
// (JSON logs) and blocks (any other HCL: rate_limit, lock, ...), and waits
// until it listens. The daemon is stopped with SIGTERM when the test ends;
// a test that failed gets its log, and a data race it reported (with -race)
// fails the test.
func startDaemon(t *testing.T, blocks string, opts ...daemonOption) *daemon {
	t.Helper()
	c := daemonConfig{kind: redistest.Redis70}
	for _, o := range opts {
		o(&c)
	}
	if c.redis == nil {
		c.redis = redistest.Start(t, redistest.WithKind(c.kind))
	}
	dir := t.TempDir()
	d := &daemon{Redis: c.redis, Config: filepath.Join(dir, "coordhost.hcl"), log: new(xtest.SyncBuffer), done: make(chan struct{})}
	hcl := fmt.Sprintf("redis {\n  addresses  = [%q]\n  key_prefix = \"e2e:\"\n}\n\nserver {\n  log_format = \"json\"\n}\n\n%s\n", c.redis.Addr, blocks)
	if err := os.WriteFile(d.Config, []byte(hcl), 0o644); err != nil {
		t.Fatal(err)
	}
	d.cmd = exec.Command(coordhostBin, "serve", "-listen", "127.0.0.1:0", d.Config)
	d.cmd.Dir = dir
	d.cmd.Stdout = d.log
	pr, pw := io.Pipe()
	d.cmd.Stderr = pw
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", coordhostBin, err)
	}
	addrc := make(chan string, 1)
	var readers sync.WaitGroup
	readers.Add(1)
	go func() {
		defer readers.Done()
		sc := bufio.NewScanner(pr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			d.log.Write(append(line, '\n'))
			var rec struct{ Msg, Addr string }
			if json.Unmarshal(line, &rec) == nil && rec.Msg == "listening" && rec.Addr != "" {
				select {
				case addrc <- rec.Addr:
				default:
				}
			}
		}
		io.Copy(d.log, pr) // a line past the scanner's limit
	}()
	go func() {
		d.err = d.cmd.Wait()
		pw.Close()
		readers.Wait()
		close(d.done)
	}()
	t.Cleanup(func() { d.stop(t) })

	select {
	case d.Addr = <-addrc:
	case <-d.done:
		t.Fatalf("coordhost serve exited before listening (%v):\n%s", d.err, d.log)
	case <-time.After(startTimeout):
		t.Fatalf("coordhost serve did not listen within %v:\n%s", startTimeout, d.log)
	}
	if _, _, err := net.SplitHostPort(d.Addr); err != nil {
		t.Fatalf("listening on %q: %v", d.Addr, err)
	}
	d.URL = "http://" + d.Addr
	return d
}

// stop ends the daemon with SIGTERM (SIGKILL after stopTimeout) and reports
// what went wrong: no graceful stop, or a data race.
func (d *daemon) stop(t *testing.T) {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(stopTimeout):
		_ = d.cmd.Process.Kill()
		<-d.done
		t.Errorf("coordhost serve did not stop within %v of SIGTERM", stopTimeout)
	}
	log := d.log.String()
	if strings.Contains(log, "WARNING: DATA RACE") {
		t.Errorf("coordhost serve reported a data race:\n%s", log)
	} else if t.Failed() {
		t.Logf("coordhost serve (exit: %v) logged:\n%s", d.err, log)
	}
}

// Log returns what the daemon has logged so far (JSON lines).
func (d *daemon) Log() string { return d.log.String() }

// Kill ends the daemon with SIGKILL, as a crash would, and waits for it.
func (d *daemon) Kill() {
	_ = d.cmd.Process.Kill()
	<-d.done
}

// dbsize is the number of keys in the daemon's Redis.
func (d *daemon) dbsize(t *testing.T) string {
	t.Helper()
	return d.Redis.MustCmd(t, "DBSIZE")
}
