package e2e

import (
	"slices"
	"strings"
	"testing"
	"time"

	coordhostv1 "github.com/coordhost/coordhost/gen/coordhost/v1"
	"github.com/coordhost/coordhost/internal/xtest"
	"google.golang.org/protobuf/types/known/durationpb"
)

// grpcurl learns the schema from server reflection alone: `list` names the
// services, `describe` resolves each one's descriptors (and the messages
// they use), and the health service answers through it.
func TestGrpcurlReflection(t *testing.T) {
	t.Parallel()
	bin := need(t, grpcurlClient)
	d := startDaemon(t, "")
	r := runClient(t, "", bin, "-plaintext", d.Addr, "list")
	if r.Code != 0 {
		t.Fatalf("grpcurl list: %s", r)
	}
	services := strings.Fields(r.Stdout)
	for _, want := range []string{
		"coordhost.v1.AdminService",
		"coordhost.v1.RateLimitService",
		"coordhost.v1.SessionService",
		"envoy.service.ratelimit.v3.RateLimitService",
		"grpc.health.v1.Health",
		"grpc.reflection.v1.ServerReflection",
		"grpc.reflection.v1alpha.ServerReflection",
	} {
		if !slices.Contains(services, want) {
			t.Errorf("grpcurl list lacks %s; listed:\n%s", want, r.Stdout)
		}
	}
	// Every service listed resolves, with its methods' messages.
	for _, svc := range services {
		r := runClient(t, "", bin, "-plaintext", d.Addr, "describe", svc)
		if r.Code != 0 || !strings.Contains(r.Stdout, "service ") {
			t.Errorf("grpcurl describe %s: %s", svc, r)
		}
	}
	r = runClient(t, "", bin, "-plaintext", d.Addr, "describe", ".coordhost.v1.ErrorDetail")
	if r.Code != 0 || !strings.Contains(r.Stdout, "field") {
		t.Errorf("grpcurl describe .coordhost.v1.ErrorDetail: %s", r)
	}
	var health struct{ Status string }
	d.grpcurlOK(t, "grpc.health.v1.Health/Check", `{"service":"coordhost.v1.SessionService"}`, &health)
	if health.Status != "SERVING" {
		t.Errorf("grpc.health.v1.Health/Check: %+v, want SERVING", health)
	}
	// A server stream the daemon does not implement (the health checker
	// has no Watch): the stream ends at once with Unimplemented.
	w := d.grpcurlServerStream(t, "grpc.health.v1.Health/Watch", `{"service":""}`)
	r = w.Wait(t)
	var st grpcStatus
	decodeJSON(t, []byte(r.Stderr), &st)
	if r.Code != 64+12 || st.Code != 12 {
		t.Errorf("grpc.health.v1.Health/Watch: %s\nwant exit %d (Unimplemented)", r, 64+12)
	}
}

