package host_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	coordhostv1 "github.com/coordhost/coordhost/gen/coordhost/v1"
	"github.com/coordhost/coordhost/internal/redistest"
)

// pttlOf returns key's PTTL in ms.
func pttlOf(t *testing.T, s *redistest.Server, key string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s.MustCmd(t, "PTTL", key), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// expiryOf returns key's absolute expiry (PEXPIRETIME, Unix ms); it fails
// the test when the key is gone or has no TTL.
func expiryOf(t *testing.T, s *redistest.Server, key string) int64 {
	t.Helper()
	at, err := strconv.ParseInt(s.MustCmd(t, "PEXPIRETIME", key), 10, 64)
	if err != nil || at < 0 {
		t.Fatalf("%s: PEXPIRETIME %s: %d %v", s.Addr, key, at, err)
	}
	return at
}

// A grant taken with a session gets the session's TTL, is listed by
// GetSession, renewed by RenewSession and KeepAlive, released by
// CloseSession; a session full of grants or gone refuses more and holds
// nothing; a session that is not renewed takes its grants with it.
func TestAPILockSession(t *testing.T) {
	s := redistest.Start(t)
	h := newHost(t, rateLimitConfig(t, s.Addr, 3, lockBlocks))
	url, hc := apiServer(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := newLockClients(hc, url, connect.WithGRPC())

	sid := newSession(t, ctx, c.sess, 5*time.Second)
	a, err := c.lock.Acquire(ctx, connect.NewRequest(&coordhostv1.AcquireLockRequest{Name: "invoice", SessionId: sid}))
	if err != nil {
		t.Fatal(err)
	}
	g := a.Msg.GetGrant()
	if g.GetSessionId() != sid || g.GetTtl().AsDuration() != 5*time.Second {
		t.Fatalf("session grant %v", g)
	}
	if p := pttlOf(t, s, "m:coordhost:lock:invoice"); p > 5000 || p < 4000 {
		t.Fatalf("a session's lock has PTTL %d, want the session's 5s", p)
	}
	got, err := c.sess.GetSession(ctx, connect.NewRequest(&coordhostv1.GetSessionRequest{SessionId: sid}))
	if err != nil {
		t.Fatal(err)
	}
	if gs := got.Msg.GetGrants(); len(gs) != 1 || gs[0].GetGrantId() != g.GetGrantId() || gs[0].GetFencingToken() != g.GetFencingToken() {
		t.Fatalf("GetSession lists %v", gs)
	}

	// Renewing the session renews its lock.
	s.MustCmd(t, "PEXPIRE", "m:coordhost:lock:invoice", "1000")
	if _, err := c.sess.RenewSession(ctx, connect.NewRequest(&coordhostv1.RenewSessionRequest{SessionId: sid})); err != nil {
		t.Fatal(err)
	}
	if p := pttlOf(t, s, "m:coordhost:lock:invoice"); p < 4000 {
		t.Fatalf("RenewSession left the lock's PTTL at %d", p)
	}
	ka := c.sess.KeepAlive(ctx)
	s.MustCmd(t, "PEXPIRE", "m:coordhost:lock:invoice", "1000")
	if err := ka.Send(&coordhostv1.KeepAliveRequest{SessionId: sid}); err != nil {
		t.Fatal(err)
	}
	if _, err := ka.Receive(); err != nil {
		t.Fatal(err)
	}
	if p := pttlOf(t, s, "m:coordhost:lock:invoice"); p < 4000 {
		t.Fatalf("KeepAlive left the lock's PTTL at %d", p)
	}
	ka.CloseRequest()
	ka.CloseResponse()

	// Closing releases: the next holder gets the lock at once, with a
	// higher fencing token.
	cl, err := c.sess.CloseSession(ctx, connect.NewRequest(&coordhostv1.CloseSessionRequest{SessionId: sid}))
	if err != nil || !cl.Msg.GetClosed() || cl.Msg.GetReleasedGrants() != 1 {
		t.Fatalf("CloseSession: %v %v", cl, err)
	}
	next, err := c.lock.TryAcquire(ctx, connect.NewRequest(&coordhostv1.TryAcquireLockRequest{Name: "invoice"}))
	if err != nil {
		t.Fatalf("the lock is still held after its session closed: %v", err)
	}
	if next.Msg.GetGrant().GetFencingToken() <= g.GetFencingToken() {
		t.Fatalf("fencing token %d after %d", next.Msg.GetGrant().GetFencingToken(), g.GetFencingToken())
	}
	if _, err := c.lock.Release(ctx, connect.NewRequest(&coordhostv1.ReleaseLockRequest{GrantId: next.Msg.GetGrant().GetGrantId()})); err != nil {
		t.Fatal(err)
	}

	// A session that is gone: NotFound, and nothing held.
	_, err = c.lock.Acquire(ctx, connect.NewRequest(&coordhostv1.AcquireLockRequest{Name: "invoice", SessionId: sid}))
	wantCode(t, "Acquire with a closed session", err, connect.CodeNotFound, coordhostv1.Reason_REASON_SESSION_NOT_FOUND, "session_id")
	if n := s.MustCmd(t, "EXISTS", "m:coordhost:lock:invoice"); n != "0" {
		t.Fatal("a lock was left held for a closed session")
	}

	// A full session refuses the next grant and holds nothing more.
	sid = newSession(t, ctx, c.sess, 30*time.Second)
	for i := range 64 {
		if _, err := c.lock.TryAcquire(ctx, connect.NewRequest(&coordhostv1.TryAcquireLockRequest{Name: "tenant", SessionId: sid,
			Attributes: map[string]string{"tenant": fmt.Sprint(i)}})); err != nil {
			t.Fatal(err)
		}
	}
	_, err = c.lock.TryAcquire(ctx, connect.NewRequest(&coordhostv1.TryAcquireLockRequest{Name: "tenant", SessionId: sid,
		Attributes: map[string]string{"tenant": "one-too-many"}}))
	wantCode(t, "a 65th grant", err, connect.CodeResourceExhausted, coordhostv1.Reason_REASON_CLIENT_LIMIT, "session_id")
	if n := s.MustCmd(t, "EXISTS", "m:coordhost:lock:tenant/one-too-many"); n != "0" {
		t.Fatal("the refused grant is still held")
	}
	cl, err = c.sess.CloseSession(ctx, connect.NewRequest(&coordhostv1.CloseSessionRequest{SessionId: sid}))
	if err != nil || cl.Msg.GetReleasedGrants() != 64 {
		t.Fatalf("CloseSession of 64 grants: %v %v", cl, err)
	}

	// Without renewals the session and its grant expire together.
	sid = newSession(t, ctx, c.sess, time.Second)
	if _, err := c.lock.TryAcquire(ctx, connect.NewRequest(&coordhostv1.TryAcquireLockRequest{Name: "invoice", SessionId: sid})); err != nil {
		t.Fatal(err)
	}
	// Absolute expiries: two PTTL reads would differ by the time between
	// them.
	se, le := expiryOf(t, s, sessionKey(sid)), expiryOf(t, s, "m:coordhost:lock:invoice")
	if le > se+50 || le < se-100 {
		t.Fatalf("the lock expires at %d ms, not with the session at %d", le, se)
	}
}

// Hold keeps a lock while the stream lasts and releases it at once when
// the client goes away, when it is released by id, when its session
// closes, and when the daemon drains.
func TestAPILockHold(t *testing.T) {
	s := redistest.Start(t)
	h := newHost(t, rateLimitConfig(t, s.Addr, 3, lockBlocks))
	url, hc := apiServer(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := newLockClients(hc, url, connect.WithGRPC())
	free := func(what string) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Second)
		for s.MustCmd(t, "EXISTS", "m:coordhost:lock:short") != "0" {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the lock is still held", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	// Renewals every ttl/3 (300ms lock): the lock outlives its TTL.
	hctx, hcancel := context.WithCancel(ctx)
	st, err := c.lock.Hold(hctx, connect.NewRequest(&coordhostv1.HoldLockRequest{Name: "short"}))
	if err != nil {
		t.Fatal(err)
	}
	var msgs int
	for msgs < 8 && st.Receive() {
		msgs++
	}
	if msgs < 8 {
		t.Fatalf("%d messages, then %v", msgs, st.Err())
	}
	if s.MustCmd(t, "EXISTS", "m:coordhost:lock:short") != "1" {
		t.Fatal("the held lock expired")
	}
	start := time.Now()
	hcancel()
	st.Close()
	free("after the client cancelled")
	if el := time.Since(start); el > time.Second {
		t.Fatalf("released %v after the client left", el)
	}

	// Release by id ends the stream with NotFound (REASON_GRANT_LOST).
	st, err = c.lock.Hold(ctx, connect.NewRequest(&coordhostv1.HoldLockRequest{Name: "short"}))
	if err != nil || !st.Receive() {
		t.Fatal(err, st.Err())
	}
	if _, err := c.lock.Release(ctx, connect.NewRequest(&coordhostv1.ReleaseLockRequest{GrantId: st.Msg().GetGrant().GetGrantId()})); err != nil {
		t.Fatal(err)
	}
	for st.Receive() {
	}
	wantCode(t, "Hold after Release", st.Err(), connect.CodeNotFound, coordhostv1.Reason_REASON_GRANT_LOST, "")
	free("after Release")

	// CloseSession ends a session's Hold at once.
	sid := newSession(t, ctx, c.sess, 30*time.Second)
	st, err = c.lock.Hold(ctx, connect.NewRequest(&coordhostv1.HoldLockRequest{Name: "short", SessionId: sid}))
	if err != nil || !st.Receive() {
		t.Fatal(err, st.Err())
	}
	start = time.Now()
	if _, err := c.sess.CloseSession(ctx, connect.NewRequest(&coordhostv1.CloseSessionRequest{SessionId: sid})); err != nil {
		t.Fatal(err)
	}
	for st.Receive() {
	}
	if st.Err() == nil || time.Since(start) > 2*time.Second {
		t.Fatalf("Hold after CloseSession: %v after %v", st.Err(), time.Since(start))
	}
	free("after CloseSession")

	// A draining daemon ends its Holds with Unavailable and releases them.
	st, err = c.lock.Hold(ctx, connect.NewRequest(&coordhostv1.HoldLockRequest{Name: "short"}))
	if err != nil || !st.Receive() {
		t.Fatal(err, st.Err())
	}
	h.Drain()
	for st.Receive() {
	}
	wantCode(t, "Hold at Drain", st.Err(), connect.CodeUnavailable, coordhostv1.Reason_REASON_UNSPECIFIED, "")
	free("after Drain")
	st, err = c.lock.Hold(ctx, connect.NewRequest(&coordhostv1.HoldLockRequest{Name: "short"}))
	if err == nil {
		for st.Receive() {
		}
		err = st.Err()
	}
	wantCode(t, "Hold while drained", err, connect.CodeUnavailable, coordhostv1.Reason_REASON_UNSPECIFIED, "")
	free("a Hold refused while drained")
}

// A reload that removes the block of a held lock ends its Hold with
// NotFound (REASON_NAME_NOT_CONFIGURED) and releases the lock.
func TestAPILockHoldReloadRemoves(t *testing.T) {
	s := redistest.Start(t)
	path := rateLimitConfig(t, s.Addr, 3, lockBlocks)
	h := newHost(t, path)
	url, hc := apiServer(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := newLockClients(hc, url, connect.WithGRPC())
	st, err := c.lock.Hold(ctx, connect.NewRequest(&coordhostv1.HoldLockRequest{Name: "short"}))
	if err != nil || !st.Receive() {
		t.Fatal(err, st.Err())
	}
	src := readFile(t, path)
	if err := os.WriteFile(path, []byte(strings.Replace(src, `lock "short"`, `lock "renamed"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := h.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	for st.Receive() {
	}
	wantCode(t, "Hold after its block went", st.Err(), connect.CodeNotFound, coordhostv1.Reason_REASON_NAME_NOT_CONFIGURED, "")
	if n := s.MustCmd(t, "EXISTS", "m:coordhost:lock:short"); n != "0" {
		t.Fatal("the lock of a removed block is still held")
	}
}

// A daemon that goes away (closed without releasing anything, as a crash
// would leave it) loses no grant Redis holds: another daemon renews the
// session, lists and renews its lock by id, and closing the session there
// releases the lock to a waiter, which gets a higher fencing token.
func TestAPISessionGrantsRestart(t *testing.T) {
	s := redistest.Start(t)
	cfg := rateLimitConfig(t, s.Addr, 3, lockBlocks)
	ha := newHost(t, cfg)
	urlA, hcA := apiServer(t, ha)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := newLockClients(hcA, urlA, connect.WithGRPC())
	sid := newSession(t, ctx, a.sess, 10*time.Second)
	got, err := a.lock.Acquire(ctx, connect.NewRequest(&coordhostv1.AcquireLockRequest{Name: "invoice", SessionId: sid}))
	if err != nil {
		t.Fatal(err)
	}
	g := got.Msg.GetGrant()
	if err := ha.Close(); err != nil {
		t.Fatal(err)
	}

	hb := newHost(t, cfg)
	urlB, hcB := apiServer(t, hb)
	b := newLockClients(hcB, urlB, connect.WithProtoJSON())
	s.MustCmd(t, "PEXPIRE", "m:coordhost:lock:invoice", "2000")
	if _, err := b.sess.RenewSession(ctx, connect.NewRequest(&coordhostv1.RenewSessionRequest{SessionId: sid})); err != nil {
		t.Fatal(err)
	}
	if p := pttlOf(t, s, "m:coordhost:lock:invoice"); p < 9000 {
		t.Fatalf("B's session renewal left the lock at PTTL %d", p)
	}
	ls, err := b.sess.GetSession(ctx, connect.NewRequest(&coordhostv1.GetSessionRequest{SessionId: sid}))
	if err != nil || len(ls.Msg.GetGrants()) != 1 || ls.Msg.GetGrants()[0].GetGrantId() != g.GetGrantId() {
		t.Fatalf("B lists %v %v", ls, err)
	}
	if _, err := b.lock.Renew(ctx, connect.NewRequest(&coordhostv1.RenewLockRequest{GrantId: g.GetGrantId()})); err != nil {
		t.Fatal(err)
	}
	waited := make(chan *coordhostv1.Grant, 1)
	go func() {
		w, err := b.lock.Acquire(ctx, connect.NewRequest(&coordhostv1.AcquireLockRequest{Name: "invoice", Wait: durationpb.New(5 * time.Second)}))
		if err != nil {
			t.Error(err)
		}
		waited <- w.Msg.GetGrant()
	}()
	time.Sleep(100 * time.Millisecond)
	cl, err := b.sess.CloseSession(ctx, connect.NewRequest(&coordhostv1.CloseSessionRequest{SessionId: sid}))
	if err != nil || cl.Msg.GetReleasedGrants() != 1 {
		t.Fatalf("CloseSession at B: %v %v", cl, err)
	}
	select {
	case w := <-waited:
		if w.GetFencingToken() <= g.GetFencingToken() {
			t.Fatalf("the waiter's fencing token %d is not above %d", w.GetFencingToken(), g.GetFencingToken())
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the waiter did not get the lock when the session closed")
	}
}

// A Hold released by id at its own daemon (as `coordhost lock hold
// -server` does when CMD exits) counts as a release, not as a lock found
// gone at the Hold's end.
func TestAPILockHoldReleasedByIDMetrics(t *testing.T) {
	s := redistest.Start(t)
	h := newHost(t, rateLimitConfig(t, s.Addr, 3, lockBlocks))
	url, hc := apiServer(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := newLockClients(hc, url, connect.WithGRPC())
	st, err := c.lock.Hold(ctx, connect.NewRequest(&coordhostv1.HoldLockRequest{Name: "invoice"}))
	if err != nil || !st.Receive() {
		t.Fatal(err, st.Err())
	}
	if _, err := c.lock.Release(ctx, connect.NewRequest(&coordhostv1.ReleaseLockRequest{GrantId: st.Msg().GetGrant().GetGrantId()})); err != nil {
		t.Fatal(err)
	}
	for st.Receive() {
	}
	st.Close()
	text := scrapeAt(t, hc, url)
	if v := metricValue(text, `coordhost_lock_releases_total{lock="invoice",result="released"}`); v != 1 {
		t.Errorf("released = %v\n%s", v, grep(text, "coordhost_lock_"))
	}
	if v := metricValue(text, `coordhost_lock_lost_total{lock="invoice",reason="release_absent"}`); v != 0 {
		t.Errorf("lost (release_absent) = %v\n%s", v, grep(text, "coordhost_lock_lost"))
	}
}

// Renewals and releases by grant id and by session are counted in
// coordhost_api_grant_operations_total (the primitives' observers do not
// see the handles the daemon rebuilds for them).
func TestAPIGrantOpsMetrics(t *testing.T) {
	s := redistest.Start(t)
	h := newHost(t, rateLimitConfig(t, s.Addr, 3, lockBlocks))
	url, hc := apiServer(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := newLockClients(hc, url, connect.WithGRPC())
	a, err := c.lock.TryAcquire(ctx, connect.NewRequest(&coordhostv1.TryAcquireLockRequest{Name: "invoice"}))
	if err != nil {
		t.Fatal(err)
	}
	id := a.Msg.GetGrant().GetGrantId()
	c.lock.Renew(ctx, connect.NewRequest(&coordhostv1.RenewLockRequest{GrantId: id}))
	c.lock.Release(ctx, connect.NewRequest(&coordhostv1.ReleaseLockRequest{GrantId: id}))
	c.lock.Release(ctx, connect.NewRequest(&coordhostv1.ReleaseLockRequest{GrantId: id}))
	c.lock.Renew(ctx, connect.NewRequest(&coordhostv1.RenewLockRequest{GrantId: id}))
	sid := newSession(t, ctx, c.sess, 0)
	if _, err := c.lock.TryAcquire(ctx, connect.NewRequest(&coordhostv1.TryAcquireLockRequest{Name: "invoice", SessionId: sid})); err != nil {
		t.Fatal(err)
	}
	c.sess.RenewSession(ctx, connect.NewRequest(&coordhostv1.RenewSessionRequest{SessionId: sid}))
	c.sess.CloseSession(ctx, connect.NewRequest(&coordhostv1.CloseSessionRequest{SessionId: sid}))
	text := scrapeAt(t, hc, url)
	for series, want := range map[string]float64{
		`coordhost_api_grant_operations_total{kind="lock",op="renew",result="renewed",via="grant_id"}`:            1,
		`coordhost_api_grant_operations_total{kind="lock",op="renew",result="lost",via="grant_id"}`:               1,
		`coordhost_api_grant_operations_total{kind="lock",op="release",result="released",via="grant_id"}`:         1,
		`coordhost_api_grant_operations_total{kind="lock",op="release",result="already_released",via="grant_id"}`: 1,
		`coordhost_api_grant_operations_total{kind="lock",op="renew",result="renewed",via="session"}`:             1,
		`coordhost_api_grant_operations_total{kind="lock",op="release",result="released",via="session"}`:          1,
	} {
		if got := metricValue(text, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	if t.Failed() {
		t.Log(grep(text, "coordhost_api_grant"))
	}
}
