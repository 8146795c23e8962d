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

// The session scripts answer {ttl ms, release_on_disconnect, server TIME
// seconds, TIME microseconds, PTTL}, or nil when the session is gone. TIME
// runs inside the script so the expiry is on Redis's clock, the one that
// expires the key, whichever daemon asks; it is taken to the millisecond,
// as Redis keeps expiries, so reads of one expiry agree (to within the
// millisecond TIME and the key's clock may straddle).
var (
	// sessionCreate never overwrites: a 128-bit random id that exists is
	// a broken random source, not a session to reset.
	sessionCreate = rueidis.NewLuaScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return false end
redis.call('HSET', KEYS[1], 'ttl', ARGV[1], 'rod', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[1])
local t = redis.call('TIME')
return {ARGV[1], ARGV[2], t[1], t[2], redis.call('PTTL', KEYS[1])}`)
	// sessionRenew renews only a session that exists: a closed or expired
	// one is not resurrected.
	sessionRenew = rueidis.NewLuaScript(`
local v = redis.call('HMGET', KEYS[1], 'ttl', 'rod')
if not v[1] then return false end
redis.call('PEXPIRE', KEYS[1], v[1])
local t = redis.call('TIME')
return {v[1], v[2], t[1], t[2], redis.call('PTTL', KEYS[1])}`)
	sessionGet = rueidis.NewLuaScript(`
local v = redis.call('HMGET', KEYS[1], 'ttl', 'rod')
if not v[1] then return false end
local p = redis.call('PTTL', KEYS[1])
local t = redis.call('TIME')
return {v[1], v[2], t[1], t[2], p}`)
)

// errSessionExists is sessionCreate finding its new id taken.
var errSessionExists = errors.New("new session id already exists")

// sessionService serves coordhost.v1.SessionService. No grant is attached
// to a session yet: CloseSession releases none and GetSession lists none.
//
// Statuses: InvalidArgument naming "ttl" or "session_id" for a bad field
// (nothing is sent to Redis); NotFound (REASON_SESSION_NOT_FOUND) for a
// session that is gone; Unavailable when Redis fails or the Host is
// closed; FailedPrecondition when another kind of value sits under the
// session's key; Canceled or DeadlineExceeded with the call.
type sessionService struct{ h *Host }

// sessionKey is the Redis key of session id.
func (s sessionService) key(id string) string { return s.h.keyPfx + SessionKeyPrefix + id }

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

// run runs one session script on id's key and decodes its answer.
func (s sessionService) run(ctx context.Context, sc *rueidis.Lua, id string, args ...string) (*coordhostv1.Session, error) {
	if s.h.closed.Load() {
		return nil, sessionError(ctx, id, ErrClosed)
	}
	vs, err := sc.Exec(ctx, s.h.client, []string{s.key(id)}, args).ToArray()
	if err != nil {
		return nil, sessionError(ctx, id, err)
	}
	if len(vs) != 5 {
		return nil, sessionError(ctx, id, fmt.Errorf("session script answered %d values", len(vs)))
	}
	var n [5]int64
	for i := range vs {
		if n[i], err = vs[i].AsInt64(); err != nil {
			return nil, sessionError(ctx, id, fmt.Errorf("session script answer: %w", err))
		}
	}
	ttl := time.Duration(n[0]) * time.Millisecond
	now := time.Unix(n[2], n[3]*int64(time.Microsecond)).Truncate(time.Millisecond)
	return &coordhostv1.Session{
		SessionId:           id,
		Ttl:                 durationpb.New(ttl),
		ExpiresAt:           timestamppb.New(now.Add(time.Duration(n[4]) * time.Millisecond)),
		ReleaseOnDisconnect: n[1] != 0,
	}, nil
}

// sessionError maps an error of a session call to a status.
func sessionError(ctx context.Context, id string, err error) error {
	switch {
	case rueidis.IsRedisNil(err):
		return apiError(connect.CodeNotFound, coordhostv1.Reason_REASON_SESSION_NOT_FOUND, "session_id", "",
			errors.New("session not found (closed or expired)"))
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

// CreateSession serves SessionService.CreateSession: a new session with a
// random 128-bit id, written with its TTL in one script.
func (s sessionService) CreateSession(ctx context.Context, req *connect.Request[coordhostv1.CreateSessionRequest]) (*connect.Response[coordhostv1.CreateSessionResponse], error) {
	ttl, cerr := sessionTTL(req.Msg.GetTtl())
	if cerr != nil {
		return nil, cerr
	}
	var b [sessionIDBytes]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	id := hex.EncodeToString(b[:])
	rod := "0"
	if req.Msg.GetReleaseOnDisconnect() {
		rod = "1"
	}
	sess, err := s.run(ctx, sessionCreate, id, strconv.FormatInt(ttl.Milliseconds(), 10), rod)
	if connect.CodeOf(err) == connect.CodeNotFound {
		// The script's nil here means the id was taken.
		err = apiError(connect.CodeInternal, coordhostv1.Reason_REASON_UNSPECIFIED, "", "", errSessionExists)
	}
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&coordhostv1.CreateSessionResponse{Session: sess}), nil
}

// RenewSession serves SessionService.RenewSession: the session's expiry
// moves to its TTL from now; NotFound when it is gone.
func (s sessionService) RenewSession(ctx context.Context, req *connect.Request[coordhostv1.RenewSessionRequest]) (*connect.Response[coordhostv1.RenewSessionResponse], error) {
	id := req.Msg.GetSessionId()
	if err := checkSessionID(id); err != nil {
		return nil, err
	}
	sess, err := s.run(ctx, sessionRenew, id)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&coordhostv1.RenewSessionResponse{Session: sess}), nil
}

// GetSession serves SessionService.GetSession: the session as Redis has
// it, not renewed; NotFound when it is gone. No grants are listed yet.
func (s sessionService) GetSession(ctx context.Context, req *connect.Request[coordhostv1.GetSessionRequest]) (*connect.Response[coordhostv1.GetSessionResponse], error) {
	id := req.Msg.GetSessionId()
	if err := checkSessionID(id); err != nil {
		return nil, err
	}
	sess, err := s.run(ctx, sessionGet, id)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&coordhostv1.GetSessionResponse{Session: sess}), nil
}

// CloseSession serves SessionService.CloseSession: the session's key is
// deleted. A session already gone is closed false, not an error.
func (s sessionService) CloseSession(ctx context.Context, req *connect.Request[coordhostv1.CloseSessionRequest]) (*connect.Response[coordhostv1.CloseSessionResponse], error) {
	id := req.Msg.GetSessionId()
	if err := checkSessionID(id); err != nil {
		return nil, err
	}
	closed, err := s.close(ctx, id)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&coordhostv1.CloseSessionResponse{Closed: closed}), nil
}

// close deletes session id's key; closed is whether it existed.
func (s sessionService) close(ctx context.Context, id string) (closed bool, err error) {
	if s.h.closed.Load() {
		return false, sessionError(ctx, id, ErrClosed)
	}
	n, err := s.h.client.Do(ctx, s.h.client.B().Del().Key(s.key(id)).Build()).AsInt64()
	if err != nil {
		return false, sessionError(ctx, id, err)
	}
	return n > 0, nil
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
// shutting down: its clients then resume on another daemon. It is not
// closed when the stream ends because the session is gone or Redis
// failed.
func (s sessionService) KeepAlive(ctx context.Context, st *connect.BidiStream[coordhostv1.KeepAliveRequest, coordhostv1.KeepAliveResponse]) (err error) {
	var id string
	var rod bool // the session's release_on_disconnect, once renewed
	release := true
	defer func() {
		if !rod || !release || s.h.life.Err() != nil || s.h.draining.Load() {
			return
		}
		// The call's context is over: the close outlives it, bounded.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sessionReleaseTimeout)
		defer cancel()
		if _, cerr := s.close(rctx, id); cerr != nil {
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
		sess, serr := s.run(ctx, sessionRenew, id)
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
