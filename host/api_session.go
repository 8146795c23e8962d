package host

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	coordhostv1 "github.com/coordhost/coordhost/gen/coordhost/v1"
	"github.com/coordhost/coordhost/lua"
	"github.com/redis/rueidis"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Session bounds and layout (session.proto).
const (
	// SessionKeyPrefix follows the redis block's key_prefix in a session's
	// key: <key_prefix>coordhost:session:<session id>, a hash with the
	// session's ttl (ms) and release_on_disconnect, expiring with it.
	SessionKeyPrefix = "coordhost:session:"
	// DefaultSessionTTL is a session's TTL when CreateSession gives none.
	DefaultSessionTTL = 60 * time.Second
	// MinSessionTTL and MaxSessionTTL bound the TTL CreateSession accepts;
	// outside them it is InvalidArgument naming "ttl". A TTL is kept in
	// whole milliseconds (truncated).
	MinSessionTTL = time.Second
	MaxSessionTTL = time.Hour
	// sessionIDBytes is a session id's entropy: 128 random bits, written
	// as 32 lowercase hex digits.
	sessionIDBytes = 16
	// sessionReleaseTimeout bounds the CloseSession a KeepAlive stream
	// with release_on_disconnect runs once its call is over.
	sessionReleaseTimeout = 5 * time.Second
)

// The session scripts (lua/session_*.lua). None is retryable: rueidis
// would resend a script whose reply was lost.
var (
	sessionCreate = rueidis.NewLuaScript(lua.SessionCreate)
	sessionRenew  = rueidis.NewLuaScript(lua.SessionRenew)
	sessionGet    = rueidis.NewLuaScript(lua.SessionGet)
	sessionAttach = rueidis.NewLuaScript(lua.SessionAttach)
	sessionClose  = rueidis.NewLuaScript(lua.SessionClose)
	sessionQuota  = rueidis.NewLuaScript(lua.SessionQuota)
)

// SessionQuotaKeyPrefix follows the redis block's key_prefix in the key of
// an API token's live sessions (<key_prefix>coordhost:session-quota:<token
// name>): a sorted set of session ids by expiry, which bounds the token's
// sessions by its max_sessions across every daemon.
const SessionQuotaKeyPrefix = "coordhost:session-quota:"

// MaxSessionGrants is the most grants one session may hold; one more is
// ResourceExhausted (REASON_CLIENT_LIMIT), and the grant is released.
const MaxSessionGrants = 64

// errSessionExists is sessionCreate finding its new id taken.
var errSessionExists = errors.New("new session id already exists")

// sessionService serves coordhost.v1.SessionService. Grants taken with a
// session_id are attached to it (sessionGrants): renewing the session
// renews them by its TTL, closing it releases them, and a session that is
// not renewed takes them with it by TTL, with no reaper anywhere.
//
// Statuses: InvalidArgument naming "ttl" or "session_id" for a bad field
// (nothing is sent to Redis); NotFound (REASON_SESSION_NOT_FOUND) for a
// session that is gone; PermissionDenied for a session another API token
// created; Unavailable when Redis fails or the Host is closed;
// FailedPrecondition when another kind of value sits under the session's
// key; Canceled or DeadlineExceeded with the call.
type sessionService struct{ h *Host }

// sessionKey is the Redis key of session id.
func (h *Host) sessionKey(id string) string { return h.keyPfx + SessionKeyPrefix + id }

// checkSessionID checks a request's session_id: 32 lowercase hex digits,
// as CreateSession makes them.
func checkSessionID(id string) *connect.Error {
	if id == "" {
		return invalidField("session_id", "", "empty")
	}
	if len(id) != 2*sessionIDBytes {
		return invalidField("session_id", "", "%d bytes, a session id has %d", len(id), 2*sessionIDBytes)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return invalidField("session_id", "", "not a session id (32 lowercase hex digits)")
		}
	}
	return nil
}

// sessionTTL checks CreateSessionRequest.ttl and applies its default.
func sessionTTL(d *durationpb.Duration) (time.Duration, *connect.Error) {
	if d == nil {
		return DefaultSessionTTL, nil
	}
	if err := d.CheckValid(); err != nil {
		return 0, invalidField("ttl", "", "%v", err)
	}
	ttl := d.AsDuration().Truncate(time.Millisecond)
	switch {
	case ttl < 0:
		return 0, invalidField("ttl", "", "%v, must not be negative", d.AsDuration())
	case ttl < MinSessionTTL:
		return 0, invalidField("ttl", "", "%v, at least %v", d.AsDuration(), MinSessionTTL)
	case ttl > MaxSessionTTL:
		return 0, invalidField("ttl", "", "%v, at most %v", d.AsDuration(), MaxSessionTTL)
	}
	return ttl, nil
}

