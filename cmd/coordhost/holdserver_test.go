package main

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/coordhost/coordhost/config"
	coordhostv1 "github.com/coordhost/coordhost/gen/coordhost/v1"
	"github.com/coordhost/coordhost/gen/coordhost/v1/coordhostv1connect"
	"github.com/coordhost/coordhost/host"
	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
)

// daemonConfig is the daemon's configuration in the -server tests, after
// limitConfig's partition policy and rate limits.
const daemonConfig = limitConfig + `
lock "job" {
  ttl     = "2s"
  fencing = true
}
lock "short" {
  ttl     = "1500ms"
  fencing = true
}
lock "plain" {
  ttl = "30s"
}
lock "tenant" {
  ttl       = "30s"
  partition = policy.partition.tenant
}
`

// testDaemon is a coordhost daemon (a host.Host behind an httptest server
// speaking cleartext HTTP/2) on its own Redis.
type testDaemon struct {
	url   string
	srv   *httptest.Server
	redis *redistest.Server
}

// startDaemon starts a daemon with daemonConfig on a new Redis; wrap, if
// not nil, wraps its handler. With tlsConfig it serves TLS (HTTP/2 by
// ALPN) with that configuration added to httptest's certificate.
func startDaemon(t *testing.T, wrap func(http.Handler) http.Handler, tlsConfig *tls.Config) *testDaemon {
	t.Helper()
	s := redistest.Start(t)
	path := writeConfig(t, redisBlock(s.Addr)+daemonConfig)
	conf, diags := config.Load(path, config.LoadOptions{})
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := host.New(ctx, conf, host.Options{Logger: slog.New(slog.DiscardHandler), SkipServerCheck: true, DrainTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := h.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	var handler http.Handler = h.Handler()
	if wrap != nil {
		handler = wrap(handler)
	}
	srv := httptest.NewUnstartedServer(handler)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused TLS handshakes
	if tlsConfig != nil {
		srv.TLS = tlsConfig
		srv.EnableHTTP2 = true
		srv.StartTLS()
	} else {
		srv.Config.Protocols = new(http.Protocols)
		srv.Config.Protocols.SetHTTP1(true)
		srv.Config.Protocols.SetUnencryptedHTTP2(true)
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return &testDaemon{url: srv.URL, srv: srv, redis: s}
}

func (d *testDaemon) exists(t *testing.T, key string) bool {
	t.Helper()
	return d.redis.MustCmd(t, "EXISTS", key) == "1"
}

// apiClients returns a LockService and SessionService client of d.
func (d *testDaemon) apiClients(t *testing.T) (coordhostv1connect.LockServiceClient, coordhostv1connect.SessionServiceClient) {
	t.Helper()
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr}
	return coordhostv1connect.NewLockServiceClient(hc, d.url, connect.WithGRPC()),
		coordhostv1connect.NewSessionServiceClient(hc, d.url, connect.WithGRPC())
}

// wantStderr fails unless stderr holds every one of want.
func wantStderr(t *testing.T, te *testEnv, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(te.errOut.String(), w) {
			t.Errorf("stderr lacks %q:\n%s", w, te.errOut)
		}
	}
}

// lock hold -server runs CMD with the lock's name and fencing token (and
// without an inherited token for a lock without fencing), passes its exit
// status on and releases the lock when it exits.
func TestHoldServerRunsCommand(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, nil, nil)
	ctx := context.Background()
	for i, tc := range []struct {
		args   []string
		vars   map[string]string
		code   int
		stdout string
		stderr []string
	}{
		{
			args:   []string{"job", "--", "sh", "-c", `echo "$COORDHOST_LOCK_NAME $COORDHOST_FENCING_TOKEN"; exit 5`},
			vars:   map[string]string{envRedisURL: "127.0.0.1:1"}, // not used with -server
			code:   5,
			stdout: "job 1\n",
			stderr: []string{`coordhost: acquired lock "job" (fencing token 1) from ` + d.url + `; key "job", ttl 2s` + "\n", `coordhost: released lock "job"` + "\n"},
		},
		{
			args:   []string{"-wait", "5s", "job", "--", "sh", "-c", `echo "$COORDHOST_FENCING_TOKEN"`},
			stdout: "2\n",
			stderr: []string{`coordhost: acquired lock "job" (fencing token 2) from ` + d.url + `; key "job", ttl 2s` + "\n"},
		},
		{
			args:   []string{"plain", "--", "sh", "-c", `echo "${COORDHOST_FENCING_TOKEN-unset} $COORDHOST_LOCK_NAME"; kill -TERM $$`},
			vars:   map[string]string{envFencingToken: "99", envLockName: "outer"},
			code:   128 + 15,
			stdout: "unset plain\n",
			stderr: []string{`coordhost: acquired lock "plain" from ` + d.url + `; key "plain", ttl 30s` + "\n", "coordhost: sh was ended by SIGTERM\n", `coordhost: released lock "plain"` + "\n"},
		},
		{
			args:   []string{"-attr", "tenant=acme", "tenant", "--", "true"},
			stderr: []string{`coordhost: acquired lock "tenant" from ` + d.url + `; key "tenant/tenant:acme", ttl 30s` + "\n", `coordhost: released lock "tenant"` + "\n"},
		},
	} {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			te := newTestEnv(t, tc.vars)
			code := run(ctx, append([]string{"lock", "hold", "-server", d.url}, tc.args...), te.env)
			if code != tc.code {
				t.Errorf("exit status %d, want %d; stderr:\n%s", code, tc.code, te.errOut)
			}
			if te.out.String() != tc.stdout {
				t.Errorf("stdout = %q, want %q", te.out, tc.stdout)
			}
			wantStderr(t, te, tc.stderr...)
		})
	}
	for _, k := range []string{"coordhost:lock:job", "coordhost:lock:plain", "coordhost:lock:tenant/tenant:acme"} {
		if d.exists(t, k) {
			t.Errorf("lock key %s still exists after the runs", k)
		}
	}
}

