package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordhost/coordhost/host/devredis"
	"github.com/coordhost/coordhost/internal/xtest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// httpGet fetches url without keeping the connection (goleak) and returns
// the status code and body.
func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

// wantGet checks that url answers code with a body containing each of want.
func wantGet(t *testing.T, url string, code int, want ...string) string {
	t.Helper()
	got, body := httpGet(t, url)
	if got != code {
		t.Fatalf("GET %s: status %d, want %d; body:\n%s", url, got, code, body)
	}
	for _, w := range want {
		if !strings.Contains(body, w) {
			t.Fatalf("GET %s: body lacks %q:\n%s", url, w, body)
		}
	}
	return body
}

// wantHealthy checks that addr answers grpc.health.v1 Check with SERVING
// over HTTP/2 cleartext, with grpc-go's own client.
func wantHealthy(t *testing.T, addr string) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("grpc health check on %s: %v, %v", addr, resp, err)
	}
}

// redisBlock points a configuration at a test server's socket.
func redisBlock(sock string) string {
	return "redis {\n  addresses = [\"" + sock + "\"]\n}\n"
}

// TestServe runs serve in process on a test server: the operational
// endpoints, a good reload, a bad reload that keeps the old configuration
// serving and logs every diagnostic, and a graceful shutdown.
func TestServe(t *testing.T) {
	t.Parallel()
	d := startTestDevRedis(t)
	path := writeConfig(t, redisBlock(d.Socket())+goodConfig)
	te := newTestEnv(t, nil)
	done := make(chan int, 1)
	go func() {
		// FILE as the argument, as validate takes it (-config FILE is
		// covered by the other tests).
		done <- run(context.Background(), []string{"serve", path, "-listen", "127.0.0.1:0"}, te.env)
	}()
	m := waitOutput(t, 10*time.Second, te.errOut, regexp.MustCompile(`level=INFO msg=listening addr=(127\.0\.0\.1:\d+) generation=1\n`))
	base := "http://" + m[1]
	if strings.Contains(te.errOut.String(), "dev mode") {
		t.Errorf("dev mode with a redis block:\n%s", te.errOut)
	}

	wantGet(t, base+"/livez", 200, "ok")
	wantGet(t, base+"/readyz", 200, "ok")
	wantGet(t, base+"/metrics", 200, "# TYPE coordhost_config_generation gauge\ncoordhost_config_generation 1\n")
	wantGet(t, base+"/nope", 404)
	// gRPC on the same port (HTTP/2 cleartext): the health service.
	wantHealthy(t, m[1])

	// A good reload: one more lock.
	if err := os.WriteFile(path, []byte(redisBlock(d.Socket())+goodConfig+"lock \"more\" {\n  ttl = \"1s\"\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	te.sig <- syscall.SIGHUP
	waitOutput(t, 10*time.Second, te.errOut, regexp.MustCompile(`msg="configuration reloaded" generation=2 .* locks=3`))
	wantGet(t, base+"/metrics", 200, "\ncoordhost_config_generation 2\n", `coordhost_reloads_total{result="ok"} 1`)

	// A bad reload: two mistakes, both logged with their lines; the
	// second generation keeps serving.
	bad := redisBlock(d.Socket()) + "lock \"job\" {\n  ttl = \"soon\"\n}\n\nlock \"other\" {\n  ttl   = \"1s\"\n  retry = policy.retry.nope\n}\n"
	if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	te.sig <- syscall.SIGHUP
	waitOutput(t, 10*time.Second, te.errOut, regexp.MustCompile(`level=ERROR msg="reload failed; still serving the previous configuration" generation=2 errors=2\n`))
	logs := te.errOut.String()
	for _, re := range []string{
		`level=ERROR msg="configuration error" severity=error summary="Invalid duration" detail=".*" file=` + regexp.QuoteMeta(path) + ` line=5 column=\d+ source="ttl = \\"soon\\""\n`,
		`level=ERROR msg="configuration error" severity=error summary="Reference to undeclared policy" .*line=10 column=\d+ source="retry = policy.retry.nope"\n`,
	} {
		if !regexp.MustCompile(re).MatchString(logs) {
			t.Errorf("log lacks %s:\n%s", re, logs)
		}
	}
	wantGet(t, base+"/readyz", 200)
	wantGet(t, base+"/metrics", 200, "\ncoordhost_config_generation 2\n", `coordhost_reloads_total{result="error"} 1`)

	te.sig <- syscall.SIGTERM
	select {
	case code := <-done:
		if code != exitOK {
			t.Fatalf("exit status %d; stderr:\n%s", code, te.errOut)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("serve did not stop; stderr:\n%s", te.errOut)
	}
	for _, s := range []string{"msg=\"got SIGHUP; reloading configuration\"", "msg=\"shutting down\" signal=SIGTERM", "msg=stopped\n"} {
		if !strings.Contains(te.errOut.String(), s) {
			t.Errorf("stderr lacks %q:\n%s", s, te.errOut)
		}
	}
	// Not serving any more. (A bare dial could reach another test's server
	// that took the freed port: ask for /livez instead.)
	hc := &http.Client{Timeout: time.Second}
	if resp, err := hc.Get(base + "/livez"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Errorf("still serving on %s after shutdown", m[1])
		}
	}
}

// TestServeDevModeProcess runs serve as a real process without a redis
// block: dev mode says so, JSON logs, SIGHUP reloads, SIGTERM stops it and
// its redis-server, leaving nothing behind.
func TestServeDevModeProcess(t *testing.T) {
	t.Parallel()
	server := redisServerBin(t)
	tmp := t.TempDir()
	path := writeConfig(t, "server {\n  log_format = \"json\"\n}\n\nlock \"job\" {\n  ttl = \"5s\"\n}\n")
	p := startProc(t, []string{devredis.ServerEnv + "=" + server, "TMPDIR=" + tmp}, "serve", "-config", path, "-listen", "127.0.0.1:0")
	m := waitOutput(t, 10*time.Second, p.stderr, regexp.MustCompile(`"msg":"listening","addr":"([^"]+)","generation":1}`))
	base := "http://" + m[1]
	dm := waitOutput(t, time.Second, p.stderr, regexp.MustCompile(`"level":"WARN","msg":"dev mode: [^"]*","socket":"([^"]+)","pid":(\d+)}`))
	if !strings.HasPrefix(dm[1], tmp+"/coordhost-redis-") {
		t.Errorf("dev socket %s not under TMPDIR %s", dm[1], tmp)
	}
	pid, _ := strconv.Atoi(dm[2])
	wantGet(t, base+"/readyz", 200)

	p.signal(t, syscall.SIGHUP)
	waitOutput(t, 10*time.Second, p.stderr, regexp.MustCompile(`"msg":"configuration reloaded","generation":2,`))
	wantGet(t, base+"/metrics", 200, "\ncoordhost_config_generation 2\n")

	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t, 15*time.Second); code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", code, p.stderr)
	}
	if !strings.Contains(p.stderr.String(), `"msg":"stopped"`) {
		t.Errorf("stderr:\n%s", p.stderr)
	}
	if !processGone(pid) {
		t.Errorf("redis-server %d still running", pid)
	}
	if left := tempDirEntries(t, tmp); len(left) != 0 {
		t.Errorf("left behind: %q", left)
	}
}

