package host

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"connectrpc.com/connect"
	"github.com/coordhost/coordhost/config"
	coordhostv1 "github.com/coordhost/coordhost/gen/coordhost/v1"
	"github.com/coordhost/coordhost/gen/coordhost/v1/coordhostv1connect"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
)

// Authentication and authorization of the network API (the server
// block's token blocks; docs/security.md).
//
// When the configuration in use declares tokens, every coordhost.v1 and
// Envoy rate-limit call needs the header "Authorization: Bearer SECRET"
// of one of them. The interceptor (apiOptions) finds the token, checks
// what the call may do and puts the caller in the call's context, where
// handlers ask authorizeName, callerToken and callerMaxSessions. Each
// generation has its own token table (only SHA-256 digests of secrets),
// so a reload that removes a token stops it at once for new calls, and at
// their next message for streams.

// The reasons of coordhost_api_auth_failures_total.
const (
	authMissing       = "missing"      // no Authorization header (or no token in a stream that began while auth was off)
	authInvalid       = "invalid"      // not "Bearer SECRET", or no token has that secret
	authRevoked       = "revoked"      // a stream's token was removed (or its secret changed) by a reload
	authClientCert    = "client_cert"  // mutual TLS: no verified client certificate
	authName          = "name"         // a primitive name outside the token's names
	authEnvoyDomain   = "envoy_domain" // an Envoy domain outside the token's envoy_domains
	authAdmin         = "admin"        // AdminService without admin = true
	authMetricsDenied = "metrics"      // GET /metrics without metrics = true
	authStreamLimit   = "stream_limit" // the token's max_streams reached
)

// maxStreamNames bounds the names a stream remembers to authorize again
// at each message (a stream normally uses one).
const maxStreamNames = 16

// authMetrics counts refused requests.
type authMetrics struct {
	failures *prometheus.CounterVec // reason, token
}

func newAuthMetrics() *authMetrics {
	m := &authMetrics{failures: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "coordhost_api_auth_failures_total",
		Help: "Network API requests refused by authentication or authorization, by reason (missing, invalid, revoked, client_cert, name, envoy_domain, admin, metrics, stream_limit) and token (the token block's name; \"\" when no valid token was given).",
	}, []string{"reason", "token"})}
	for _, r := range []string{authMissing, authInvalid, authClientCert} {
		m.failures.WithLabelValues(r, "")
	}
	return m
}

func (m *authMetrics) collectors() []prometheus.Collector { return []prometheus.Collector{m.failures} }

// authTable is one generation's tokens.
type authTable struct {
	tokens      []*authToken // none: auth is off
	metricsOpen bool
}

// authToken is one token block; the secret is only its digest.
type authToken struct {
	name   string
	digest [sha256.Size]byte
	cfg    *config.Token
}

func newAuthTable(s config.Server) *authTable {
	t := &authTable{metricsOpen: s.MetricsOpen}
	for _, c := range s.Tokens {
		t.tokens = append(t.tokens, &authToken{name: c.Name, digest: c.SecretSHA256, cfg: c})
	}
	return t
}

func (t *authTable) on() bool { return len(t.tokens) > 0 }

// lookup returns the token whose secret has digest d, or nil. Every
// token is compared, in constant time.
func (t *authTable) lookup(d *[sha256.Size]byte) *authToken {
	var found *authToken
	for _, tok := range t.tokens {
		if subtle.ConstantTimeCompare(d[:], tok.digest[:]) == 1 {
			found = tok
		}
	}
	return found
}