// A second holder waits while the first runs CMD, and gets the lock, with
// a higher fencing token, when the first CMD has exited; the lock stays
// held, renewed by the daemon, past its ttl while CMD runs.
func TestHoldServerSecondWaits(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, nil, nil)
	dir := t.TempDir()
	logFile, started, release := filepath.Join(dir, "log"), filepath.Join(dir, "started"), filepath.Join(dir, "release")
	te1, te2 := newTestEnv(t, nil), newTestEnv(t, nil)
	done1 := runHoldAsync(te1, "-server", d.url, "short", "--", "sh", "-c",
		`echo "enter 1 $COORDHOST_FENCING_TOKEN" >> `+logFile+`; touch `+started+`; while [ ! -e `+release+` ]; do sleep 0.02; done; echo "leave 1" >> `+logFile)
	xtest.Eventually(t, 10*time.Second, "the first CMD to start", fileExists(started))
	done2 := runHoldAsync(te2, "-server", d.url, "-wait", "20s", "short", "--", "sh", "-c",
		`echo "enter 2 $COORDHOST_FENCING_TOKEN" >> `+logFile)
	waitOutput(t, 5*time.Second, te2.errOut, regexp.MustCompile(`coordhost: waiting for lock "short"`))
	time.Sleep(1700 * time.Millisecond) // past the ttl of 1.5s: the daemon renews
	if !d.exists(t, "coordhost:lock:short") {
		t.Fatalf("the lock expired while CMD ran; stderr:\n%s", te1.errOut)
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := awaitExit(t, te1, done1, 10*time.Second); code != 0 {
		t.Fatalf("first: exit %d; stderr:\n%s", code, te1.errOut)
	}
	if code := awaitExit(t, te2, done2, 10*time.Second); code != 0 {
		t.Fatalf("second: exit %d; stderr:\n%s", code, te2.errOut)
	}
	b, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	if want := "enter 1 1\nleave 1\nenter 2 2\n"; string(b) != want {
		t.Fatalf("log:\n%s\nwant:\n%s", b, want)
	}
}

// -wait running out while another holds the lock: exit 1, and CMD does not
// run; a signal while waiting: 128+N.
func TestHoldServerNotAcquired(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, nil, nil)
	d.redis.MustCmd(t, "SET", "coordhost:lock:plain", "someone-else", "PX", "30000")
	ran := filepath.Join(t.TempDir(), "ran")

	te := newTestEnv(t, nil)
	t0 := time.Now()
	code := run(context.Background(), []string{"lock", "hold", "-server", d.url, "-wait", "300ms", "plain", "--", "touch", ran}, te.env)
	if code != exitFailure {
		t.Fatalf("exit status %d, want 1; stderr:\n%s", code, te.errOut)
	}
	if el := time.Since(t0); el < 300*time.Millisecond || el > 5*time.Second {
		t.Fatalf("gave up after %v, want about 300ms", el)
	}
	wantStderr(t, te, "coordhost: waiting for lock \"plain\"\ncoordhost: lock \"plain\" not acquired within -wait 300ms\n")

	te = newTestEnv(t, nil)
	done := runHoldAsync(te, "-server", d.url, "plain", "--", "touch", ran)
	waitOutput(t, 5*time.Second, te.errOut, regexp.MustCompile(`coordhost: waiting for lock "plain"`+"\n"))
	te.sig <- syscall.SIGINT
	if code := awaitExit(t, te, done, 5*time.Second); code != 130 {
		t.Fatalf("exit status %d, want 130; stderr:\n%s", code, te.errOut)
	}
	wantStderr(t, te, "coordhost: interrupted by SIGINT while waiting for lock \"plain\"\n")
	if _, err := os.Stat(ran); err == nil {
		t.Fatal("CMD ran without the lock")
	}
	if v := d.redis.MustCmd(t, "GET", "coordhost:lock:plain"); v != "someone-else" {
		t.Fatalf("holder's key = %q", v)
	}
}

