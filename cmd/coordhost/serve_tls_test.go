package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	coordhostv1 "github.com/coordhost/coordhost/gen/coordhost/v1"
	"github.com/coordhost/coordhost/gen/coordhost/v1/coordhostv1connect"
	"github.com/coordhost/coordhost/internal/xtest"
)

const tlsTestSecret = "serve-tls-secret-0123456789"

// tlsClient returns an HTTPS client trusting roots, presenting certs
// (when the server asks for their CA), speaking HTTP/2 unless http1.
func tlsClient(t *testing.T, roots *xtest.Cert, http1 bool, certs ...tls.Certificate) *http.Client {
	t.Helper()
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots.Pool(), Certificates: certs}, ForceAttemptHTTP2: !http1}
	if http1 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// fetch GETs url with hc and returns the response (body read and closed)
// and its body.
func fetch(t *testing.T, hc *http.Client, url string) (*http.Response, string) {
	t.Helper()
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestServeTLS runs serve with a tls block and a client CA (mutual TLS)
// and a token: HTTP/2 by ALPN and HTTP/1.1; probes (also grpc.health.v1)
// without a client certificate; the API and /metrics refused without
// one; SIGHUP re-reads the certificate (a new handshake sees the new one)
// and keeps the old one when the new files are bad.
func TestServeTLS(t *testing.T) {
	t.Parallel()
	d := startTestDevRedis(t)
	dir := t.TempDir()
	serverCA, clientCA := xtest.NewCA(t, "server CA"), xtest.NewCA(t, "client CA")
	first := serverCA.Issue(t, "coordhost-1", true)
	first.Write(t, dir, "server")
	clientCA.Write(t, dir, "clients")
	if err := os.WriteFile(filepath.Join(dir, "app.token"), []byte(tlsTestSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "coordhost.hcl")
	if err := os.WriteFile(path, []byte(redisBlock(d.Socket())+`
server {
  tls {
    cert_file      = "server.pem"
    key_file       = "server.key"
    client_ca_file = "clients.pem"
  }
  token "app" {
    secret_file = "app.token"
    names       = ["x"]
  }
}

rate_limit "x" {
  algorithm = "fixed_window"
  limit     = 10
  window    = "1m"
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	te := newTestEnv(t, nil)
	done := make(chan int, 1)
	go func() {
		done <- run(context.Background(), []string{"serve", path, "-listen", "127.0.0.1:0"}, te.env)
	}()
	waitOutput(t, 10*time.Second, te.errOut, regexp.MustCompile(`level=INFO msg="network API" tls=true mutual_tls=true tokens=1 metrics_open=false\n`))
	m := waitOutput(t, 10*time.Second, te.errOut, regexp.MustCompile(`level=INFO msg=listening addr=(127\.0\.0\.1:\d+) generation=1\n`))
	base := "https://" + m[1]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	anon := tlsClient(t, serverCA, false)
	withCert := tlsClient(t, serverCA, false, clientCA.Issue(t, "app", false).TLS)
	for _, c := range []struct {
		hc    *http.Client
		proto int
	}{{anon, 2}, {tlsClient(t, serverCA, true), 1}} {
		for _, p := range []string{"/livez", "/readyz"} {
			resp, body := fetch(t, c.hc, base+p)
			if resp.StatusCode != 200 || resp.ProtoMajor != c.proto {
				t.Fatalf("%s: %d %s %s", p, resp.StatusCode, resp.Proto, body)
			}
		}
	}
	conn, err := grpc.NewClient(m[1], grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: serverCA.Pool()})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if hr, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || hr.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("grpc health without a client certificate: %v %v", hr, err)
	}
	if resp, body := fetch(t, anon, base+"/metrics"); resp.StatusCode != 401 || !strings.Contains(body, "client certificate") {
		t.Fatalf("/metrics without a client certificate: %d %s", resp.StatusCode, body)
	}
	check := func(hc *http.Client, token string) error {
		req := connect.NewRequest(&coordhostv1.CheckRateLimitRequest{Name: "x"})
		if token != "" {
			req.Header().Set("Authorization", "Bearer "+token)
		}
		_, err := coordhostv1connect.NewRateLimitServiceClient(hc, base, connect.WithGRPC()).Check(ctx, req)
		return err
	}
	if err := check(anon, tlsTestSecret); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("token without a client certificate: %v", err)
	}
	if err := check(withCert, ""); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("client certificate without a token: %v", err)
	}
	if err := check(withCert, tlsTestSecret); err != nil {
		t.Fatalf("client certificate and token: %v", err)
	}

	// serial returns the certificate a new handshake gets.
	serial := func() *big.Int {
		t.Helper()
		c, err := tls.Dial("tcp", m[1], &tls.Config{RootCAs: serverCA.Pool()})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber
	}
	if got := serial(); got.Cmp(first.X509.SerialNumber) != 0 {
		t.Fatalf("serving serial %v, want %v", got, first.X509.SerialNumber)
	}
	second := serverCA.Issue(t, "coordhost-2", true)
	second.Write(t, dir, "server")
	te.sig <- syscall.SIGHUP
	waitOutput(t, 10*time.Second, te.errOut, regexp.MustCompile(`level=INFO msg="TLS certificate reloaded" cert_file=\S+ subject="CN=coordhost-2" `))
	if got := serial(); got.Cmp(second.X509.SerialNumber) != 0 {
		t.Fatalf("after SIGHUP: serving serial %v, want %v", got, second.X509.SerialNumber)
	}
	// A key that does not match the certificate: the second stays.
	if err := os.WriteFile(filepath.Join(dir, "server.key"), serverCA.Issue(t, "other", true).KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	te.sig <- syscall.SIGHUP
	waitOutput(t, 10*time.Second, te.errOut, regexp.MustCompile(`level=ERROR msg="TLS reload failed; keeping the previous certificate" err=`))
	if got := serial(); got.Cmp(second.X509.SerialNumber) != 0 {
		t.Fatalf("after a bad SIGHUP: serving serial %v, want %v", got, second.X509.SerialNumber)
	}
	if err := check(withCert, tlsTestSecret); err != nil {
		t.Fatalf("after a bad SIGHUP: %v", err)
	}

	te.sig <- syscall.SIGTERM
	select {
	case code := <-done:
		if code != exitOK {
			t.Fatalf("exit status %d; stderr:\n%s", code, te.errOut)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("serve did not stop; stderr:\n%s", te.errOut)
	}
}

// TestServeTLSBadCertificate: a certificate that does not load stops
// serve before anything starts.
func TestServeTLSBadCertificate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, content := range map[string]string{"server.pem": "not a certificate", "server.key": "not a key"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "coordhost.hcl")
	if err := os.WriteFile(path, []byte("redis {\n  addresses = [\"127.0.0.1:1\"]\n}\nserver {\n  tls {\n    cert_file = \"server.pem\"\n    key_file  = \"server.key\"\n  }\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	te := newTestEnv(t, nil)
	if code := run(context.Background(), []string{"serve", path, "-listen", "127.0.0.1:0"}, te.env); code != exitFailure {
		t.Fatalf("exit status %d; stderr:\n%s", code, te.errOut)
	}
	if !strings.Contains(te.errOut.String(), `level=ERROR msg="cannot load the TLS certificate" err="server tls: cert_file `) ||
		strings.Contains(te.errOut.String(), "starting coordhost") {
		t.Fatalf("stderr:\n%s", te.errOut)
	}
}

// The server's HTTP/2 keep-alive: a connection silent for pingAfter gets
// a PING, and is closed when no answer comes within pingTimeout. (serve
// uses h2PingAfter and h2PingTimeout; this test shortens them.)
func TestServeHTTP2Keepalive(t *testing.T) {
	t.Parallel()
	if h2PingAfter != 15*time.Second || h2PingTimeout != 10*time.Second || idleTimeout != 2*time.Minute {
		t.Fatalf("keep-alive %v %v %v", h2PingAfter, h2PingTimeout, idleTimeout)
	}
	srv := newHTTPServer(http.NotFoundHandler(), false, keepalive{pingAfter: 300 * time.Millisecond, pingTimeout: 300 * time.Millisecond, idle: time.Minute},
		log.New(io.Discard, "", 0))
	if srv.IdleTimeout != time.Minute || srv.MaxHeaderBytes != maxHeaderBytes || srv.HTTP2.SendPingTimeout != 300*time.Millisecond || !srv.Protocols.UnencryptedHTTP2() || !srv.Protocols.HTTP1() {
		t.Fatalf("server: %+v", srv)
	}
	ts := httptest.NewUnstartedServer(srv.Handler)
	ts.Config = srv
	ts.Start()
	defer ts.Close()

	c, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// HTTP/2 with prior knowledge: the preface and an empty SETTINGS.
	if _, err := c.Write(append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 0, 0, 0, 4, 0, 0, 0, 0, 0)); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	start := time.Now()
	c.SetReadDeadline(start.Add(10 * time.Second))
	var pinged time.Time
	for {
		var hdr [9]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			// Closed by the server: after the PING, once its timeout ran
			// out (a GOAWAY may come first).
			if pinged.IsZero() {
				t.Fatalf("connection ended before a PING: %v", err)
			}
			if el := time.Since(pinged); el < 250*time.Millisecond {
				t.Fatalf("closed %v after the PING, before its timeout", el)
			}
			return
		}
		n := int(binary.BigEndian.Uint32(append([]byte{0}, hdr[:3]...)))
		if _, err := io.CopyN(io.Discard, r, int64(n)); err != nil {
			t.Fatal(err)
		}
		switch typ, flags := hdr[3], hdr[4]; {
		case typ == 4 && flags&1 == 0: // the server's SETTINGS: acknowledge
			if _, err := c.Write([]byte{0, 0, 0, 4, 1, 0, 0, 0, 0}); err != nil {
				t.Fatal(err)
			}
		case typ == 6 && flags&1 == 0: // PING: never answered
			if pinged.IsZero() {
				pinged = time.Now()
				if el := pinged.Sub(start); el < 250*time.Millisecond {
					t.Fatalf("PING after %v, before the connection was silent for 300ms", el)
				}
			}
		}
	}
}