// TestServeSignalWhileStarting: SIGTERM while dev mode waits for its
// redis-server ends serve with 143, and the server is gone.
func TestServeSignalWhileStarting(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	pidFile := filepath.Join(t.TempDir(), "pid")
	fake := filepath.Join(t.TempDir(), "silent")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho $$ > "+pidFile+".tmp; mv "+pidFile+".tmp "+pidFile+"\nexec sleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	path := writeConfig(t, "lock \"job\" {\n  ttl = \"5s\"\n}\n")
	p := startProc(t, []string{devredis.ServerEnv + "=" + fake, "TMPDIR=" + tmp}, "serve", "-config", path, "-listen", "127.0.0.1:0")
	xtest.Eventually(t, 10*time.Second, "fake server to start", fileExists(pidFile))
	p.signal(t, syscall.SIGHUP) // remembered, not fatal
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t, 10*time.Second); code != 143 {
		t.Fatalf("exit status %d, want 143; stderr:\n%s", code, p.stderr)
	}
	if !strings.Contains(p.stderr.String(), `msg="interrupted while starting" signal=SIGTERM`) {
		t.Errorf("stderr:\n%s", p.stderr)
	}
	b, _ := os.ReadFile(pidFile)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if pid == 0 || !processGone(pid) {
		t.Fatalf("fake server %d still running", pid)
	}
	if left := tempDirEntries(t, tmp); len(left) != 0 {
		t.Fatalf("left behind: %q", left)
	}
}

// TestServeBadConfig: a bad file is printed as validate prints it, and
// nothing starts.
func TestServeBadConfig(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"serve", "-config", brokenExample, "-listen", "127.0.0.1:0"},
		{"serve", brokenExample, "-listen", "127.0.0.1:0"},
		{"serve", "-listen", "127.0.0.1:0", brokenExample},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			te := newTestEnv(t, nil)
			code := run(context.Background(), args, te.env)
			if code != exitFailure {
				t.Fatalf("exit status %d, want 1; stderr:\n%s", code, te.errOut)
			}
			stderr := te.errOut.String()
			if n := strings.Count(stderr, "Error: "); n != 5 {
				t.Errorf("%d errors, want 5:\n%s", n, stderr)
			}
			if !strings.Contains(stderr, "on ../../examples/broken.hcl line 22, in lock \"invoice\":") ||
				!strings.HasSuffix(stderr, "coordhost: serve: ../../examples/broken.hcl: 5 errors; not starting\n") {
				t.Errorf("stderr:\n%s", stderr)
			}
		})
	}
}