// The lock lost while CMD runs, however the client learns of it: CMD is
// stopped as in process, and a CMD that exits 0 on SIGTERM still makes
// coordhost fail.
func TestHoldServerLostLock(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		lock   string
		script string        // gets the marker path as $1
		ping   time.Duration // != 0: the proxy goes silent
		lose   func(t *testing.T, d *testDaemon, p *freezeProxy)
		code   int
		why    string // the reason on stderr
	}{
		{"key deleted", "short", `touch "$1"; sleep 30`, 0,
			func(t *testing.T, d *testDaemon, _ *freezeProxy) { d.redis.MustCmd(t, "DEL", "coordhost:lock:short") },
			143, `answered not found (grant lost, field "grant_id")`},
		{"key taken over, CMD exits 0 on SIGTERM", "short", `trap 'exit 0' TERM; touch "$1"; sleep 30 & wait`, 0,
			func(t *testing.T, d *testDaemon, _ *freezeProxy) {
				d.redis.MustCmd(t, "SET", "coordhost:lock:short", "someone-else", "PX", "10000")
			},
			exitFailure, `answered not found (grant lost`},
		{"daemon's connections closed", "plain", `touch "$1"; sleep 30`, 0,
			func(t *testing.T, d *testDaemon, _ *freezeProxy) { d.srv.CloseClientConnections() },
			143, "broke: "},
		// The connection goes silent: PINGs find it dead, long before
		// the 30s ttl.
		{"connection silent, PING unanswered", "plain", `touch "$1"; sleep 30`, 200 * time.Millisecond,
			func(t *testing.T, _ *testDaemon, p *freezeProxy) { p.freeze() },
			143, "broke: "},
		// Silent, with PINGs too slow to notice: no renewal within the ttl.
		{"connection silent, no renewal within the ttl", "short", `touch "$1"; sleep 30`, time.Minute,
			func(t *testing.T, _ *testDaemon, p *freezeProxy) { p.freeze() },
			143, "no renewal from the daemon at "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := startDaemon(t, nil, nil)
			p := newFreezeProxy(t, d.srv.Listener.Addr().String())
			url := "http://" + p.addr()
			started := filepath.Join(t.TempDir(), "started")
			te := newTestEnv(t, nil)
			te.apiPing = tc.ping
			done := runHoldAsync(te, "-server", url, tc.lock, "--", "sh", "-c", tc.script, "sh", started)
			xtest.Eventually(t, 10*time.Second, "CMD to start", fileExists(started))
			t0 := time.Now()
			tc.lose(t, d, p)
			xtest.Eventually(t, 5*time.Second, "the loss to be noticed", func() bool {
				return strings.Contains(te.errOut.String(), "coordhost: lost lock "+strconv.Quote(tc.lock)+"; stopping sh (SIGTERM now, SIGKILL in 5s)")
			})
			if el := time.Since(t0); el > 3*time.Second {
				t.Errorf("CMD stopped %v after the lock was lost", el)
			}
			if tc.ping != 0 {
				p.close() // a release through a silent proxy would wait for its timeout
			}
			if code := awaitExit(t, te, done, 15*time.Second); code != tc.code {
				t.Fatalf("exit status %d, want %d; stderr:\n%s", code, tc.code, te.errOut)
			}
			wantStderr(t, te, "coordhost: lock "+strconv.Quote(tc.lock)+": ", tc.why)
			if strings.Contains(te.errOut.String(), "released lock") {
				t.Fatalf("reported a release of a lost lock:\n%s", te.errOut)
			}
		})
	}
}

