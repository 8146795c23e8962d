package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/xtest"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// A client program: the variable scripts/test-clients.sh exports its path
// in, and where to look without it.
type client struct {
	name   string // for messages
	env    string
	cached string // under <repo>/.cache/clients/bin, "" if none
	system string // an absolute path or a name looked up on PATH, "" if none
}

var (
	grpcurlClient     = client{name: "grpcurl", env: "COORDHOST_GRPCURL", cached: "grpcurl"}
	healthProbeClient = client{name: "grpc-health-probe", env: "COORDHOST_GRPC_HEALTH_PROBE", cached: "grpc-health-probe"}
	rlsClient         = client{name: "envoyproxy/ratelimit client_cmd", env: "COORDHOST_RLS_CLIENT", cached: "client_cmd"}
	curlClient        = client{name: "curl", env: "COORDHOST_CURL", system: "curl"}
	// Debian's python3 with python3-grpcio and python3-protobuf: never a
	// pyenv or venv python from PATH.
	pythonClient = client{name: "python3 with Debian's python3-grpcio", env: "COORDHOST_PYTHON3", system: "/usr/bin/python3"}
)

// need returns the path of c's program. A missing program fails the test
// under CI=true and skips it elsewhere.
func need(t testing.TB, c client) string {
	t.Helper()
	path, why := c.find()
	if path == "" {
		missing(t, fmt.Sprintf("%s not found (%s): run `make clients` (scripts/test-clients.sh), then `. .cache/clients-env.sh`", c.name, why))
	}
	if c == pythonClient {
		out, err := exec.Command(path, "-I", "-c", "import grpc, google.protobuf").CombinedOutput()
		if err != nil {
			missing(t, fmt.Sprintf("%s cannot import grpc and google.protobuf (%v: %s): run `make clients`", path, err, bytes.TrimSpace(out)))
		}
	}
	return path
}

