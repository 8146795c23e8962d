package ratelimit

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/coordhost/coordhost/primitives"
)

// DefaultPolicyName is the policy name in the RateLimit fields when
// MiddlewareOptions.Name is empty.
const DefaultPolicyName = "default"

// MiddlewareOptions configure NewMiddleware. The zero value is valid:
// policy "default", one partition per client address (RemoteAddrKey), one
// permit per request, no waiting, fail closed (503 when the limiter cannot
// decide), no legacy fields, no error hook, a short text body on 429.
type MiddlewareOptions struct {
	// Name is the policy's name in the RateLimit-Policy and RateLimit
	// fields (an RFC 8941 string: printable ASCII only, checked by
	// NewMiddleware). "" means DefaultPolicyName.
	Name string

	// Key returns the partition of a request: the Partitioned's limiter
	// that decides it. Nil means RemoteAddrKey, the connection's peer
	// address. A constant key limits all requests together.
	//
	// Behind a reverse proxy every request comes from the proxy's address:
	// return the client address the proxy writes instead (the entry your
	// own proxy appended to X-Forwarded-For, never one a client could have
	// sent). The default never reads X-Forwarded-For or Forwarded because
	// any client can set them, and a limit keyed on them would give each
	// request whatever partition it names.
	//
	// An error, or a key longer than MaxPartitionKey, means the request
	// cannot be placed (e.g. a required API key header is missing): it is
	// answered 400 Bad Request without
	// asking the limiter, and given to OnError. To limit such requests
	// together instead, return a shared key such as "anonymous".
	Key func(r *http.Request) (string, error)

	// Cost returns the permits a request consumes. Nil means 1. A
	// negative cost is a bug in Cost: the request is answered 500 without
	// asking the limiter, and OnError gets an error matching
	// ErrInvalidPermits. A cost of 0 consumes nothing but is refused (429)
	// while no permit is available; route requests that must never be
	// limited around the middleware.
	Cost func(r *http.Request) int64

	// Queue makes a request that is refused wait in its limiter's queue
	// (Partitioned.Acquire; the limiter's QueueLimit bounds the queue, and
	// a full queue answers 429 at once) until the permits are back or the
	// request's context ends. False decides at once (TryAcquire). The
	// limiters PartitionedOptions.New makes need a QueueLimit above 0 for
	// this to do anything: with QueueLimit 0 (their default) every refusal
	// is a full queue.
	Queue bool

	// FailOpen lets a request through to the next handler, without
	// RateLimit fields, when the limiter cannot decide (a Redis error,
	// ErrTooManyPartitions, a closed Partitioned, an error of
	// PartitionedOptions.New). False (the default) answers 503 Service
	// Unavailable instead: a limit that guards cost or abuse (logins, paid
	// API calls) stays in force during an outage, and the outage shows.
	// Set it where availability matters more than the limit. Either way
	// OnError gets the error.
	FailOpen bool

	// LegacyHeaders adds X-RateLimit-Limit (the limit), X-RateLimit-Remaining
	// and X-RateLimit-Reset (when more permits come back, in Unix seconds
	// rounded up, from this host's clock, as GitHub and most X- headers
	// send it) to the RateLimit fields.
	LegacyHeaders bool

	// OnError is called with every error that decides a response other
	// than a grant or a refusal: a Key error (400), a negative Cost (500),
	// an error of the limiter (503, or the next handler with FailOpen).
	// Not called when the request's context ended (the client left). It
	// runs on the request's goroutine, so keep it quick (logging,
	// metrics). Nil means nothing is called.
	OnError func(r *http.Request, err error)

	// Rejected writes the body of a refused request. The status is 429
	// Too Many Requests unless it calls WriteHeader with another; the
	// RateLimit fields and Retry-After are already in w.Header() (no
	// Retry-After when the request costs more than the limit, so it can
	// never succeed). Nil means a short text body.
	Rejected http.Handler
}