// A lock attached to a session ends with the session: closing it while
// CMD runs stops CMD. A session that does not exist is an error (1), a
// malformed id a usage error (2).
func TestHoldServerSession(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, nil, nil)
	_, sess := d.apiClients(t)
	ctx := context.Background()
	cs, err := sess.CreateSession(ctx, connect.NewRequest(&coordhostv1.CreateSessionRequest{Ttl: durationpb.New(10 * time.Second)}))
	if err != nil {
		t.Fatal(err)
	}
	sid := cs.Msg.GetSession().GetSessionId()
	started := filepath.Join(t.TempDir(), "started")
	te := newTestEnv(t, nil)
	done := runHoldAsync(te, "-server", d.url, "-session", sid, "job", "--", "sh", "-c", `echo $COORDHOST_FENCING_TOKEN; touch "$1"; sleep 30`, "sh", started)
	xtest.Eventually(t, 10*time.Second, "CMD to start", fileExists(started))
	wantStderr(t, te, "; key \"job\", ttl 10s\n") // the session's TTL
	if _, err := sess.CloseSession(ctx, connect.NewRequest(&coordhostv1.CloseSessionRequest{SessionId: sid})); err != nil {
		t.Fatal(err)
	}
	if code := awaitExit(t, te, done, 15*time.Second); code != 143 {
		t.Fatalf("exit status %d, want 143; stderr:\n%s", code, te.errOut)
	}
	wantStderr(t, te, `coordhost: lost lock "job"; stopping sh`)

	for _, tc := range []struct {
		sid  string
		code int
		want string
	}{
		{sid, exitFailure, `answered not found (session not found`},
		{"nope", exitUsage, `answered invalid argument (field "session_id")`},
	} {
		te := newTestEnv(t, nil)
		if code := run(ctx, []string{"lock", "hold", "-server", d.url, "-session", tc.sid, "job", "--", "true"}, te.env); code != tc.code {
			t.Fatalf("-session %s: exit status %d, want %d; stderr:\n%s", tc.sid, code, tc.code, te.errOut)
		}
		wantStderr(t, te, tc.want)
	}
}

// What the daemon refuses, and a daemon that cannot be reached, give the
// exit statuses of the in-process form: a name it does not have is a usage
// error (2), attributes it finds no key in an error (1), an unreachable
// daemon as an unreachable Redis (1). CMD never runs, and the daemon's
// text is escaped.
func TestHoldServerRefused(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, nil, nil)
	ran := filepath.Join(t.TempDir(), "ran")
	for _, tc := range []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"unknown name", []string{"-server", d.url, "nope"}, exitUsage,
			[]string{`coordhost: lock hold: lock "nope": the daemon at ` + d.url + ` answered not found (name not configured): `, "Run 'coordhost lock hold -h' for usage."}},
		{"name that steers the terminal", []string{"-server", d.url, "\x1b[2Jx\ny"}, exitUsage,
			[]string{`lock "\x1b[2Jx\ny": the daemon at ` + d.url + ` answered not found (name not configured): `}},
		// As in process: a partition policy that finds no key is no usage error.
		{"partition policy finds no key", []string{"-server", d.url, "tenant"}, exitFailure,
			[]string{`answered invalid argument (field "attributes"): attributes: `}},
		{"too many attributes", append([]string{"-server", d.url}, append(manyAttrs(40), "tenant")...), exitFailure,
			[]string{`field "attributes"): attributes: 40 entries, at most 32`}},
		{"unreachable", []string{"-server", "http://127.0.0.1:1", "job"}, exitFailure,
			[]string{"coordhost: calling the daemon at http://127.0.0.1:1: ", "connection refused"}},
		{"not a gRPC server", []string{"-server", d.url + "/nothing/here", "job"}, exitFailure,
			[]string{"coordhost: calling the daemon at " + d.url + "/nothing/here: HTTP status 404 Not Found"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			te := newTestEnv(t, nil)
			code := run(context.Background(), append(append([]string{"lock", "hold"}, tc.args...), "--", "touch", ran), te.env)
			if code != tc.code {
				t.Fatalf("exit status %d, want %d; stderr:\n%s", code, tc.code, te.errOut)
			}
			wantStderr(t, te, tc.want...)
			if strings.ContainsAny(te.errOut.String(), "\x1b\r") {
				t.Errorf("stderr carries control characters: %q", te.errOut)
			}
			if _, err := os.Stat(ran); err == nil {
				t.Fatal("CMD ran")
			}
		})
	}
}

func manyAttrs(n int) []string {
	var args []string
	for i := range n {
		args = append(args, "-attr", "k"+strconv.Itoa(i)+"=v")
	}
	return args
}