// RateLimitService/Check through grpcurl: granted twice, then refused with
// a retry_after; another tenant has its own count. A bad request prints
// its status and ErrorDetail (reason and field) and writes nothing.
func TestGrpcurlRateLimitCheck(t *testing.T) {
	t.Parallel()
	need(t, grpcurlClient)
	d := startDaemon(t, rateLimitHCL)
	const method = "coordhost.v1.RateLimitService/Check"
	req := &coordhostv1.CheckRateLimitRequest{Name: "api", Attributes: map[string]string{"tenant": "acme"}}
	for i, allowed := range []bool{true, true, false} {
		var resp coordhostv1.CheckRateLimitResponse
		d.grpcurlOK(t, method, req, &resp)
		if resp.Allowed != allowed || resp.Limit != 2 || resp.Remaining != int64(1-i) && allowed {
			t.Errorf("call %d: %v, want allowed %v, limit 2", i+1, &resp, allowed)
		}
		if !allowed && (resp.RetryAfter.AsDuration() <= 0 || resp.RetryAfter.AsDuration() > 2*time.Hour) {
			t.Errorf("refusal: retry_after %v, want in (0, 2h] (a window and a segment at most)", resp.RetryAfter.AsDuration())
		}
	}
	var other coordhostv1.CheckRateLimitResponse
	d.grpcurlOK(t, method, `{"name":"api","attributes":{"tenant":"globex"}}`, &other)
	if !other.Allowed {
		t.Errorf("another tenant: %v, want allowed", &other)
	}

	before := d.dbsize(t)
	for _, bad := range []struct {
		name, req, code, reason, field string
	}{
		{"empty name", `{"attributes":{"tenant":"acme"}}`, "InvalidArgument", "REASON_INVALID_FIELD", "name"},
		{"negative cost", `{"name":"api","attributes":{"tenant":"acme"},"cost":"-1"}`, "InvalidArgument", "REASON_INVALID_FIELD", "cost"},
		{"missing attribute", `{"name":"api"}`, "InvalidArgument", "REASON_INVALID_FIELD", "attributes"},
		{"unknown name", `{"name":"nope","attributes":{"tenant":"acme"}}`, "NotFound", "REASON_NAME_NOT_CONFIGURED", ""},
	} {
		// grpcurl's own error text: code, message and the details.
		r := d.grpcurl(t, method, bad.req)
		out := r.Stdout + r.Stderr
		if r.Code == 0 || !strings.Contains(out, "Code: "+bad.code) || !strings.Contains(out, bad.reason) ||
			bad.field != "" && !strings.Contains(out, `"field": "`+bad.field+`"`) {
			t.Errorf("%s: %s\nwant Code: %s with %s naming field %q", bad.name, r, bad.code, bad.reason, bad.field)
		}
		// The same as JSON (-format-error).
		st := d.grpcurlErr(t, method, bad.req)
		if len(st.Details) != 1 {
			t.Errorf("%s: %d details, want 1: %+v", bad.name, len(st.Details), st)
			continue
		}
		var detail struct {
			Type   string `json:"@type"`
			Reason string `json:"reason"`
			Field  string `json:"field"`
		}
		decodeJSON(t, st.Details[0], &detail)
		if detail.Type != "type.googleapis.com/coordhost.v1.ErrorDetail" || detail.Reason != bad.reason || detail.Field != bad.field {
			t.Errorf("%s: detail %+v, want ErrorDetail %s field %q", bad.name, detail, bad.reason, bad.field)
		}
	}
	if after := d.dbsize(t); after != before {
		t.Errorf("DBSIZE %s after the bad requests, %s before", after, before)
	}
}

// SessionService through grpcurl: create, get, renew (the expiry moves
// on), close, then get is NotFound with REASON_SESSION_NOT_FOUND.
func TestGrpcurlSession(t *testing.T) {
	t.Parallel()
	need(t, grpcurlClient)
	d := startDaemon(t, "")
	const svc = "coordhost.v1.SessionService/"

	var created coordhostv1.CreateSessionResponse
	d.grpcurlOK(t, svc+"CreateSession", &coordhostv1.CreateSessionRequest{Ttl: durationpb.New(30 * time.Second)}, &created)
	s := created.Session
	if len(s.GetSessionId()) != 32 || s.Ttl.AsDuration() != 30*time.Second || time.Until(s.ExpiresAt.AsTime()) <= 0 {
		t.Fatalf("CreateSession: %v", &created)
	}
	id := `{"session_id":"` + s.SessionId + `"}`

	var got coordhostv1.GetSessionResponse
	d.grpcurlOK(t, svc+"GetSession", id, &got)
	if got.Session.GetSessionId() != s.SessionId || !got.Session.ExpiresAt.AsTime().Equal(s.ExpiresAt.AsTime()) {
		t.Errorf("GetSession: %v, want %v", &got, s)
	}

	time.Sleep(20 * time.Millisecond) // expiries have millisecond precision
	var renewed coordhostv1.RenewSessionResponse
	d.grpcurlOK(t, svc+"RenewSession", id, &renewed)
	if !renewed.Session.ExpiresAt.AsTime().After(s.ExpiresAt.AsTime()) {
		t.Errorf("RenewSession: expires %v, not after %v", renewed.Session.ExpiresAt.AsTime(), s.ExpiresAt.AsTime())
	}

	var closed coordhostv1.CloseSessionResponse
	d.grpcurlOK(t, svc+"CloseSession", id, &closed)
	if !closed.Closed {
		t.Errorf("CloseSession: %v, want closed", &closed)
	}
	d.grpcurlOK(t, svc+"CloseSession", id, &closed)
	if closed.Closed {
		t.Errorf("CloseSession again: %v, want closed false", &closed)
	}
	st := d.grpcurlErr(t, svc+"GetSession", id)
	if st.Code != 5 || len(st.Details) != 1 || !strings.Contains(string(st.Details[0]), "REASON_SESSION_NOT_FOUND") {
		t.Errorf("GetSession after close: %+v, want NotFound (5) with REASON_SESSION_NOT_FOUND", st)
	}
	if n := d.dbsize(t); n != "0" {
		t.Errorf("DBSIZE %s after the session closed, want 0", n)
	}
}