// NewMiddleware returns net/http middleware that decides every request on
// p, in the partition MiddlewareOptions.Key gives, with the request's
// context (a client that disconnects stops waiting in the queue).
//
// A granted request gets the RateLimit-Policy and RateLimit fields of IETF
// draft-ietf-httpapi-ratelimit-headers-11, set before the next handler runs:
//
//	RateLimit-Policy: "name";q=<limit>;w=<window in seconds>
//	RateLimit: "name";r=<remaining>;t=<seconds until more permits>
//
// from Result.Limit, Result.Window (at least 1), Result.Remaining and
// Result.ResetAfter, durations rounded up to whole seconds. A refused
// request gets the same fields and 429 Too Many Requests with
// Retry-After: Result.RetryAfter rounded up to whole seconds, and never
// less than t, so a client that follows either is never early. A request
// that costs more than the limit can never succeed: 429 without
// Retry-After.
//
// Other answers, without RateLimit fields: 400 when Key fails, 500 for a
// negative Cost, 503 (or the next handler, see FailOpen) when the limiter
// fails, and 503 when the request's context ends while it waits (the
// client has usually gone and reads nothing).
//
// The middleware is safe for concurrent use; Key, Cost, OnError and
// Rejected are called concurrently. It does not close p.
//
// Errors wrap primitives.ErrInvalidOptions: a nil p, or a Name with a
// character outside printable ASCII. Nothing is sent.
func NewMiddleware(p *Partitioned, o MiddlewareOptions) (func(http.Handler) http.Handler, error) {
	if p == nil || p.newFn == nil {
		return nil, fmt.Errorf("%w: ratelimit: NewMiddleware needs a Partitioned made by NewPartitioned", primitives.ErrInvalidOptions)
	}
	name := o.Name
	if name == "" {
		name = DefaultPolicyName
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x20 || c > 0x7e {
			return nil, fmt.Errorf("%w: ratelimit: MiddlewareOptions.Name %q has byte 0x%02x at %d: a policy name is printable ASCII (RFC 8941 sf-string)", primitives.ErrInvalidOptions, o.Name, c, i)
		}
	}
	m := &middleware{p: p, o: o, name: sfString(name)}
	if m.o.Key == nil {
		m.o.Key = RemoteAddrKey
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, next) })
	}, nil
}

// RemoteAddrKey is the default MiddlewareOptions.Key: the client's address
// from r.RemoteAddr, the peer of the connection, without the port. An IPv6
// client is keyed by its /64 network (e.g. "2001:db8::/64"), because one
// host usually holds a whole /64 and could take a new address for every
// request; an IPv4-mapped IPv6 address counts as the IPv4 address. It
// never reads headers (see MiddlewareOptions.Key).
//
// Errors: RemoteAddr is not an IP address and port, as with a listener
// on a Unix socket.
func RemoteAddrKey(r *http.Request) (string, error) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return "", fmt.Errorf("ratelimit: RemoteAddr %q: %w", r.RemoteAddr, err)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return "", fmt.Errorf("ratelimit: RemoteAddr %q has no IP address: %w", r.RemoteAddr, err)
	}
	ip = ip.Unmap().WithZone("")
	if ip.Is4() {
		return ip.String(), nil
	}
	pfx, err := ip.Prefix(64)
	if err != nil {
		return "", fmt.Errorf("ratelimit: RemoteAddr %q: %w", r.RemoteAddr, err)
	}
	return pfx.String(), nil
}

type middleware struct {
	p    *Partitioned
	o    MiddlewareOptions // Key set
	name string            // quoted
}

