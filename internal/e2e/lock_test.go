package e2e

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	coordhostv1 "github.com/coordhost/coordhost/gen/coordhost/v1"
)

// lockHCL is the lock the LockService tests take: a long TTL, so that only
// a release lets the next holder in quickly.
const lockHCL = `
lock "job" {
  ttl     = "60s"
  fencing = true
}
`

// A Hold stream whose grpcurl is killed with SIGKILL releases the lock at
// once: a waiting grpcurl Acquire gets it long before the 60s TTL, with a
// higher fencing token.
func TestGrpcurlHoldKilled(t *testing.T) {
	t.Parallel()
	need(t, grpcurlClient)
	d := startDaemon(t, lockHCL)
	const hold = "coordhost.v1.LockService/Hold"
	a := d.grpcurlServerStream(t, hold, &coordhostv1.HoldLockRequest{Name: "job"})
	var ga coordhostv1.HoldLockResponse
	a.Recv(t, &ga)
	if ga.GetGrant().GetFencingToken() == 0 {
		t.Fatalf("Hold granted %v", ga.GetGrant())
	}
	b := d.grpcurlServerStream(t, hold, &coordhostv1.HoldLockRequest{Name: "job", Wait: durationpb.New(20 * time.Second)})
	time.Sleep(300 * time.Millisecond) // b waits behind a
	start := time.Now()
	a.Kill()
	var gb coordhostv1.HoldLockResponse
	b.Recv(t, &gb)
	took := time.Since(start)
	t.Logf("the next holder got the lock %v after the first holder's SIGKILL (TTL 60s)", took)
	if took > 5*time.Second {
		t.Fatalf("the next holder waited %v after the kill", took)
	}
	if gb.GetGrant().GetFencingToken() <= ga.GetGrant().GetFencingToken() {
		t.Fatalf("fencing token %d after %d", gb.GetGrant().GetFencingToken(), ga.GetGrant().GetFencingToken())
	}
	var rel coordhostv1.ReleaseLockResponse
	b.Kill()
	// Released at b's end too: the unary calls see a free lock.
	deadline := time.Now().Add(5 * time.Second)
	for {
		var got coordhostv1.TryAcquireLockResponse
		r := d.grpcurl(t, "coordhost.v1.LockService/TryAcquire", &coordhostv1.TryAcquireLockRequest{Name: "job"})
		if r.Code == 0 {
			decodeJSON(t, []byte(r.Stdout), &got)
			d.grpcurlOK(t, "coordhost.v1.LockService/Release", &coordhostv1.ReleaseLockRequest{GrantId: got.GetGrant().GetGrantId()}, &rel)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lock is still held after the second Hold was killed: %s", r)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if rel.GetResult() != coordhostv1.ReleaseResult_RELEASE_RESULT_RELEASED {
		t.Fatalf("Release: %v", rel.GetResult())
	}
}

// Unary LockService calls through grpcurl: acquire, contention with its
// ErrorDetail, renew and release by grant id; a bad request writes nothing.
func TestGrpcurlLockUnary(t *testing.T) {
	t.Parallel()
	need(t, grpcurlClient)
	d := startDaemon(t, lockHCL)
	var got coordhostv1.AcquireLockResponse
	d.grpcurlOK(t, "coordhost.v1.LockService/Acquire", &coordhostv1.AcquireLockRequest{Name: "job"}, &got)
	if got.GetGrant().GetFencingToken() != 1 || got.GetGrant().GetGrantId() == "" {
		t.Fatalf("Acquire: %v", got.GetGrant())
	}
	st := d.grpcurlErr(t, "coordhost.v1.LockService/TryAcquire", &coordhostv1.TryAcquireLockRequest{Name: "job"})
	if st.Code != 10 || len(st.Details) != 1 || !strings.Contains(string(st.Details[0]), "REASON_CONTENDED") {
		t.Fatalf("TryAcquire of a held lock: %+v, want Aborted (10) with REASON_CONTENDED", st)
	}
	size := d.dbsize(t)
	bad := d.grpcurlErr(t, "coordhost.v1.LockService/Acquire", &coordhostv1.AcquireLockRequest{Name: "job", Wait: durationpb.New(-time.Second)})
	if bad.Code != 3 || len(bad.Details) != 1 || !strings.Contains(string(bad.Details[0]), `"field": "wait"`) {
		t.Fatalf("a negative wait: %+v, want InvalidArgument (3) naming wait", bad)
	}
	if n := d.dbsize(t); n != size {
		t.Fatalf("a bad request changed DBSIZE from %s to %s", size, n)
	}
	var renewed coordhostv1.RenewLockResponse
	d.grpcurlOK(t, "coordhost.v1.LockService/Renew", &coordhostv1.RenewLockRequest{GrantId: got.GetGrant().GetGrantId()}, &renewed)
	var rel coordhostv1.ReleaseLockResponse
	d.grpcurlOK(t, "coordhost.v1.LockService/Release", &coordhostv1.ReleaseLockRequest{GrantId: got.GetGrant().GetGrantId()}, &rel)
	if rel.GetResult() != coordhostv1.ReleaseResult_RELEASE_RESULT_RELEASED {
		t.Fatalf("Release: %v", rel.GetResult())
	}
}

// Python's grpcio takes a lock through a session: listed by GetSession,
// released by CloseSession, the next holder's fencing token higher.
func TestPythonGrpcioSessionLock(t *testing.T) {
	t.Parallel()
	need(t, pythonClient)
	d := startDaemon(t, lockHCL)
	steps := d.python(t, "session_lock")
	for _, name := range []string{"create", "acquire", "try_held", "get", "close", "next", "release"} {
		if _, ok := steps[name]; !ok {
			t.Errorf("no step %q in the Python client's output", name)
		}
	}
	if n := d.dbsize(t); n != "1" { // the fencing counter stays
		t.Errorf("DBSIZE %s after the scenario, want 1 (the fencing counter)", n)
	}
}
