package host_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/durationpb"

	coordhostv1 "github.com/coordhost/coordhost/gen/coordhost/v1"
	"github.com/coordhost/coordhost/gen/coordhost/v1/coordhostv1connect"
	"github.com/coordhost/coordhost/host"
	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
)

// The secrets of the auth tests' tokens.
const (
	appSecret    = "app-secret-0123456789abcdef"
	opsSecret    = "ops-secret-0123456789abcdef"
	readerSecret = "reader-secret-0123456789abcdef"
)

// authTokens is a server block's tokens: app may use x and api, the Envoy
// domain edge and 2 streams; ops is an operator (admin, metrics); reader
// may do nothing but sessions.
const authTokens = `
  token "app" {
    secret_file   = "app.token"
    names         = ["x", "api"]
    envoy_domains = ["edge"]
    max_streams   = 2
  }
  token "ops" {
    secret_file = "ops.token"
    admin       = true
    metrics     = true
  }
  token "reader" {
    secret_file = "reader.token"
  }
`

// authConfig is rateLimitConfig with a server block (serverBody, e.g.
// authTokens) and two Envoy domains; the token files are written next to
// it.
func authConfig(t *testing.T, addr, serverBody string) string {
	t.Helper()
	path := rateLimitConfig(t, addr, 3, "server {\n"+serverBody+"\n}\n"+`
envoy_rate_limit "edge" {
  descriptor {
    entries    = [{ key = "k" }]
    rate_limit = "x"
  }
}
envoy_rate_limit "other" {
  descriptor {
    entries    = [{ key = "k" }]
    rate_limit = "x"
  }
}
`)
	dir := filepath.Dir(path)
	for name, secret := range map[string]string{"app": appSecret, "ops": opsSecret, "reader": readerSecret} {
		if err := os.WriteFile(filepath.Join(dir, name+".token"), []byte(secret+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// bearerTransport adds "Authorization: Bearer secret" to every request.
type bearerTransport struct {
	rt     http.RoundTripper
	header string
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", b.header)
	return b.rt.RoundTrip(r)
}

// withToken returns a client like hc that sends the token secret.
func withToken(hc *http.Client, secret string) *http.Client {
	return withAuthHeader(hc, "Bearer "+secret)
}

func withAuthHeader(hc *http.Client, header string) *http.Client {
	return &http.Client{Transport: bearerTransport{rt: hc.Transport, header: header}}
}

// wantNamed checks err's code and that it carries an ErrorDetail (with
// name, when not empty).
func wantNamed(t *testing.T, what string, err error, code connect.Code, name string) {
	t.Helper()
	d := errDetail(t, err)
	if connect.CodeOf(err) != code || d == nil || d.Name != name {
		t.Fatalf("%s: %v (detail %v), want %v with an ErrorDetail naming %q", what, err, d, code, name)
	}
}

// get fetches url with client hc and the Authorization header auth
// ("" for none), and returns the status, a header and the body.
func get(t *testing.T, hc *http.Client, url, auth string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// TestAuthAPI: with tokens configured, over gRPC and Connect JSON: no,
// malformed or unknown tokens are Unauthenticated; names, Envoy domains
// and the admin service are checked (PermissionDenied, before a name is
// looked up, so an unconfigured name is no different); probes stay open;
// /metrics needs a metrics token; every refusal is counted.
func TestAuthAPI(t *testing.T) {
	s := redistest.Start(t)
	h := newHost(t, authConfig(t, s.Addr, authTokens))
	url, hc := apiServer(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	app, ops, reader := withToken(hc, appSecret), withToken(hc, opsSecret), withToken(hc, readerSecret)

	for _, mode := range []struct {
		name string
		opts []connect.ClientOption
	}{{"grpc", []connect.ClientOption{connect.WithGRPC()}}, {"connect-json", []connect.ClientOption{connect.WithProtoJSON()}}} {
		t.Run(mode.name, func(t *testing.T) {
			check := func(c *http.Client, name string) error {
				_, err := coordhostv1connect.NewRateLimitServiceClient(c, url, mode.opts...).Check(ctx,
					connect.NewRequest(&coordhostv1.CheckRateLimitRequest{Name: name, Attributes: map[string]string{"tenant": "t"}}))
				return err
			}
			for _, bad := range []struct {
				what string
				c    *http.Client
			}{
				{"no token", hc},
				{"wrong token", withToken(hc, "not-a-token-0123456789")},
				{"a prefix of a token", withToken(hc, appSecret[:20])},
				{"basic auth", withAuthHeader(hc, "Basic "+appSecret)},
				{"empty bearer", withAuthHeader(hc, "Bearer ")},
			} {
				wantNamed(t, bad.what, check(bad.c, "x"), connect.CodeUnauthenticated, "")
			}
			if err := check(app, "x"); err != nil {
				t.Fatalf("app, x: %v", err)
			}
			if err := check(withAuthHeader(hc, "bearer  "+appSecret), "api"); err != nil {
				t.Fatalf("app, lower-case scheme: %v", err)
			}
			wantNamed(t, "app, login", check(app, "login"), connect.CodePermissionDenied, "login")
			wantNamed(t, "app, not configured", check(app, "nope"), connect.CodePermissionDenied, "nope")
			wantNamed(t, "reader, x", check(reader, "x"), connect.CodePermissionDenied, "x")
			// An empty name is the handler's to refuse.
			if err := check(app, ""); connect.CodeOf(err) != connect.CodeInvalidArgument {
				t.Fatalf("app, empty name: %v", err)
			}

			// Sessions need a token, not names.
			sc := func(c *http.Client) error {
				_, err := coordhostv1connect.NewSessionServiceClient(c, url, mode.opts...).CreateSession(ctx, connect.NewRequest(&coordhostv1.CreateSessionRequest{}))
				return err
			}
			wantNamed(t, "session without token", sc(hc), connect.CodeUnauthenticated, "")
			if err := sc(reader); err != nil {
				t.Fatalf("reader, CreateSession: %v", err)
			}

			// The admin service needs admin.
			list := func(c *http.Client) error {
				_, err := coordhostv1connect.NewAdminServiceClient(c, url, mode.opts...).ListPolicies(ctx, connect.NewRequest(&coordhostv1.ListPoliciesRequest{}))
				return err
			}
			wantNamed(t, "app, admin", list(app), connect.CodePermissionDenied, "")
			wantNamed(t, "no token, admin", list(hc), connect.CodeUnauthenticated, "")
			if err := list(ops); err != nil {
				t.Fatalf("ops, admin: %v", err)
			}

			// The Envoy rate-limit service needs the domain.
			rls := func(c *http.Client, domain string) error {
				_, err := connect.NewClient[rlsv3.RateLimitRequest, rlsv3.RateLimitResponse](c, url+host.RLSProcedure, mode.opts...).
					CallUnary(ctx, connect.NewRequest(rlsReq(domain, desc("k", "v"))))
				return err
			}
			if err := rls(app, "edge"); err != nil {
				t.Fatalf("app, edge: %v", err)
			}
			wantNamed(t, "app, other", rls(app, "other"), connect.CodePermissionDenied, "")
			wantNamed(t, "ops, edge", rls(ops, "edge"), connect.CodePermissionDenied, "")
			wantNamed(t, "no token, edge", rls(hc, "edge"), connect.CodeUnauthenticated, "")
		})
	}

	// Probes stay open: /livez, /readyz, grpc.health.v1.
	for _, p := range []string{"/livez", "/readyz"} {
		if code, _, body := get(t, hc, url+p, ""); code != 200 {
			t.Fatalf("%s without a token: %d %s", p, code, body)
		}
	}
	hr, err := connect.NewClient[healthpb.HealthCheckRequest, healthpb.HealthCheckResponse](hc, url+"/grpc.health.v1.Health/Check", connect.WithGRPC()).
		CallUnary(ctx, connect.NewRequest(&healthpb.HealthCheckRequest{}))
	if err != nil || hr.Msg.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health without a token: %v %v", hr, err)
	}

	// /metrics: 401 without a valid token, 403 without metrics.
	code, hdr, _ := get(t, hc, url+"/metrics", "")
	if code != 401 || !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Bearer") {
		t.Fatalf("/metrics without a token: %d %v", code, hdr)
	}
	if code, _, _ := get(t, hc, url+"/metrics", "Bearer wrong-wrong-wrong-wrong"); code != 401 {
		t.Fatalf("/metrics, wrong token: %d", code)
	}
	if code, _, body := get(t, hc, url+"/metrics", "Bearer "+appSecret); code != 403 || !strings.Contains(body, `"app"`) {
		t.Fatalf("/metrics, app: %d %s", code, body)
	}
	code, _, text := get(t, hc, url+"/metrics", "Bearer "+opsSecret)
	if code != 200 {
		t.Fatalf("/metrics, ops: %d", code)
	}
	// Per mode: 5 bad tokens on Check, 1 session, 1 admin, 1 RLS without
	// a token (missing: 4, invalid: 4); plus the 3 /metrics refusals. The
	// refused domain never reached the service.
	for series, want := range map[string]float64{
		`coordhost_api_auth_failures_total{reason="missing",token=""}`:         2*4 + 1,
		`coordhost_api_auth_failures_total{reason="invalid",token=""}`:         2*4 + 1,
		`coordhost_api_auth_failures_total{reason="client_cert",token=""}`:     0,
		`coordhost_api_auth_failures_total{reason="name",token="app"}`:         2 * 2,
		`coordhost_api_auth_failures_total{reason="name",token="reader"}`:      2,
		`coordhost_api_auth_failures_total{reason="admin",token="app"}`:        2,
		`coordhost_api_auth_failures_total{reason="envoy_domain",token="app"}`: 2,
		`coordhost_api_auth_failures_total{reason="envoy_domain",token="ops"}`: 2,
		`coordhost_api_auth_failures_total{reason="metrics",token="app"}`:      1,
		`coordhost_api_auth_failures_total{reason="stream_limit",token="app"}`: 0,
		`coordhost_api_auth_failures_total{reason="missing",token="reader"}`:   0,
		`coordhost_rls_decisions_total{domain="edge",outcome="ok"}`:            1,
		`coordhost_rls_decisions_total{domain="edge",outcome="over_limit"}`:    1,
		`coordhost_rls_decisions_total{domain="other",outcome="ok"}`:           0,
	} {
		if got := metricValue(text, series); got != want {
			t.Errorf("%s = %v, want %v\n%s", series, got, want, grep(text, "auth_failures"))
		}
	}
	if strings.Contains(text, appSecret) || strings.Contains(text, opsSecret) {
		t.Error("/metrics shows a secret")
	}
}

// TestAuthMetricsOpen: metrics_open serves /metrics without a token while
// the API still needs one.
func TestAuthMetricsOpen(t *testing.T) {
	s := redistest.Start(t)
	h := newHost(t, authConfig(t, s.Addr, "metrics_open = true\n"+authTokens))
	url, hc := apiServer(t, h)
	if code, _, body := get(t, hc, url+"/metrics", ""); code != 200 || !strings.Contains(body, "coordhost_config_generation 1") {
		t.Fatalf("/metrics: %d", code)
	}
	_, err := coordhostv1connect.NewRateLimitServiceClient(hc, url).Check(context.Background(), connect.NewRequest(&coordhostv1.CheckRateLimitRequest{Name: "x"}))
	wantNamed(t, "Check without a token", err, connect.CodeUnauthenticated, "")
}

// TestAuthValidateSandbox: AdminService.Validate of a source reads no file
// of the daemon's machine and no environment variable, so its
// diagnostics cannot carry them.
func TestAuthValidateSandbox(t *testing.T) {
	s := redistest.Start(t)
	path := authConfig(t, s.Addr, authTokens)
	h := newHost(t, path)
	url, hc := apiServer(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := coordhostv1connect.NewAdminServiceClient(withToken(hc, opsSecret), url, connect.WithGRPC())
	for _, src := range []string{
		"lock \"a\" {\n  ttl = file(\"/etc/passwd\")\n}\n",
		"lock \"a\" {\n  ttl = file(\"app.token\")\n}\n", // relative: the daemon's configuration directory
		"server {\n  token \"t\" {\n    secret_file = \"app.token\"\n  }\n}\n",
		"server {\n  token \"t\" {\n    secret_env = \"PATH\"\n  }\n}\n",
		"variable \"v\" {\n  default = file(\"ops.token\")\n}\nlock \"a\" {\n  ttl = var.v\n}\n",
	} {
		v, err := c.Validate(ctx, connect.NewRequest(&coordhostv1.ValidateRequest{Source: []byte(src)}))
		if err != nil {
			t.Fatal(err)
		}
		if v.Msg.Valid || len(v.Msg.Diagnostics) == 0 {
			t.Fatalf("Validate(%q): valid", src)
		}
		var all strings.Builder
		for _, d := range v.Msg.Diagnostics {
			all.WriteString(d.Summary + "\n" + d.Detail + "\n")
		}
		for _, leak := range []string{"root:", appSecret, opsSecret, os.Getenv("PATH")} {
			if strings.Contains(all.String(), leak) {
				t.Fatalf("Validate(%q) quotes %q:\n%s", src, leak, all.String())
			}
		}
		if !strings.Contains(all.String(), "sandboxed check") {
			t.Fatalf("Validate(%q):\n%s", src, all.String())
		}
	}
	// The daemon's own file, tokens and all, is read as usual.
	v, err := c.Validate(ctx, connect.NewRequest(&coordhostv1.ValidateRequest{}))
	if err != nil || !v.Msg.Valid {
		t.Fatalf("Validate(own file): %v %v", v, err)
	}
}

// keepAlive opens a KeepAlive stream for sess with client c and checks
// one renewal.
func keepAlive(t *testing.T, ctx context.Context, c coordhostv1connect.SessionServiceClient, id string) *connect.BidiStreamForClient[coordhostv1.KeepAliveRequest, coordhostv1.KeepAliveResponse] {
	t.Helper()
	st := c.KeepAlive(ctx)
	t.Cleanup(func() { st.CloseRequest(); st.CloseResponse() })
	if err := st.Send(&coordhostv1.KeepAliveRequest{SessionId: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Receive(); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestAuthStreams: a token's max_streams bounds its open streams
// (ResourceExhausted, REASON_CLIENT_LIMIT); a reload that removes the
// token ends its open stream with Unauthenticated at the next message,
// and one that narrows its names ends a stream using them with
// PermissionDenied.
func TestAuthStreams(t *testing.T) {
	s := redistest.Start(t)
	path := authConfig(t, s.Addr, authTokens)
	h := newHost(t, path)
	url, hc := apiServer(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := coordhostv1connect.NewSessionServiceClient(withToken(hc, appSecret), url, connect.WithGRPC())
	id := newSession(t, ctx, c, 0)

	// app has 2 streams; the third is refused at once.
	sctx, scancel := context.WithCancel(ctx)
	first := keepAlive(t, sctx, c, id)
	keepAlive(t, ctx, c, id)
	third := c.KeepAlive(ctx)
	third.Send(&coordhostv1.KeepAliveRequest{SessionId: id})
	_, err := third.Receive()
	if d := errDetail(t, err); connect.CodeOf(err) != connect.CodeResourceExhausted || d == nil || d.Reason != coordhostv1.Reason_REASON_CLIENT_LIMIT ||
		!strings.Contains(err.Error(), "max_streams") {
		t.Fatalf("third stream: %v (detail %v)", err, d)
	}
	third.CloseRequest()
	third.CloseResponse()
	// Another token's streams are counted apart (on its own session: a
	// session belongs to the token that created it).
	rc := coordhostv1connect.NewSessionServiceClient(withToken(hc, readerSecret), url, connect.WithGRPC())
	rid := newSession(t, ctx, rc, 0)
	keepAlive(t, ctx, rc, rid)
	// A stream that ends gives its place back.
	scancel()
	first.CloseRequest()
	first.CloseResponse()
	var appStream *connect.BidiStreamForClient[coordhostv1.KeepAliveRequest, coordhostv1.KeepAliveResponse]
	xtest.Eventually(t, 5*time.Second, "a stream place to come back", func() bool {
		st := c.KeepAlive(ctx)
		st.Send(&coordhostv1.KeepAliveRequest{SessionId: id})
		if _, err := st.Receive(); err != nil {
			st.CloseRequest()
			st.CloseResponse()
			return false
		}
		appStream = st
		t.Cleanup(func() { st.CloseRequest(); st.CloseResponse() })
		return true
	})

	// A reload that removes app: its open stream ends at its next message
	// with Unauthenticated; reader's stream goes on.
	readerStream := keepAlive(t, ctx, rc, rid)
	src := readFile(t, path)
	start := strings.Index(src, `  token "app" {`)
	end := start + strings.Index(src[start:], "  }\n") + len("  }\n")
	if err := os.WriteFile(path, []byte(src[:start]+src[end:]), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := h.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if err := appStream.Send(&coordhostv1.KeepAliveRequest{SessionId: id}); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	_, err = appStream.Receive()
	wantNamed(t, "app's stream after the reload", err, connect.CodeUnauthenticated, "")
	if !strings.Contains(err.Error(), "no longer valid") {
		t.Fatalf("app's stream: %v", err)
	}
	if err := readerStream.Send(&coordhostv1.KeepAliveRequest{SessionId: rid}); err != nil {
		t.Fatal(err)
	}
	if _, err := readerStream.Receive(); err != nil {
		t.Fatalf("reader's stream after the reload: %v", err)
	}
	_, err = c.GetSession(ctx, connect.NewRequest(&coordhostv1.GetSessionRequest{SessionId: id}))
	wantNamed(t, "app after the reload", err, connect.CodeUnauthenticated, "")
	text := scrapeAt(t, withToken(hc, opsSecret), url)
	if got := metricValue(text, `coordhost_api_auth_failures_total{reason="revoked",token="app"}`); got != 1 {
		t.Errorf("revoked = %v\n%s", got, grep(text, "auth_failures"))
	}
	// At least the third stream; the wait for a place back may have met
	// the limit again.
	if got := metricValue(text, `coordhost_api_auth_failures_total{reason="stream_limit",token="app"}`); got < 1 {
		t.Errorf("stream_limit = %v\n%s", got, grep(text, "auth_failures"))
	}
}

// scrapeAt reads /metrics through the API server at url with client hc.
func scrapeAt(t *testing.T, hc *http.Client, url string) string {
	t.Helper()
	code, _, body := get(t, hc, url+"/metrics", "")
	if code != 200 {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	return body
}

// TestAuthTLS: the Handler behind TLS with client_ca_file (mutual TLS):
// HTTP/2 by ALPN; without a verified client certificate an RPC is
// Unauthenticated and /metrics 401, while /livez, /readyz and
// grpc.health.v1 answer; with one, tokens apply as usual.
func TestAuthTLS(t *testing.T) {
	s := redistest.Start(t)
	ca, clientCA, stranger := xtest.NewCA(t, "server CA"), xtest.NewCA(t, "client CA"), xtest.NewCA(t, "someone else's CA")
	dir := t.TempDir()
	certFile, keyFile := ca.Issue(t, "coordhost", true).Write(t, dir, "server")
	caFile, _ := clientCA.Write(t, dir, "clients")
	path := authConfig(t, s.Addr, authTokens+`
  tls {
    cert_file      = "`+certFile+`"
    key_file       = "`+keyFile+`"
    client_ca_file = "`+caFile+`"
  }
`)
	h := newHost(t, path)
	st, err := host.NewServerTLS(h.Config().Server.TLS, quietLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if !st.MutualTLS() {
		t.Fatal("MutualTLS false with client_ca_file")
	}
	srv := httptest.NewUnstartedServer(h.Handler())
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake
	srv.TLS = st.Config()
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	client := func(certs ...tls.Certificate) *http.Client {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), Certificates: certs}, ForceAttemptHTTP2: true}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr}
	}
	anon := client()
	withCert := client(clientCA.Issue(t, "app", false).TLS)
	// A client sends only a certificate of a CA the server asks for,
	// unless forced.
	strangerCert := stranger.Issue(t, "app", false).TLS
	wrongCA := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(),
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &strangerCert, nil }}}}

	// Probes without a client certificate, over HTTP/2.
	for _, p := range []string{"/livez", "/readyz"} {
		resp, err := anon.Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.ProtoMajor != 2 {
			t.Fatalf("%s: %d %s", p, resp.StatusCode, resp.Proto)
		}
	}
	conn, err := grpc.NewClient(strings.TrimPrefix(srv.URL, "https://"), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: ca.Pool()})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if hr, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || hr.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("grpc health without a client certificate: %v %v", hr, err)
	}

	check := func(hc *http.Client, opts ...connect.ClientOption) error {
		_, err := coordhostv1connect.NewRateLimitServiceClient(hc, srv.URL, opts...).Check(ctx, connect.NewRequest(&coordhostv1.CheckRateLimitRequest{Name: "x"}))
		return err
	}
	for _, opts := range [][]connect.ClientOption{{connect.WithGRPC()}, {connect.WithProtoJSON()}} {
		err := check(withToken(anon, appSecret), opts...)
		wantNamed(t, "token without a client certificate", err, connect.CodeUnauthenticated, "")
		if !strings.Contains(err.Error(), "client certificate") {
			t.Fatalf("without a client certificate: %v", err)
		}
		wantNamed(t, "certificate without a token", check(withCert, opts...), connect.CodeUnauthenticated, "")
	}
	if _, err := wrongCA.Get(srv.URL + "/livez"); err == nil {
		t.Fatal("a certificate of an unknown CA was accepted")
	}
	if err := check(withToken(withCert, appSecret), connect.WithGRPC()); err != nil {
		t.Fatalf("certificate and token: %v", err)
	}
	if code, _, _ := get(t, anon, srv.URL+"/metrics", "Bearer "+opsSecret); code != 401 {
		t.Fatalf("/metrics without a client certificate: %d", code)
	}
	code, _, text := get(t, withCert, srv.URL+"/metrics", "Bearer "+opsSecret)
	if code != 200 {
		t.Fatalf("/metrics with both: %d", code)
	}
	if got := metricValue(text, `coordhost_api_auth_failures_total{reason="client_cert",token=""}`); got != 3 {
		t.Errorf("client_cert = %v\n%s", got, grep(text, "auth_failures"))
	}
}

// A token's max_sessions bounds its live sessions across daemons on one
// Redis: one more is ResourceExhausted (REASON_CLIENT_LIMIT) and writes no
// session; a closed or expired session gives its place back; another
// token's sessions are counted apart; a session belongs to its token.
func TestAuthMaxSessions(t *testing.T) {
	s := redistest.Start(t)
	path := authConfig(t, s.Addr, strings.Replace(authTokens, "    max_streams   = 2\n", "    max_streams   = 2\n    max_sessions  = 2\n", 1))
	urlA, hcA := apiServer(t, newHost(t, path))
	urlB, hcB := apiServer(t, newHost(t, path))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := coordhostv1connect.NewSessionServiceClient(withToken(hcA, appSecret), urlA, connect.WithGRPC())
	b := coordhostv1connect.NewSessionServiceClient(withToken(hcB, appSecret), urlB, connect.WithProtoJSON())
	reader := coordhostv1connect.NewSessionServiceClient(withToken(hcA, readerSecret), urlA, connect.WithGRPC())
	create := func(c coordhostv1connect.SessionServiceClient, ttl time.Duration) (string, error) {
		r, err := c.CreateSession(ctx, connect.NewRequest(&coordhostv1.CreateSessionRequest{Ttl: durationpb.New(ttl)}))
		if err != nil {
			return "", err
		}
		return r.Msg.GetSession().GetSessionId(), nil
	}
	first, err := create(a, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	short, err := create(b, time.Second) // at the other daemon
	if err != nil {
		t.Fatal(err)
	}
	keys := s.MustCmd(t, "DBSIZE")
	_, err = create(a, time.Minute)
	if d := errDetail(t, err); connect.CodeOf(err) != connect.CodeResourceExhausted || d == nil || d.Reason != coordhostv1.Reason_REASON_CLIENT_LIMIT {
		t.Fatalf("a third session: %v (detail %v)", err, d)
	}
	if got := s.MustCmd(t, "DBSIZE"); got != keys {
		t.Fatalf("the refused session changed DBSIZE from %s to %s", keys, got)
	}
	if _, err := create(reader, time.Minute); err != nil {
		t.Fatalf("another token's session: %v", err)
	}
	// Another token cannot touch app's session.
	_, err = reader.RenewSession(ctx, connect.NewRequest(&coordhostv1.RenewSessionRequest{SessionId: first}))
	if connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("reader renewing app's session: %v", err)
	}
	// Closing one gives its place back.
	if _, err := b.CloseSession(ctx, connect.NewRequest(&coordhostv1.CloseSessionRequest{SessionId: first})); err != nil {
		t.Fatal(err)
	}
	third, err := create(a, time.Minute)
	if err != nil {
		t.Fatalf("after a close: %v", err)
	}
	// So does one that expires unrenewed.
	time.Sleep(1100 * time.Millisecond)
	if _, err := create(b, time.Minute); err != nil {
		t.Fatalf("after %s expired: %v", short, err)
	}
	// A renewed session keeps counting past its first expiry.
	if _, err := a.RenewSession(ctx, connect.NewRequest(&coordhostv1.RenewSessionRequest{SessionId: third})); err != nil {
		t.Fatal(err)
	}
	if _, err := create(a, time.Minute); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("a third live session: %v", err)
	}
}
