package ratelimit_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/ratelimit"
)

// httpEnv is a middleware on a Partitioned whose limiters New makes, in
// front of a handler that counts its calls and answers "ok".
type httpEnv struct {
	s     *redistest.Server
	p     *ratelimit.Partitioned
	h     http.Handler
	calls atomic.Int64

	mu   sync.Mutex
	errs []error // given to OnError
}

// newHTTPEnv makes the limiters under the prefix "t:" with mk, on s (a
// fresh server when nil). o.OnError is set to record the errors.
func newHTTPEnv(t *testing.T, s *redistest.Server, o ratelimit.MiddlewareOptions, mk func(*ratelimit.Limiters, string) (*ratelimit.Limiter, error)) *httpEnv {
	t.Helper()
	if s == nil {
		s = redistest.Start(t)
	}
	ls, err := ratelimit.New(s.Client(t), ratelimit.Options{Prefix: "t:"})
	if err != nil {
		t.Fatal(err)
	}
	e := &httpEnv{s: s}
	e.p, err = ratelimit.NewPartitioned(ratelimit.PartitionedOptions{New: func(part string) (*ratelimit.Limiter, error) { return mk(ls, part) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.p.Close() })
	o.OnError = func(_ *http.Request, err error) {
		e.mu.Lock()
		e.errs = append(e.errs, err)
		e.mu.Unlock()
	}
	mw, err := ratelimit.NewMiddleware(e.p, o)
	if err != nil {
		t.Fatal(err)
	}
	e.h = mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.calls.Add(1)
		io.WriteString(w, "ok")
	}))
	return e
}

func (e *httpEnv) errors() []error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.errs)
}

// do serves a GET of path from remoteAddr, with headers as name, value
// pairs.
func (e *httpEnv) do(t *testing.T, path, remoteAddr string, headers ...string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, path, nil).WithContext(xtest.Ctx(t, 10*time.Second))
	r.RemoteAddr = remoteAddr
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Set(headers[i], headers[i+1])
	}
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, r)
	return w
}

func fixed(limit int64, window time.Duration, queue int64) func(*ratelimit.Limiters, string) (*ratelimit.Limiter, error) {
	return func(ls *ratelimit.Limiters, part string) (*ratelimit.Limiter, error) {
		return ls.FixedWindow("fw:"+part, ratelimit.FixedWindowOptions{Limit: limit, Window: window, QueueLimit: queue})
	}
}

func bucket(limit, per int64, period time.Duration) func(*ratelimit.Limiters, string) (*ratelimit.Limiter, error) {
	return func(ls *ratelimit.Limiters, part string) (*ratelimit.Limiter, error) {
		return ls.TokenBucket("tb:"+part, ratelimit.TokenBucketOptions{Limit: limit, TokensPerPeriod: per, Period: period})
	}
}

// want checks a response's status, body and fields; a field wanted ""
// must be absent.
func want(t *testing.T, w *httptest.ResponseRecorder, status int, body string, fields ...string) {
	t.Helper()
	if w.Code != status {
		t.Errorf("status %d, want %d (body %q)", w.Code, status, w.Body.String())
	}
	if body != "" && w.Body.String() != body {
		t.Errorf("body %q, want %q", w.Body.String(), body)
	}
	for i := 0; i+1 < len(fields); i += 2 {
		got, ok := w.Header()[http.CanonicalHeaderKey(fields[i])]
		switch {
		case fields[i+1] == "" && ok:
			t.Errorf("%s: %q, want none", fields[i], got)
		case fields[i+1] != "" && (len(got) != 1 || got[0] != fields[i+1]):
			t.Errorf("%s: %q, want %q", fields[i], got, fields[i+1])
		}
	}
}

// secs is the header value ⌈d⌉ seconds that a duration counted down from
// d gives when at most elapsed has passed: exact while elapsed is below
// d's fraction of a second (a fast run), else the value actually seen if
// it is one of the possible ones, so a slow machine cannot fail the test.
func secs(t *testing.T, got string, d, elapsed time.Duration) string {
	t.Helper()
	hi := int64((d + time.Second - 1) / time.Second)
	lo := int64((max(d-elapsed, 0) + time.Second - 1) / time.Second)
	if n, err := strconv.ParseInt(got, 10, 64); err == nil && lo < hi && n >= lo && n <= hi {
		return got
	}
	return strconv.FormatInt(hi, 10)
}

