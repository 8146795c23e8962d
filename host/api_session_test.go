package host_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	coordhostv1 "github.com/coordhost/coordhost/gen/coordhost/v1"
	"github.com/coordhost/coordhost/gen/coordhost/v1/coordhostv1connect"
	"github.com/coordhost/coordhost/host"
	"github.com/coordhost/coordhost/internal/redistest"
)

// sessionKey is session id's key under rateLimitConfig's key_prefix.
func sessionKey(id string) string { return "m:" + host.SessionKeyPrefix + id }

// absDur is |d|. Two reads of one expiry may differ by the millisecond
// in which Redis's TIME and its key clock straddle a tick.
func absDur(d time.Duration) time.Duration { return max(d, -d) }

// wantNotFound fails unless err is NotFound with REASON_SESSION_NOT_FOUND.
func wantNotFound(t *testing.T, what string, err error) {
	t.Helper()
	d := errDetail(t, err)
	if connect.CodeOf(err) != connect.CodeNotFound || d == nil || d.Reason != coordhostv1.Reason_REASON_SESSION_NOT_FOUND {
		t.Fatalf("%s: %v (detail %v), want NotFound REASON_SESSION_NOT_FOUND", what, err, d)
	}
}

// newSession creates a session with ttl (0: the daemon's default) through
// c and returns its id.
func newSession(t *testing.T, ctx context.Context, c coordhostv1connect.SessionServiceClient, ttl time.Duration) string {
	t.Helper()
	req := &coordhostv1.CreateSessionRequest{}
	if ttl != 0 {
		req.Ttl = durationpb.New(ttl)
	}
	cr, err := c.CreateSession(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	return cr.Msg.GetSession().GetSessionId()
}

// waitGone polls GetSession until the session is gone, for up to 15s.
func waitGone(t *testing.T, ctx context.Context, c coordhostv1connect.SessionServiceClient, id string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, err := c.GetSession(ctx, connect.NewRequest(&coordhostv1.GetSessionRequest{SessionId: id}))
		if connect.CodeOf(err) == connect.CodeNotFound {
			wantNotFound(t, "GetSession", err)
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("session %s still there", id)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// SessionService's unary RPCs over gRPC and Connect JSON: create, get,
// renew, close (twice), the documented statuses, bad input that writes
// nothing, and expiry without renewal (not resurrected by a renewal).
func TestAPISessionUnary(t *testing.T) {
	s := redistest.Start(t)
	h := newHost(t, rateLimitConfig(t, s.Addr, 3, ""))
	url, hc := apiServer(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	for _, mode := range []struct {
		name string
		opts []connect.ClientOption
	}{{"grpc", []connect.ClientOption{connect.WithGRPC()}}, {"connect-json", []connect.ClientOption{connect.WithProtoJSON()}}} {
		t.Run(mode.name, func(t *testing.T) {
			s.MustCmd(t, "FLUSHALL")
			c := coordhostv1connect.NewSessionServiceClient(hc, url, mode.opts...)

			// Bad input: InvalidArgument naming the field, nothing written.
			okID := strings.Repeat("ab", 16)
			badIDs := []string{"", "abc", strings.Repeat("AB", 16), strings.Repeat("a", 33), strings.Repeat("g", 32),
				strings.Repeat("a", 31) + "\x00", strings.Repeat("x", 10000)}
			type call func() error
			var bad []struct {
				what  string
				call  call
				field string
			}
			add := func(what, field string, f call) {
				bad = append(bad, struct {
					what  string
					call  call
					field string
				}{what, f, field})
			}
			ttls := []*durationpb.Duration{
				durationpb.New(-time.Second), durationpb.New(0), durationpb.New(999 * time.Millisecond),
				durationpb.New(host.MaxSessionTTL + time.Millisecond), durationpb.New(1 << 62),
			}
			if mode.name == "grpc" {
				// Invalid Durations: protojson refuses to send them.
				ttls = append(ttls, &durationpb.Duration{Seconds: 1, Nanos: -1}, &durationpb.Duration{Seconds: 1 << 62})
			}
			for _, ttl := range ttls {
				add("create ttl "+ttl.String(), "ttl", func() error {
					_, err := c.CreateSession(ctx, connect.NewRequest(&coordhostv1.CreateSessionRequest{Ttl: ttl, ReleaseOnDisconnect: true}))
					return err
				})
			}
			for _, id := range badIDs {
				add("renew "+id, "session_id", func() error {
					_, err := c.RenewSession(ctx, connect.NewRequest(&coordhostv1.RenewSessionRequest{SessionId: id}))
					return err
				})
				add("get "+id, "session_id", func() error {
					_, err := c.GetSession(ctx, connect.NewRequest(&coordhostv1.GetSessionRequest{SessionId: id}))
					return err
				})
				add("close "+id, "session_id", func() error {
					_, err := c.CloseSession(ctx, connect.NewRequest(&coordhostv1.CloseSessionRequest{SessionId: id}))
					return err
				})
			}
			for _, b := range bad {
				err := b.call()
				d := errDetail(t, err)
				if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), b.field) ||
					d == nil || d.Field != b.field || d.Reason != coordhostv1.Reason_REASON_INVALID_FIELD {
					t.Errorf("%.60q: %v (detail %v), want InvalidArgument naming %s", b.what, err, d, b.field)
				}
			}
			if n := s.MustCmd(t, "DBSIZE"); n != "0" {
				t.Fatalf("DBSIZE %s after bad requests: %s", n, s.MustCmd(t, "KEYS", "*"))
			}

			// A well-formed id of no session.
			_, err := c.GetSession(ctx, connect.NewRequest(&coordhostv1.GetSessionRequest{SessionId: okID}))
			wantNotFound(t, "get unknown", err)
			_, err = c.RenewSession(ctx, connect.NewRequest(&coordhostv1.RenewSessionRequest{SessionId: okID}))
			wantNotFound(t, "renew unknown", err)
			if n := s.MustCmd(t, "DBSIZE"); n != "0" {
				t.Fatalf("renewal of no session wrote: %s", s.MustCmd(t, "KEYS", "*"))
			}

			// Default TTL.
			cr, err := c.CreateSession(ctx, connect.NewRequest(&coordhostv1.CreateSessionRequest{}))
			if err != nil {
				t.Fatal(err)
			}
			sess := cr.Msg.GetSession()
			id := sess.GetSessionId()
			if len(id) != 32 || sess.GetTtl().AsDuration() != host.DefaultSessionTTL || sess.GetReleaseOnDisconnect() ||
				!sess.GetExpiresAt().IsValid() {
				t.Fatalf("created %v", sess)
			}
			if pttl := s.MustCmd(t, "PTTL", sessionKey(id)); pttl == "-2" || pttl == "-1" {
				t.Fatalf("PTTL of %s: %s", sessionKey(id), pttl)
			}

			gr, err := c.GetSession(ctx, connect.NewRequest(&coordhostv1.GetSessionRequest{SessionId: id}))
			if err != nil {
				t.Fatal(err)
			}
			if g := gr.Msg.GetSession(); g.GetSessionId() != id || g.GetTtl().AsDuration() != host.DefaultSessionTTL ||
				absDur(g.GetExpiresAt().AsTime().Sub(sess.GetExpiresAt().AsTime())) > time.Millisecond || len(gr.Msg.GetGrants()) != 0 {
				t.Fatalf("got %v, created %v", gr.Msg, sess)
			}
			rr, err := c.RenewSession(ctx, connect.NewRequest(&coordhostv1.RenewSessionRequest{SessionId: id}))
			if err != nil {
				t.Fatal(err)
			}
			if r := rr.Msg.GetSession(); r.GetSessionId() != id || r.GetExpiresAt().AsTime().Before(sess.GetExpiresAt().AsTime().Add(-time.Millisecond)) {
				t.Fatalf("renewed %v, created %v", r, sess)
			}

			for i, want := range []bool{true, false} {
				cl, err := c.CloseSession(ctx, connect.NewRequest(&coordhostv1.CloseSessionRequest{SessionId: id}))
				if err != nil || cl.Msg.GetClosed() != want || cl.Msg.GetReleasedGrants() != 0 {
					t.Fatalf("close %d: %v %v, want closed %v", i, cl, err, want)
				}
			}
			_, err = c.GetSession(ctx, connect.NewRequest(&coordhostv1.GetSessionRequest{SessionId: id}))
			wantNotFound(t, "get closed", err)
			_, err = c.RenewSession(ctx, connect.NewRequest(&coordhostv1.RenewSessionRequest{SessionId: id}))
			wantNotFound(t, "renew closed", err)
			if n := s.MustCmd(t, "DBSIZE"); n != "0" {
				t.Fatalf("closed session left: %s", s.MustCmd(t, "KEYS", "*"))
			}

			// Expiry without renewal; a renewal then does not resurrect it.
			cr, err = c.CreateSession(ctx, connect.NewRequest(&coordhostv1.CreateSessionRequest{Ttl: durationpb.New(host.MinSessionTTL), ReleaseOnDisconnect: true}))
			if err != nil {
				t.Fatal(err)
			}
			if !cr.Msg.GetSession().GetReleaseOnDisconnect() || cr.Msg.GetSession().GetTtl().AsDuration() != host.MinSessionTTL {
				t.Fatalf("created %v", cr.Msg.GetSession())
			}
			id = cr.Msg.GetSession().GetSessionId()
			waitGone(t, ctx, c, id)
			_, err = c.RenewSession(ctx, connect.NewRequest(&coordhostv1.RenewSessionRequest{SessionId: id}))
			wantNotFound(t, "renew expired", err)
			if n := s.MustCmd(t, "EXISTS", sessionKey(id)); n != "0" {
				t.Fatal("expired session resurrected")
			}
		})
	}
}

// Two daemons on one Redis: a session one creates, the other reads,
// renews and closes.
func TestAPISessionTwoHosts(t *testing.T) {
	s := redistest.Start(t)
	cfg := rateLimitConfig(t, s.Addr, 3, "")
	url1, hc1 := apiServer(t, newHost(t, cfg))
	url2, hc2 := apiServer(t, newHost(t, cfg))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c1 := coordhostv1connect.NewSessionServiceClient(hc1, url1, connect.WithGRPC())
	c2 := coordhostv1connect.NewSessionServiceClient(hc2, url2, connect.WithGRPC())

	cr, err := c1.CreateSession(ctx, connect.NewRequest(&coordhostv1.CreateSessionRequest{Ttl: durationpb.New(30 * time.Second)}))
	if err != nil {
		t.Fatal(err)
	}
	id := cr.Msg.GetSession().GetSessionId()
	gr, err := c2.GetSession(ctx, connect.NewRequest(&coordhostv1.GetSessionRequest{SessionId: id}))
	if err != nil || gr.Msg.GetSession().GetTtl().AsDuration() != 30*time.Second {
		t.Fatalf("get on the other daemon: %v %v", gr, err)
	}
	rr, err := c2.RenewSession(ctx, connect.NewRequest(&coordhostv1.RenewSessionRequest{SessionId: id}))
	if err != nil || rr.Msg.GetSession().GetExpiresAt().AsTime().Before(cr.Msg.GetSession().GetExpiresAt().AsTime().Add(-time.Millisecond)) {
		t.Fatalf("renew on the other daemon: %v %v", rr, err)
	}
	cl, err := c2.CloseSession(ctx, connect.NewRequest(&coordhostv1.CloseSessionRequest{SessionId: id}))
	if err != nil || !cl.Msg.GetClosed() {
		t.Fatalf("close on the other daemon: %v %v", cl, err)
	}
	_, err = c1.GetSession(ctx, connect.NewRequest(&coordhostv1.GetSessionRequest{SessionId: id}))
	wantNotFound(t, "get on the first daemon after close", err)
}

// KeepAlive over gRPC: each request renews and answers the new expiry; a
// stream's end closes the session only with release_on_disconnect; a
// session gone while the stream is open ends it with NotFound; another
// session's id ends it with InvalidArgument.
func TestAPISessionKeepAlive(t *testing.T) {
	s := redistest.Start(t)
	h := newHost(t, rateLimitConfig(t, s.Addr, 3, ""))
	url, hc := apiServer(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := coordhostv1connect.NewSessionServiceClient(hc, url, connect.WithGRPC())

	create := func(rod bool) *coordhostv1.Session {
		t.Helper()
		cr, err := c.CreateSession(ctx, connect.NewRequest(&coordhostv1.CreateSessionRequest{Ttl: durationpb.New(20 * time.Second), ReleaseOnDisconnect: rod}))
		if err != nil {
			t.Fatal(err)
		}
		return cr.Msg.GetSession()
	}
	// keep sends n requests for id on st, checking each answer.
	keep := func(st *connect.BidiStreamForClient[coordhostv1.KeepAliveRequest, coordhostv1.KeepAliveResponse], sess *coordhostv1.Session, n int) {
		t.Helper()
		last := sess.GetExpiresAt().AsTime()
		for i := 0; i < n; i++ {
			if err := st.Send(&coordhostv1.KeepAliveRequest{SessionId: sess.GetSessionId()}); err != nil {
				t.Fatal(err)
			}
			r, err := st.Receive()
			if err != nil {
				t.Fatal(err)
			}
			got := r.GetSession()
			if got.GetSessionId() != sess.GetSessionId() || got.GetExpiresAt().AsTime().Before(last.Add(-time.Millisecond)) ||
				got.GetReleaseOnDisconnect() != sess.GetReleaseOnDisconnect() {
				t.Fatalf("keepalive %d: %v, before %v", i, got, last)
			}
			last = got.GetExpiresAt().AsTime()
		}
	}
	// end half-closes st and reads it to its end.
	end := func(st *connect.BidiStreamForClient[coordhostv1.KeepAliveRequest, coordhostv1.KeepAliveResponse]) error {
		t.Helper()
		if err := st.CloseRequest(); err != nil {
			t.Fatal(err)
		}
		for {
			if _, err := st.Receive(); err != nil {
				st.CloseResponse()
				if errors.Is(err, io.EOF) {
					return nil
				}
				return err
			}
		}
	}
	get := func(id string) error {
		_, err := c.GetSession(ctx, connect.NewRequest(&coordhostv1.GetSessionRequest{SessionId: id}))
		return err
	}

	t.Run("half-close", func(t *testing.T) {
		for _, rod := range []bool{false, true} {
			sess := create(rod)
			st := c.KeepAlive(ctx)
			keep(st, sess, 3)
			if err := end(st); err != nil {
				t.Fatalf("rod %v: stream end: %v", rod, err)
			}
			// The server's release runs before its handler returns, so
			// before the client reads the stream's end.
			err := get(sess.GetSessionId())
			if rod {
				wantNotFound(t, "released on disconnect", err)
			} else if err != nil {
				t.Fatalf("session ended with its stream: %v", err)
			}
		}
	})

	t.Run("cancel", func(t *testing.T) {
		for _, rod := range []bool{false, true} {
			sess := create(rod)
			sctx, scancel := context.WithCancel(ctx)
			st := c.KeepAlive(sctx)
			keep(st, sess, 1)
			scancel()
			st.CloseRequest()
			st.CloseResponse()
			if rod {
				waitGone(t, ctx, c, sess.GetSessionId())
			} else if err := get(sess.GetSessionId()); err != nil {
				t.Fatalf("session ended with its cancelled stream: %v", err)
			}
		}
	})

	t.Run("drain", func(t *testing.T) {
		// Subtests run in order: this one last but for those below,
		// which do not depend on release_on_disconnect.
		sess := create(true)
		st := c.KeepAlive(ctx)
		keep(st, sess, 1)
		h.Drain() // the daemon is stopping: a stream ending now is not the client leaving
		if err := end(st); err != nil {
			t.Fatalf("stream end while draining: %v", err)
		}
		if err := get(sess.GetSessionId()); err != nil {
			t.Fatalf("a draining daemon ended a release_on_disconnect session: %v", err)
		}
	})

	t.Run("gone while open", func(t *testing.T) {
		sess := create(false)
		st := c.KeepAlive(ctx)
		keep(st, sess, 1)
		// As an expiry would: the key goes behind the stream's back.
		s.MustCmd(t, "DEL", sessionKey(sess.GetSessionId()))
		if err := st.Send(&coordhostv1.KeepAliveRequest{SessionId: sess.GetSessionId()}); err != nil {
			t.Fatal(err)
		}
		_, err := st.Receive()
		wantNotFound(t, "keepalive of a gone session", err)
		st.CloseRequest()
		st.CloseResponse()
		if n := s.MustCmd(t, "EXISTS", sessionKey(sess.GetSessionId())); n != "0" {
			t.Fatal("keepalive resurrected the session")
		}
	})

	t.Run("bad input", func(t *testing.T) {
		for _, tc := range []struct {
			name  string
			first bool // only a bad first request
		}{{"malformed", true}, {"another session", false}} {
			sess := create(false)
			st := c.KeepAlive(ctx)
			bad := "nope"
			if !tc.first {
				keep(st, sess, 1)
				bad = create(false).GetSessionId()
			}
			if err := st.Send(&coordhostv1.KeepAliveRequest{SessionId: bad}); err != nil {
				t.Fatal(err)
			}
			_, err := st.Receive()
			d := errDetail(t, err)
			if connect.CodeOf(err) != connect.CodeInvalidArgument || d == nil || d.Field != "session_id" {
				t.Fatalf("%s: %v (detail %v), want InvalidArgument naming session_id", tc.name, err, d)
			}
			st.CloseRequest()
			st.CloseResponse()
		}
	})
}
