package lease_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/lease"
)

// hget reads field of key on s: "" when absent.
func hget(t *testing.T, s *redistest.Server, key, field string) string {
	t.Helper()
	v, err := s.Cmd(t, "HGET", key, field)
	if err != nil && !strings.Contains(err.Error(), "nil") {
		t.Fatalf("HGET on %s: %v", s.Addr, err)
	}
	return v
}

// With Replicas = 1 a lease and its renewal are on the replica when the
// calls return; with the replica paused, acquires fail with
// ErrNotReplicated and leave no field, and a renewal loses the handle.
func TestReplicas(t *testing.T) {
	p := redistest.Start(t, redistest.WithKind(redistest.Redis80))
	r := redistest.StartReplicaOf(t, p)
	c := p.Client(t)
	ctx := xtest.Ctx(t, 30*time.Second)
	const timeout = 200 * time.Millisecond
	ls := newLeases(t, c, lease.Options{Replicas: 1, ReplicaTimeout: timeout})

	l, err := ls.TryAcquire(ctx, "h", "f", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if hget(t, r, "h", "f") != l.Token() {
		t.Fatal("the lease is not on the replica")
	}
	if ok, err := l.Renew(ctx, time.Hour); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if ms, _ := strconv.ParseInt(r.MustCmd(t, "HPTTL", "h", "FIELDS", "1", "f"), 10, 64); ms < int64(59*time.Minute/time.Millisecond) {
		t.Fatalf("replica's HPTTL %dms after a renewal for 1h", ms)
	}

	r.Pause()
	defer r.Resume()
	ok, err := l.Renew(ctx, time.Minute)
	if ok || !errors.Is(err, primitives.ErrNotReplicated) || !strings.Contains(err.Error(), `lease "h" field "f": renew not confirmed by replicas (handle lost)`) {
		t.Fatalf("Renew with the replica paused: %v %v", ok, err)
	}
	select {
	case <-l.Done():
	default:
		t.Fatal("Done open after an unconfirmed renewal")
	}
	if res, err := l.Release(ctx); res != primitives.Released || err != nil {
		t.Fatal(res, err)
	}
	for name, try := range map[string]func() (*lease.Lease, error){
		"TryAcquire": func() (*lease.Lease, error) { return ls.TryAcquire(ctx, "h", "f", time.Minute) },
	} {
		start := time.Now()
		l, err := try()
		if l != nil || !errors.Is(err, primitives.ErrNotReplicated) || !strings.Contains(err.Error(), `lease "h" field "f": acquire not confirmed by replicas (released)`) {
			t.Fatalf("%s: %v %v", name, l, err)
		}
		if took := time.Since(start); took < timeout {
			t.Errorf("%s: failed after %v, before the %v timeout", name, took, timeout)
		}
		if v := hget(t, p, "h", "f"); v != "" {
			t.Fatalf("%s: the field is still held on the primary (%q)", name, v)
		}
	}
	// A waiting Acquire does not stop at an unconfirmed grant: it gives
	// each one back and tries again, until its ctx ends, holding nothing.
	actx, cancel := context.WithTimeout(ctx, 3*timeout)
	defer cancel()
	pm, err := ls.Acquire(actx, "h", "f", time.Minute)
	if pm != nil || !errors.Is(err, context.DeadlineExceeded) || hget(t, p, "h", "f") != "" {
		t.Fatalf("a waiting Acquire with the replica paused: %v %v", pm, err)
	}
}

func TestReplicasBadOptions(t *testing.T) {
	c := redistest.Start(t).Client(t)
	for _, o := range []lease.Options{
		{Replicas: -1},
		{Replicas: primitives.MaxReplicas + 1},
		{Replicas: 1, ReplicaTimeout: -time.Millisecond},
		{Replicas: 1, ReplicaTimeout: primitives.MaxReplicaTimeout + time.Millisecond},
	} {
		if ls, err := lease.New(c, o); ls != nil || !errors.Is(err, primitives.ErrInvalidOptions) || !strings.Contains(err.Error(), "lease: Replica") {
			t.Errorf("%+v: %v", o, err)
		}
	}
}
