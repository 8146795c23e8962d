package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"
	coordhostv1 "github.com/coordhost/coordhost/gen/coordhost/v1"
	"github.com/coordhost/coordhost/gen/coordhost/v1/coordhostv1connect"
)

// The client side of `-server URL` (lock hold, limit check): the
// commands call the coordhost daemon's coordhost.v1 API over gRPC
// (connect-go) instead of Redis.

// Environment variables of the API client.
const (
	envToken   = "COORDHOST_TOKEN"    // sent as "Authorization: Bearer TOKEN"
	envTLSCert = "COORDHOST_TLS_CERT" // client certificate (PEM) for mutual TLS
	envTLSKey  = "COORDHOST_TLS_KEY"  // its private key (PEM)
	envTLSCA   = "COORDHOST_TLS_CA"   // CA certificates (PEM) the server's certificate must chain to; else the system's
)

const (
	// defaultAPIPing is how long a connection to the daemon may stay
	// silent before the client sends an HTTP/2 PING, and how long it then
	// waits for the answer before it closes the connection (so that a
	// daemon that is gone, or a network path that silently drops
	// everything, ends a Hold stream within about twice this).
	defaultAPIPing = 5 * time.Second
	// apiDialTimeout bounds connecting (TCP and TLS handshake).
	apiDialTimeout = 10 * time.Second
	// apiCallTimeout bounds a unary call (limit check's Check).
	apiCallTimeout = 30 * time.Second
	// maxAPIResponseBytes bounds a response message from the daemon.
	maxAPIResponseBytes = 1 << 20
	// maxServerText is how much of a message from the daemon is printed.
	maxServerText = 512
)

// apiTarget is a checked -server URL and what the environment adds to
// it. Files are read only when the client is built.
type apiTarget struct {
	url                       string // the base URL, without a trailing slash
	tls                       bool   // https
	token                     string // "" for none
	certFile, keyFile, caFile string
}

// parseAPITarget checks the -server URL s and the client's environment
// variables (the token and TLS files). Errors never show the token.
func parseAPITarget(s string, getenv func(string) string) (apiTarget, error) {
	var t apiTarget
	if s == "" {
		return t, errors.New("-server URL is empty")
	}
	u, err := url.Parse(s)
	want := "want http://HOST:PORT (cleartext HTTP/2) or https://HOST:PORT (TLS)"
	switch {
	case err != nil || u.Opaque != "":
		return t, fmt.Errorf("-server %q: %s", s, want)
	case u.Scheme != "http" && u.Scheme != "https":
		return t, fmt.Errorf("-server %q: %s", s, want)
	case u.User != nil:
		// Keep a password off the terminal, and out of URLs that show up in
		// process lists.
		return t, fmt.Errorf("-server %q: credentials do not go in the URL; put a token in $%s", u.Scheme+"://xxxxx@"+u.Host, envToken)
	case u.Host == "" || u.Hostname() == "":
		return t, fmt.Errorf("-server %q: missing host; %s", s, want)
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return t, fmt.Errorf("-server %q: a query or fragment has no meaning here", s)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return t, fmt.Errorf("-server %q: bad port %q", s, p)
		}
	}
	t.tls = u.Scheme == "https"
	t.url = strings.TrimRight(u.String(), "/")

	t.token = getenv(envToken)
	if t.token != "" {
		for _, r := range t.token {
			if r <= ' ' || r >= 0x7f {
				// The token itself is never printed.
				return t, fmt.Errorf("$%s holds a space, a control character or a non-ASCII character (%d bytes); a bearer token has none", envToken, len(t.token))
			}
		}
	}
	t.certFile, t.keyFile, t.caFile = getenv(envTLSCert), getenv(envTLSKey), getenv(envTLSCA)
	if !t.tls {
		for _, v := range []string{envTLSCert, envTLSKey, envTLSCA} {
			if getenv(v) != "" {
				return t, fmt.Errorf("$%s is set, but -server %q is cleartext: give an https:// URL (or unset $%s)", v, t.url, v)
			}
		}
	}
	if (t.certFile == "") != (t.keyFile == "") {
		return t, fmt.Errorf("$%s and $%s go together (a client certificate and its key)", envTLSCert, envTLSKey)
	}
	return t, nil
}

// apiClient is a connection pool to one daemon and the services the CLI
// calls on it.
type apiClient struct {
	url   string
	lock  coordhostv1connect.LockServiceClient
	limit coordhostv1connect.RateLimitServiceClient
	tr    *http.Transport
}

// newAPIClient builds the client for t: gRPC over HTTP/2 (cleartext for
// http://, TLS for https://) with keep-alive pings every ping of silence,
// the bearer token on every call. It reads the TLS files.
func newAPIClient(t apiTarget, ping time.Duration) (*apiClient, error) {
	if ping <= 0 {
		ping = defaultAPIPing
	}
	tr := &http.Transport{
		// No proxy from the environment: an HTTP proxy cannot carry
		// cleartext HTTP/2.
		DialContext:         (&net.Dialer{Timeout: apiDialTimeout, KeepAlive: 15 * time.Second}).DialContext,
		TLSHandshakeTimeout: apiDialTimeout,
		Protocols:           new(http.Protocols),
		// net/http's own HTTP/2 client sends the PINGs: SendPingTimeout
		// is its ReadIdleTimeout.
		HTTP2: &http.HTTP2Config{SendPingTimeout: ping, PingTimeout: ping},
	}
	if t.tls {
		cfg, err := clientTLSConfig(t)
		if err != nil {
			return nil, err
		}
		tr.TLSClientConfig = cfg
		tr.Protocols.SetHTTP2(true)
	} else {
		tr.Protocols.SetUnencryptedHTTP2(true)
	}
	hc := &http.Client{Transport: tr}
	opts := []connect.ClientOption{connect.WithGRPC(), connect.WithReadMaxBytes(maxAPIResponseBytes)}
	if t.token != "" {
		opts = append(opts, connect.WithInterceptors(bearer("Bearer "+t.token)))
	}
	return &apiClient{
		url:   t.url,
		lock:  coordhostv1connect.NewLockServiceClient(hc, t.url, opts...),
		limit: coordhostv1connect.NewRateLimitServiceClient(hc, t.url, opts...),
		tr:    tr,
	}, nil
}

