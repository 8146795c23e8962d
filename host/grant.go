package host

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"
	coordhostv1 "github.com/coordhost/coordhost/gen/coordhost/v1"
	"github.com/coordhost/coordhost/policies"
	"github.com/coordhost/coordhost/primitives"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Grant ids and waits (grant.proto).
const (
	// grantIDVersion starts every grant id; a later layout gets a new one.
	grantIDVersion = "g1."
	// MaxGrantIDBytes bounds a grant id a request may carry.
	MaxGrantIDBytes = 8 << 10
	// MaxAPIWait is the longest wait an acquisition may ask for.
	MaxAPIWait = time.Hour
)

// Grant kinds, as grant ids and partition requests name them.
const (
	kindLock      = "lock"
	kindRedlock   = "redlock"
	kindLease     = "lease"
	kindRWLock    = "rwlock"
	kindSemaphore = "semaphore"
)

// grantRef is what a grant id carries: enough for any daemon on the same
// Redis to rebuild the grant's handle (a primitive's Resume) without a
// round trip. It is not signed: every operation it allows is owner-checked
// in Redis by the ownership token inside, which only the grant's holder
// knows, and the key is held to the name it claims (checkKey), so a forged
// id reaches nothing its forger could not reach anyway.
type grantRef struct {
	Kind    string `json:"k"`
	Name    string `json:"n"`
	Key     string `json:"y"`           // below the block's prefix: the name, or name "/" partition key
	Field   string `json:"f,omitempty"` // lease: the field in the hash
	Mode    string `json:"m,omitempty"` // rwlock: "read" or "write"
	Token   string `json:"t"`
	Fence   int64  `json:"x,omitempty"`
	Session string `json:"s,omitempty"`
	// TTLMillis is the lease the grant is renewed by: the block's (or
	// the request's) TTL, or its session's; 0 for a permit that never
	// expires.
	TTLMillis int64 `json:"l,omitempty"`
}

// same reports whether r and o name one grant.
func (r *grantRef) same(o *grantRef) bool {
	return r.Kind == o.Kind && r.Name == o.Name && r.Key == o.Key && r.Field == o.Field &&
		r.Mode == o.Mode && r.Token == o.Token
}

// ttl returns the grant's lease length (0: it never expires).
func (r *grantRef) ttl() time.Duration { return time.Duration(r.TTLMillis) * time.Millisecond }

// id encodes r as a grant id: grantIDVersion + base64url(JSON).
func (r *grantRef) id() string {
	b, err := json.Marshal(r)
	if err != nil {
		panic(err) // strings and integers only: cannot fail
	}
	return grantIDVersion + base64.RawURLEncoding.EncodeToString(b)
}

// sessionField is the grant's field in its session's hash.
func (r *grantRef) sessionField() string { return "g:" + r.Token }

// parseGrantID decodes and checks a grant id from a request; kind is the
// service's ("" accepts any, as a session's list does). Errors are
// InvalidArgument naming "grant_id"; nothing has been sent to Redis.
func parseGrantID(id, kind string) (*grantRef, *connect.Error) {
	bad := func(format string, args ...any) (*grantRef, *connect.Error) {
		return nil, invalidField("grant_id", "", format, args...)
	}
	switch {
	case id == "":
		return bad("empty")
	case len(id) > MaxGrantIDBytes:
		return bad("%d bytes, at most %d", len(id), MaxGrantIDBytes)
	case !strings.HasPrefix(id, grantIDVersion):
		return bad("not a grant id (it starts %q)", grantIDVersion)
	}
	raw, err := base64.RawURLEncoding.DecodeString(id[len(grantIDVersion):])
	if err != nil {
		return bad("not a grant id (bad encoding)")
	}
	var r grantRef
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil || dec.More() {
		return bad("not a grant id (bad content)")
	}
	if err := r.check(kind); err != nil {
		return bad("%v", err)
	}
	return &r, nil
}