func (m *middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	ctx := r.Context()
	key, err := m.o.Key(r)
	if err == nil && len(key) > MaxPartitionKey {
		err = fmt.Errorf("%w: a key of %d bytes is longer than MaxPartitionKey (%d)", primitives.ErrInvalidKey, len(key), MaxPartitionKey)
	}
	if err != nil {
		m.fail(r, fmt.Errorf("ratelimit: MiddlewareOptions.Key: %w", err))
		http.Error(w, "bad request: no rate-limit partition for this request", http.StatusBadRequest)
		return
	}
	cost := int64(1)
	if m.o.Cost != nil {
		cost = m.o.Cost(r)
	}
	if cost < 0 {
		m.fail(r, fmt.Errorf("%w: MiddlewareOptions.Cost returned %d", ErrInvalidPermits, cost))
		http.Error(w, http.StatusText(http.StatusInternalServerError), http.StatusInternalServerError)
		return
	}
	var res Result
	if m.o.Queue {
		res, err = m.p.Acquire(ctx, key, cost)
	} else {
		res, err = m.p.TryAcquire(ctx, key, cost)
	}
	if err != nil {
		if ctx.Err() != nil {
			// The client left (or a server timeout ended the request):
			// nobody waits for an answer, and running next would be
			// wasted work.
			http.Error(w, "request ended while waiting for the rate limit", http.StatusServiceUnavailable)
			return
		}
		m.fail(r, err)
		if m.o.FailOpen {
			next.ServeHTTP(w, r)
			return
		}
		http.Error(w, "rate limit unavailable", http.StatusServiceUnavailable)
		return
	}

	h := w.Header()
	t := ceilSeconds(res.ResetAfter)
	h.Set("RateLimit-Policy", m.name+";q="+strconv.FormatInt(res.Limit, 10)+";w="+strconv.FormatInt(max(ceilSeconds(res.Window), 1), 10))
	h.Set("RateLimit", m.name+";r="+strconv.FormatInt(res.Remaining, 10)+";t="+strconv.FormatInt(t, 10))
	if m.o.LegacyHeaders {
		h.Set("X-RateLimit-Limit", strconv.FormatInt(res.Limit, 10))
		h.Set("X-RateLimit-Remaining", strconv.FormatInt(res.Remaining, 10))
		h.Set("X-RateLimit-Reset", strconv.FormatInt(ceilUnix(time.Now().Add(res.ResetAfter)), 10))
	}
	if res.Acquired {
		next.ServeHTTP(w, r)
		return
	}
	if cost <= res.Limit {
		// At least 1: a refusal whose permits can come back never says
		// "retry now".
		h.Set("Retry-After", strconv.FormatInt(max(ceilSeconds(res.RetryAfter), t, 1), 10))
	}
	rw := &rejectWriter{ResponseWriter: w}
	if m.o.Rejected != nil {
		m.o.Rejected.ServeHTTP(rw, r)
	} else {
		rejectedText(rw, r)
	}
	if !rw.wrote {
		rw.WriteHeader(http.StatusTooManyRequests)
	}
}

func (m *middleware) fail(r *http.Request, err error) {
	if m.o.OnError != nil {
		m.o.OnError(r, err)
	}
}

// rejectedText is the default MiddlewareOptions.Rejected.
func rejectedText(w http.ResponseWriter, _ *http.Request) {
	msg := "rate limit exceeded: this request costs more than the limit allows"
	if s := w.Header().Get("Retry-After"); s != "" {
		msg = "rate limit exceeded: retry after " + s + "s"
	}
	http.Error(w, msg, http.StatusTooManyRequests)
}

// rejectWriter answers 429 unless Rejected chose another status.
type rejectWriter struct {
	http.ResponseWriter
	wrote bool
}

func (w *rejectWriter) WriteHeader(code int) {
	if code >= 200 {
		// 1xx responses (e.g. 103 Early Hints) precede the final one.
		w.wrote = true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *rejectWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusTooManyRequests)
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *rejectWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// sfString quotes s, printable ASCII, as an RFC 8941 string.
func sfString(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	b.WriteByte('"')
	return b.String()
}

// ceilSeconds is d in whole seconds, rounded up; 0 for d <= 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// ceilUnix is t in Unix seconds, rounded up.
func ceilUnix(t time.Time) int64 {
	s := t.Unix()
	if t.Nanosecond() > 0 {
		s++
	}
	return s
}