func rateLimit(name string, r int64, t string) string {
	return `"` + name + `";r=` + strconv.FormatInt(r, 10) + ";t=" + t
}

func TestMiddlewareHeaders(t *testing.T) {
	// A bucket of 2, one token back every 10.4s: w = 20.8s → 21, t =
	// 10.4s → 11 (rounded up, not to the nearest).
	const period = 10400 * time.Millisecond
	e := newHTTPEnv(t, nil, ratelimit.MiddlewareOptions{Name: "api"}, bucket(2, 1, period))
	start := time.Now()
	const addr = "192.0.2.1:1234"
	const policy = `"api";q=2;w=21`

	w := e.do(t, "/", addr)
	want(t, w, 200, "ok", "RateLimit-Policy", policy, "RateLimit", rateLimit("api", 1, "11"), "Retry-After", "")

	w = e.do(t, "/", addr)
	tv := secs(t, strings.TrimPrefix(w.Header().Get("RateLimit"), `"api";r=0;t=`), period, time.Since(start))
	want(t, w, 200, "ok", "RateLimit-Policy", policy, "RateLimit", rateLimit("api", 0, tv), "Retry-After", "")

	w = e.do(t, "/", addr)
	tv = secs(t, strings.TrimPrefix(w.Header().Get("RateLimit"), `"api";r=0;t=`), period, time.Since(start))
	want(t, w, http.StatusTooManyRequests, "rate limit exceeded: retry after "+tv+"s\n",
		"RateLimit-Policy", policy, "RateLimit", rateLimit("api", 0, tv), "Retry-After", tv,
		"Content-Type", "text/plain; charset=utf-8",
		"X-RateLimit-Limit", "", "X-RateLimit-Remaining", "", "X-RateLimit-Reset", "")
	if n := e.calls.Load(); n != 2 {
		t.Errorf("handler called %d times, want 2", n)
	}
	if errs := e.errors(); len(errs) != 0 {
		t.Errorf("OnError got %v", errs)
	}
}

// A refusal's Retry-After is RetryAfter rounded up to whole seconds: a
// fixed window of 1.2s says 2, and so does w.
func TestMiddlewareRetryAfterRoundsUp(t *testing.T) {
	const window = 1200 * time.Millisecond
	e := newHTTPEnv(t, nil, ratelimit.MiddlewareOptions{}, fixed(1, window, 0))
	start := time.Now()
	w := e.do(t, "/", "192.0.2.1:1")
	want(t, w, 200, "ok", "RateLimit-Policy", `"default";q=1;w=2`)
	w = e.do(t, "/", "192.0.2.1:1")
	// The fixed window's reset is the counter's PTTL + 1ms (Redis
	// expires a key once strictly past its deadline).
	ra := secs(t, w.Header().Get("Retry-After"), window+time.Millisecond, time.Since(start))
	want(t, w, http.StatusTooManyRequests, "", "Retry-After", ra, "RateLimit", rateLimit("default", 0, ra))
}

// Retry-After follows RetryAfter, which can be later than t: two tokens
// of a bucket that adds one per period are two periods away.
func TestMiddlewareCostAndRetryAfterBeyondT(t *testing.T) {
	const period = 10400 * time.Millisecond
	e := newHTTPEnv(t, nil, ratelimit.MiddlewareOptions{
		Name: "bulk",
		Cost: func(r *http.Request) int64 {
			n, _ := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
			return n
		},
	}, bucket(2, 1, period))
	start := time.Now()
	w := e.do(t, "/?n=2", "192.0.2.1:1")
	want(t, w, 200, "ok", "RateLimit", rateLimit("bulk", 0, "11"))
	w = e.do(t, "/?n=2", "192.0.2.1:1")
	el := time.Since(start)
	tv := secs(t, strings.TrimPrefix(w.Header().Get("RateLimit"), `"bulk";r=0;t=`), period, el)
	ra := secs(t, w.Header().Get("Retry-After"), 2*period, el)
	want(t, w, http.StatusTooManyRequests, "", "RateLimit", rateLimit("bulk", 0, tv), "Retry-After", ra)
	if a, _ := strconv.Atoi(ra); a < 20 || tv != "11" && tv != "10" {
		t.Errorf("Retry-After %s with t=%s, want two periods (21) after one (11)", ra, tv)
	}
	// Cost 0 consumes nothing and is refused while nothing is available.
	w = e.do(t, "/?n=0", "192.0.2.1:1")
	want(t, w, http.StatusTooManyRequests, "")
	if n := e.calls.Load(); n != 1 {
		t.Errorf("handler called %d times, want 1", n)
	}
}