// bearer returns the digest of the request's bearer token, or the reason
// there is none (authMissing, authInvalid).
func bearer(h http.Header) ([sha256.Size]byte, string) {
	vs := h.Values("Authorization")
	switch {
	case len(vs) == 0:
		return [sha256.Size]byte{}, authMissing
	case len(vs) > 1:
		return [sha256.Size]byte{}, authInvalid
	}
	scheme, secret, ok := strings.Cut(vs[0], " ")
	secret = strings.TrimLeft(secret, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || secret == "" {
		return [sha256.Size]byte{}, authInvalid
	}
	return sha256.Sum256([]byte(secret)), ""
}

// caller is who makes a call: the token it presented, resolved against
// the token table of the generation in use when it was last checked.
type caller struct {
	h         *Host
	procedure string
	digest    [sha256.Size]byte
	hasToken  bool

	mu    sync.Mutex
	tab   *authTable // the table tok was resolved in
	tok   *authToken // nil: auth off (in tab)
	names []string   // names authorized so far (at most maxStreamNames)
	// ended is the error that ended the call's stream (a revoked token):
	// the stream's status whatever its handler returns.
	ended error
}

type callerKey struct{}

func withCaller(ctx context.Context, c *caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

func callerFrom(ctx context.Context) *caller {
	c, _ := ctx.Value(callerKey{}).(*caller)
	return c
}

// authFailure counts a refusal.
func (h *Host) authFailure(reason, token string) {
	h.metrics.auth.failures.WithLabelValues(reason, token).Inc()
}

// unauthenticated is the Unauthenticated status of a refusal.
func unauthenticated(reason string) *connect.Error {
	var err error
	switch reason {
	case authMissing:
		err = errors.New("missing token: send the header \"Authorization: Bearer <secret>\"")
	case authRevoked:
		err = errors.New("token no longer valid: the daemon's configuration removed or changed it")
	case authClientCert:
		err = errors.New("a verified client certificate is required (mutual TLS)")
	default:
		err = errors.New("invalid token")
	}
	return apiError(connect.CodeUnauthenticated, coordhostv1.Reason_REASON_UNSPECIFIED, "", "", err)
}

// authenticate finds the token of a call with request header hdr in the
// table in use: a caller, or Unauthenticated (counted).
func (h *Host) authenticate(procedure string, hdr http.Header) (*caller, error) {
	tab := h.gen.Load().auth
	c := &caller{h: h, procedure: procedure, tab: tab}
	d, reason := bearer(hdr)
	// Kept with auth off too: a stream may outlive a reload that turns
	// auth on.
	c.digest, c.hasToken = d, reason == ""
	if !tab.on() {
		return c, nil
	}
	if reason != "" {
		h.authFailure(reason, "")
		return nil, unauthenticated(reason)
	}
	if c.tok = tab.lookup(&d); c.tok == nil {
		h.authFailure(authInvalid, "")
		return nil, unauthenticated(authInvalid)
	}
	if err := c.authorizeProcedure(c.tok); err != nil {
		return nil, err
	}
	return c, nil
}

// isAdmin reports whether procedure belongs to AdminService.
func isAdmin(procedure string) bool {
	return strings.HasPrefix(procedure, "/"+coordhostv1connect.AdminServiceName+"/")
}

// authorizeProcedure checks what tok may call regardless of the request:
// AdminService needs admin.
func (c *caller) authorizeProcedure(tok *authToken) error {
	if isAdmin(c.procedure) && !tok.cfg.Admin {
		c.h.authFailure(authAdmin, tok.name)
		return apiError(connect.CodePermissionDenied, coordhostv1.Reason_REASON_UNSPECIFIED, "", "",
			fmt.Errorf("token %q may not use the admin service (admin = false)", tok.name))
	}
	return nil
}

// authorizeMessage checks a request message: its name (GetName) against
// the token's names, or, for the Envoy rate-limit service, its domain
// against envoy_domains. An empty name or domain is left to the handler
// (InvalidArgument). AdminService requests name no primitive.
func (c *caller) authorizeMessage(msg any) error {
	if isAdmin(c.procedure) {
		return nil
	}
	switch m := msg.(type) {
	case *rlsv3.RateLimitRequest:
		if d := m.GetDomain(); d != "" {
			return c.authorizeDomain(d)
		}
	case interface{ GetName() string }:
		if n := m.GetName(); n != "" {
			return c.authorizeName(n)
		}
	}
	return nil
}

// authorizeName checks name against the caller's token and remembers it,
// to check it again when a stream's token changes.
func (c *caller) authorizeName(name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.allowName(c.tok, name); err != nil {
		return err
	}
	if len(c.names) < maxStreamNames && !contains(c.names, name) {
		c.names = append(c.names, name)
	}
	return nil
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// allowName checks name against tok (nil: auth off).
func (c *caller) allowName(tok *authToken, name string) error {
	if tok == nil || tok.cfg.AllowsName(name) {
		return nil
	}
	c.h.authFailure(authName, tok.name)
	return apiError(connect.CodePermissionDenied, coordhostv1.Reason_REASON_UNSPECIFIED, "", name,
		fmt.Errorf("token %q may not use %q (not in its names)", tok.name, name))
}

func (c *caller) authorizeDomain(domain string) error {
	c.mu.Lock()
	tok := c.tok
	c.mu.Unlock()
	if tok == nil || tok.cfg.AllowsEnvoyDomain(domain) {
		return nil
	}
	c.h.authFailure(authEnvoyDomain, tok.name)
	return apiError(connect.CodePermissionDenied, coordhostv1.Reason_REASON_UNSPECIFIED, "", "",
		fmt.Errorf("token %q may not use the Envoy domain %q (not in its envoy_domains)", tok.name, domain))
}

// recheck resolves the caller's token again when the generation's token
// table changed since the last check: a token that is gone ends the call
// with Unauthenticated, one whose permissions no longer cover the call
// with PermissionDenied. The error is remembered as the stream's end.
func (c *caller) recheck() error {
	tab := c.h.gen.Load().auth
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended != nil {
		return c.ended
	}
	if tab == c.tab {
		return nil
	}
	var tok *authToken
	if tab.on() {
		if !c.hasToken {
			c.h.authFailure(authMissing, "")
			c.ended = unauthenticated(authMissing)
			return c.ended
		}
		if tok = tab.lookup(&c.digest); tok == nil {
			old := ""
			if c.tok != nil {
				old = c.tok.name
			}
			c.h.authFailure(authRevoked, old)
			c.ended = unauthenticated(authRevoked)
			return c.ended
		}
		if err := c.authorizeProcedure(tok); err != nil {
			c.ended = err
			return err
		}
		for _, n := range c.names {
			if err := c.allowName(tok, n); err != nil {
				c.ended = err
				return err
			}
		}
	}
	c.tab, c.tok = tab, tok
	return nil
}

// token returns the caller's token, nil when auth is off.
func (c *caller) token() *authToken {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tok
}

// authorizeName reports whether the call of ctx may use the primitive
// name: nil when auth is off or the caller's token's names allow it;
// otherwise PermissionDenied (counted), with an ErrorDetail naming it.
// Handlers call it for names the interceptor did not see (a grant's
// name, found from its grant id). A ctx that did not come through the
// interceptor is refused.
func authorizeName(ctx context.Context, name string) error {
	c := callerFrom(ctx)
	if c == nil {
		return apiError(connect.CodePermissionDenied, coordhostv1.Reason_REASON_UNSPECIFIED, "", name,
			errors.New("call without an authenticated caller"))
	}
	return c.authorizeName(name)
}

// callerToken returns the name of the token that made the call of ctx,
// "" when auth is off (or ctx did not come through the interceptor).
func callerToken(ctx context.Context) string {
	if c := callerFrom(ctx); c != nil {
		if tok := c.token(); tok != nil {
			return tok.name
		}
	}
	return ""
}

// callerMaxSessions returns the sessions the caller's token may hold
// (max_sessions); 0, unlimited, when auth is off (or ctx did not come
// through the interceptor).
func callerMaxSessions(ctx context.Context) int {
	if c := callerFrom(ctx); c != nil {
		if tok := c.token(); tok != nil {
			return tok.cfg.MaxSessions
		}
	}
	return 0
}

// apiOptions are the options of every coordhost.v1 and Envoy rate-limit
// handler: the request size bound, the authentication interceptor and
// JSON that refuses unknown fields (codec.go).
func (h *Host) apiOptions() []connect.HandlerOption {
	return append([]connect.HandlerOption{
		connect.WithReadMaxBytes(MaxAPIRequestBytes),
		connect.WithInterceptors(authInterceptor{h}),
	}, jsonCodecs()...)
}

// authInterceptor authenticates and authorizes every call of the handlers
// it is given to (apiOptions).
type authInterceptor struct{ h *Host }

func (i authInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			return next(ctx, req)
		}
		c, err := i.h.authenticate(req.Spec().Procedure, req.Header())
		if err != nil {
			return nil, err
		}
		if err := c.authorizeMessage(req.Any()); err != nil {
			return nil, err
		}
		// A unary call may wait as long as a stream (an Acquire's wait,
		// a queued Check): it takes a place among the token's streams.
		if tok := c.token(); tok != nil {
			if err := i.h.takeStreamPlace(tok); err != nil {
				return nil, err
			}
			defer i.h.streams.release(tok.name)
		}
		return next(withCaller(ctx, c), req)
	}
}

func (i authInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i authInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		c, err := i.h.authenticate(conn.Spec().Procedure, conn.RequestHeader())
		if err != nil {
			return err
		}
		if tok := c.token(); tok != nil {
			if err := i.h.takeStreamPlace(tok); err != nil {
				return err
			}
			defer i.h.streams.release(tok.name)
		}
		err = next(withCaller(ctx, c), &authStream{StreamingHandlerConn: conn, c: c})
		c.mu.Lock()
		if c.ended != nil {
			err = c.ended
		}
		c.mu.Unlock()
		return err
	}
}