// randomID returns n random bytes in lowercase hex.
func randomID(n int) string {
	b := make([]byte, n)
	rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// sessionState is a session as a session script answered it.
type sessionState struct {
	msg    *coordhostv1.Session
	ttl    time.Duration
	grants []string // grant ids, where the script lists them
}

// runSession runs one session script on id's key and decodes its answer
// (lua/session_lib.lua). A nil answer is NotFound.
func (h *Host) runSession(ctx context.Context, sc *rueidis.Lua, id string, args ...string) (*sessionState, error) {
	if h.closed.Load() {
		return nil, sessionError(ctx, ErrClosed)
	}
	vs, err := sc.Exec(ctx, h.client, []string{h.sessionKey(id)}, args).ToArray()
	if err != nil {
		return nil, sessionError(ctx, err)
	}
	if len(vs) < 5 || len(vs) > 5+MaxSessionGrants {
		return nil, sessionError(ctx, fmt.Errorf("session script answered %d values", len(vs)))
	}
	var n [5]int64
	for i := range n {
		if n[i], err = vs[i].AsInt64(); err != nil {
			return nil, sessionError(ctx, fmt.Errorf("session script answer: %w", err))
		}
	}
	st := &sessionState{ttl: time.Duration(n[0]) * time.Millisecond}
	for _, v := range vs[5:] {
		g, err := v.ToString()
		if err != nil {
			return nil, sessionError(ctx, fmt.Errorf("session script answer: %w", err))
		}
		st.grants = append(st.grants, g)
	}
	now := time.Unix(n[2], n[3]*int64(time.Microsecond)).Truncate(time.Millisecond)
	st.msg = &coordhostv1.Session{
		SessionId:           id,
		Ttl:                 durationpb.New(st.ttl),
		ExpiresAt:           timestamppb.New(now.Add(time.Duration(n[4]) * time.Millisecond)),
		ReleaseOnDisconnect: n[1] != 0,
	}
	return st, nil
}

// sessionError maps an error of a session call to a status.
func sessionError(ctx context.Context, err error) error {
	switch {
	case rueidis.IsRedisNil(err):
		return sessionGone()
	case isNotOwner(err):
		return apiError(connect.CodePermissionDenied, coordhostv1.Reason_REASON_UNSPECIFIED, "session_id", "",
			errors.New("session_id: the session belongs to another API token"))
	}
	if code, ok := ctxCode(ctx, err); ok {
		return apiError(code, coordhostv1.Reason_REASON_UNSPECIFIED, "", "", err)
	}
	var re *rueidis.RedisError
	if errors.As(err, &re) && strings.HasPrefix(re.Error(), "WRONGTYPE") {
		return apiError(connect.CodeFailedPrecondition, coordhostv1.Reason_REASON_UNSPECIFIED, "", "",
			fmt.Errorf("another kind of value sits under the session's key: %w", err))
	}
	// Redis failed or the Host is closed: retrying (perhaps at another
	// daemon) may succeed.
	return apiError(connect.CodeUnavailable, coordhostv1.Reason_REASON_UNSPECIFIED, "", "", err)
}

// sessionGone is NotFound (REASON_SESSION_NOT_FOUND).
func sessionGone() *connect.Error {
	return apiError(connect.CodeNotFound, coordhostv1.Reason_REASON_SESSION_NOT_FOUND, "session_id", "",
		errors.New("session not found (closed or expired)"))
}

// isNotOwner reports whether err is a session script's COORDHOST_NOTOWNER.
func isNotOwner(err error) bool {
	re, ok := rueidis.IsRedisErr(err)
	return ok && strings.HasPrefix(re.Error(), "COORDHOST_NOTOWNER")
}

// CreateSession serves SessionService.CreateSession: a new session with a
// random 128-bit id, written with its TTL in one script.
func (s sessionService) CreateSession(ctx context.Context, req *connect.Request[coordhostv1.CreateSessionRequest]) (*connect.Response[coordhostv1.CreateSessionResponse], error) {
	ttl, cerr := sessionTTL(req.Msg.GetTtl())
	if cerr != nil {
		return nil, cerr
	}
	id := randomID(sessionIDBytes)
	tok, max := callerToken(ctx), callerMaxSessions(ctx)
	if max > 0 {
		n, err := sessionQuota.Exec(ctx, s.h.client, []string{s.h.quotaKey(tok)},
			[]string{id, strconv.Itoa(max), strconv.FormatInt(ttl.Milliseconds(), 10)}).AsInt64()
		if err != nil {
			return nil, sessionError(ctx, err)
		}
		if n != 1 {
			return nil, apiError(connect.CodeResourceExhausted, coordhostv1.Reason_REASON_CLIENT_LIMIT, "", "",
				fmt.Errorf("the API token %q holds %d live sessions, its max_sessions: close one or let it expire", tok, max))
		}
	}
	rod := "0"
	if req.Msg.GetReleaseOnDisconnect() {
		rod = "1"
	}
	st, err := s.h.runSession(ctx, sessionCreate, id, strconv.FormatInt(ttl.Milliseconds(), 10), rod, tok)
	if connect.CodeOf(err) == connect.CodeNotFound {
		// The script's nil here means the id was taken.
		err = apiError(connect.CodeInternal, coordhostv1.Reason_REASON_UNSPECIFIED, "", "", errSessionExists)
	}
	if err != nil {
		if max > 0 {
			s.h.unquote(context.WithoutCancel(ctx), tok, id)
		}
		return nil, err
	}
	return connect.NewResponse(&coordhostv1.CreateSessionResponse{Session: st.msg}), nil
}

// renew renews session id by its TTL and then its grants by the same TTL;
// renewer is the KeepAlive stream's id ("" for RenewSession).
func (h *Host) renewSession(ctx context.Context, id, renewer string) (*coordhostv1.Session, error) {
	st, err := h.runSession(ctx, sessionRenew, id, callerToken(ctx), renewer)
	if err != nil {
		return nil, err
	}
	h.renewSessionGrants(ctx, id, st)
	h.requota(ctx, id, st.msg.GetExpiresAt().AsTime())
	return st.msg, nil
}

// requota keeps session id counted against the caller's max_sessions
// until expires, its new expiry (after any renewal: RenewSession,
// KeepAlive, an acquisition through it). Best effort: at worst it stops
// counting at its old expiry.
func (h *Host) requota(ctx context.Context, id string, expires time.Time) {
	tok := callerToken(ctx)
	if tok == "" || callerMaxSessions(ctx) <= 0 {
		return
	}
	c, key := h.client, h.quotaKey(tok)
	ttl := max(time.Until(expires), time.Millisecond)
	for _, r := range c.DoMulti(ctx,
		c.B().Zadd().Key(key).Xx().Gt().ScoreMember().ScoreMember(float64(expires.UnixMilli()), id).Build(),
		c.B().Pexpire().Key(key).Milliseconds(ttl.Milliseconds()).Gt().Build()) {
		if err := r.Error(); err != nil {
			h.log.Debug("session: updating the token's session count failed", "error", err)
		}
	}
}

// quotaKey is the key of API token tok's live sessions.
func (h *Host) quotaKey(tok string) string { return h.keyPfx + SessionQuotaKeyPrefix + tok }

// unquote stops counting session id against token tok, best effort.
func (h *Host) unquote(ctx context.Context, tok, id string) {
	if tok == "" {
		return
	}
	c := h.client
	if err := c.Do(ctx, c.B().Zrem().Key(h.quotaKey(tok)).Member(id).Build()).Error(); err != nil {
		h.log.Debug("session: updating the token's session count failed", "error", err)
	}
}

// RenewSession serves SessionService.RenewSession: the session's expiry
// moves to its TTL from now, and so do its grants'; NotFound when it is
// gone.
func (s sessionService) RenewSession(ctx context.Context, req *connect.Request[coordhostv1.RenewSessionRequest]) (*connect.Response[coordhostv1.RenewSessionResponse], error) {
	id := req.Msg.GetSessionId()
	if err := checkSessionID(id); err != nil {
		return nil, err
	}
	sess, err := s.h.renewSession(ctx, id, "")
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&coordhostv1.RenewSessionResponse{Session: sess}), nil
}

