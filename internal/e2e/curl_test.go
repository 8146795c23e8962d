package e2e

import (
	"encoding/json"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	coordhostv1 "github.com/coordhost/coordhost/gen/coordhost/v1"
)

// curlResult is an HTTP exchange as curl saw it.
type curlResult struct {
	Status      int
	ContentType string
	Body        string
}

// curlMarker separates the body from what curl's -w writes after it.
const curlMarker = "\n--curl-write-out--\n"

// curl runs curl against d: method "GET" or "POST", path (with its query),
// and for a POST the JSON body (see jsonText) sent as application/json, as
// a Connect unary call over HTTP/1.1. It fails the test when curl itself
// fails (no HTTP answer).
func (d *daemon) curl(t testing.TB, method, path string, body any) curlResult {
	t.Helper()
	bin := need(t, curlClient)
	args := []string{"-sS", "--http1.1", "-X", method, "-w", curlMarker + "%{http_code} %{content_type}"}
	stdin := ""
	if method == "POST" {
		args = append(args, "-H", "Content-Type: application/json", "--data-binary", "@-")
		stdin = jsonText(t, body)
	}
	r := runClient(t, stdin, bin, append(args, d.URL+path)...)
	out, tail, ok := strings.Cut(r.Stdout, curlMarker)
	if r.Code != 0 || !ok {
		t.Fatalf("curl %s %s: %s", method, path, r)
	}
	code, ctype, _ := strings.Cut(tail, " ")
	status, err := strconv.Atoi(code)
	if err != nil {
		t.Fatalf("curl %s %s: status %q: %v", method, path, code, err)
	}
	return curlResult{Status: status, ContentType: ctype, Body: out}
}

// connectError is a Connect error body: code, message and details, each
// detail with its type, base64 value and (connect-go adds it) the JSON.
type connectError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Details []struct {
		Type  string          `json:"type"`
		Value string          `json:"value"`
		Debug json.RawMessage `json:"debug"`
	} `json:"details"`
}

// Connect's JSON protocol through curl: a POST per unary call (the
// README's example), a GET for a NO_SIDE_EFFECTS method
// (SessionService/GetSession) with the message in the query, and errors as
// Connect's JSON error body with the ErrorDetail.
func TestCurlConnectJSON(t *testing.T) {
	t.Parallel()
	need(t, curlClient)
	d := startDaemon(t, rateLimitHCL)

	const check = "/coordhost.v1.RateLimitService/Check"
	body := `{"name":"api","attributes":{"tenant":"acme"}}`
	for i, allowed := range []bool{true, true, false} {
		r := d.curl(t, "POST", check, body)
		if r.Status != 200 || r.ContentType != "application/json" {
			t.Fatalf("call %d: %+v, want 200 application/json", i+1, r)
		}
		var resp coordhostv1.CheckRateLimitResponse
		decodeJSON(t, []byte(r.Body), &resp)
		if resp.Allowed != allowed || resp.Limit != 2 {
			t.Errorf("call %d: %s, want allowed %v", i+1, r.Body, allowed)
		}
		// A refusal is 200 with allowed absent (false is the default).
		if !allowed && strings.Contains(r.Body, "allowed") {
			t.Errorf("refusal %s names allowed", r.Body)
		}
	}

	before := d.dbsize(t)
	r := d.curl(t, "POST", check, `{"name":"","attributes":{"tenant":"acme"}}`)
	var ce connectError
	decodeJSON(t, []byte(r.Body), &ce)
	if r.Status != 400 || ce.Code != "invalid_argument" || !strings.HasPrefix(ce.Message, "name:") || len(ce.Details) != 1 ||
		ce.Details[0].Type != "coordhost.v1.ErrorDetail" {
		t.Errorf("bad request: %+v, want 400 invalid_argument with one coordhost.v1.ErrorDetail", r)
	} else {
		var detail coordhostv1.ErrorDetail
		decodeJSON(t, ce.Details[0].Debug, &detail)
		if detail.Reason != coordhostv1.Reason_REASON_INVALID_FIELD || detail.Field != "name" {
			t.Errorf("bad request's detail: %s, want REASON_INVALID_FIELD naming name", ce.Details[0].Debug)
		}
	}
	r = d.curl(t, "POST", check, `{"name":"nope","attributes":{"tenant":"acme"}}`)
	decodeJSON(t, []byte(r.Body), &ce)
	if r.Status != 404 || ce.Code != "not_found" || len(ce.Details) != 1 || !strings.Contains(string(ce.Details[0].Debug), "REASON_NAME_NOT_CONFIGURED") {
		t.Errorf("unknown name: %+v, want 404 not_found with REASON_NAME_NOT_CONFIGURED", r)
	}
	if r := d.curl(t, "POST", check, `{"name":`); r.Status != 400 || !strings.Contains(r.Body, `"invalid_argument"`) {
		t.Errorf("malformed JSON: %+v, want 400 invalid_argument", r)
	}
	if after := d.dbsize(t); after != before {
		t.Errorf("DBSIZE %s after the bad requests, %s before", after, before)
	}

	// A session: created with a POST, read with a GET.
	r = d.curl(t, "POST", "/coordhost.v1.SessionService/CreateSession", `{"ttl":"45s"}`)
	var created coordhostv1.CreateSessionResponse
	decodeJSON(t, []byte(r.Body), &created)
	id := created.Session.GetSessionId()
	if r.Status != 200 || id == "" || created.Session.Ttl.AsDuration() != 45*time.Second {
		t.Fatalf("CreateSession: %+v", r)
	}
	get := func(msg string) curlResult {
		q := url.Values{"connect": {"v1"}, "encoding": {"json"}, "message": {msg}}
		return d.curl(t, "GET", "/coordhost.v1.SessionService/GetSession?"+q.Encode(), nil)
	}
	r = get(`{"session_id":"` + id + `"}`)
	var got coordhostv1.GetSessionResponse
	decodeJSON(t, []byte(r.Body), &got)
	if r.Status != 200 || got.Session.GetSessionId() != id || !got.Session.ExpiresAt.AsTime().Equal(created.Session.ExpiresAt.AsTime()) {
		t.Errorf("GET GetSession: %+v, want the session created", r)
	}
	r = get(`{"session_id":"` + strings.Repeat("0", 32) + `"}`)
	decodeJSON(t, []byte(r.Body), &ce)
	if r.Status != 404 || ce.Code != "not_found" || len(ce.Details) != 1 || !strings.Contains(string(ce.Details[0].Debug), "REASON_SESSION_NOT_FOUND") {
		t.Errorf("GET GetSession of no session: %+v, want 404 not_found with REASON_SESSION_NOT_FOUND", r)
	}
	// GET is only for NO_SIDE_EFFECTS methods.
	q := url.Values{"connect": {"v1"}, "encoding": {"json"}, "message": {`{"session_id":"` + id + `"}`}}
	if r := d.curl(t, "GET", "/coordhost.v1.SessionService/CloseSession?"+q.Encode(), nil); r.Status != 405 {
		t.Errorf("GET CloseSession: %+v, want 405", r)
	}
	if r := d.curl(t, "POST", "/coordhost.v1.SessionService/GetSession", `{"session_id":"`+id+`"}`); r.Status != 200 {
		t.Errorf("POST GetSession after the GET CloseSession: %+v, want the session still there", r)
	}
}