// More permits than the limit can never be granted: 429 without
// Retry-After, and nothing is sent to Redis.
func TestMiddlewareNeverSucceeds(t *testing.T) {
	e := newHTTPEnv(t, nil, ratelimit.MiddlewareOptions{Cost: func(*http.Request) int64 { return 3 }}, fixed(2, time.Hour, 0))
	w := e.do(t, "/", "192.0.2.1:1")
	want(t, w, http.StatusTooManyRequests, "rate limit exceeded: this request costs more than the limit allows\n",
		"Retry-After", "", "RateLimit-Policy", `"default";q=2;w=3600`, "RateLimit", `"default";r=2;t=0`)
	if n := e.s.MustCmd(t, "DBSIZE"); n != "0" {
		t.Errorf("DBSIZE %s after a request that can never succeed, want 0", n)
	}
	if e.calls.Load() != 0 || len(e.errors()) != 0 {
		t.Errorf("handler called %d times, errors %v", e.calls.Load(), e.errors())
	}
}

// The default key is the peer's IP address (an IPv6 peer's /64), so two
// clients have separate limits and one client's ports share one.
func TestMiddlewarePerClientAddress(t *testing.T) {
	e := newHTTPEnv(t, nil, ratelimit.MiddlewareOptions{}, fixed(1, time.Hour, 0))
	for _, c := range []struct {
		addr   string
		status int
	}{
		{"192.0.2.1:1000", 200},
		{"192.0.2.1:2000", 429}, // same host, another port
		{"192.0.2.2:1000", 200},
		{"[::ffff:192.0.2.2]:1000", 429}, // IPv4-mapped
		{"[2001:db8::1]:1", 200},
		{"[2001:db8::2]:1", 429}, // same /64
		{"[2001:db8:0:1::1]:1", 200},
		{"[fe80::1%eth0]:1", 200},
	} {
		if w := e.do(t, "/", c.addr, "X-Forwarded-For", "198.51.100.7"); w.Code != c.status {
			t.Errorf("%s: status %d, want %d", c.addr, w.Code, c.status)
		}
	}
	keys := strings.Split(e.s.MustCmd(t, "KEYS", "*"), "\n")
	slices.Sort(keys)
	wantKeys := []string{"t:fw:192.0.2.1", "t:fw:192.0.2.2", "t:fw:2001:db8:0:1::/64", "t:fw:2001:db8::/64", "t:fw:fe80::/64"}
	if !slices.Equal(keys, wantKeys) {
		t.Errorf("keys %q, want %q", keys, wantKeys)
	}

	// A RemoteAddr that is no IP address (a Unix socket's) cannot be
	// placed: 400, OnError, nothing sent.
	before := e.s.MustCmd(t, "DBSIZE")
	w := e.do(t, "/", "@")
	want(t, w, http.StatusBadRequest, "", "RateLimit", "", "RateLimit-Policy", "")
	if errs := e.errors(); len(errs) != 1 || !strings.Contains(errs[0].Error(), `RemoteAddr "@"`) {
		t.Errorf("OnError got %v, want one error naming RemoteAddr", errs)
	}
	if after := e.s.MustCmd(t, "DBSIZE"); after != before {
		t.Errorf("DBSIZE %s → %s after a request with no key", before, after)
	}
}