// SessionService/KeepAlive as a grpcurl bidirectional stream fed from its
// stdin: each request renews the session and answers with the new expiry;
// closing stdin ends the stream cleanly and the session lives on. A
// session made with release_on_disconnect ends as soon as its KeepAlive
// client is killed (SIGKILL).
func TestGrpcurlKeepAlive(t *testing.T) {
	t.Parallel()
	need(t, grpcurlClient)
	d := startDaemon(t, "")
	const svc = "coordhost.v1.SessionService/"
	create := func(rod bool) string {
		t.Helper()
		var created coordhostv1.CreateSessionResponse
		d.grpcurlOK(t, svc+"CreateSession", &coordhostv1.CreateSessionRequest{Ttl: durationpb.New(time.Minute), ReleaseOnDisconnect: rod}, &created)
		return created.Session.GetSessionId()
	}

	id := create(false)
	ka := d.grpcurlStream(t, svc+"KeepAlive")
	var last time.Time
	for i := range 3 {
		ka.Send(t, &coordhostv1.KeepAliveRequest{SessionId: id})
		var resp coordhostv1.KeepAliveResponse
		ka.Recv(t, &resp)
		exp := resp.Session.GetExpiresAt().AsTime()
		if resp.Session.GetSessionId() != id || !exp.After(last) {
			t.Errorf("response %d: %v, want session %s expiring after %v", i+1, &resp, id, last)
		}
		last = exp
		time.Sleep(20 * time.Millisecond)
	}
	ka.CloseSend(t)
	if r := ka.Wait(t); r.Code != 0 {
		t.Errorf("grpcurl KeepAlive after EOF on stdin: %s", r)
	}
	d.grpcurlOK(t, svc+"GetSession", &coordhostv1.GetSessionRequest{SessionId: id}, nil)

	// The client vanishes: a release_on_disconnect session ends with it.
	rod := create(true)
	ka = d.grpcurlStream(t, svc+"KeepAlive")
	ka.Send(t, &coordhostv1.KeepAliveRequest{SessionId: rod})
	var resp coordhostv1.KeepAliveResponse
	ka.Recv(t, &resp)
	if !resp.Session.GetReleaseOnDisconnect() {
		t.Fatalf("KeepAlive: %v, want release_on_disconnect", &resp)
	}
	ka.Kill()
	xtest.Eventually(t, 10*time.Second, "the release_on_disconnect session still exists after its KeepAlive client was killed", func() bool {
		return d.grpcurl(t, svc+"GetSession", &coordhostv1.GetSessionRequest{SessionId: rod}).Code == 64+5
	})
	// The other session is untouched.
	d.grpcurlOK(t, svc+"GetSession", &coordhostv1.GetSessionRequest{SessionId: id}, nil)
}