// check checks a decoded grant's fields against each other; kind as in
// parseGrantID.
func (r *grantRef) check(kind string) error {
	switch r.Kind {
	case kindLock, kindRedlock, kindLease, kindRWLock, kindSemaphore:
	default:
		return fmt.Errorf("unknown grant kind %q", r.Kind)
	}
	if kind != "" && kind != r.Kind && !(kind == kindLock && r.Kind == kindRedlock) {
		return fmt.Errorf("a %s grant, not a %s grant", r.Kind, kind)
	}
	if err := checkName(r.Name); err != nil {
		return errors.New("bad name")
	}
	if r.Key != r.Name && !strings.HasPrefix(r.Key, r.Name+"/") {
		return errors.New("key does not belong to its name")
	}
	if err := checkToken(r.Token); err != nil {
		return err
	}
	if r.Fence < 0 || r.Fence != 0 && r.Kind != kindLock {
		return errors.New("bad fencing token")
	}
	if r.Session != "" && checkSessionID(r.Session) != nil {
		return errors.New("bad session id")
	}
	if r.TTLMillis < 0 || r.TTLMillis > MaxAPITTL.Milliseconds() || r.TTLMillis == 0 && r.Kind != kindSemaphore {
		return errors.New("bad ttl")
	}
	switch r.Kind {
	case kindLease:
		if r.Field == "" || len(r.Field) > MaxLeaseFieldBytes {
			return errors.New("bad field")
		}
	case kindRWLock:
		if r.Mode != modeRead && r.Mode != modeWrite {
			return errors.New("bad mode")
		}
	}
	if r.Field != "" && r.Kind != kindLease || r.Mode != "" && r.Kind != kindRWLock {
		return errors.New("fields of another kind")
	}
	return nil
}

// checkToken checks an ownership token as the primitives make them:
// printable ASCII without spaces, at most primitives.MaxTokenBytes. (The
// primitives' Resume checks again; this keeps a bad id from reaching
// them.)
func checkToken(t string) error {
	if t == "" || len(t) > primitives.MaxTokenBytes {
		return errors.New("bad ownership token")
	}
	for i := 0; i < len(t); i++ {
		if t[i] <= ' ' || t[i] > '~' {
			return errors.New("bad ownership token")
		}
	}
	return nil
}

// Read-write modes in grant ids.
const (
	modeRead  = "read"
	modeWrite = "write"
)

// MaxAPITTL bounds any TTL a grant id may carry or a request may ask for:
// above it nothing is renewed (config keeps block TTLs far below).
const MaxAPITTL = 365 * 24 * time.Hour

// MaxLeaseFieldBytes bounds a lease's field.
const MaxLeaseFieldBytes = 1024

// grantProto is the Grant message of r with remaining time left: the
// expiry is a handle's local estimate (measured from before the command
// was sent, so never later than Redis's expiry) on this daemon's clock;
// unset when there is none (a permit without expiry, a grant listed in a
// session, which expires with it).
func grantProto(r *grantRef, remaining time.Duration) *coordhostv1.Grant {
	g := &coordhostv1.Grant{
		GrantId:        r.id(),
		Name:           r.Name,
		Key:            r.Key,
		OwnershipToken: r.Token,
		FencingToken:   uint64(r.Fence),
		SessionId:      r.Session,
		Field:          r.Field,
	}
	if ttl := r.ttl(); ttl > 0 {
		g.Ttl = durationpb.New(ttl)
	}
	if remaining > 0 {
		g.ExpiresAt = timestamppb.New(time.Now().Add(remaining).Truncate(time.Millisecond))
	}
	return g
}

// apiWait reads an acquisition's wait: forever (until the retry policy
// gives up or the call ends) when unset, one attempt when zero, else a
// bound. InvalidArgument naming "wait" when negative or above MaxAPIWait.
type apiWait struct {
	set bool
	d   time.Duration
}

func parseWait(w *durationpb.Duration, name string) (apiWait, *connect.Error) {
	if w == nil {
		return apiWait{}, nil
	}
	if err := w.CheckValid(); err != nil {
		return apiWait{}, invalidField("wait", name, "%v", err)
	}
	d := w.AsDuration()
	switch {
	case d < 0:
		return apiWait{}, invalidField("wait", name, "%v, must not be negative", d)
	case d > MaxAPIWait:
		return apiWait{}, invalidField("wait", name, "%v, at most %v", d, MaxAPIWait)
	}
	return apiWait{set: true, d: d}, nil
}

// try reports whether the wait asks for one attempt.
func (w apiWait) try() bool { return w.set && w.d == 0 }

// acquireWithin runs acquire within the wait: ctx bounded by it when set
// and positive (a wait of zero is one attempt, which acquire makes on the
// call's ctx). A wait of the request's own that runs out while the call's
// ctx still runs is contention (primitives.ErrNotAcquired), not a
// deadline.
func acquireWithin[T any](ctx context.Context, w apiWait, acquire func(context.Context) (T, error)) (T, error) {
	if !w.set || w.d == 0 {
		return acquire(ctx)
	}
	wctx, cancel := context.WithTimeout(ctx, w.d)
	defer cancel()
	got, err := acquire(wctx)
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("%w: the wait of %v ran out", primitives.ErrNotAcquired, w.d)
	}
	return got, err
}