// close closes the idle connections (after the last call has ended).
func (c *apiClient) close() { c.tr.CloseIdleConnections() }

// clientTLSConfig reads the CA and client certificate files of t.
func clientTLSConfig(t apiTarget) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if t.caFile != "" {
		pem, err := os.ReadFile(t.caFile)
		if err != nil {
			return nil, fmt.Errorf("$%s: %w", envTLSCA, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("$%s: no PEM certificate in %q", envTLSCA, t.caFile)
		}
		cfg.RootCAs = pool
	}
	if t.certFile != "" {
		cert, err := tls.LoadX509KeyPair(t.certFile, t.keyFile)
		if err != nil {
			return nil, fmt.Errorf("$%s / $%s: %w", envTLSCert, envTLSKey, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// bearer is an interceptor that sends an Authorization header with every
// call.
type bearer string

func (b bearer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", string(b))
		return next(ctx, req)
	}
}

func (b bearer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("Authorization", string(b))
		return conn
	}
}

func (b bearer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// apiErrorText describes an error of a call to the daemon at url in plain
// words, for a "coordhost: ..." line (which escapes it as a whole): what
// the daemon answered (its status code, the ErrorDetail's reason and
// field, and its message, shortened), or why it could not be asked.
func apiErrorText(url string, err error) string {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return fmt.Sprintf("calling the daemon at %s: %v", url, err)
	}
	if !connect.IsWireError(err) {
		// Made by the client: the daemon could not be reached, the
		// connection broke, or what answered is not a coordhost daemon.
		s := fmt.Sprintf("calling the daemon at %s: %s", url, transportText(err))
		if strings.HasPrefix(url, "http://") && tlsAnswered(err) {
			s += " (does the daemon serve TLS? then use https://)"
		}
		return s
	}
	s := fmt.Sprintf("the daemon at %s answered %s", url, codeWords(ce.Code()))
	if d := errorDetail(ce); d != nil {
		var notes []string
		// REASON_INVALID_FIELD says no more than the field does.
		if r := reasonWords(d.GetReason()); r != "" && !(d.GetReason() == coordhostv1.Reason_REASON_INVALID_FIELD && d.GetField() != "") {
			notes = append(notes, r)
		}
		if f := d.GetField(); f != "" {
			notes = append(notes, fmt.Sprintf("field %q", clipText(f)))
		}
		if len(notes) > 0 {
			s += " (" + strings.Join(notes, ", ") + ")"
		}
	}
	if m := ce.Message(); m != "" {
		s += ": " + clipText(m)
	}
	return s
}

// tlsAnswered reports whether err looks like a cleartext HTTP/2 call
// answered by a TLS listener, which closes the connection on the first
// bytes it cannot read as a handshake.
func tlsAnswered(err error) bool {
	m := err.Error()
	return strings.Contains(m, "broken pipe") || strings.Contains(m, "connection reset by peer") ||
		strings.Contains(m, "could not be established") || strings.Contains(m, "malformed HTTP")
}

// transportText is the text of an error the client made (not the
// daemon's answer): the message of a connect error without its code.
func transportText(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return clipText(ce.Message())
	}
	return clipText(err.Error())
}

// errorDetail returns the coordhost.v1 ErrorDetail of ce, or nil.
func errorDetail(ce *connect.Error) *coordhostv1.ErrorDetail {
	for _, d := range ce.Details() {
		if v, err := d.Value(); err == nil {
			if ed, ok := v.(*coordhostv1.ErrorDetail); ok {
				return ed
			}
		}
	}
	return nil
}

// refusedArgs reports whether the daemon refused what the command line
// gave it: a name its configuration does not have, or a request field
// (other than the attributes) it finds invalid. Those are usage errors as
// in process; attributes the partition policy finds no key in are not
// (in process either), and neither is anything else.
func refusedArgs(err error) bool {
	var ce *connect.Error
	if !errors.As(err, &ce) || !connect.IsWireError(err) {
		return false
	}
	d := errorDetail(ce)
	switch ce.Code() {
	case connect.CodeNotFound:
		return d.GetReason() == coordhostv1.Reason_REASON_NAME_NOT_CONFIGURED
	case connect.CodeInvalidArgument:
		return d.GetField() != "attributes"
	}
	return false
}

// codeWords is a status code in words: "not found".
func codeWords(c connect.Code) string {
	return strings.ReplaceAll(c.String(), "_", " ")
}

// reasonWords is an ErrorDetail reason in words ("grant lost"), "" for
// none; a reason this build does not know is "reason N".
func reasonWords(r coordhostv1.Reason) string {
	if r == coordhostv1.Reason_REASON_UNSPECIFIED {
		return ""
	}
	name, ok := coordhostv1.Reason_name[int32(r)]
	if !ok {
		return fmt.Sprintf("reason %d", int32(r))
	}
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(name, "REASON_")), "_", " ")
}

// clipText shortens s to at most maxServerText bytes (at a character
// boundary), marking the cut.
func clipText(s string) string {
	if len(s) <= maxServerText {
		return s
	}
	cut := maxServerText
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