func TestRemoteAddrKey(t *testing.T) {
	for _, c := range []struct{ addr, key string }{
		{"192.0.2.1:80", "192.0.2.1"},
		{"[::ffff:192.0.2.1]:80", "192.0.2.1"},
		{"[2001:db8:1:2:3:4:5:6]:80", "2001:db8:1:2::/64"},
		{"[::1]:80", "::/64"},
		{"[fe80::1%eth0]:80", "fe80::/64"},
		{"192.0.2.1", ""},
		{"example.com:80", ""},
		{"", ""},
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = c.addr
		key, err := ratelimit.RemoteAddrKey(r)
		if key != c.key || (err != nil) != (c.key == "") {
			t.Errorf("RemoteAddrKey(%q) = %q, %v; want %q", c.addr, key, err, c.key)
		}
	}
}

var errNoAPIKey = errors.New("no X-API-Key")

// A custom Key partitions by API key; a request without one gets 400 and
// no key in Redis. A negative Cost is a 500 without a round trip.
func TestMiddlewareCustomKeyAndCost(t *testing.T) {
	e := newHTTPEnv(t, nil, ratelimit.MiddlewareOptions{
		Key: func(r *http.Request) (string, error) {
			k := r.Header.Get("X-API-Key")
			if k == "" {
				return "", errNoAPIKey
			}
			return k, nil
		},
		Cost: func(r *http.Request) int64 {
			switch r.URL.Path {
			case "/bulk":
				return 3
			case "/broken":
				return -1
			}
			return 1
		},
	}, fixed(4, time.Hour, 0))

	w := e.do(t, "/", "192.0.2.1:1")
	want(t, w, http.StatusBadRequest, "", "RateLimit", "")
	if errs := e.errors(); len(errs) != 1 || !errors.Is(errs[0], errNoAPIKey) {
		t.Errorf("OnError got %v, want the Key's error", errs)
	}
	w = e.do(t, "/broken", "192.0.2.1:1", "X-API-Key", "alice")
	want(t, w, http.StatusInternalServerError, "", "RateLimit", "")
	if errs := e.errors(); len(errs) != 2 || !errors.Is(errs[1], ratelimit.ErrInvalidPermits) {
		t.Errorf("OnError got %v, want ErrInvalidPermits second", errs)
	}
	if n := e.s.MustCmd(t, "DBSIZE"); n != "0" {
		t.Errorf("DBSIZE %s after requests with no key or a negative cost, want 0", n)
	}

	want(t, e.do(t, "/bulk", "192.0.2.1:1", "X-API-Key", "alice"), 200, "ok", "RateLimit", rateLimit("default", 1, "3601"))
	want(t, e.do(t, "/bulk", "192.0.2.9:1", "X-API-Key", "alice"), 429, "") // same key, other address
	want(t, e.do(t, "/", "192.0.2.1:1", "X-API-Key", "alice"), 200, "ok")
	want(t, e.do(t, "/bulk", "192.0.2.1:1", "X-API-Key", "bob"), 200, "ok")
	if got := e.s.MustCmd(t, "MGET", "t:fw:alice", "t:fw:bob"); got != "4\n3" {
		t.Errorf("counters %q, want alice 4 and bob 3", got)
	}
}

// A limiter that cannot decide answers 503 (fail closed, the default) or
// lets the request through (FailOpen); OnError sees the error either way.
func TestMiddlewareFailOpen(t *testing.T) {
	s := redistest.Start(t)
	// A hash where the fixed window keeps its counter: WRONGTYPE.
	s.MustCmd(t, "HSET", "t:fw:192.0.2.1", "f", "v")
	for _, c := range []struct {
		name     string
		down     bool // else the key holds a hash
		failOpen bool
		status   int
	}{
		{"wrong type, fail closed", false, false, http.StatusServiceUnavailable},
		{"wrong type, fail open", false, true, 200},
		{"server down, fail closed", true, false, http.StatusServiceUnavailable},
		{"server down, fail open", true, true, 200},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := s
			if c.down {
				srv = redistest.Start(t)
			}
			e := newHTTPEnv(t, srv, ratelimit.MiddlewareOptions{FailOpen: c.failOpen, LegacyHeaders: true}, fixed(5, time.Hour, 0))
			if c.down {
				srv.Stop()
			}
			w := e.do(t, "/", "192.0.2.1:1")
			want(t, w, c.status, "", "RateLimit", "", "RateLimit-Policy", "", "Retry-After", "", "X-RateLimit-Limit", "")
			if calls := e.calls.Load(); (calls == 1) != c.failOpen {
				t.Errorf("handler called %d times with FailOpen %v", calls, c.failOpen)
			}
			errs := e.errors()
			if len(errs) != 1 || errors.Is(errs[0], primitives.ErrWrongType) == c.down {
				t.Errorf("OnError got %v, want one error (ErrWrongType: %v)", errs, !c.down)
			}
		})
	}
	if got := s.MustCmd(t, "HGETALL", "t:fw:192.0.2.1"); got != "f\nv" {
		t.Errorf("the foreign hash is now %q", got)
	}
}

