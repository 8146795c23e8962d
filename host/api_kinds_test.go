package host_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	coordhostv1 "github.com/coordhost/coordhost/gen/coordhost/v1"
	"github.com/coordhost/coordhost/gen/coordhost/v1/coordhostv1connect"
	"github.com/coordhost/coordhost/internal/redistest"
)

// kindBlocks are the blocks of the grant-kind tests: one of each kind,
// each excluding a second holder (the semaphore has one permit), with a
// lease TTL of 30s.
const kindBlocks = `
lease "jobs" {
  ttl     = "30s"
  max_ttl = "1m"
}
rwlock "doc" {
  ttl = "30s"
}
semaphore "slot" {
  capacity = 1
  ttl      = "30s"
}
semaphore "forever" {
  capacity = 1
  ttl      = "none"
}
`

// grantAPI drives one grant kind's service through closures, so that one
// scenario runs on every kind.
type grantAPI struct {
	kind      string
	contended connect.Code
	key       string // the Redis key the grant lives in
	acquire   func(ctx context.Context, session string, wait *durationpb.Duration) (*coordhostv1.Grant, error)
	try       func(ctx context.Context) (*coordhostv1.Grant, error)
	renew     func(ctx context.Context, id string) (*coordhostv1.Grant, error)
	release   func(ctx context.Context, id string) (coordhostv1.ReleaseResult, error)
	// hold opens a Hold stream and returns a function that reads its next
	// grant (nil at its end, with the stream's error).
	hold func(ctx context.Context) func() (*coordhostv1.Grant, error)
}