// GetSession serves SessionService.GetSession: the session as Redis has
// it, not renewed, with the grants attached to it; NotFound when it is
// gone.
func (s sessionService) GetSession(ctx context.Context, req *connect.Request[coordhostv1.GetSessionRequest]) (*connect.Response[coordhostv1.GetSessionResponse], error) {
	id := req.Msg.GetSessionId()
	if err := checkSessionID(id); err != nil {
		return nil, err
	}
	st, err := s.h.runSession(ctx, sessionGet, id, callerToken(ctx))
	if err != nil {
		return nil, err
	}
	out := &coordhostv1.GetSessionResponse{Session: st.msg}
	for _, gid := range st.grants {
		if g := s.h.listedGrant(gid); g != nil {
			out.Grants = append(out.Grants, g)
		}
	}
	return connect.NewResponse(out), nil
}

// CloseSession serves SessionService.CloseSession: the session's key is
// deleted and its grants released. A session already gone is closed
// false, not an error.
func (s sessionService) CloseSession(ctx context.Context, req *connect.Request[coordhostv1.CloseSessionRequest]) (*connect.Response[coordhostv1.CloseSessionResponse], error) {
	id := req.Msg.GetSessionId()
	if err := checkSessionID(id); err != nil {
		return nil, err
	}
	closed, released, err := s.h.closeSession(ctx, id, "")
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&coordhostv1.CloseSessionResponse{Closed: closed, ReleasedGrants: int64(released)}), nil
}