// takeStreamPlace takes one of tok's max_streams places on this daemon
// (a stream, or a unary call in flight): ResourceExhausted
// (REASON_CLIENT_LIMIT) when all are taken. The caller releases it.
func (h *Host) takeStreamPlace(tok *authToken) error {
	if h.streams.acquire(tok.name, tok.cfg.MaxStreams) {
		return nil
	}
	h.authFailure(authStreamLimit, tok.name)
	return apiError(connect.CodeResourceExhausted, coordhostv1.Reason_REASON_CLIENT_LIMIT, "", "",
		fmt.Errorf("token %q has %d streams and calls in flight on this daemon, its max_streams", tok.name, tok.cfg.MaxStreams))
}

// authStream checks the caller again at every message it receives or
// sends, and authorizes the names of the messages it receives.
type authStream struct {
	connect.StreamingHandlerConn
	c *caller
}

func (s *authStream) Receive(m any) error {
	if err := s.StreamingHandlerConn.Receive(m); err != nil {
		return err
	}
	if err := s.c.recheck(); err != nil {
		return err
	}
	return s.c.authorizeMessage(m)
}

func (s *authStream) Send(m any) error {
	if err := s.c.recheck(); err != nil {
		return err
	}
	return s.StreamingHandlerConn.Send(m)
}

