package host_test

// Hostile tests of the coordhost.v1 network API (issue 11): grant ids,
// sessions, Hold streams, auth and limits. Each "FINDING n" test
// reproduced a defect a hostile review found (it failed before its fix)
// and now keeps it fixed; the TestHostileHeld... tests are attacks that
// held up from the start.

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	coordhostv1 "github.com/coordhost/coordhost/gen/coordhost/v1"
	"github.com/coordhost/coordhost/gen/coordhost/v1/coordhostv1connect"
	"github.com/coordhost/coordhost/host"
	"github.com/coordhost/coordhost/internal/redistest"
)

// forgeID decodes grant id, lets mut change its JSON fields, and encodes
// it again, as a client that parses its grant ids (or forges one) would.
func forgeID(t *testing.T, id string, mut func(m map[string]any)) string {
	t.Helper()
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(id, "g1."))
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]any{}
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	mut(m)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return "g1." + base64.RawURLEncoding.EncodeToString(b)
}

// hostileSecrets are the token secrets of hostileAuthConfig.
var hostileSecrets = map[string]string{
	"victim":   "victim-secret-0123456789abcdef",
	"attacker": "attacker-secret-0123456789abcd",
}

// hostileAuthConfig is rateLimitConfig with lockBlocks and kindBlocks and
// a server block with two tokens: "victim" (names invoice, jobs) and
// "attacker" (names short, nope-*), each with max_sessions sessions.
func hostileAuthConfig(t *testing.T, addr string, maxSessions int) string {
	t.Helper()
	server := fmt.Sprintf(`
server {
  metrics_open = true
  token "victim" {
    secret_file  = "victim.token"
    names        = ["invoice", "jobs"]
    max_sessions = %d
  }
  token "attacker" {
    secret_file  = "attacker.token"
    names        = ["short", "nope-*"]
    max_sessions = %d
  }
}
`, maxSessions, maxSessions)
	path := rateLimitConfig(t, addr, 3, lockBlocks+kindBlocks+server)
	for name, secret := range hostileSecrets {
		if err := os.WriteFile(filepath.Join(filepath.Dir(path), name+".token"), []byte(secret+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// FINDING 1: the TTL inside a grant id ("l", TTLMillis) is trusted by
// Renew: a client that rewrites it renews its lock for up to a year
// (MaxAPITTL), whatever the block's ttl, and a lease beyond its block's
// max_ttl. The grant id is documented as unsigned but owner-checked; the
// owner check does not cover the TTL, which the block is supposed to
// decide ("The block decides the TTL"). A client that crashes after such
// a Renew leaves the lock held for a year.
func TestHostileForgedGrantTTL(t *testing.T) {
	s := redistest.Start(t, redistest.WithKind(redistest.Redis80))
	h := newHost(t, rateLimitConfig(t, s.Addr, 3, lockBlocks+kindBlocks))
	url, hc := apiServer(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	year := int64((365 * 24 * time.Hour) / time.Millisecond)

	lc := coordhostv1connect.NewLockServiceClient(hc, url, connect.WithGRPC())
	a, err := lc.Acquire(ctx, connect.NewRequest(&coordhostv1.AcquireLockRequest{Name: "invoice"}))
	if err != nil {
		t.Fatal(err)
	}
	forged := forgeID(t, a.Msg.GetGrant().GetGrantId(), func(m map[string]any) { m["l"] = year })
	r, err := lc.Renew(ctx, connect.NewRequest(&coordhostv1.RenewLockRequest{GrantId: forged}))
	if p := pttlOf(t, s, "m:coordhost:lock:invoice"); p > int64(31*time.Second/time.Millisecond) {
		t.Errorf("lock \"invoice\" (ttl 30s) renewed by a rewritten grant id to PTTL %dms (%v); answer %v %v",
			p, time.Duration(p)*time.Millisecond, r.Msg.GetGrant().GetTtl().AsDuration(), err)
	}

	ls := coordhostv1connect.NewLeaseServiceClient(hc, url, connect.WithGRPC())
	la, err := ls.Acquire(ctx, connect.NewRequest(&coordhostv1.AcquireLeaseRequest{Name: "jobs", Field: "nightly"}))
	if err != nil {
		t.Fatal(err)
	}
	forged = forgeID(t, la.Msg.GetGrant().GetGrantId(), func(m map[string]any) { m["l"] = year })
	if _, err := ls.Renew(ctx, connect.NewRequest(&coordhostv1.RenewLeaseRequest{GrantId: forged})); err != nil {
		t.Logf("lease Renew: %v", err)
	}
	ttl := s.MustCmd(t, "HPTTL", "m:coordhost:lease:jobs", "FIELDS", "1", "nightly")
	var ms int64
	fmt.Sscan(strings.Trim(ttl, "[] "), &ms)
	if ms > int64(time.Minute/time.Millisecond) {
		t.Errorf("lease \"jobs\" (max_ttl 1m) renewed by a rewritten grant id to HPTTL %dms", ms)
	}
}

// FINDING 2: a grant taken in a session outlives the session when renewed
// by its grant id. grant.proto says such a grant "expires with [its
// session] when it is not renewed", and Hold checks that the session
// still exists at each renewal, but Renew by id does not look at the
// session at all: the session expires, GetSession says NotFound, and the
// lock stays held for as long as its id is renewed.
func TestHostileSessionGrantOutlivesSession(t *testing.T) {
	s := redistest.Start(t)
	h := newHost(t, rateLimitConfig(t, s.Addr, 3, lockBlocks))
	url, hc := apiServer(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := newLockClients(hc, url, connect.WithGRPC())
	sid := newSession(t, ctx, c.sess, time.Second)
	a, err := c.lock.Acquire(ctx, connect.NewRequest(&coordhostv1.AcquireLockRequest{Name: "invoice", SessionId: sid}))
	if err != nil {
		t.Fatal(err)
	}
	id := a.Msg.GetGrant().GetGrantId()
	var renewErr error
	for end := time.Now().Add(2500 * time.Millisecond); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		if _, renewErr = c.lock.Renew(ctx, connect.NewRequest(&coordhostv1.RenewLockRequest{GrantId: id})); renewErr != nil {
			break
		}
	}
	if s.MustCmd(t, "EXISTS", sessionKey(sid)) != "0" {
		t.Fatal("the session is still there")
	}
	_, err = c.sess.GetSession(ctx, connect.NewRequest(&coordhostv1.GetSessionRequest{SessionId: sid}))
	wantNotFound(t, "GetSession", err)
	if s.MustCmd(t, "EXISTS", "m:coordhost:lock:invoice") == "1" {
		t.Errorf("session %s expired, yet its grant on \"invoice\" is still held (last Renew: %v)", sid, renewErr)
	}
}

// FINDING 3: Release by grant id ends the Hold stream serving the
// ownership token inside the id, whatever Release found: it calls
// holds.end(r.Token) before looking at the result, and the token is not
// tied to the name, key or kind of the Hold. So a caller whose token may
// only use "short" ends (and so releases) another token's Hold on
// "invoice" with a forged id {n: "short", t: <the victim's ownership
// token>}: its Release answers ALREADY_RELEASED, yet the victim's Hold
// ends with GRANT_LOST and the lock is released. The ownership token is
// not the grant id: Grant.ownership_token is handed out "to check the
// grant out of band".
func TestHostileForgedReleaseEndsOthersHold(t *testing.T) {
	s := redistest.Start(t, redistest.WithKind(redistest.Redis80))
	h := newHost(t, hostileAuthConfig(t, s.Addr, 10))
	url, hc := apiServer(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	victim := coordhostv1connect.NewLockServiceClient(withToken(hc, hostileSecrets["victim"]), url, connect.WithGRPC())
	attacker := coordhostv1connect.NewLockServiceClient(withToken(hc, hostileSecrets["attacker"]), url, connect.WithGRPC())

	hctx, hcancel := context.WithCancel(ctx)
	defer hcancel()
	st, err := victim.Hold(hctx, connect.NewRequest(&coordhostv1.HoldLockRequest{Name: "invoice"}))
	if err != nil {
		t.Fatal(err)
	}
	if !st.Receive() {
		t.Fatal(st.Err())
	}
	g := st.Msg().GetGrant()
	ended := make(chan error, 1)
	go func() {
		for st.Receive() {
		}
		ended <- st.Err()
	}()

	// The attacker may not touch "invoice".
	_, err = attacker.Release(ctx, connect.NewRequest(&coordhostv1.ReleaseLockRequest{GrantId: g.GetGrantId()}))
	if connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("the attacker released the victim's own grant id: %v", err)
	}
	forged := forgeID(t, g.GetGrantId(), func(m map[string]any) {
		m["n"], m["y"], m["x"], m["l"] = "short", "short", 0, 300
	})
	rel, err := attacker.Release(ctx, connect.NewRequest(&coordhostv1.ReleaseLockRequest{GrantId: forged}))
	t.Logf("forged Release on \"short\": %v %v", rel.Msg.GetResult(), err)
	select {
	case err := <-ended:
		t.Errorf("the victim's Hold on \"invoice\" ended after the attacker released \"short\": %v; lock key exists=%s",
			err, s.MustCmd(t, "EXISTS", "m:coordhost:lock:invoice"))
	case <-time.After(time.Second):
	}
}

// FINDING 4: max_sessions is evaded by a session kept alive through its
// acquisitions. session_attach.lua renews the session's key (PEXPIRE)
// when a grant is attached, but the token's quota set
// (coordhost:session-quota:<token>) keeps the session's expiry from its
// creation or last RenewSession/KeepAlive; once that passes, the next
// CreateSession prunes it and counts one session fewer than live. With
// max_sessions = 1 the token ends up with two live sessions (and, by
// repeating, any number).
func TestHostileSessionQuotaEvadedByAttach(t *testing.T) {
	s := redistest.Start(t, redistest.WithKind(redistest.Redis80))
	h := newHost(t, hostileAuthConfig(t, s.Addr, 1))
	url, hc := apiServer(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := newLockClients(withToken(hc, hostileSecrets["victim"]), url, connect.WithGRPC())

	sid := newSession(t, ctx, c.sess, time.Second)
	if _, err := c.sess.CreateSession(ctx, connect.NewRequest(&coordhostv1.CreateSessionRequest{Ttl: durationpb.New(time.Second)})); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("second session at once: %v, want ResourceExhausted", err)
	}
	// Keep the session alive by acquiring through it, never renewing it.
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(300 * time.Millisecond) {
		a, err := c.lock.TryAcquire(ctx, connect.NewRequest(&coordhostv1.TryAcquireLockRequest{Name: "invoice", SessionId: sid}))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.lock.Release(ctx, connect.NewRequest(&coordhostv1.ReleaseLockRequest{GrantId: a.Msg.GetGrant().GetGrantId()})); err != nil {
			t.Fatal(err)
		}
	}
	if s.MustCmd(t, "EXISTS", sessionKey(sid)) != "1" {
		t.Fatal("the first session expired")
	}
	cs2, err := c.sess.CreateSession(ctx, connect.NewRequest(&coordhostv1.CreateSessionRequest{Ttl: durationpb.New(time.Minute)}))
	if err == nil {
		t.Errorf("max_sessions = 1, session %s live, yet CreateSession made %s", sid, cs2.Msg.GetSession().GetSessionId())
	}
}

// FINDING 5: every acquisition of a name that no block has still creates
// Prometheus series labelled with that name
// (coordhost_lock_acquisitions_total{name=...,outcome="error"} and a
// coordhost_lock_wait_duration_seconds histogram, likewise for
// semaphores, rwlocks and leases): host.Lock.acquire observes before
// knowing the name is configured. Over the API the name is the client's:
// an open daemon, or a token whose names hold a pattern ("nope-*"),
// grows the daemon's memory and /metrics without bound, one histogram per
// request.
func TestHostileUnconfiguredNamesGrowMetrics(t *testing.T) {
	s := redistest.Start(t, redistest.WithKind(redistest.Redis80))
	h := newHost(t, hostileAuthConfig(t, s.Addr, 10))
	url, hc := apiServer(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ahc := withToken(hc, hostileSecrets["attacker"])
	lc := coordhostv1connect.NewLockServiceClient(ahc, url, connect.WithGRPC())
	sc := coordhostv1connect.NewSemaphoreServiceClient(ahc, url, connect.WithGRPC())
	wc := coordhostv1connect.NewRWLockServiceClient(ahc, url, connect.WithGRPC())
	ec := coordhostv1connect.NewLeaseServiceClient(ahc, url, connect.WithGRPC())
	const n = 50
	for i := range n {
		name := fmt.Sprintf("nope-%d", i)
		_, err := lc.TryAcquire(ctx, connect.NewRequest(&coordhostv1.TryAcquireLockRequest{Name: name}))
		wantCode(t, "TryAcquire "+name, err, connect.CodeNotFound, coordhostv1.Reason_REASON_NAME_NOT_CONFIGURED, "")
		sc.TryAcquire(ctx, connect.NewRequest(&coordhostv1.TryAcquireSemaphoreRequest{Name: name}))
		wc.TryAcquire(ctx, connect.NewRequest(&coordhostv1.TryAcquireRWLockRequest{Name: name, Mode: coordhostv1.LockMode_LOCK_MODE_READ}))
		ec.TryAcquire(ctx, connect.NewRequest(&coordhostv1.TryAcquireLeaseRequest{Name: name, Field: "f"}))
	}
	// The metrics (metrics_open: no token needed).
	text := scrapeAt(t, hc, url)
	series := 0
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, `="nope-`) {
			series++
		}
	}
	if series > 0 {
		t.Errorf("%d NotFound acquisitions of unconfigured names left %d metric lines naming them (%d bytes of /metrics)", 4*n, series, len(text))
	}
}

// FINDING 6: AdminService.Validate evaluates a sent configuration's
// expressions with cty's format(), whose width is unbounded (Go's fmt caps
// %d's width, but cty pads %s itself): format("%100000000s", "x") in a
// 68-byte source makes the daemon allocate ~380 MB and spend half a
// second of CPU scanning grapheme clusters, and a 64 KiB source holds a
// thousand such calls (join() keeps them all live at once). The sandbox keeps files and the environment out
// of reach but not memory: one request can exhaust the daemon (open
// without tokens; admin tokens otherwise).
func TestHostileValidateFormatWidth(t *testing.T) {
	s := redistest.Start(t)
	h := newHost(t, rateLimitConfig(t, s.Addr, 3, ""))
	url, hc := apiServer(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ac := coordhostv1connect.NewAdminServiceClient(hc, url, connect.WithGRPC())
	src := `lock "a" {
  ttl = format("%100000000s", "x") == "" ? "1s" : "2s"
}
`
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	r, err := ac.Validate(ctx, connect.NewRequest(&coordhostv1.ValidateRequest{Source: []byte(src)}))
	runtime.ReadMemStats(&after)
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("Validate: %v %v in %v, %d MB allocated", r.Msg, err, time.Since(start), alloc>>20)
	if alloc > 50<<20 {
		t.Errorf("one Validate of a %d-byte source allocated %d MB", len(src), alloc>>20)
	}
}

// FINDING 7: an acquisition refused because its session already holds
// MaxSessionGrants (64) grants is refused only after the grant was taken
// in Redis, then released again: takeGrant reads the session (which
// lists its grants) before acquiring, but counts them only in
// session_attach.lua, afterwards. So a request that gets
// RESOURCE_EXHAUSTED (REASON_CLIENT_LIMIT) has written: the fencing
// counter of "invoice" moved on (fencing tokens are burnt), the lock was
// held for a round trip (another client's TryAcquire at that moment is
// refused), and a blocking Acquire with such a session waits for (and
// takes) a lock it is then bound to give back. docs/api.md: a bad
// request "writes nothing".
func TestHostileFullSessionAcquiresFirst(t *testing.T) {
	s := redistest.Start(t)
	h := newHost(t, rateLimitConfig(t, s.Addr, 3, lockBlocks))
	url, hc := apiServer(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := newLockClients(hc, url, connect.WithGRPC())
	sid := newSession(t, ctx, c.sess, time.Minute)
	for i := range host.MaxSessionGrants {
		if _, err := c.lock.TryAcquire(ctx, connect.NewRequest(&coordhostv1.TryAcquireLockRequest{
			Name: "tenant", Attributes: map[string]string{"tenant": fmt.Sprint(i)}, SessionId: sid})); err != nil {
			t.Fatal(err)
		}
	}
	before := s.MustCmd(t, "KEYS", "m:*invoice*")
	for range 3 {
		_, err := c.lock.TryAcquire(ctx, connect.NewRequest(&coordhostv1.TryAcquireLockRequest{Name: "invoice", SessionId: sid}))
		wantCode(t, "65th grant", err, connect.CodeResourceExhausted, coordhostv1.Reason_REASON_CLIENT_LIMIT, "session_id")
	}
	after := s.MustCmd(t, "KEYS", "m:*invoice*")
	// The next holder's fencing token says how many were handed out.
	a, err := c.lock.TryAcquire(ctx, connect.NewRequest(&coordhostv1.TryAcquireLockRequest{Name: "invoice"}))
	if err != nil {
		t.Fatal(err)
	}
	if f := a.Msg.GetGrant().GetFencingToken(); f != 1 || before != after {
		t.Errorf("three refused acquisitions wrote to Redis: keys %q -> %q; the first real holder's fencing token is %d, want 1", before, after, f)
	}
}

// FINDING 8: with tokens configured, a unary call's body is read in full
// before the token is looked at (connect decodes a unary request before
// it runs the interceptors, and authInterceptor is the only check), and
// nothing bounds how long that read may take (no read deadline on API
// request bodies). A client without any token opens streams whose gRPC
// message never completes: each pins a handler goroutine and the up to
// 64 KiB it sent, for as long as the connection lives (HTTP/2 PINGs are
// answered by the client's transport, so the keep-alive never closes
// it). max_streams and max_sessions cannot apply: there is no token.
func TestHostileUnauthenticatedSlowBody(t *testing.T) {
	s := redistest.Start(t, redistest.WithKind(redistest.Redis80))
	h := newHost(t, hostileAuthConfig(t, s.Addr, 10))
	url, hc := apiServer(t, h)

	const streams = 100
	const sent = 60 << 10
	var pipes []*io.PipeWriter
	defer func() {
		for _, p := range pipes {
			p.Close()
		}
	}()
	answered := make(chan int, streams)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	g0 := runtime.NumGoroutine()
	for range streams {
		pr, pw := io.Pipe()
		pipes = append(pipes, pw)
		req, err := http.NewRequest("POST", url+coordhostv1connect.LockServiceAcquireProcedure, pr)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/grpc")
		req.Header.Set("Te", "trailers")
		go func() {
			resp, err := hc.Do(req)
			if err == nil {
				answered <- resp.StatusCode
				resp.Body.Close()
			}
		}()
		// A gRPC message announced at 64000 bytes, of which 60 KiB come.
		go func() {
			pw.Write([]byte{0, 0, 0, 0xfa, 0x00})
			pw.Write(make([]byte, sent))
		}()
	}
	time.Sleep(2 * time.Second)
	runtime.ReadMemStats(&after)
	g1 := runtime.NumGoroutine()
	t.Logf("%d unauthenticated stalled calls: %d goroutines more, heap in use %+d KB (client and server in one process); %d answered",
		streams, g1-g0, (int64(after.HeapInuse)-int64(before.HeapInuse))>>10, len(answered))
	if len(answered) < streams {
		t.Errorf("%d of %d calls without a token still open after 2s (the daemon reads their bodies before asking for a token)", streams-len(answered), streams)
	}
}

// FINDING 9: Host.Shutdown(ctx) is documented to wait "bounded by ctx"
// for in-flight calls, but it waits for every Hold stream without a
// bound (holds.wg.Wait): a Hold whose handler is stuck in Send (its
// client advertised an HTTP/2 window of 0, or simply stopped reading)
// never sees Drain's cancellation, so Shutdown hangs past its deadline,
// and Close ("Shutdown without waiting") hangs too. `coordhost serve`
// escapes only because it closes the HTTP server's connections first;
// an embedder that shuts the Host down before its server hangs.
func TestHostileShutdownHangsOnStuckHold(t *testing.T) {
	s := redistest.Start(t)
	h := newHost(t, rateLimitConfig(t, s.Addr, 3, lockBlocks))
	url, _ := apiServer(t, h)

	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fr := http2.NewFramer(conn, conn)
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	// A window of 0: the daemon may send headers, but no DATA.
	if err := fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0}); err != nil {
		t.Fatal(err)
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "x"},
		{":path", coordhostv1connect.LockServiceHoldProcedure}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	msg, _ := proto.Marshal(&coordhostv1.HoldLockRequest{Name: "invoice"})
	body := append([]byte{0, 0, 0, 0, byte(len(msg))}, msg...)
	if err := fr.WriteData(1, true, body); err != nil {
		t.Fatal(err)
	}
	go func() { // read (and so acknowledge) whatever comes
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			if p, ok := f.(*http2.PingFrame); ok && !p.IsAck() {
				fr.WritePing(true, p.Data)
			}
			if st, ok := f.(*http2.SettingsFrame); ok && !st.IsAck() {
				fr.WriteSettingsAck()
			}
		}
	}()
	for i := 0; s.MustCmd(t, "EXISTS", "m:coordhost:lock:invoice") != "1"; i++ {
		if i > 100 {
			t.Fatal("the Hold did not take the lock")
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)

	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		done <- h.Shutdown(ctx)
	}()
	select {
	case err := <-done:
		t.Logf("Shutdown: %v", err)
	case <-time.After(4 * time.Second):
		t.Errorf("Host.Shutdown with a 1s ctx still running after 4s (a Hold stuck in Send)")
		conn.Close() // unblocks it, for the cleanup
		<-done
	}
}

// FINDING 10: a reload that takes a name away from a token stops its
// Renew and Release by grant id (PermissionDenied) and ends its Hold
// streams, but not the renewals of its sessions: RenewSession and
// KeepAlive renew every grant attached to the session (renewSessionGrants)
// without asking whether the caller's token may still use the grant's
// name. So a token whose "invoice" permission was revoked keeps the lock
// on "invoice" for as long as it keeps its session alive.
func TestHostileSessionRenewsRevokedName(t *testing.T) {
	s := redistest.Start(t, redistest.WithKind(redistest.Redis80))
	path := hostileAuthConfig(t, s.Addr, 10)
	h := newHost(t, path)
	url, hc := apiServer(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := newLockClients(withToken(hc, hostileSecrets["victim"]), url, connect.WithGRPC())
	sid := newSession(t, ctx, c.sess, 10*time.Second)
	a, err := c.lock.Acquire(ctx, connect.NewRequest(&coordhostv1.AcquireLockRequest{Name: "invoice", SessionId: sid}))
	if err != nil {
		t.Fatal(err)
	}
	// The operator takes "invoice" away from the token.
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(src), `names        = ["invoice", "jobs"]`, `names        = ["jobs"]`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := h.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = c.lock.Renew(ctx, connect.NewRequest(&coordhostv1.RenewLockRequest{GrantId: a.Msg.GetGrant().GetGrantId()}))
	if connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("Renew after the reload: %v, want PermissionDenied", err)
	}
	s.MustCmd(t, "PEXPIRE", "m:coordhost:lock:invoice", "2000")
	if _, err := c.sess.RenewSession(ctx, connect.NewRequest(&coordhostv1.RenewSessionRequest{SessionId: sid})); err != nil {
		t.Fatal(err)
	}
	if p := pttlOf(t, s, "m:coordhost:lock:invoice"); p > 2000 {
		t.Errorf("RenewSession renewed the lock on \"invoice\" (PTTL %dms) for a token that may no longer use it", p)
	}
}

// FINDING 11: without token blocks the API is open, which docs/security.md
// presents as safe on loopback ("serve logs a warning when it listens
// beyond loopback that way"). But the daemon answers any Host and any
// Origin: a web page the developer visits can rebind its own DNS name to
// 127.0.0.1 and then POST Connect JSON as a same-origin request (Host:
// attacker's name, Origin: the attacker's page), taking and releasing
// locks and calling AdminService.Reload on the loopback daemon of
// `make run`. Nothing checks that Host is the listen address (or an IP,
// or localhost) or refuses a browser's cross-site Origin.
func TestHostileForeignHostAndOrigin(t *testing.T) {
	s := redistest.Start(t)
	h := newHost(t, rateLimitConfig(t, s.Addr, 3, lockBlocks))
	url, _ := apiServer(t, h)
	req, err := http.NewRequest("POST", url+coordhostv1connect.LockServiceAcquireProcedure, strings.NewReader(`{"name":"invoice"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "rebind.attacker.example:7379"
	req.Header.Set("Origin", "http://rebind.attacker.example:7379")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode == 200 || s.MustCmd(t, "EXISTS", "m:coordhost:lock:invoice") == "1" {
		t.Errorf("a request with Host %q and Origin %q took the lock: %d %s", req.Host, req.Header.Get("Origin"), resp.StatusCode, b)
	}
}

// FINDING 12: max_streams bounds a token's Hold, KeepAlive and Wait
// streams, but the same long wait is open to it as unary calls, without
// any bound: Acquire with wait up to 1h (or unset: until the retry policy
// gives up) parks a handler and a waiter per call for as long as the lock
// stays held. A token with max_streams = 2 has its third Hold refused and
// then parks 50 Acquire calls (any number) on the same lock.
func TestHostileUnaryWaitsEscapeMaxStreams(t *testing.T) {
	s := redistest.Start(t, redistest.WithKind(redistest.Redis80))
	path := hostileAuthConfig(t, s.Addr, 10)
	src, _ := os.ReadFile(path)
	os.WriteFile(path, []byte(strings.Replace(string(src), `secret_file  = "victim.token"`, `secret_file  = "victim.token"
    max_streams  = 2`, 1)), 0o644)
	h := newHost(t, path)
	url, hc := apiServer(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lc := coordhostv1connect.NewLockServiceClient(withToken(hc, hostileSecrets["victim"]), url, connect.WithGRPC())
	// Two streams: a Hold that has the lock and one waiting for it.
	hctx, hcancel := context.WithCancel(ctx)
	defer hcancel()
	first, err := lc.Hold(hctx, connect.NewRequest(&coordhostv1.HoldLockRequest{Name: "invoice"}))
	if err != nil || !first.Receive() {
		t.Fatalf("first Hold: %v %v", err, first.Err())
	}
	go func() { // waits for the lock (Hold answers its headers with the grant)
		if second, err := lc.Hold(hctx, connect.NewRequest(&coordhostv1.HoldLockRequest{Name: "invoice"})); err == nil {
			second.Receive()
		}
	}()
	time.Sleep(300 * time.Millisecond)
	third, err := lc.Hold(hctx, connect.NewRequest(&coordhostv1.HoldLockRequest{Name: "invoice"}))
	if err == nil {
		third.Receive()
		err = third.Err()
	}
	if connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("third Hold: %v, want ResourceExhausted", err)
	}

	const n = 50
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	returned := make(chan error, n)
	g0 := runtime.NumGoroutine()
	for range n {
		go func() {
			_, err := lc.Acquire(wctx, connect.NewRequest(&coordhostv1.AcquireLockRequest{Name: "invoice", Wait: durationpb.New(time.Hour)}))
			returned <- err
		}()
	}
	time.Sleep(time.Second)
	t.Logf("%d Acquire calls: %d returned, %d goroutines more (client and server)", n, len(returned), runtime.NumGoroutine()-g0)
	if len(returned) == 0 {
		t.Errorf("a token with max_streams = 2 (both in use) parked %d Acquire calls with a 1h wait; none was refused", n)
	}
}

// Held up: eight clients on two daemons (one Redis) take the fenced lock
// "invoice" in turns through every path (Hold then cancel, Acquire then
// Release by id at the other daemon, a session's grant then CloseSession
// at the other daemon, a KeepAlive stream with release_on_disconnect then
// its end) while the race detector watches: never two clients inside at
// once, fencing tokens strictly increasing, nothing left in Redis but the
// fencing counter, every session's quota entry gone, no stream counted.
func TestHostileHeldLockTurnsAcrossPaths(t *testing.T) {
	s := redistest.Start(t, redistest.WithKind(redistest.Redis80))
	path := hostileAuthConfig(t, s.Addr, 100)
	ha, hb := newHost(t, path), newHost(t, path)
	urlA, hcA := apiServer(t, ha)
	urlB, hcB := apiServer(t, hb)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sec := hostileSecrets["victim"]
	a := newLockClients(withToken(hcA, sec), urlA, connect.WithGRPC())
	b := newLockClients(withToken(hcB, sec), urlB, connect.WithProtoJSON())
	bg := newLockClients(withToken(hcB, sec), urlB, connect.WithGRPC())

	var mu sync.Mutex
	inside, lastFence := 0, uint64(0)
	enter := func(g *coordhostv1.Grant) {
		mu.Lock()
		defer mu.Unlock()
		inside++
		if inside > 1 {
			t.Errorf("two holders: fencing token %d entered while another is inside", g.GetFencingToken())
		}
		if g.GetFencingToken() <= lastFence {
			t.Errorf("fencing token %d after %d", g.GetFencingToken(), lastFence)
		}
		lastFence = g.GetFencingToken()
	}
	leave := func() { mu.Lock(); inside--; mu.Unlock() }
	wait := durationpb.New(20 * time.Second)

	var wg sync.WaitGroup
	stop := time.Now().Add(3 * time.Second)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) && ctx.Err() == nil {
				switch i % 4 {
				case 0: // Hold at A, then cancel.
					hctx, hcancel := context.WithCancel(ctx)
					st, err := a.lock.Hold(hctx, connect.NewRequest(&coordhostv1.HoldLockRequest{Name: "invoice", Wait: wait}))
					if err != nil || !st.Receive() {
						t.Errorf("Hold: %v", err)
						hcancel()
						return
					}
					enter(st.Msg().GetGrant())
					leave()
					hcancel()
					st.Close()
				case 1: // Acquire at A, Release by id at B.
					r, err := a.lock.Acquire(ctx, connect.NewRequest(&coordhostv1.AcquireLockRequest{Name: "invoice", Wait: wait}))
					if err != nil {
						t.Errorf("Acquire: %v", err)
						return
					}
					enter(r.Msg.GetGrant())
					leave()
					if rel, err := b.lock.Release(ctx, connect.NewRequest(&coordhostv1.ReleaseLockRequest{GrantId: r.Msg.GetGrant().GetGrantId()})); err != nil ||
						rel.Msg.GetResult() != coordhostv1.ReleaseResult_RELEASE_RESULT_RELEASED {
						t.Errorf("Release at B: %v %v", rel, err)
					}
				case 2: // A session's grant at B, CloseSession at A.
					cs, err := b.sess.CreateSession(ctx, connect.NewRequest(&coordhostv1.CreateSessionRequest{Ttl: durationpb.New(10 * time.Second)}))
					if err != nil {
						t.Errorf("CreateSession: %v", err)
						return
					}
					sid := cs.Msg.GetSession().GetSessionId()
					r, err := b.lock.Acquire(ctx, connect.NewRequest(&coordhostv1.AcquireLockRequest{Name: "invoice", Wait: wait, SessionId: sid}))
					if err != nil {
						t.Errorf("Acquire in a session: %v", err)
						return
					}
					enter(r.Msg.GetGrant())
					leave()
					if cl, err := a.sess.CloseSession(ctx, connect.NewRequest(&coordhostv1.CloseSessionRequest{SessionId: sid})); err != nil || cl.Msg.GetReleasedGrants() != 1 {
						t.Errorf("CloseSession at A: %v %v", cl, err)
					}
				case 3: // release_on_disconnect: the KeepAlive stream's end releases.
					cs, err := bg.sess.CreateSession(ctx, connect.NewRequest(&coordhostv1.CreateSessionRequest{Ttl: durationpb.New(10 * time.Second), ReleaseOnDisconnect: true}))
					if err != nil {
						t.Errorf("CreateSession: %v", err)
						return
					}
					sid := cs.Msg.GetSession().GetSessionId()
					kctx, kcancel := context.WithCancel(ctx)
					ka := bg.sess.KeepAlive(kctx)
					if err := ka.Send(&coordhostv1.KeepAliveRequest{SessionId: sid}); err != nil {
						t.Errorf("KeepAlive: %v", err)
					}
					if _, err := ka.Receive(); err != nil {
						t.Errorf("KeepAlive: %v", err)
					}
					r, err := a.lock.Acquire(ctx, connect.NewRequest(&coordhostv1.AcquireLockRequest{Name: "invoice", Wait: wait, SessionId: sid}))
					if err != nil {
						t.Errorf("Acquire in a session: %v", err)
						kcancel()
						return
					}
					enter(r.Msg.GetGrant())
					leave()
					kcancel()
					ka.CloseResponse() // the client's transport resets the stream
					// The release runs after the stream's end, at B: wait
					// for the session to go before the next turn.
					for i := 0; s.MustCmd(t, "EXISTS", sessionKey(sid)) == "1"; i++ {
						if i > 250 {
							t.Errorf("release_on_disconnect: session %s still there", sid)
							break
						}
						time.Sleep(20 * time.Millisecond)
					}
				}
			}
		}()
	}
	wg.Wait()
	time.Sleep(200 * time.Millisecond)
	if keys := s.MustCmd(t, "KEYS", "m:*"); strings.Contains(keys, "session:") || strings.Contains(keys, "lock:invoice\n") || strings.HasSuffix(keys, "lock:invoice") {
		t.Errorf("left in Redis: %s", keys)
	}
	if n := s.MustCmd(t, "ZCARD", "m:"+host.SessionQuotaKeyPrefix+"victim"); n != "0" {
		t.Errorf("%s sessions still counted against the token", n)
	}
	t.Logf("%d turns", lastFence)
}

// Held up: rewritten grant ids that point a grant elsewhere are refused
// before Redis is asked (or answer without writing): another name's key,
// a partition of a block without a partition policy, another kind, a
// session of another token, a semaphore TTL of 0, garbage around the
// JSON, duplicate and case-folded keys; and a token cannot reach a name
// outside its patterns through a grant id.
func TestHostileHeldForgedGrantIDs(t *testing.T) {
	s := redistest.Start(t, redistest.WithKind(redistest.Redis80))
	h := newHost(t, hostileAuthConfig(t, s.Addr, 10))
	url, hc := apiServer(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	victim := newLockClients(withToken(hc, hostileSecrets["victim"]), url, connect.WithGRPC())
	attacker := coordhostv1connect.NewLockServiceClient(withToken(hc, hostileSecrets["attacker"]), url, connect.WithProtoJSON())
	sem := coordhostv1connect.NewSemaphoreServiceClient(withToken(hc, hostileSecrets["victim"]), url, connect.WithGRPC())

	a, err := victim.lock.Acquire(ctx, connect.NewRequest(&coordhostv1.AcquireLockRequest{Name: "invoice"}))
	if err != nil {
		t.Fatal(err)
	}
	id := a.Msg.GetGrant().GetGrantId()
	snapshot := func() string {
		return s.MustCmd(t, "KEYS", "*") + "|" + s.MustCmd(t, "GET", "m:coordhost:lock:invoice")
	}
	before := snapshot()
	raw := func(js string) string { return "g1." + base64.RawURLEncoding.EncodeToString([]byte(js)) }
	for _, c := range []struct {
		what string
		id   string
		code connect.Code
	}{
		{"another name's key", forgeID(t, id, func(m map[string]any) { m["n"] = "short" }), connect.CodeInvalidArgument},
		{"a partition of an unpartitioned block", forgeID(t, id, func(m map[string]any) { m["y"] = "invoice/x" }), connect.CodeInvalidArgument},
		{"a semaphore grant at LockService", forgeID(t, id, func(m map[string]any) { m["k"] = "semaphore"; delete(m, "x") }), connect.CodeInvalidArgument},
		{"a negative ttl", forgeID(t, id, func(m map[string]any) { m["l"] = -1 }), connect.CodeInvalidArgument},
		{"a ttl beyond MaxAPITTL", forgeID(t, id, func(m map[string]any) { m["l"] = int64(host.MaxAPITTL/time.Millisecond) + 1 }), connect.CodeInvalidArgument},
		{"a token with a space", forgeID(t, id, func(m map[string]any) { m["t"] = "a b" }), connect.CodeInvalidArgument},
		{"a bad session id", forgeID(t, id, func(m map[string]any) { m["s"] = "../x" }), connect.CodeInvalidArgument},
		{"trailing JSON", raw(`{"k":"lock","n":"invoice","y":"invoice","t":"T","l":1}{}`), connect.CodeInvalidArgument},
		{"an unknown field", raw(`{"k":"lock","n":"invoice","y":"invoice","t":"T","l":1,"z":1}`), connect.CodeInvalidArgument},
		{"a float ttl", raw(`{"k":"lock","n":"invoice","y":"invoice","t":"T","l":1.5}`), connect.CodeInvalidArgument},
		{"padding", id + "==", connect.CodeInvalidArgument},
		{"standard base64", strings.ReplaceAll(strings.ReplaceAll(id, "-", "+"), "_", "/") + "+", connect.CodeInvalidArgument},
	} {
		_, err := victim.lock.Renew(ctx, connect.NewRequest(&coordhostv1.RenewLockRequest{GrantId: c.id}))
		if connect.CodeOf(err) != c.code {
			t.Errorf("Renew of %s: %v, want %v", c.what, err, c.code)
		}
		_, err = victim.lock.Release(ctx, connect.NewRequest(&coordhostv1.ReleaseLockRequest{GrantId: c.id}))
		if connect.CodeOf(err) != c.code {
			t.Errorf("Release of %s: %v, want %v", c.what, err, c.code)
		}
	}
	if after := snapshot(); after != before {
		t.Errorf("refused grant ids wrote to Redis: %q -> %q", before, after)
	}
	// Case-folded and duplicate keys parse (encoding/json), but reach only
	// what they name: a wrong token is not owned.
	for _, js := range []string{
		`{"K":"lock","N":"invoice","Y":"invoice","T":"WRONG","L":30000}`,
		`{"k":"lock","n":"invoice","y":"invoice","t":"WRONG","t":"WRONG2","l":30000}`,
	} {
		rel, err := victim.lock.Release(ctx, connect.NewRequest(&coordhostv1.ReleaseLockRequest{GrantId: raw(js)}))
		if err != nil || rel.Msg.GetResult() != coordhostv1.ReleaseResult_RELEASE_RESULT_NOT_OWNED {
			t.Errorf("Release of %s: %v %v, want NOT_OWNED", js, rel, err)
		}
		_, err = victim.lock.Renew(ctx, connect.NewRequest(&coordhostv1.RenewLockRequest{GrantId: raw(js)}))
		wantCode(t, "Renew "+js, err, connect.CodeNotFound, coordhostv1.Reason_REASON_GRANT_LOST, "")
	}
	// The attacker's token may not use "invoice": not by the id, not by a
	// semaphore's service.
	_, err = attacker.Renew(ctx, connect.NewRequest(&coordhostv1.RenewLockRequest{GrantId: id}))
	wantNamed(t, "attacker Renew", err, connect.CodePermissionDenied, "invoice")
	_, err = attacker.Release(ctx, connect.NewRequest(&coordhostv1.ReleaseLockRequest{GrantId: id}))
	wantNamed(t, "attacker Release", err, connect.CodePermissionDenied, "invoice")
	_, err = sem.Renew(ctx, connect.NewRequest(&coordhostv1.RenewSemaphoreRequest{GrantId: id}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("a lock's id at SemaphoreService: %v", err)
	}
	// A session of the attacker's own, used with the victim's name, and
	// the victim's session used by the attacker.
	sid := newSession(t, ctx, victim.sess, 0)
	_, err = attacker.TryAcquire(ctx, connect.NewRequest(&coordhostv1.TryAcquireLockRequest{Name: "short", SessionId: sid}))
	if connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("the attacker acquiring in the victim's session: %v", err)
	}
	if s.MustCmd(t, "GET", "m:coordhost:lock:invoice") != a.Msg.GetGrant().GetOwnershipToken() {
		t.Error("the victim's lock changed hands")
	}
	if s.MustCmd(t, "EXISTS", "m:coordhost:lock:short") != "0" {
		t.Error("a refused acquisition wrote \"short\"")
	}
}

// FINDING 13: a lease (or redlock) acquisition in a session whose TTL is
// above the block's max_ttl is refused as INVALID_ARGUMENT naming "ttl",
// a field the request did not set (and may not set with a session_id):
// the grant takes the session's TTL (takeGrant), leaseTTL refuses it, and
// grantError names "ttl" for any ErrInvalidTTL. The client is told to fix
// a field it never sent; `coordhost`'s own client (refusedArgs) takes it
// for a usage error. The session is what does not fit: FAILED_PRECONDITION
// (or INVALID_ARGUMENT naming "session_id"), saying the block's max_ttl.
func TestHostileSessionTTLAboveMaxTTLBlamesTTL(t *testing.T) {
	s := redistest.Start(t, redistest.WithKind(redistest.Redis80))
	h := newHost(t, rateLimitConfig(t, s.Addr, 3, lockBlocks+kindBlocks))
	url, hc := apiServer(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ss := coordhostv1connect.NewSessionServiceClient(hc, url, connect.WithGRPC())
	ls := coordhostv1connect.NewLeaseServiceClient(hc, url, connect.WithGRPC())
	sid := newSession(t, ctx, ss, 2*time.Minute)
	_, err := ls.Acquire(ctx, connect.NewRequest(&coordhostv1.AcquireLeaseRequest{Name: "jobs", Field: "nightly", SessionId: sid}))
	if d := errDetail(t, err); d != nil && d.Field == "ttl" {
		t.Errorf("a lease in a 2m session (max_ttl 1m) is refused naming \"ttl\", which the request did not set: %v", err)
	}
}