// grantAPIs are the grant services besides LockService's lock blocks,
// over hc at url.
func grantAPIs(hc *http.Client, url string, opts ...connect.ClientOption) []grantAPI {
	lease := coordhostv1connect.NewLeaseServiceClient(hc, url, opts...)
	rw := coordhostv1connect.NewRWLockServiceClient(hc, url, opts...)
	sem := coordhostv1connect.NewSemaphoreServiceClient(hc, url, opts...)
	return []grantAPI{
		{
			kind: "lease", contended: connect.CodeAborted, key: "m:coordhost:lease:jobs",
			acquire: func(ctx context.Context, session string, wait *durationpb.Duration) (*coordhostv1.Grant, error) {
				r, err := lease.Acquire(ctx, connect.NewRequest(&coordhostv1.AcquireLeaseRequest{Name: "jobs", Field: "nightly", SessionId: session, Wait: wait}))
				if err != nil {
					return nil, err
				}
				return r.Msg.GetGrant(), nil
			},
			try: func(ctx context.Context) (*coordhostv1.Grant, error) {
				r, err := lease.TryAcquire(ctx, connect.NewRequest(&coordhostv1.TryAcquireLeaseRequest{Name: "jobs", Field: "nightly"}))
				if err != nil {
					return nil, err
				}
				return r.Msg.GetGrant(), nil
			},
			renew: func(ctx context.Context, id string) (*coordhostv1.Grant, error) {
				r, err := lease.Renew(ctx, connect.NewRequest(&coordhostv1.RenewLeaseRequest{GrantId: id}))
				if err != nil {
					return nil, err
				}
				return r.Msg.GetGrant(), nil
			},
			release: func(ctx context.Context, id string) (coordhostv1.ReleaseResult, error) {
				r, err := lease.Release(ctx, connect.NewRequest(&coordhostv1.ReleaseLeaseRequest{GrantId: id}))
				if err != nil {
					return 0, err
				}
				return r.Msg.GetResult(), nil
			},
			hold: func(ctx context.Context) func() (*coordhostv1.Grant, error) {
				st, err := lease.Hold(ctx, connect.NewRequest(&coordhostv1.HoldLeaseRequest{Name: "jobs", Field: "nightly"}))
				return streamReader(st, err, (*coordhostv1.HoldLeaseResponse).GetGrant)
			},
		},
		{
			kind: "rwlock", contended: connect.CodeAborted, key: "m:coordhost:rwlock:doc",
			acquire: func(ctx context.Context, session string, wait *durationpb.Duration) (*coordhostv1.Grant, error) {
				r, err := rw.Acquire(ctx, connect.NewRequest(&coordhostv1.AcquireRWLockRequest{Name: "doc", Mode: coordhostv1.LockMode_LOCK_MODE_WRITE, SessionId: session, Wait: wait}))
				if err == nil && r.Msg.GetMode() != coordhostv1.LockMode_LOCK_MODE_WRITE {
					return nil, fmt.Errorf("mode %v", r.Msg.GetMode())
				}
				if err != nil {
					return nil, err
				}
				return r.Msg.GetGrant(), nil
			},
			try: func(ctx context.Context) (*coordhostv1.Grant, error) {
				r, err := rw.TryAcquire(ctx, connect.NewRequest(&coordhostv1.TryAcquireRWLockRequest{Name: "doc", Mode: coordhostv1.LockMode_LOCK_MODE_READ}))
				if err != nil {
					return nil, err
				}
				return r.Msg.GetGrant(), nil
			},
			renew: func(ctx context.Context, id string) (*coordhostv1.Grant, error) {
				r, err := rw.Renew(ctx, connect.NewRequest(&coordhostv1.RenewRWLockRequest{GrantId: id}))
				if err != nil {
					return nil, err
				}
				return r.Msg.GetGrant(), nil
			},
			release: func(ctx context.Context, id string) (coordhostv1.ReleaseResult, error) {
				r, err := rw.Release(ctx, connect.NewRequest(&coordhostv1.ReleaseRWLockRequest{GrantId: id}))
				if err != nil {
					return 0, err
				}
				return r.Msg.GetResult(), nil
			},
			hold: func(ctx context.Context) func() (*coordhostv1.Grant, error) {
				st, err := rw.Hold(ctx, connect.NewRequest(&coordhostv1.HoldRWLockRequest{Name: "doc", Mode: coordhostv1.LockMode_LOCK_MODE_WRITE}))
				return streamReader(st, err, (*coordhostv1.HoldRWLockResponse).GetGrant)
			},
		},
		{
			kind: "semaphore", contended: connect.CodeResourceExhausted, key: "m:coordhost:semaphore:slot",
			acquire: func(ctx context.Context, session string, wait *durationpb.Duration) (*coordhostv1.Grant, error) {
				r, err := sem.Acquire(ctx, connect.NewRequest(&coordhostv1.AcquireSemaphoreRequest{Name: "slot", SessionId: session, Wait: wait}))
				if err == nil && r.Msg.GetCapacity() != 1 {
					return nil, fmt.Errorf("capacity %d", r.Msg.GetCapacity())
				}
				if err != nil {
					return nil, err
				}
				return r.Msg.GetGrant(), nil
			},
			try: func(ctx context.Context) (*coordhostv1.Grant, error) {
				r, err := sem.TryAcquire(ctx, connect.NewRequest(&coordhostv1.TryAcquireSemaphoreRequest{Name: "slot"}))
				if err != nil {
					return nil, err
				}
				return r.Msg.GetGrant(), nil
			},
			renew: func(ctx context.Context, id string) (*coordhostv1.Grant, error) {
				r, err := sem.Renew(ctx, connect.NewRequest(&coordhostv1.RenewSemaphoreRequest{GrantId: id}))
				if err != nil {
					return nil, err
				}
				return r.Msg.GetGrant(), nil
			},
			release: func(ctx context.Context, id string) (coordhostv1.ReleaseResult, error) {
				r, err := sem.Release(ctx, connect.NewRequest(&coordhostv1.ReleaseSemaphoreRequest{GrantId: id}))
				if err != nil {
					return 0, err
				}
				return r.Msg.GetResult(), nil
			},
			hold: func(ctx context.Context) func() (*coordhostv1.Grant, error) {
				st, err := sem.Hold(ctx, connect.NewRequest(&coordhostv1.HoldSemaphoreRequest{Name: "slot"}))
				return streamReader(st, err, (*coordhostv1.HoldSemaphoreResponse).GetGrant)
			},
		},
	}
}

