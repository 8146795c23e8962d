package host

import (
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/coordhost/coordhost/config"
	coordhostv1 "github.com/coordhost/coordhost/gen/coordhost/v1"
	"github.com/coordhost/coordhost/internal/redistest"
)

const internalSecret = "internal-secret-0123456789"

// authRig is a Host whose configuration file the test rewrites, behind
// test handlers served with apiOptions: a unary one that reports what the
// caller helpers say, and a server stream that sends on demand.
type authRig struct {
	h     *Host
	redis string // the test server's address
	path  string
	url   string
	hc    *http.Client
	calls atomic.Int64 // unary handler runs
	ticks sync.Map     // stream id -> chan struct{}: one more response per receive
	ids   atomic.Int64
	seen  chan callerSnapshot // what the unary handler saw
}

type callerSnapshot struct {
	token       string
	maxSessions int
	grant, y    error // authorizeName of "grant-1" and "y"
}

const (
	testUnary  = "/coordhost.v1.LockService/TryAcquire"
	testStream = "/coordhost.v1.LockService/Hold"
)

func (r *authRig) write(t *testing.T, server string) {
	t.Helper()
	src := "redis {\n  addresses = [\"" + r.redis + "\"]\n}\nlock \"x\" {\n  ttl = \"1s\"\n}\nlock \"y\" {\n  ttl = \"1s\"\n}\nserver {\n" + server + "\n}\n"
	if err := os.WriteFile(r.path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
}

func newAuthRig(t *testing.T, server string) *authRig {
	t.Helper()
	s := redistest.Start(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "app.token"), []byte(internalSecret), 0o600); err != nil {
		t.Fatal(err)
	}
	r := &authRig{redis: s.Addr, path: filepath.Join(dir, "coordhost.hcl"), seen: make(chan callerSnapshot, 1)}
	r.write(t, server)
	cfg, diags := config.Load(r.path, config.LoadOptions{})
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := New(ctx, cfg, Options{Logger: slog.New(slog.DiscardHandler), DrainTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	r.h = h

	mux := http.NewServeMux()
	mux.Handle(testUnary, connect.NewUnaryHandler(testUnary, func(ctx context.Context, req *connect.Request[coordhostv1.TryAcquireLockRequest]) (*connect.Response[coordhostv1.TryAcquireLockResponse], error) {
		r.calls.Add(1)
		r.seen <- callerSnapshot{token: callerToken(ctx), maxSessions: callerMaxSessions(ctx), grant: authorizeName(ctx, "grant-1"), y: authorizeName(ctx, "y")}
		return connect.NewResponse(&coordhostv1.TryAcquireLockResponse{}), nil
	}, h.apiOptions()...))
	mux.Handle(testStream, connect.NewServerStreamHandler(testStream, func(ctx context.Context, req *connect.Request[coordhostv1.HoldLockRequest], st *connect.ServerStream[coordhostv1.HoldLockResponse]) error {
		// One response at once (a client's CallServerStream returns with
		// the response headers), then one per tick.
		tick, _ := r.ticks.Load(req.Msg.GetAttributes()["id"])
		for {
			if err := st.Send(&coordhostv1.HoldLockResponse{Grant: &coordhostv1.Grant{Name: req.Msg.GetName()}}); err != nil {
				return err
			}
			select {
			case <-tick.(chan struct{}):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}, h.apiOptions()...))
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	t.Cleanup(tr.CloseIdleConnections)
	r.url, r.hc = srv.URL, &http.Client{Transport: tr}
	return r
}

func (r *authRig) reload(t *testing.T, server string) {
	t.Helper()
	r.write(t, server)
	if err := r.h.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// unary calls the test unary handler for name, with the token secret
// ("" for none).
func (r *authRig) unary(secret, name string) error {
	req := connect.NewRequest(&coordhostv1.TryAcquireLockRequest{Name: name})
	if secret != "" {
		req.Header().Set("Authorization", "Bearer "+secret)
	}
	_, err := connect.NewClient[coordhostv1.TryAcquireLockRequest, coordhostv1.TryAcquireLockResponse](r.hc, r.url+testUnary, connect.WithGRPC()).CallUnary(context.Background(), req)
	return err
}

// stream opens the test stream for name and reads its first response
// (or its end: first); next has the handler send one more and reads it.
func (r *authRig) stream(t *testing.T, secret, name string) (next func() error, first error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	id := strconv.FormatInt(r.ids.Add(1), 10)
	tick := make(chan struct{})
	r.ticks.Store(id, tick)
	req := connect.NewRequest(&coordhostv1.HoldLockRequest{Name: name, Attributes: map[string]string{"id": id}})
	if secret != "" {
		req.Header().Set("Authorization", "Bearer "+secret)
	}
	st, err := connect.NewClient[coordhostv1.HoldLockRequest, coordhostv1.HoldLockResponse](r.hc, r.url+testStream, connect.WithGRPC()).CallServerStream(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); st.Close() })
	read := func() error {
		if st.Receive() {
			if got := st.Msg().GetGrant().GetName(); got != name {
				t.Fatalf("stream answered %q", got)
			}
			return nil
		}
		if err := st.Err(); err != nil {
			return err
		}
		return io.EOF
	}
	return func() error {
		select {
		case tick <- struct{}{}:
		case <-time.After(5 * time.Second):
			t.Fatal("the stream's handler does not run")
		}
		return read()
	}, read()
}

const internalToken = `  token "app" {
    secret_file  = "app.token"
    names        = NAMES
    max_sessions = 7
  }`

func tokenWith(names string) string { return strings.Replace(internalToken, "NAMES", names, 1) }

// The helpers handlers use: callerToken, callerMaxSessions and
// authorizeName, with auth on and off; a request's name is checked before
// its handler runs.
func TestAuthCallerHelpers(t *testing.T) {
	r := newAuthRig(t, tokenWith(`["x", "grant-*"]`))
	if err := r.unary(internalSecret, "x"); err != nil {
		t.Fatal(err)
	}
	got := <-r.seen
	if got.token != "app" || got.maxSessions != 7 || got.grant != nil || connect.CodeOf(got.y) != connect.CodePermissionDenied {
		t.Fatalf("auth on: %+v", got)
	}
	var ce *connect.Error
	if !errors.As(got.y, &ce) || !strings.Contains(ce.Message(), `token "app" may not use "y"`) {
		t.Fatalf("authorizeName(y): %v", got.y)
	}
	if err := r.unary(internalSecret, "y"); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("y: %v", err)
	}
	if err := r.unary("", "x"); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("no token: %v", err)
	}
	if n := r.calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1 (refusals come first)", n)
	}

	// Auth off: everything is allowed, no token, no session limit.
	r.reload(t, "")
	if err := r.unary("", "y"); err != nil {
		t.Fatal(err)
	}
	got = <-r.seen
	if got.token != "" || got.maxSessions != 0 || got.grant != nil || got.y != nil {
		t.Fatalf("auth off: %+v", got)
	}

	// A context that did not come through the interceptor is refused.
	if err := authorizeName(context.Background(), "x"); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("bare context: %v", err)
	}
	if callerToken(context.Background()) != "" || callerMaxSessions(context.Background()) != 0 {
		t.Fatal("bare context: a token")
	}
}