func TestMiddlewareLegacyHeaders(t *testing.T) {
	e := newHTTPEnv(t, nil, ratelimit.MiddlewareOptions{LegacyHeaders: true}, fixed(2, time.Hour, 0))
	before := time.Now()
	var ws []*httptest.ResponseRecorder
	for range 3 {
		ws = append(ws, e.do(t, "/", "192.0.2.1:1"))
	}
	after := time.Now()
	for i, w := range ws {
		want(t, w, []int{200, 200, 429}[i], "",
			"X-RateLimit-Limit", "2", "X-RateLimit-Remaining", []string{"1", "0", "0"}[i])
		// Unix seconds when the window ends: it started between before
		// and after, and lasts an hour (and a millisecond).
		reset, err := strconv.ParseInt(w.Header().Get("X-RateLimit-Reset"), 10, 64)
		if lo, hi := before.Unix()+3600, after.Unix()+3602; err != nil || reset < lo || reset > hi {
			t.Errorf("request %d: X-RateLimit-Reset %q, want Unix seconds in [%d, %d]", i, w.Header().Get("X-RateLimit-Reset"), lo, hi)
		}
	}
}

// With Queue, a refused request waits in its limiter's queue and is
// served once the window ends.
func TestMiddlewareQueueWaits(t *testing.T) {
	e := newHTTPEnv(t, nil, ratelimit.MiddlewareOptions{Queue: true}, fixed(1, 300*time.Millisecond, 1))
	want(t, e.do(t, "/", "192.0.2.1:1"), 200, "ok")
	w := e.do(t, "/", "192.0.2.1:1")
	want(t, w, 200, "ok", "RateLimit", rateLimit("default", 0, "1"), "Retry-After", "")
	if s := e.p.Statistics(); s.Granted != 2 || s.Queued != 0 {
		t.Errorf("statistics %+v, want 2 granted and nothing queued", s)
	}
}

// A full queue (here QueueLimit 0) refuses like TryAcquire does.
func TestMiddlewareQueueFull(t *testing.T) {
	e := newHTTPEnv(t, nil, ratelimit.MiddlewareOptions{Queue: true}, fixed(1, 3599500*time.Millisecond, 0))
	want(t, e.do(t, "/", "192.0.2.1:1"), 200, "ok")
	w := e.do(t, "/", "192.0.2.1:1")
	want(t, w, http.StatusTooManyRequests, "", "Retry-After", "3600", "RateLimit", rateLimit("default", 0, "3600"))
}

// A client that disconnects while its request is queued stops waiting:
// the request leaves the queue, the handler never runs, nothing more is
// consumed.
func TestMiddlewareClientDisconnectWhileQueued(t *testing.T) {
	e := newHTTPEnv(t, nil, ratelimit.MiddlewareOptions{Queue: true, Key: func(*http.Request) (string, error) { return "all", nil }}, fixed(1, time.Hour, 5))
	var served sync.WaitGroup
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		defer served.Done()
		e.h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	client := srv.Client()

	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("first request: %s", resp.Status)
	}

	ctx, cancel := context.WithCancel(xtest.Ctx(t, 10*time.Second))
	defer cancel()
	done := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	xtest.Eventually(t, 5*time.Second, "the second request queues", func() bool { return e.p.Statistics().Queued == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("client got %v, want context.Canceled", err)
	}
	xtest.Eventually(t, 5*time.Second, "the queue empties", func() bool { return e.p.Statistics().Queued == 0 })
	served.Wait()
	if n := e.calls.Load(); n != 1 {
		t.Errorf("handler called %d times, want 1", n)
	}
	if got := e.s.MustCmd(t, "GET", "t:fw:all"); got != "1" {
		t.Errorf("counter %s, want 1 (the cancelled request consumed nothing)", got)
	}
	if errs := e.errors(); len(errs) != 0 {
		t.Errorf("OnError got %v for a client that left", errs)
	}
}

