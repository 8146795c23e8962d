package host_test

import (
	"context"
	"encoding/base64"
	"io"
	"net/http"
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

// lockBlocks are the lock blocks of the LockService tests, added to
// rateLimitConfig's (key_prefix "m:", partition policies tenant and raw).
const lockBlocks = `
lock "invoice" {
  ttl     = "30s"
  fencing = true
}
lock "short" {
  ttl = "300ms"
}
lock "tenant" {
  ttl       = "30s"
  partition = policy.partition.raw
}
`

// lockClients are the LockService and SessionService clients of one
// protocol.
type lockClients struct {
	lock coordhostv1connect.LockServiceClient
	sess coordhostv1connect.SessionServiceClient
}

func newLockClients(hc connect.HTTPClient, url string, opts ...connect.ClientOption) lockClients {
	return lockClients{
		lock: coordhostv1connect.NewLockServiceClient(hc, url, opts...),
		sess: coordhostv1connect.NewSessionServiceClient(hc, url, opts...),
	}
}

// wantCode fails unless err has code and, when reason is set, that
// ErrorDetail reason; field, when set, must be ErrorDetail.field.
func wantCode(t *testing.T, what string, err error, code connect.Code, reason coordhostv1.Reason, field string) {
	t.Helper()
	if connect.CodeOf(err) != code {
		t.Fatalf("%s: %v, want %v", what, err, code)
	}
	d := errDetail(t, err)
	if d == nil {
		t.Fatalf("%s: %v has no ErrorDetail", what, err)
	}
	if reason != coordhostv1.Reason_REASON_UNSPECIFIED && d.Reason != reason {
		t.Fatalf("%s: reason %v, want %v (%v)", what, d.Reason, reason, err)
	}
	if field != "" && d.Field != field {
		t.Fatalf("%s: field %q, want %q (%v)", what, d.Field, field, err)
	}
}

// LockService's unary RPCs over gRPC and Connect JSON: grants with
// increasing fencing tokens, contention, waits, renewals, releases, and
// the statuses of grants that are gone.
func TestAPILockUnary(t *testing.T) {
	s := redistest.Start(t)
	h := newHost(t, rateLimitConfig(t, s.Addr, 3, lockBlocks))
	url, hc := apiServer(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, mode := range []struct {
		name string
		opts []connect.ClientOption
	}{{"grpc", []connect.ClientOption{connect.WithGRPC()}}, {"connect-json", []connect.ClientOption{connect.WithProtoJSON()}}} {
		t.Run(mode.name, func(t *testing.T) {
			s.MustCmd(t, "FLUSHALL")
			c := newLockClients(hc, url, mode.opts...).lock

			a, err := c.Acquire(ctx, connect.NewRequest(&coordhostv1.AcquireLockRequest{Name: "invoice"}))
			if err != nil {
				t.Fatal(err)
			}
			g := a.Msg.GetGrant()
			if g.GetName() != "invoice" || g.GetKey() != "invoice" || g.GetFencingToken() != 1 || g.GetOwnershipToken() == "" ||
				g.GetTtl().AsDuration() != 30*time.Second || !strings.HasPrefix(g.GetGrantId(), "g1.") {
				t.Fatalf("grant %v", g)
			}
			if exp := time.Until(g.GetExpiresAt().AsTime()); exp <= 29*time.Second || exp > 30*time.Second {
				t.Fatalf("expires in %v", exp)
			}
			if v := s.MustCmd(t, "GET", "m:coordhost:lock:invoice"); v != g.GetOwnershipToken() {
				t.Fatalf("Redis holds %q, grant says %q", v, g.GetOwnershipToken())
			}

			// Contention: TryAcquire and a bounded wait are Aborted.
			_, err = c.TryAcquire(ctx, connect.NewRequest(&coordhostv1.TryAcquireLockRequest{Name: "invoice"}))
			wantCode(t, "TryAcquire held", err, connect.CodeAborted, coordhostv1.Reason_REASON_CONTENDED, "")
			start := time.Now()
			_, err = c.Acquire(ctx, connect.NewRequest(&coordhostv1.AcquireLockRequest{Name: "invoice", Wait: durationpb.New(150 * time.Millisecond)}))
			wantCode(t, "Acquire with a wait", err, connect.CodeAborted, coordhostv1.Reason_REASON_CONTENDED, "")
			if el := time.Since(start); el < 150*time.Millisecond {
				t.Fatalf("the wait ended after %v", el)
			}
			_, err = c.Acquire(ctx, connect.NewRequest(&coordhostv1.AcquireLockRequest{Name: "invoice", Wait: durationpb.New(0)}))
			wantCode(t, "Acquire with wait 0", err, connect.CodeAborted, coordhostv1.Reason_REASON_CONTENDED, "")

			// Renew moves the expiry in Redis.
			s.MustCmd(t, "PEXPIRE", "m:coordhost:lock:invoice", "5000")
			r, err := c.Renew(ctx, connect.NewRequest(&coordhostv1.RenewLockRequest{GrantId: g.GetGrantId()}))
			if err != nil {
				t.Fatal(err)
			}
			if pttl := s.MustCmd(t, "PTTL", "m:coordhost:lock:invoice"); len(pttl) != 5 || pttl < "29000" {
				t.Fatalf("PTTL after Renew: %s", pttl)
			}
			if rg := r.Msg.GetGrant(); rg.GetGrantId() != g.GetGrantId() || rg.GetFencingToken() != 1 || rg.GetExpiresAt() == nil {
				t.Fatalf("renewed grant %v", rg)
			}

			// A waiter wakes when the holder releases.
			waited := make(chan *coordhostv1.Grant, 1)
			go func() {
				a, err := c.Acquire(ctx, connect.NewRequest(&coordhostv1.AcquireLockRequest{Name: "invoice", Wait: durationpb.New(10 * time.Second)}))
				if err != nil {
					t.Error(err)
				}
				waited <- a.Msg.GetGrant()
			}()
			time.Sleep(100 * time.Millisecond)
			rel, err := c.Release(ctx, connect.NewRequest(&coordhostv1.ReleaseLockRequest{GrantId: g.GetGrantId()}))
			if err != nil || rel.Msg.GetResult() != coordhostv1.ReleaseResult_RELEASE_RESULT_RELEASED {
				t.Fatalf("Release: %v %v", rel, err)
			}
			var g2 *coordhostv1.Grant
			select {
			case g2 = <-waited:
			case <-time.After(5 * time.Second):
				t.Fatal("the waiter did not get the lock after the release")
			}
			if g2.GetFencingToken() != 2 {
				t.Fatalf("the next holder's fencing token is %d, want 2", g2.GetFencingToken())
			}

			// The first grant is gone: releasing again finds another owner,
			// renewing it is NotFound (REASON_GRANT_LOST).
			rel, err = c.Release(ctx, connect.NewRequest(&coordhostv1.ReleaseLockRequest{GrantId: g.GetGrantId()}))
			if err != nil || rel.Msg.GetResult() != coordhostv1.ReleaseResult_RELEASE_RESULT_NOT_OWNED {
				t.Fatalf("Release of a lock another holds: %v %v", rel, err)
			}
			_, err = c.Renew(ctx, connect.NewRequest(&coordhostv1.RenewLockRequest{GrantId: g.GetGrantId()}))
			wantCode(t, "Renew of a lost grant", err, connect.CodeNotFound, coordhostv1.Reason_REASON_GRANT_LOST, "")
			rel, err = c.Release(ctx, connect.NewRequest(&coordhostv1.ReleaseLockRequest{GrantId: g2.GetGrantId()}))
			if err != nil || rel.Msg.GetResult() != coordhostv1.ReleaseResult_RELEASE_RESULT_RELEASED {
				t.Fatalf("Release: %v %v", rel, err)
			}
			rel, err = c.Release(ctx, connect.NewRequest(&coordhostv1.ReleaseLockRequest{GrantId: g2.GetGrantId()}))
			if err != nil || rel.Msg.GetResult() != coordhostv1.ReleaseResult_RELEASE_RESULT_ALREADY_RELEASED {
				t.Fatalf("second Release: %v %v", rel, err)
			}

			// A partition policy picks the key from the attributes.
			tg, err := c.TryAcquire(ctx, connect.NewRequest(&coordhostv1.TryAcquireLockRequest{Name: "tenant", Attributes: map[string]string{"tenant": "acme"}}))
			if err != nil {
				t.Fatal(err)
			}
			if k := tg.Msg.GetGrant().GetKey(); k != "tenant/acme" || s.MustCmd(t, "EXISTS", "m:coordhost:lock:tenant/acme") != "1" {
				t.Fatalf("partitioned key %q", k)
			}
			if _, err := c.TryAcquire(ctx, connect.NewRequest(&coordhostv1.TryAcquireLockRequest{Name: "tenant", Attributes: map[string]string{"tenant": "globex"}})); err != nil {
				t.Fatalf("another partition: %v", err)
			}

			// A grant that expired: Renew is NotFound, Release is already released.
			sg, err := c.TryAcquire(ctx, connect.NewRequest(&coordhostv1.TryAcquireLockRequest{Name: "short"}))
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(400 * time.Millisecond)
			_, err = c.Renew(ctx, connect.NewRequest(&coordhostv1.RenewLockRequest{GrantId: sg.Msg.GetGrant().GetGrantId()}))
			wantCode(t, "Renew of an expired grant", err, connect.CodeNotFound, coordhostv1.Reason_REASON_GRANT_LOST, "grant_id")
		})
	}
}

// Every bad LockService request is InvalidArgument naming its field (or
// NotFound for an unconfigured name), and writes nothing.
func TestAPILockBadInput(t *testing.T) {
	s := redistest.Start(t)
	h := newHost(t, rateLimitConfig(t, s.Addr, 3, lockBlocks))
	url, hc := apiServer(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := newLockClients(hc, url, connect.WithGRPC()).lock

	// A real grant, to forge ids from.
	real, err := c.TryAcquire(ctx, connect.NewRequest(&coordhostv1.TryAcquireLockRequest{Name: "invoice"}))
	if err != nil {
		t.Fatal(err)
	}
	rid := real.Msg.GetGrant().GetGrantId()
	forge := func(json string) string { return "g1." + base64.RawURLEncoding.EncodeToString([]byte(json)) }
	dbsize := s.MustCmd(t, "DBSIZE")
	pttl := s.MustCmd(t, "PTTL", "m:coordhost:lock:invoice")

	acquire := func(m *coordhostv1.AcquireLockRequest) error {
		_, err := c.Acquire(ctx, connect.NewRequest(m))
		return err
	}
	renew := func(id string) error {
		_, err := c.Renew(ctx, connect.NewRequest(&coordhostv1.RenewLockRequest{GrantId: id}))
		return err
	}
	release := func(id string) error {
		_, err := c.Release(ctx, connect.NewRequest(&coordhostv1.ReleaseLockRequest{GrantId: id}))
		return err
	}
	tok := real.Msg.GetGrant().GetOwnershipToken()
	for _, tc := range []struct {
		what  string
		err   error
		code  connect.Code
		field string
	}{
		{"empty name", acquire(&coordhostv1.AcquireLockRequest{}), connect.CodeInvalidArgument, "name"},
		{"long name", acquire(&coordhostv1.AcquireLockRequest{Name: strings.Repeat("n", host.MaxAPINameBytes+1)}), connect.CodeInvalidArgument, "name"},
		{"unknown kind", acquire(&coordhostv1.AcquireLockRequest{Name: "invoice", Kind: 7}), connect.CodeInvalidArgument, "kind"},
		{"negative wait", acquire(&coordhostv1.AcquireLockRequest{Name: "invoice", Wait: durationpb.New(-time.Second)}), connect.CodeInvalidArgument, "wait"},
		{"huge wait", acquire(&coordhostv1.AcquireLockRequest{Name: "invoice", Wait: durationpb.New(host.MaxAPIWait + time.Second)}), connect.CodeInvalidArgument, "wait"},
		{"invalid wait", acquire(&coordhostv1.AcquireLockRequest{Name: "invoice", Wait: &durationpb.Duration{Seconds: 1, Nanos: -1}}), connect.CodeInvalidArgument, "wait"},
		{"too many attributes", acquire(&coordhostv1.AcquireLockRequest{Name: "tenant", Attributes: manyAttrs(host.MaxAPIAttributes + 1)}), connect.CodeInvalidArgument, "attributes"},
		{"empty attribute key", acquire(&coordhostv1.AcquireLockRequest{Name: "tenant", Attributes: map[string]string{"": "x"}}), connect.CodeInvalidArgument, "attributes"},
		{"missing partition attribute", acquire(&coordhostv1.AcquireLockRequest{Name: "tenant"}), connect.CodeInvalidArgument, "attributes"},
		{"bad session id", acquire(&coordhostv1.AcquireLockRequest{Name: "invoice", SessionId: "nope"}), connect.CodeInvalidArgument, "session_id"},
		{"unconfigured name", acquire(&coordhostv1.AcquireLockRequest{Name: "nope"}), connect.CodeNotFound, ""},
		{"redlock kind unconfigured", acquire(&coordhostv1.AcquireLockRequest{Name: "invoice", Kind: coordhostv1.LockKind_LOCK_KIND_REDLOCK}), connect.CodeNotFound, ""},
		{"empty grant id", renew(""), connect.CodeInvalidArgument, "grant_id"},
		{"long grant id", renew("g1." + strings.Repeat("A", host.MaxGrantIDBytes)), connect.CodeInvalidArgument, "grant_id"},
		{"other version", renew("g2." + rid[3:]), connect.CodeInvalidArgument, "grant_id"},
		{"bad base64", release("g1.!!!"), connect.CodeInvalidArgument, "grant_id"},
		{"not json", renew(forge("nope")), connect.CodeInvalidArgument, "grant_id"},
		{"unknown json field", renew(forge(`{"k":"lock","n":"invoice","y":"invoice","t":"` + tok + `","l":30000,"z":1}`)), connect.CodeInvalidArgument, "grant_id"},
		{"trailing json", renew(forge(`{"k":"lock","n":"invoice","y":"invoice","t":"` + tok + `","l":30000}{}`)), connect.CodeInvalidArgument, "grant_id"},
		{"unknown kind in id", renew(forge(`{"k":"what","n":"invoice","y":"invoice","t":"` + tok + `","l":30000}`)), connect.CodeInvalidArgument, "grant_id"},
		{"another service's kind", renew(forge(`{"k":"rwlock","n":"invoice","y":"invoice","m":"read","t":"` + tok + `","l":30000}`)), connect.CodeInvalidArgument, "grant_id"},
		{"key of another name", release(forge(`{"k":"lock","n":"invoice","y":"short","t":"` + tok + `","l":30000}`)), connect.CodeInvalidArgument, "grant_id"},
		{"partition key on a block without one", release(forge(`{"k":"lock","n":"invoice","y":"invoice/x","t":"` + tok + `","l":30000}`)), connect.CodeInvalidArgument, "grant_id"},
		{"token with a space", renew(forge(`{"k":"lock","n":"invoice","y":"invoice","t":"a b","l":30000}`)), connect.CodeInvalidArgument, "grant_id"},
		{"empty token", renew(forge(`{"k":"lock","n":"invoice","y":"invoice","t":"","l":30000}`)), connect.CodeInvalidArgument, "grant_id"},
		{"negative fence", renew(forge(`{"k":"lock","n":"invoice","y":"invoice","t":"` + tok + `","x":-1,"l":30000}`)), connect.CodeInvalidArgument, "grant_id"},
		{"fence on a lock without fencing", renew(forge(`{"k":"lock","n":"short","y":"short","t":"` + tok + `","x":3,"l":30000}`)), connect.CodeInvalidArgument, "grant_id"},
		{"zero ttl", renew(forge(`{"k":"lock","n":"invoice","y":"invoice","t":"` + tok + `"}`)), connect.CodeInvalidArgument, "grant_id"},
		{"huge ttl", renew(forge(`{"k":"lock","n":"invoice","y":"invoice","t":"` + tok + `","l":99999999999999}`)), connect.CodeInvalidArgument, "grant_id"},
		{"bad session in id", renew(forge(`{"k":"lock","n":"invoice","y":"invoice","t":"` + tok + `","s":"x","l":30000}`)), connect.CodeInvalidArgument, "grant_id"},
		{"unconfigured name in id", renew(forge(`{"k":"lock","n":"gone","y":"gone","t":"` + tok + `","l":30000}`)), connect.CodeNotFound, ""},
	} {
		if connect.CodeOf(tc.err) != tc.code {
			t.Errorf("%s: %v, want %v", tc.what, tc.err, tc.code)
			continue
		}
		d := errDetail(t, tc.err)
		if d == nil || tc.field != "" && d.Field != tc.field {
			t.Errorf("%s: detail %v, want field %q (%v)", tc.what, d, tc.field, tc.err)
		}
	}
	if got := s.MustCmd(t, "DBSIZE"); got != dbsize {
		t.Fatalf("bad requests changed DBSIZE from %s to %s", dbsize, got)
	}
	if got := s.MustCmd(t, "PTTL", "m:coordhost:lock:invoice"); got > pttl {
		t.Fatalf("bad requests renewed the lock: PTTL %s, was %s", got, pttl)
	}
	if got := s.MustCmd(t, "GET", "m:coordhost:lock:invoice"); got != tok {
		t.Fatalf("bad requests changed the holder: %q", got)
	}
}

// A grant id taken at one daemon is renewed and released at another on
// the same Redis, which never saw the grant.
func TestAPILockTwoHosts(t *testing.T) {
	s := redistest.Start(t)
	cfg := rateLimitConfig(t, s.Addr, 3, lockBlocks)
	urlA, hcA := apiServer(t, newHost(t, cfg))
	urlB, hcB := apiServer(t, newHost(t, cfg))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := newLockClients(hcA, urlA, connect.WithGRPC()).lock
	b := newLockClients(hcB, urlB, connect.WithProtoJSON()).lock
	got, err := a.TryAcquire(ctx, connect.NewRequest(&coordhostv1.TryAcquireLockRequest{Name: "invoice"}))
	if err != nil {
		t.Fatal(err)
	}
	id := got.Msg.GetGrant().GetGrantId()
	s.MustCmd(t, "PEXPIRE", "m:coordhost:lock:invoice", "1000")
	r, err := b.Renew(ctx, connect.NewRequest(&coordhostv1.RenewLockRequest{GrantId: id}))
	if err != nil {
		t.Fatal(err)
	}
	if r.Msg.GetGrant().GetFencingToken() != got.Msg.GetGrant().GetFencingToken() || r.Msg.GetGrant().GetExpiresAt() == nil {
		t.Fatalf("renewed at B: %v", r.Msg.GetGrant())
	}
	if pttl := s.MustCmd(t, "PTTL", "m:coordhost:lock:invoice"); len(pttl) != 5 {
		t.Fatalf("PTTL after B's renewal: %s", pttl)
	}
	rel, err := b.Release(ctx, connect.NewRequest(&coordhostv1.ReleaseLockRequest{GrantId: id}))
	if err != nil || rel.Msg.GetResult() != coordhostv1.ReleaseResult_RELEASE_RESULT_RELEASED {
		t.Fatalf("Release at B: %v %v", rel, err)
	}
	if n := s.MustCmd(t, "EXISTS", "m:coordhost:lock:invoice"); n != "0" {
		t.Fatal("the lock is still held after B released it")
	}
}

// Connect JSON refuses an unknown field (connect's own codec drops it): a
// misspelt "session" must not take a grant outside the session.
func TestAPIUnknownJSONField(t *testing.T) {
	s := redistest.Start(t)
	h := newHost(t, rateLimitConfig(t, s.Addr, 3, lockBlocks))
	url, hc := apiServer(t, h)
	for _, ct := range []string{"application/json", "application/json; charset=utf-8"} {
		req, err := http.NewRequest("POST", url+"/coordhost.v1.LockService/Acquire", strings.NewReader(`{"name":"invoice","session":"x"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", ct)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(body), "invalid_argument") {
			t.Fatalf("%s: %d %s", ct, resp.StatusCode, body)
		}
	}
	if n := s.MustCmd(t, "DBSIZE"); n != "0" {
		t.Fatalf("a request with an unknown field wrote %s keys", n)
	}
}