// missing fails the test with msg under CI=true and skips it elsewhere.
func missing(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

func (c client) find() (path, why string) {
	if p := os.Getenv(c.env); p != "" {
		if isExec(p) {
			return p, ""
		}
		return "", fmt.Sprintf("$%s=%s is not an executable file", c.env, p)
	}
	if c.cached != "" {
		p := filepath.Join("..", "..", ".cache", "clients", "bin", c.cached)
		if isExec(p) {
			abs, err := filepath.Abs(p)
			if err == nil {
				return abs, ""
			}
		}
		return "", fmt.Sprintf("$%s is unset and .cache/clients/bin/%s is missing", c.env, c.cached)
	}
	if p, err := exec.LookPath(c.system); err == nil {
		return p, ""
	}
	return "", fmt.Sprintf("$%s is unset and %s is missing", c.env, c.system)
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// result is how a client program ended.
type result struct {
	Stdout, Stderr string
	// Code is the exit status (-1 if it was killed or did not start).
	Code int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
}

// runClient runs bin with args and stdin (may be empty) within
// clientTimeout, and returns how it ended; it fails the test only if the
// program cannot be run at all or outlives the timeout.
func runClient(t testing.TB, stdin string, bin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err := cmd.Run()
	r := result{Stdout: stdout.String(), Stderr: stderr.String(), Code: cmd.ProcessState.ExitCode()}
	if ctx.Err() != nil {
		t.Fatalf("%s %s: still running after %v\n%s", filepath.Base(bin), strings.Join(args, " "), clientTimeout, r)
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("%s: %v", bin, err)
	}
	return r
}

// jsonText is v as the JSON a client sends: a string or []byte as it is
// (raw JSON, for requests no Go type can express), a proto.Message through
// protojson, anything else through encoding/json.
func jsonText(t testing.TB, v any) string {
	t.Helper()
	switch v := v.(type) {
	case nil:
		return "{}"
	case string:
		return v
	case []byte:
		return string(v)
	case proto.Message:
		b, err := protojson.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	default:
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
}

// decodeJSON decodes a client's JSON output into out: a proto.Message
// through protojson (unknown fields are an error: the API changed under the
// test), anything else through encoding/json.
func decodeJSON(t testing.TB, data []byte, out any) {
	t.Helper()
	var err error
	if m, ok := out.(proto.Message); ok {
		err = protojson.Unmarshal(data, m)
	} else {
		err = json.Unmarshal(data, out)
	}
	if err != nil {
		t.Fatalf("decoding %T from %s: %v", out, data, err)
	}
}

// ---------------------------------------------------------------- grpcurl

// grpcurl runs grpcurl against d in plaintext (h2c), with the schema from
// server reflection, sending req (see jsonText; nil sends {}) as the one
// request: e.g. d.grpcurl(t, "coordhost.v1.SessionService/GetSession", req).
// extra are more grpcurl flags, put before the address. Output is JSON
// with default values emitted; an error status goes to stderr with its
// details, and the exit code is 64 + the gRPC code.
func (d *daemon) grpcurl(t testing.TB, method string, req any, extra ...string) result {
	t.Helper()
	bin := need(t, grpcurlClient)
	args := append([]string{"-plaintext", "-format", "json", "-emit-defaults", "-d", "@"}, extra...)
	args = append(args, d.Addr, method)
	return runClient(t, jsonText(t, req)+"\n", bin, args...)
}

// grpcurlOK is grpcurl that fails the test unless the call succeeds, and
// decodes its one response into out (nil: ignore it).
func (d *daemon) grpcurlOK(t testing.TB, method string, req, out any) {
	t.Helper()
	r := d.grpcurl(t, method, req)
	if r.Code != 0 {
		t.Fatalf("grpcurl %s %s: %s", method, jsonText(t, req), r)
	}
	if out != nil {
		decodeJSON(t, []byte(r.Stdout), out)
	}
}

// grpcStatus is an error status as grpcurl -format-error prints it (the
// google.rpc.Status JSON, details resolved through reflection).
type grpcStatus struct {
	Code    int               `json:"code"`
	Message string            `json:"message"`
	Details []json.RawMessage `json:"details"`
}

// grpcurlErr is grpcurl for a call that must fail: it fails the test if the
// call succeeds, and returns the status (from grpcurl -format-error).
func (d *daemon) grpcurlErr(t testing.TB, method string, req any) grpcStatus {
	t.Helper()
	r := d.grpcurl(t, method, req, "-format-error")
	if r.Code == 0 {
		t.Fatalf("grpcurl %s %s succeeded; want an error: %s", method, jsonText(t, req), r)
	}
	var st grpcStatus
	decodeJSON(t, []byte(r.Stdout+r.Stderr), &st)
	if r.Code != 64+st.Code {
		t.Errorf("grpcurl exit code %d for status code %d; want %d", r.Code, st.Code, 64+st.Code)
	}
	return st
}

// grpcStream is one grpcurl process running a streaming call: requests are
// JSON written to its stdin, responses JSON read from its stdout.
type grpcStream struct {
	method string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout io.ReadCloser
	dec    *json.Decoder
	stderr *xtest.SyncBuffer
	done   chan struct{}
	once   sync.Once
}

// grpcurlStream starts grpcurl on a streaming method (client, server or
// bidirectional). Send requests with Send and end them with CloseSend (a
// server stream takes its one request so); read responses with Recv; end
// the client with Kill (SIGKILL: a client that vanishes) or wait for it
// with Wait. The process is killed when the test ends, if still running.
func (d *daemon) grpcurlStream(t testing.TB, method string, extra ...string) *grpcStream {
	t.Helper()
	bin := need(t, grpcurlClient)
	args := append([]string{"-plaintext", "-format", "json", "-emit-defaults", "-format-error", "-d", "@"}, extra...)
	args = append(args, d.Addr, method)
	s := &grpcStream{method: method, cmd: exec.Command(bin, args...), stderr: new(xtest.SyncBuffer), done: make(chan struct{})}
	var err error
	if s.stdin, err = s.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if s.stdout, err = s.cmd.StdoutPipe(); err != nil {
		t.Fatal(err)
	}
	s.dec = json.NewDecoder(s.stdout)
	s.cmd.Stderr = s.stderr
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.stdin.Close()
		s.cmd.Process.Kill()
		s.wait()
	})
	return s
}

// grpcurlServerStream starts grpcurl on a server-streaming method with its
// one request (see jsonText) and EOF after it: grpcurl sends a server
// stream's request only once its stdin ends, to check there is no second
// one. Closing stdin does not end the call; Kill does (the connection
// drops, as when a client crashes).
func (d *daemon) grpcurlServerStream(t testing.TB, method string, req any, extra ...string) *grpcStream {
	t.Helper()
	s := d.grpcurlStream(t, method, extra...)
	s.Send(t, req)
	s.CloseSend(t)
	return s
}

// Send writes one request (see jsonText).
func (s *grpcStream) Send(t testing.TB, req any) {
	t.Helper()
	if _, err := io.WriteString(s.stdin, jsonText(t, req)+"\n"); err != nil {
		t.Fatalf("grpcurl %s: sending: %v (stderr: %s)", s.method, err, s.stderr)
	}
}

// CloseSend ends the requests (EOF on grpcurl's stdin).
func (s *grpcStream) CloseSend(t testing.TB) {
	t.Helper()
	if err := s.stdin.Close(); err != nil {
		t.Fatal(err)
	}
}

// Recv reads the next response into out (see decodeJSON), waiting at most
// clientTimeout; it fails the test when the stream ended instead.
func (s *grpcStream) Recv(t testing.TB, out any) {
	t.Helper()
	type msg struct {
		raw json.RawMessage
		err error
	}
	c := make(chan msg, 1)
	go func() {
		var m msg
		m.err = s.dec.Decode(&m.raw)
		c <- m
	}()
	select {
	case m := <-c:
		if m.err != nil {
			t.Fatalf("grpcurl %s: no response (%v); stderr: %s", s.method, m.err, s.stderr)
		}
		decodeJSON(t, m.raw, out)
	case <-time.After(clientTimeout):
		s.cmd.Process.Kill() // ends the reader above
		t.Fatalf("grpcurl %s: no response within %v; stderr: %s", s.method, clientTimeout, s.stderr)
	}
}

// Kill ends grpcurl with SIGKILL, as a client that crashes, and waits.
func (s *grpcStream) Kill() {
	s.cmd.Process.Kill()
	s.wait()
}

// Wait waits (at most clientTimeout) for grpcurl to end by itself and
// returns how it ended; Stdout holds what Recv did not read.
func (s *grpcStream) Wait(t testing.TB) result {
	t.Helper()
	timer := time.AfterFunc(clientTimeout, func() { s.cmd.Process.Kill() })
	rest, _ := io.ReadAll(io.MultiReader(s.dec.Buffered(), s.stdout))
	s.wait()
	if !timer.Stop() {
		t.Fatalf("grpcurl %s: still running after %v", s.method, clientTimeout)
	}
	return result{Stdout: string(rest), Stderr: s.stderr.String(), Code: s.cmd.ProcessState.ExitCode()}
}

func (s *grpcStream) waitChan() <-chan struct{} {
	s.once.Do(func() {
		go func() {
			_ = s.cmd.Wait()
			close(s.done)
		}()
	})
	return s.done
}

func (s *grpcStream) wait() { <-s.waitChan() }