// closeSession deletes session id's key and releases its grants; renewer
// as in lua/session_close.lua. closed is whether it was deleted now;
// released counts the grants this call released.
func (h *Host) closeSession(ctx context.Context, id, renewer string) (closed bool, released int, err error) {
	if h.closed.Load() {
		return false, 0, sessionError(ctx, ErrClosed)
	}
	vs, err := sessionClose.Exec(ctx, h.client, []string{h.sessionKey(id)}, []string{callerToken(ctx), renewer}).ToArray()
	if rueidis.IsRedisNil(err) {
		return false, 0, nil
	}
	if err != nil {
		return false, 0, sessionError(ctx, err)
	}
	if len(vs) == 0 || len(vs) > 1+MaxSessionGrants {
		return false, 0, sessionError(ctx, fmt.Errorf("session script answered %d values", len(vs)))
	}
	if n, err := vs[0].AsInt64(); err != nil || n != 1 {
		return false, 0, nil // another stream renewed it last
	}
	ids := make([]string, 0, len(vs)-1)
	for _, v := range vs[1:] {
		if g, err := v.ToString(); err == nil {
			ids = append(ids, g)
		}
	}
	// The session is gone either way: its grants are released on the
	// daemon's own account, within one bound, whatever the caller's ctx.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sessionReleaseTimeout)
	defer cancel()
	h.unquote(rctx, callerToken(ctx), id)
	return true, h.releaseGrants(rctx, ids), nil
}

// KeepAlive serves SessionService.KeepAlive: each request renews the
// session (as RenewSession) and each response carries its new expiry.
//
// The stream is driven by the client's requests, with no timer of its own
// (no goroutine per idle stream): a session that expires or is closed
// while the stream is open ends it with NotFound at the client's next
// request. A request naming another session than the first ends it with
// InvalidArgument naming "session_id".
//
// When the stream ends with the client (half-close, cancel, a broken
// connection, or its own bad request) and the session was created with
// release_on_disconnect, the session is closed, unless the Host is
// shutting down (its clients then resume on another daemon) or another
// KeepAlive stream renewed it since (the client moved on, perhaps to
// another daemon). It is not closed when the stream ends because the
// session is gone or Redis failed.
func (s sessionService) KeepAlive(ctx context.Context, st *connect.BidiStream[coordhostv1.KeepAliveRequest, coordhostv1.KeepAliveResponse]) (err error) {
	var id string
	var rod bool // the session's release_on_disconnect, once renewed
	release := true
	renewer := randomID(8)
	defer func() {
		if !rod || !release || s.h.life.Err() != nil || s.h.draining.Load() {
			return
		}
		// The call's context is over: the close outlives it, bounded.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sessionReleaseTimeout)
		defer cancel()
		if _, _, cerr := s.h.closeSession(rctx, id, renewer); cerr != nil {
			s.h.log.Warn("session: release on disconnect failed", "error", cerr)
		}
	}()
	for {
		m, rerr := st.Receive()
		if errors.Is(rerr, io.EOF) {
			return nil
		}
		if rerr != nil {
			return rerr
		}
		got := m.GetSessionId()
		if cerr := checkSessionID(got); cerr != nil {
			return cerr
		}
		if id == "" {
			id = got
		} else if got != id {
			return invalidField("session_id", "", "names another session than the stream's first request")
		}
		sess, serr := s.h.renewSession(ctx, id, renewer)
		if serr != nil {
			// Gone (nothing to release) or Redis failed (the client may
			// resume at another daemon). A call cancelled meanwhile is
			// the client going away: that still releases.
			if ctx.Err() == nil {
				release = false
			}
			return serr
		}
		rod = sess.GetReleaseOnDisconnect()
		if err := st.Send(&coordhostv1.KeepAliveResponse{Session: sess}); err != nil {
			return err
		}
	}
}