// TestServeStartFailures: the address is taken; Redis does not answer.
func TestServeStartFailures(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	good := writeConfig(t, redisBlock(filepath.Join(t.TempDir(), "none.sock"))+goodConfig)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"address in use", []string{"-config", good, "-listen", ln.Addr().String()}, `level=ERROR msg="cannot listen" addr=` + ln.Addr().String()},
		{"redis unreachable", []string{"-config", good, "-listen", "127.0.0.1:0"}, `level=ERROR msg="cannot start" err=`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			te := newTestEnv(t, nil)
			code := run(context.Background(), append([]string{"serve"}, tc.args...), te.env)
			if code != exitFailure {
				t.Fatalf("exit status %d, want 1; stderr:\n%s", code, te.errOut)
			}
			if !strings.Contains(te.errOut.String(), tc.want) {
				t.Fatalf("stderr lacks %q:\n%s", tc.want, te.errOut)
			}
		})
	}
}

func TestServeBadArgs(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no arguments", nil, "serve: missing FILE"},
		{"empty -config", []string{"-config", ""}, "serve: missing FILE"},
		{"empty FILE", []string{""}, "serve: FILE is empty"},
		{"FILE and -config", []string{"-config", "a.hcl", "b.hcl"}, `serve: FILE "b.hcl" and -config "a.hcl": give the file once`},
		{"two files", []string{"a.hcl", "b.hcl"}, `serve: unexpected argument "b.hcl": serve takes one FILE`},
		{"FILE and -config, flag last", []string{"b.hcl", "-listen", "127.0.0.1:0", "-config", "a.hcl"}, `serve: FILE "b.hcl" and -config "a.hcl": give the file once`},
		{"listen not host:port", []string{"-config", "c.hcl", "-listen", "7379"}, `serve: -listen "7379" is not host:port`},
		{"listen empty", []string{"-config", "c.hcl", "-listen", ""}, `serve: -listen "" is not host:port`},
		{"listen bad port", []string{"-config", "c.hcl", "-listen", "127.0.0.1:http"}, `serve: -listen "127.0.0.1:http": bad port "http"`},
		{"listen port out of range", []string{"-config", "c.hcl", "-listen", "127.0.0.1:65536"}, `bad port "65536"`},
		{"var without =", []string{"-config", "c.hcl", "-var", "x"}, `serve: -var "x": want NAME=VALUE`},
		{"var bad name", []string{"-config", "c.hcl", "-var", "=x"}, `is not a valid variable name`},
		{"unknown flag", []string{"-config", "c.hcl", "-redis", "127.0.0.1:6379"}, "flag provided but not defined: -redis"},
		{"misspelt flag", []string{"c.hcl", "-lisen", "127.0.0.1:0"}, "flag provided but not defined: -lisen (did you mean -listen?)"},
		{"flag missing value", []string{"-config"}, "flag needs an argument: -config"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			te := newTestEnv(t, nil)
			code := run(context.Background(), append([]string{"serve"}, tc.args...), te.env)
			if code != exitUsage {
				t.Fatalf("exit status %d, want 2; stderr:\n%s", code, te.errOut)
			}
			if !strings.Contains(te.errOut.String(), tc.want) || !strings.HasSuffix(te.errOut.String(), "\nRun 'coordhost serve -h' for usage.\n") {
				t.Fatalf("stderr = %q, want %q", te.errOut, tc.want)
			}
		})
	}
}

// TestServeDevModeQuietLogs: dev mode is announced even when
// server.log_level hides the host's warning.
func TestServeDevModeQuietLogs(t *testing.T) {
	t.Setenv(devredis.ServerEnv, redisServerBin(t)) // the host reads the real environment
	privateTMPDIR(t)
	path := writeConfig(t, "server {\n  log_level = \"error\"\n}\n")
	te := newTestEnv(t, nil)
	done := make(chan int, 1)
	go func() {
		done <- run(context.Background(), []string{"serve", "-config", path, "-listen", "127.0.0.1:0"}, te.env)
	}()
	waitOutput(t, 10*time.Second, te.errOut, regexp.MustCompile(`coordhost: dev mode: \S+ has no redis block; started a private redis-server on unix socket \S+\n`))
	te.sig <- syscall.SIGINT
	select {
	case code := <-done:
		if code != exitOK {
			t.Fatalf("exit status %d; stderr:\n%s", code, te.errOut)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("serve did not stop; stderr:\n%s", te.errOut)
	}
	if strings.Contains(te.errOut.String(), "level=") {
		t.Errorf("log records below log_level error:\n%s", te.errOut)
	}
}