// A stream's name is authorized on its first message and again at every
// message after a reload: narrowed names end it with PermissionDenied; a
// stream begun while auth was off ends with Unauthenticated once a
// reload turns it on, unless it carries a valid token.
func TestAuthStreamRecheck(t *testing.T) {
	r := newAuthRig(t, tokenWith(`["x", "y"]`))
	if _, err := r.stream(t, internalSecret, "nope"); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("stream outside names: %v", err)
	}
	x, err := r.stream(t, internalSecret, "x")
	if err != nil {
		t.Fatal(err)
	}
	y, err := r.stream(t, internalSecret, "y")
	if err != nil {
		t.Fatal(err)
	}
	for _, next := range []func() error{x, y, x} {
		if err := next(); err != nil {
			t.Fatal(err)
		}
	}
	if n := r.h.streams.open("app"); n != 2 {
		t.Fatalf("%d streams counted, want 2", n)
	}
	r.reload(t, tokenWith(`["y"]`))
	err = x()
	var ce *connect.Error
	if connect.CodeOf(err) != connect.CodePermissionDenied || !errors.As(err, &ce) || !strings.Contains(ce.Message(), `"x"`) {
		t.Fatalf("x after narrowing: %v", err)
	}
	if err := y(); err != nil {
		t.Fatalf("y after narrowing: %v", err)
	}

	// Auth off, then on again.
	r.reload(t, "")
	anon, err := r.stream(t, "", "x")
	if err != nil {
		t.Fatal(err)
	}
	tokened, err := r.stream(t, internalSecret, "x")
	if err != nil {
		t.Fatal(err)
	}
	r.reload(t, tokenWith(`["x"]`))
	if err := anon(); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("tokenless stream once auth is on: %v", err)
	}
	if err := tokened(); err != nil {
		t.Fatalf("stream with a valid token once auth is on: %v", err)
	}
}

// bearer reads "Bearer SECRET" only, scheme in any case.
func TestBearer(t *testing.T) {
	for _, tc := range []struct {
		vals   []string
		reason string
	}{
		{nil, authMissing},
		{[]string{"Bearer abc"}, ""},
		{[]string{"bearer   abc"}, ""},
		{[]string{"BEARER abc"}, ""},
		{[]string{"Bearer"}, authInvalid},
		{[]string{"Bearer "}, authInvalid},
		{[]string{"Basic abc"}, authInvalid},
		{[]string{"abc"}, authInvalid},
		{[]string{"Bearer abc", "Bearer abc"}, authInvalid},
	} {
		h := http.Header{}
		for _, v := range tc.vals {
			h.Add("Authorization", v)
		}
		d, reason := bearer(h)
		if reason != tc.reason || reason == "" && d != sha256.Sum256([]byte("abc")) {
			t.Errorf("%q: %q", tc.vals, reason)
		}
	}
}