// Rejected writes the body; the status is 429 unless it picks another.
func TestMiddlewareRejectedHandler(t *testing.T) {
	for _, c := range []struct {
		name   string
		h      http.HandlerFunc
		status int
		body   string
	}{
		{"body only", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"retry_after":`+w.Header().Get("Retry-After")+`}`)
		}, 429, `{"retry_after":3600}`},
		{"nothing", func(http.ResponseWriter, *http.Request) {}, 429, ""},
		{"own status", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }, 503, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newHTTPEnv(t, nil, ratelimit.MiddlewareOptions{Rejected: c.h}, fixed(1, 3599500*time.Millisecond, 0))
			e.do(t, "/", "192.0.2.1:1")
			w := e.do(t, "/", "192.0.2.1:1")
			want(t, w, c.status, c.body, "Retry-After", "3600")
			if w.Body.String() != c.body {
				t.Errorf("body %q, want %q", w.Body.String(), c.body)
			}
		})
	}
}

// A policy name is an RFC 8941 string: quotes and backslashes are
// escaped.
func TestMiddlewareNameQuoted(t *testing.T) {
	e := newHTTPEnv(t, nil, ratelimit.MiddlewareOptions{Name: `a "b" \c`}, fixed(1, time.Hour, 0))
	want(t, e.do(t, "/", "192.0.2.1:1"), 200, "ok",
		"RateLimit-Policy", `"a \"b\" \\c";q=1;w=3600`, "RateLimit", `"a \"b\" \\c";r=0;t=3601`)
}

// Bad options are refused with ErrInvalidOptions naming the problem, and
// nothing reaches Redis.
func TestNewMiddlewareBadOptions(t *testing.T) {
	s := redistest.Start(t)
	ls, err := ratelimit.New(s.Client(t), ratelimit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := ratelimit.NewPartitioned(ratelimit.PartitionedOptions{New: func(part string) (*ratelimit.Limiter, error) {
		return ls.FixedWindow(part, ratelimit.FixedWindowOptions{Limit: 1, Window: time.Hour})
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, c := range []struct {
		name string
		p    *ratelimit.Partitioned
		o    ratelimit.MiddlewareOptions
		says string
	}{
		{"nil Partitioned", nil, ratelimit.MiddlewareOptions{}, "Partitioned"},
		{"zero Partitioned", &ratelimit.Partitioned{}, ratelimit.MiddlewareOptions{}, "Partitioned"},
		{"newline in Name", p, ratelimit.MiddlewareOptions{Name: "api\r\nX-Evil: 1"}, "Name"},
		{"NUL in Name", p, ratelimit.MiddlewareOptions{Name: "a\x00"}, "Name"},
		{"DEL in Name", p, ratelimit.MiddlewareOptions{Name: "a\x7f"}, "Name"},
		{"non-ASCII Name", p, ratelimit.MiddlewareOptions{Name: "café"}, "Name"},
	} {
		t.Run(c.name, func(t *testing.T) {
			mw, err := ratelimit.NewMiddleware(c.p, c.o)
			if !errors.Is(err, primitives.ErrInvalidOptions) || !strings.Contains(err.Error(), c.says) || mw != nil {
				t.Errorf("NewMiddleware: %v (middleware %v), want ErrInvalidOptions naming %s", err, mw != nil, c.says)
			}
		})
	}
	if n := s.MustCmd(t, "DBSIZE"); n != "0" {
		t.Errorf("DBSIZE %s, want 0", n)
	}
}