// https with a CA from $COORDHOST_TLS_CA, a client certificate from
// $COORDHOST_TLS_CERT/KEY for mutual TLS, and $COORDHOST_TOKEN sent as a
// bearer token (and never printed).
func TestServerTLSAndToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clientCA := xtest.NewCA(t, "client CA")
	certFile, keyFile := clientCA.Issue(t, "coordhost test client", false).Write(t, dir, "client")
	var mu sync.Mutex
	var auth []string
	d := startDaemon(t, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			auth = append(auth, r.Header.Get("Authorization"))
			mu.Unlock()
			next.ServeHTTP(w, r)
		})
	}, &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clientCA.Pool()})
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: d.srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	const token = "s3cret.T0ken"
	full := map[string]string{envToken: token, envTLSCA: caFile, envTLSCert: certFile, envTLSKey: keyFile}
	without := func(keys ...string) map[string]string {
		m := map[string]string{}
		for k, v := range full {
			m[k] = v
		}
		for _, k := range keys {
			delete(m, k)
		}
		return m
	}
	ctx := context.Background()

	te := newTestEnv(t, full)
	if code := run(ctx, []string{"lock", "hold", "-server", d.url, "job", "--", "sh", "-c", `echo "${COORDHOST_TOKEN-unset}"`}, te.env); code != 0 {
		t.Fatalf("lock hold: exit status %d; stderr:\n%s", code, te.errOut)
	}
	if te.out.String() != "unset\n" {
		t.Fatalf("CMD inherited the token: stdout %q", te.out)
	}
	te2 := newTestEnv(t, full)
	if code := run(ctx, []string{"limit", "check", "-server", d.url, "global"}, te2.env); code != exitGranted {
		t.Fatalf("limit check: exit status %d; stderr:\n%s", code, te2.errOut)
	}
	mu.Lock()
	got := append([]string(nil), auth...)
	mu.Unlock()
	// Hold, Release, Check.
	if len(got) != 3 || got[0] != "Bearer "+token || got[1] != "Bearer "+token || got[2] != "Bearer "+token {
		t.Fatalf("Authorization headers %q", got)
	}

	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"no client certificate", without(envTLSCert, envTLSKey), "coordhost: calling the daemon at " + d.url + ": "},
		{"system roots only", without(envTLSCA), "certificate"},
		{"CA file missing", map[string]string{envTLSCA: filepath.Join(dir, "none.pem")}, "coordhost: $COORDHOST_TLS_CA: open "},
		{"CA file without a certificate", map[string]string{envTLSCA: keyFile}, "$COORDHOST_TLS_CA: no PEM certificate in "},
		{"key that does not fit", map[string]string{envTLSCA: caFile, envTLSCert: certFile, envTLSKey: caFile}, "$COORDHOST_TLS_CERT / $COORDHOST_TLS_KEY: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			te := newTestEnv(t, tc.env)
			if code := run(ctx, []string{"lock", "hold", "-server", d.url, "job", "--", "true"}, te.env); code != exitFailure {
				t.Fatalf("exit status %d, want 1; stderr:\n%s", code, te.errOut)
			}
			wantStderr(t, te, tc.want)
			te2 := newTestEnv(t, tc.env)
			if code := run(ctx, []string{"limit", "check", "-server", d.url, "global"}, te2.env); code != exitCheckError {
				t.Fatalf("limit check: exit status %d, want 2; stderr:\n%s", code, te2.errOut)
			}
			if strings.Contains(te.errOut.String()+te2.errOut.String(), token) {
				t.Fatal("the token was printed")
			}
		})
	}
}

// freezeProxy forwards TCP connections to a target until frozen: then it
// stops passing bytes either way but keeps the connections open, as a
// network path that drops everything does.
type freezeProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	frozen chan struct{} // closed when frozen
	closed bool
	conns  []net.Conn
	wg     sync.WaitGroup
}

func newFreezeProxy(t *testing.T, target string) *freezeProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &freezeProxy{ln: ln, target: target, frozen: make(chan struct{})}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *freezeProxy) addr() string { return p.ln.Addr().String() }

func (p *freezeProxy) freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.frozen:
	default:
		close(p.frozen)
	}
}

// close stops the proxy and closes every connection; it waits for its
// goroutines.
func (p *freezeProxy) close() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		_ = p.ln.Close()
		for _, c := range p.conns {
			_ = c.Close()
		}
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// track records c for close; false (and c closed) once closed.
func (p *freezeProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns = append(p.conns, c)
	return true
}

func (p *freezeProxy) serve() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(in) {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = in.Close()
			continue
		}
		if !p.track(out) {
			return
		}
		p.wg.Add(2)
		go p.pipe(in, out)
		go p.pipe(out, in)
	}
}

// pipe copies from src to dst until either fails; once frozen, what is
// read is dropped.
func (p *freezeProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			select {
			case <-p.frozen:
				continue
			default:
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				_ = dst.Close()
			}
			if tc, ok := dst.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			}
			return
		}
	}
}