// streamReader reads grants from a Hold stream (see grantAPI.hold).
func streamReader[T any](st *connect.ServerStreamForClient[T], err error, grant func(*T) *coordhostv1.Grant) func() (*coordhostv1.Grant, error) {
	return func() (*coordhostv1.Grant, error) {
		if err != nil {
			return nil, err
		}
		if st.Receive() {
			return grant(st.Msg()), nil
		}
		return nil, st.Err()
	}
}

// Every grant kind over gRPC and Connect JSON: grant, contention with the
// kind's status, renewal moving the expiry in Redis, release, a waiter
// woken by a release, a Hold released when the client goes, and a
// session's grant released by CloseSession.
func TestAPIGrantKinds(t *testing.T) {
	s := redistest.Start(t, redistest.WithKind(redistest.Redis80))
	h := newHost(t, rateLimitConfig(t, s.Addr, 3, kindBlocks))
	url, hc := apiServer(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	sess := coordhostv1connect.NewSessionServiceClient(hc, url, connect.WithGRPC())
	for _, proto := range []struct {
		name string
		opts []connect.ClientOption
	}{{"grpc", []connect.ClientOption{connect.WithGRPC()}}, {"connect-json", []connect.ClientOption{connect.WithProtoJSON()}}} {
		for _, api := range grantAPIs(hc, url, proto.opts...) {
			t.Run(proto.name+"/"+api.kind, func(t *testing.T) {
				s.MustCmd(t, "FLUSHALL")
				ttlOf := func() int64 {
					t.Helper()
					var v string
					switch api.kind {
					case "lease":
						v = strings.Trim(s.MustCmd(t, "HPTTL", api.key, "FIELDS", "1", "nightly"), "[]")
					default:
						v = s.MustCmd(t, "PTTL", api.key)
					}
					n, err := strconv.ParseInt(v, 10, 64)
					if err != nil {
						t.Fatalf("TTL of %s: %q", api.key, v)
					}
					return n
				}
				held := func() bool { return s.MustCmd(t, "EXISTS", api.key) == "1" }

				g, err := api.acquire(ctx, "", nil)
				if err != nil {
					t.Fatal(err)
				}
				if g.GetTtl().AsDuration() != 30*time.Second || g.GetFencingToken() != 0 || g.GetExpiresAt() == nil || !held() ||
					(g.GetField() == "nightly") != (api.kind == "lease") {
					t.Fatalf("grant %v", g)
				}
				_, err = api.try(ctx)
				wantCode(t, "a second holder", err, api.contended, coordhostv1.Reason_REASON_CONTENDED, "")
				_, err = api.acquire(ctx, "", durationpb.New(100*time.Millisecond))
				wantCode(t, "a second holder's wait", err, api.contended, coordhostv1.Reason_REASON_CONTENDED, "")

				if api.kind != "semaphore" && api.kind != "rwlock" {
					// (The sorted-set kinds keep each grant's deadline as a
					// score; their key's TTL follows the latest.)
					s.MustCmd(t, "HPEXPIRE", api.key, "1000", "FIELDS", "1", "nightly")
				}
				if _, err := api.renew(ctx, g.GetGrantId()); err != nil {
					t.Fatal(err)
				}
				if n := ttlOf(); n < 29000 {
					t.Fatalf("TTL after Renew: %d", n)
				}

				waited := make(chan *coordhostv1.Grant, 1)
				go func() {
					w, err := api.acquire(ctx, "", durationpb.New(10*time.Second))
					if err != nil {
						t.Error(err)
					}
					waited <- w
				}()
				time.Sleep(100 * time.Millisecond)
				if res, err := api.release(ctx, g.GetGrantId()); err != nil || res != coordhostv1.ReleaseResult_RELEASE_RESULT_RELEASED {
					t.Fatalf("Release: %v %v", res, err)
				}
				var w *coordhostv1.Grant
				select {
				case w = <-waited:
				case <-time.After(5 * time.Second):
					t.Fatal("the waiter was not woken by the release")
				}
				_, err = api.renew(ctx, g.GetGrantId())
				wantCode(t, "Renew of a released grant", err, connect.CodeNotFound, coordhostv1.Reason_REASON_GRANT_LOST, "")
				if res, err := api.release(ctx, w.GetGrantId()); err != nil || res != coordhostv1.ReleaseResult_RELEASE_RESULT_RELEASED {
					t.Fatalf("Release: %v %v", res, err)
				}

				hctx, hcancel := context.WithCancel(ctx)
				next := api.hold(hctx)
				if hg, err := next(); err != nil || hg.GetGrantId() == "" {
					t.Fatalf("Hold: %v %v", hg, err)
				}
				if _, err = api.try(ctx); connect.CodeOf(err) != api.contended {
					t.Fatalf("while held: %v", err)
				}
				hcancel()
				deadline := time.Now().Add(2 * time.Second)
				for {
					g2, err := api.try(ctx)
					if err == nil {
						api.release(ctx, g2.GetGrantId())
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("the Hold's grant was not released when the client left: %v", err)
					}
					time.Sleep(10 * time.Millisecond)
				}

				sid := newSession(t, ctx, sess, 5*time.Second)
				sg, err := api.acquire(ctx, sid, nil)
				if err != nil {
					t.Fatal(err)
				}
				if sg.GetTtl().AsDuration() != 5*time.Second || sg.GetSessionId() != sid {
					t.Fatalf("session grant %v", sg)
				}
				cl, err := sess.CloseSession(ctx, connect.NewRequest(&coordhostv1.CloseSessionRequest{SessionId: sid}))
				if err != nil || cl.Msg.GetReleasedGrants() != 1 {
					t.Fatalf("CloseSession: %v %v", cl, err)
				}
				if g3, err := api.try(ctx); err != nil {
					t.Fatalf("after CloseSession: %v", err)
				} else {
					api.release(ctx, g3.GetGrantId())
				}
			})
		}
	}
}

// Redlock blocks through LockService: grant, renewal and release by id on
// every node, and kind resolution.
func TestAPIRedlock(t *testing.T) {
	main := redistest.Start(t)
	nodes := redistest.StartN(t, 3)
	addrs := []string{nodes[0].Addr, nodes[1].Addr, nodes[2].Addr}
	h := newHost(t, redlockConfig(t, main.Addr, addrs))
	url, hc := apiServer(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := coordhostv1connect.NewLockServiceClient(hc, url, connect.WithGRPC())
	// Fresh nodes sit out a quorum for max_ttl (the restart guard): wait.
	a, err := c.Acquire(ctx, connect.NewRequest(&coordhostv1.AcquireLockRequest{Name: "invoice", Wait: durationpb.New(10 * time.Second)}))
	if err != nil {
		t.Fatal(err)
	}
	g := a.Msg.GetGrant()
	if g.GetFencingToken() != 0 || g.GetExpiresAt() == nil || g.GetTtl().AsDuration() != time.Second {
		t.Fatalf("redlock grant %v", g)
	}
	// A majority holds it (a node still in its restart guard may not).
	var holding []*redistest.Server
	for _, n := range nodes {
		if v, _ := n.Cmd(t, "GET", "m:coordhost:redlock:invoice"); v == g.GetOwnershipToken() {
			holding = append(holding, n)
		}
	}
	if len(holding) < 2 {
		t.Fatalf("%d of 3 nodes hold the grant", len(holding))
	}
	_, err = c.TryAcquire(ctx, connect.NewRequest(&coordhostv1.TryAcquireLockRequest{Name: "invoice", Kind: coordhostv1.LockKind_LOCK_KIND_REDLOCK}))
	wantCode(t, "a second holder", err, connect.CodeAborted, coordhostv1.Reason_REASON_CONTENDED, "")
	_, err = c.TryAcquire(ctx, connect.NewRequest(&coordhostv1.TryAcquireLockRequest{Name: "invoice", Kind: coordhostv1.LockKind_LOCK_KIND_LOCK}))
	wantCode(t, "a lock block of that name", err, connect.CodeNotFound, coordhostv1.Reason_REASON_NAME_NOT_CONFIGURED, "")
	// Absolute expiries, so slow reads cannot blur them: the renewal, at
	// least 300 ms after the grant, moves each node's expiry on by as much.
	const key = "m:coordhost:redlock:invoice"
	before := make([]int64, len(holding))
	for i, n := range holding {
		before[i] = expiryOf(t, n, key)
	}
	time.Sleep(300 * time.Millisecond)
	r, err := c.Renew(ctx, connect.NewRequest(&coordhostv1.RenewLockRequest{GrantId: g.GetGrantId()}))
	if err != nil || r.Msg.GetGrant().GetExpiresAt() == nil {
		t.Fatalf("Renew: %v %v", r, err)
	}
	for i, n := range holding {
		if after := expiryOf(t, n, key); after < before[i]+299 {
			t.Fatalf("node %s: the renewal moved the expiry from %d to %d ms, want 300 ms on at least", n.Addr, before[i], after)
		}
	}
	rel, err := c.Release(ctx, connect.NewRequest(&coordhostv1.ReleaseLockRequest{GrantId: g.GetGrantId()}))
	if err != nil || rel.Msg.GetResult() != coordhostv1.ReleaseResult_RELEASE_RESULT_RELEASED {
		t.Fatalf("Release: %v %v", rel, err)
	}
	for _, n := range nodes {
		if v := n.MustCmd(t, "EXISTS", "m:coordhost:redlock:invoice"); v != "0" {
			t.Fatalf("node %s still holds the lock", n.Addr)
		}
	}
}

// The kind-specific bad inputs and refusals: each InvalidArgument names
// its field (or FailedPrecondition for a ttl = "none" permit without a
// session) and writes nothing.
func TestAPIGrantKindsBadInput(t *testing.T) {
	s := redistest.Start(t, redistest.WithKind(redistest.Redis80))
	h := newHost(t, rateLimitConfig(t, s.Addr, 3, kindBlocks+lockBlocks))
	url, hc := apiServer(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lease := coordhostv1connect.NewLeaseServiceClient(hc, url, connect.WithGRPC())
	rw := coordhostv1connect.NewRWLockServiceClient(hc, url, connect.WithGRPC())
	sem := coordhostv1connect.NewSemaphoreServiceClient(hc, url, connect.WithGRPC())
	lk := coordhostv1connect.NewLockServiceClient(hc, url, connect.WithGRPC())
	sess := coordhostv1connect.NewSessionServiceClient(hc, url, connect.WithGRPC())
	sid := newSession(t, ctx, sess, 0)
	lockGrant, err := lk.TryAcquire(ctx, connect.NewRequest(&coordhostv1.TryAcquireLockRequest{Name: "invoice"}))
	if err != nil {
		t.Fatal(err)
	}
	longSession := newSession(t, ctx, sess, 10*time.Minute)
	dbsize := s.MustCmd(t, "DBSIZE")

	leaseTry := func(m *coordhostv1.TryAcquireLeaseRequest) error {
		_, err := lease.TryAcquire(ctx, connect.NewRequest(m))
		return err
	}
	for _, tc := range []struct {
		what  string
		err   error
		code  connect.Code
		field string
	}{
		{"lease: empty field", leaseTry(&coordhostv1.TryAcquireLeaseRequest{Name: "jobs"}), connect.CodeInvalidArgument, "field"},
		{"lease: long field", leaseTry(&coordhostv1.TryAcquireLeaseRequest{Name: "jobs", Field: strings.Repeat("f", 1025)}), connect.CodeInvalidArgument, "field"},
		{"lease: ttl below 1ms", leaseTry(&coordhostv1.TryAcquireLeaseRequest{Name: "jobs", Field: "f", Ttl: durationpb.New(time.Microsecond)}), connect.CodeInvalidArgument, "ttl"},
		{"lease: negative ttl", leaseTry(&coordhostv1.TryAcquireLeaseRequest{Name: "jobs", Field: "f", Ttl: durationpb.New(-time.Second)}), connect.CodeInvalidArgument, "ttl"},
		{"lease: ttl above max_ttl", leaseTry(&coordhostv1.TryAcquireLeaseRequest{Name: "jobs", Field: "f", Ttl: durationpb.New(2 * time.Minute)}), connect.CodeInvalidArgument, "ttl"},
		{"lease: ttl with a session", leaseTry(&coordhostv1.TryAcquireLeaseRequest{Name: "jobs", Field: "f", Ttl: durationpb.New(time.Second), SessionId: sid}), connect.CodeInvalidArgument, "ttl"},
		{"lease: session ttl above max_ttl", leaseTry(&coordhostv1.TryAcquireLeaseRequest{Name: "jobs", Field: "f", SessionId: longSession}), connect.CodeInvalidArgument, "session_id"},
		{"lease: unconfigured", leaseTry(&coordhostv1.TryAcquireLeaseRequest{Name: "nope", Field: "f"}), connect.CodeNotFound, ""},
		{"rwlock: no mode", func() error {
			_, err := rw.TryAcquire(ctx, connect.NewRequest(&coordhostv1.TryAcquireRWLockRequest{Name: "doc"}))
			return err
		}(), connect.CodeInvalidArgument, "mode"},
		{"rwlock: unknown mode", func() error {
			_, err := rw.Acquire(ctx, connect.NewRequest(&coordhostv1.AcquireRWLockRequest{Name: "doc", Mode: 9}))
			return err
		}(), connect.CodeInvalidArgument, "mode"},
		{"rwlock: a lock's grant id", func() error {
			_, err := rw.Renew(ctx, connect.NewRequest(&coordhostv1.RenewRWLockRequest{GrantId: lockGrant.Msg.GetGrant().GetGrantId()}))
			return err
		}(), connect.CodeInvalidArgument, "grant_id"},
		{"semaphore: ttl none without a session", func() error {
			_, err := sem.TryAcquire(ctx, connect.NewRequest(&coordhostv1.TryAcquireSemaphoreRequest{Name: "forever"}))
			return err
		}(), connect.CodeFailedPrecondition, "session_id"},
		{"semaphore: a lock's grant id", func() error {
			_, err := sem.Release(ctx, connect.NewRequest(&coordhostv1.ReleaseSemaphoreRequest{GrantId: lockGrant.Msg.GetGrant().GetGrantId()}))
			return err
		}(), connect.CodeInvalidArgument, "grant_id"},
		{"semaphore: negative wait", func() error {
			_, err := sem.Acquire(ctx, connect.NewRequest(&coordhostv1.AcquireSemaphoreRequest{Name: "slot", Wait: durationpb.New(-time.Second)}))
			return err
		}(), connect.CodeInvalidArgument, "wait"},
	} {
		if connect.CodeOf(tc.err) != tc.code {
			t.Errorf("%s: %v, want %v", tc.what, tc.err, tc.code)
			continue
		}
		if d := errDetail(t, tc.err); d == nil || tc.field != "" && d.Field != tc.field {
			t.Errorf("%s: detail %v, want field %q (%v)", tc.what, d, tc.field, tc.err)
		}
	}
	if got := s.MustCmd(t, "DBSIZE"); got != dbsize {
		t.Fatalf("bad requests changed DBSIZE from %s to %s", dbsize, got)
	}

	// ttl = "none" over the API: a session's permit has the session's TTL,
	// a Hold's permit HoldPermitTTL.
	g, err := sem.TryAcquire(ctx, connect.NewRequest(&coordhostv1.TryAcquireSemaphoreRequest{Name: "forever", SessionId: sid}))
	if err != nil {
		t.Fatal(err)
	}
	if g.Msg.GetGrant().GetTtl().AsDuration() != 60*time.Second {
		t.Fatalf("a session's permit of a ttl = none block: %v", g.Msg.GetGrant())
	}
	sess.CloseSession(ctx, connect.NewRequest(&coordhostv1.CloseSessionRequest{SessionId: sid}))
	st, err := sem.Hold(ctx, connect.NewRequest(&coordhostv1.HoldSemaphoreRequest{Name: "forever"}))
	if err != nil || !st.Receive() {
		t.Fatal(err, st.Err())
	}
	if st.Msg().GetGrant().GetTtl().AsDuration() != 30*time.Second {
		t.Fatalf("a Hold's permit of a ttl = none block: %v", st.Msg().GetGrant())
	}
	st.Close()
}

// A name no block has makes no metric series, whatever the service: a
// client could otherwise grow /metrics without end.
func TestAPIUnconfiguredNamesMakeNoSeries(t *testing.T) {
	s := redistest.Start(t, redistest.WithKind(redistest.Redis80))
	h := newHost(t, rateLimitConfig(t, s.Addr, 3, kindBlocks+lockBlocks))
	url, hc := apiServer(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const made = "made-up-name-4711"
	lk := coordhostv1connect.NewLockServiceClient(hc, url, connect.WithGRPC())
	for _, kind := range []coordhostv1.LockKind{coordhostv1.LockKind_LOCK_KIND_UNSPECIFIED, coordhostv1.LockKind_LOCK_KIND_REDLOCK} {
		_, err := lk.TryAcquire(ctx, connect.NewRequest(&coordhostv1.TryAcquireLockRequest{Name: made, Kind: kind}))
		wantCode(t, "lock", err, connect.CodeNotFound, coordhostv1.Reason_REASON_NAME_NOT_CONFIGURED, "")
	}
	_, err := lk.TryAcquire(ctx, connect.NewRequest(&coordhostv1.TryAcquireLockRequest{Name: "slot"})) // a semaphore's name
	wantCode(t, "lock named like a semaphore", err, connect.CodeNotFound, coordhostv1.Reason_REASON_NAME_NOT_CONFIGURED, "")
	_, err = coordhostv1connect.NewSemaphoreServiceClient(hc, url).TryAcquire(ctx, connect.NewRequest(&coordhostv1.TryAcquireSemaphoreRequest{Name: made}))
	wantCode(t, "semaphore", err, connect.CodeNotFound, coordhostv1.Reason_REASON_NAME_NOT_CONFIGURED, "")
	_, err = coordhostv1connect.NewLeaseServiceClient(hc, url).TryAcquire(ctx, connect.NewRequest(&coordhostv1.TryAcquireLeaseRequest{Name: made, Field: "f"}))
	wantCode(t, "lease", err, connect.CodeNotFound, coordhostv1.Reason_REASON_NAME_NOT_CONFIGURED, "")
	_, err = coordhostv1connect.NewRWLockServiceClient(hc, url).TryAcquire(ctx, connect.NewRequest(&coordhostv1.TryAcquireRWLockRequest{Name: made, Mode: coordhostv1.LockMode_LOCK_MODE_READ}))
	wantCode(t, "rwlock", err, connect.CodeNotFound, coordhostv1.Reason_REASON_NAME_NOT_CONFIGURED, "")
	if strings.Contains(err.Error(), "host:") || !strings.Contains(err.Error(), `no rwlock "`+made+`" is configured`) {
		t.Errorf("NotFound message: %v", err)
	}
	body := scrapeAt(t, hc, url)
	for _, name := range []string{made, `lock="slot"`} {
		if strings.Contains(body, name) {
			t.Errorf("/metrics has a series for %s", name)
		}
	}
}