// notConfigured is the message of a NotFound for name: the kind of block
// that has no such name, without the configuration's path (clients need
// not know it) or a Go package's prefix.
func notConfigured(err error, name string) error {
	kind := "block"
	for _, k := range []struct {
		err  error
		kind string
	}{{ErrNoLock, "lock"}, {ErrNoRedlock, "redlock"}, {ErrNoLease, "lease"}, {ErrNoRWLock, "rwlock"},
		{ErrNoSemaphore, "semaphore"}, {ErrNoLatch, "latch"}} {
		if errors.Is(err, k.err) {
			kind = k.kind
		}
	}
	return fmt.Errorf("no %s %q is configured", kind, name)
}

// unconfigured lists the errors of a name no block of its kind has.
var unconfigured = []error{ErrNoLock, ErrNoRedlock, ErrNoLease, ErrNoRWLock, ErrNoSemaphore, ErrNoLatch}

// unconfiguredName reports whether err says no block of its kind has the
// name: such a call is not counted in a metric labelled by name, since any
// client could make up names without end.
func unconfiguredName(err error) bool {
	for _, e := range unconfigured {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// grantError maps an error of a grant operation (op "acquire", "renew",
// "release") on name to a status. contended is the status of contention:
// Aborted for exclusive leases, ResourceExhausted for permits.
func grantError(ctx context.Context, op, name string, contended connect.Code, err error) error {
	if unconfiguredName(err) {
		return apiError(connect.CodeNotFound, coordhostv1.Reason_REASON_NAME_NOT_CONFIGURED, "", name, notConfigured(err, name))
	}
	switch {
	case errors.Is(err, policies.ErrPartition), errors.Is(err, primitives.ErrInvalidKey):
		return apiError(connect.CodeInvalidArgument, coordhostv1.Reason_REASON_INVALID_FIELD, "attributes", name, fmt.Errorf("attributes: %w", err))
	case errors.Is(err, errBadGrant), errors.Is(err, primitives.ErrInvalidToken):
		return apiError(connect.CodeInvalidArgument, coordhostv1.Reason_REASON_INVALID_FIELD, "grant_id", name, fmt.Errorf("grant_id: %w", err))
	case errors.Is(err, primitives.ErrInvalidTTL):
		return apiError(connect.CodeInvalidArgument, coordhostv1.Reason_REASON_INVALID_FIELD, "ttl", name, fmt.Errorf("ttl: %w", err))
	case errors.Is(err, primitives.ErrNotAcquired):
		return apiError(contended, coordhostv1.Reason_REASON_CONTENDED, "", name, err)
	case errors.Is(err, primitives.ErrUnsupported):
		return apiError(connect.CodeFailedPrecondition, coordhostv1.Reason_REASON_UNSUPPORTED_SERVER, "", name, err)
	case errors.Is(err, primitives.ErrNotReplicated):
		return apiError(connect.CodeUnavailable, coordhostv1.Reason_REASON_NOT_REPLICATED, "", name, err)
	case errors.Is(err, primitives.ErrUncertain) && op != "acquire":
		// An acquisition settles its own uncertain outcome (it holds
		// nothing); a renewal or release may or may not have happened.
		return apiError(connect.CodeUnknown, coordhostv1.Reason_REASON_OUTCOME_UNKNOWN, "", name, err)
	}
	if code, ok := ctxCode(ctx, err); ok {
		return apiError(code, coordhostv1.Reason_REASON_UNSPECIFIED, "", name, err)
	}
	if errors.Is(err, primitives.ErrWrongType) || errors.Is(err, primitives.ErrCorruptCounter) ||
		errors.Is(err, primitives.ErrNoPermission) {
		// Someone else's data sits under the key, or the server refuses
		// a command: retrying will not help.
		return apiError(connect.CodeFailedPrecondition, coordhostv1.Reason_REASON_UNSPECIFIED, "", name, err)
	}
	// Redis failed or the daemon is closing: retrying may succeed.
	return apiError(connect.CodeUnavailable, coordhostv1.Reason_REASON_UNSPECIFIED, "", name, err)
}

// grantLost is NotFound (REASON_GRANT_LOST): the grant is no longer held.
func grantLost(name string) error {
	return apiError(connect.CodeNotFound, coordhostv1.Reason_REASON_GRANT_LOST, "grant_id", name,
		errors.New("the grant is no longer held (expired, released, or its session ended); acquire again"))
}

// releaseResult maps a primitive's release result to the API's.
func releaseResult(r primitives.ReleaseResult) coordhostv1.ReleaseResult {
	switch r {
	case primitives.Released:
		return coordhostv1.ReleaseResult_RELEASE_RESULT_RELEASED
	case primitives.AlreadyReleased:
		return coordhostv1.ReleaseResult_RELEASE_RESULT_ALREADY_RELEASED
	case primitives.NotOwned:
		return coordhostv1.ReleaseResult_RELEASE_RESULT_NOT_OWNED
	}
	return coordhostv1.ReleaseResult_RELEASE_RESULT_UNSPECIFIED
}