// streamCounts counts the open streams of each token on this daemon, by
// token name (so counts carry over reloads). The zero value is ready.
type streamCounts struct {
	mu sync.Mutex
	n  map[string]int
}

// acquire takes one of max streams for token; false when all are taken.
func (s *streamCounts) acquire(token string, max int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n[token] >= max {
		return false
	}
	if s.n == nil {
		s.n = map[string]int{}
	}
	s.n[token]++
	return true
}

func (s *streamCounts) release(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n[token]--; s.n[token] <= 0 {
		delete(s.n, token)
	}
}

// open returns token's open streams.
func (s *streamCounts) open(token string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n[token]
}

// metricsAuth guards /metrics: open when auth is off or metrics_open is
// set; else 401 without a valid token, 403 with one whose metrics is
// false.
func (h *Host) metricsAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tab := h.gen.Load().auth
		if !tab.on() || tab.metricsOpen {
			next.ServeHTTP(w, r)
			return
		}
		d, reason := bearer(r.Header)
		var tok *authToken
		if reason == "" {
			if tok = tab.lookup(&d); tok == nil {
				reason = authInvalid
			}
		}
		if reason != "" {
			h.authFailure(reason, "")
			w.Header().Set("WWW-Authenticate", `Bearer realm="coordhost"`)
			http.Error(w, "401 Unauthorized: "+unauthenticated(reason).Message(), http.StatusUnauthorized)
			return
		}
		if !tok.cfg.Metrics {
			h.authFailure(authMetricsDenied, tok.name)
			http.Error(w, fmt.Sprintf("403 Forbidden: token %q may not read /metrics (metrics = false)", tok.name), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// probePath reports whether path is served without a client certificate
// under mutual TLS: the probes of Kubernetes and load balancers.
func probePath(path string) bool {
	return path == "/livez" || path == "/readyz" || strings.HasPrefix(path, "/grpc.health.v1.Health/")
}

// clientCertGate enforces mutual TLS when the server block's tls names a
// client_ca_file: a request without a verified client certificate is
// Unauthenticated (an RPC) or 401 (plain HTTP), except probePath. The
// TLS layer verifies a certificate the client gives; this makes giving
// one mandatory. The setting is that of the configuration in use when
// Handler is called (the listener's TLS is not reloaded either).
func (h *Host) clientCertGate(next http.Handler) http.Handler {
	t := h.Config().Server.TLS
	if t == nil || t.ClientCAFile == "" {
		return next
	}
	ew := connect.NewErrorWriter()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 || probePath(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		h.authFailure(authClientCert, "")
		err := unauthenticated(authClientCert)
		if ew.IsSupported(r) {
			_ = ew.Write(w, r, err)
			return
		}
		http.Error(w, "401 Unauthorized: "+err.Message(), http.StatusUnauthorized)
	})
}

// apiGate runs before any API handler reads a request body:
//
//   - With tokens, a call without a valid one (or AdminService without
//     admin) is answered at once, before connect reads and decodes its
//     message (which it does before any interceptor runs): a client
//     without a token cannot hold the daemon's goroutines and buffers
//     with bodies it never finishes. The interceptor checks again, per
//     message, for what only the message says.
//   - Without tokens the API is open, meant for loopback; a browser's
//     request from a site other than an IP address or localhost (its
//     Origin) is refused, so that a web page that rebinds its own DNS
//     name to 127.0.0.1 cannot take locks or reload the daemon.
func (h *Host) apiGate(next http.Handler) http.Handler {
	ew := connect.NewErrorWriter()
	refuse := func(w http.ResponseWriter, r *http.Request, err *connect.Error, status int) {
		if ew.IsSupported(r) {
			_ = ew.Write(w, r, err)
			return
		}
		http.Error(w, err.Message(), status)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !apiPath(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		if !h.gen.Load().auth.on() {
			if o := r.Header.Get("Origin"); o != "" && !localOrigin(o) {
				refuse(w, r, apiError(connect.CodePermissionDenied, coordhostv1.Reason_REASON_UNSPECIFIED, "", "",
					fmt.Errorf("a browser request from %q: the API has no tokens, so it serves browsers only from IP addresses and localhost (configure a token to serve others)", o)),
					http.StatusForbidden)
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		if _, err := h.authenticate(r.URL.Path, r.Header); err != nil {
			var ce *connect.Error
			if !errors.As(err, &ce) {
				ce = connect.NewError(connect.CodeUnauthenticated, err)
			}
			status := http.StatusUnauthorized
			if ce.Code() == connect.CodePermissionDenied {
				status = http.StatusForbidden
			}
			refuse(w, r, ce, status)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// apiPath reports whether path is a procedure of the network API (the
// coordhost.v1 services, the Envoy rate-limit service, reflection), as
// opposed to the probes and /metrics.
func apiPath(path string) bool {
	for _, p := range []string{"/coordhost.v1.", "/envoy.service.ratelimit.", "/grpc.reflection."} {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}

// localOrigin reports whether a browser's Origin header names an IP
// address or localhost (any scheme and port).
func localOrigin(origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false // "null" and the like: an opaque origin
	}
	host := u.Hostname()
	return host == "localhost" || net.ParseIP(host) != nil
}
