package rwlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/rwlock"
)

// score reads member's deadline in the sorted set key on s: "" when absent.
func score(t *testing.T, s *redistest.Server, key, member string) string {
	t.Helper()
	v, err := s.Cmd(t, "ZSCORE", key, member)
	if err != nil && !strings.Contains(err.Error(), "nil") {
		t.Fatalf("ZSCORE on %s: %v", s.Addr, err)
	}
	return v
}

// With Replicas = 1, read and write grants and renewals are on the
// replica when the calls return; with the replica paused, acquires fail
// with ErrNotReplicated and leave nothing held, and a renewal loses the
// handle.
func TestReplicas(t *testing.T) {
	p := redistest.Start(t)
	r := redistest.StartReplicaOf(t, p)
	c := p.Client(t)
	ctx := xtest.Ctx(t, 30*time.Second)
	const timeout = 200 * time.Millisecond
	l := newLocker(t, c, rwlock.Options{Replicas: 1, ReplicaTimeout: timeout})

	rd, err := l.TryAcquireRead(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	before := score(t, r, "k", "r:"+rd.Token())
	if before == "" {
		t.Fatal("the read grant is not on the replica")
	}
	if ok, err := rd.Renew(ctx, time.Hour); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if after := score(t, r, "k", "r:"+rd.Token()); after <= before {
		t.Fatalf("replica's deadline %s after a renewal, %s before", after, before)
	}
	if _, err := rd.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wr, err := l.AcquireWrite(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if score(t, r, "k", "w:"+wr.Token()) == "" {
		t.Fatal("the write grant is not on the replica")
	}

	r.Pause()
	defer r.Resume()
	ok, err := wr.Renew(ctx, time.Minute)
	if ok || !errors.Is(err, primitives.ErrNotReplicated) || !strings.Contains(err.Error(), "renew not confirmed by replicas (handle lost)") {
		t.Fatalf("Renew with the replica paused: %v %v", ok, err)
	}
	select {
	case <-wr.Done():
	default:
		t.Fatal("Done open after an unconfirmed renewal")
	}
	if res, err := wr.Release(ctx); res != primitives.Released || err != nil {
		t.Fatal(res, err)
	}
	for name, try := range map[string]func() (*rwlock.Lease, error){
		"TryAcquireRead":  func() (*rwlock.Lease, error) { return l.TryAcquireRead(ctx, "k", time.Minute) },
		"TryAcquireWrite": func() (*rwlock.Lease, error) { return l.TryAcquireWrite(ctx, "k", time.Minute) },
	} {
		start := time.Now()
		ls, err := try()
		if ls != nil || !errors.Is(err, primitives.ErrNotReplicated) || !strings.Contains(err.Error(), `rwlock "k": acquire not confirmed by replicas (released)`) {
			t.Fatalf("%s: %v %v", name, ls, err)
		}
		if took := time.Since(start); took < timeout {
			t.Errorf("%s: failed after %v, before the %v timeout", name, took, timeout)
		}
		if n := p.MustCmd(t, "ZCARD", "k"); n != "0" {
			t.Fatalf("%s: %s member(s) left on the primary", name, n)
		}
	} // Waiting acquisitions do not stop at an unconfirmed grant: they give
	// each one back and try again, until their ctx ends, holding nothing.
	for name, try := range map[string]func(context.Context) (*rwlock.Lease, error){
		"AcquireRead":  func(ctx context.Context) (*rwlock.Lease, error) { return l.AcquireRead(ctx, "k", time.Minute) },
		"AcquireWrite": func(ctx context.Context) (*rwlock.Lease, error) { return l.AcquireWrite(ctx, "k", time.Minute) },
	} {
		actx, cancel := context.WithTimeout(ctx, 3*timeout)
		ls, err := try(actx)
		cancel()
		if ls != nil || !errors.Is(err, context.DeadlineExceeded) || p.MustCmd(t, "ZCARD", "k") != "0" {
			t.Fatalf("%s with the replica paused: %v %v", name, ls, err)
		}
	}
}

func TestReplicasBadOptions(t *testing.T) {
	c := redistest.Start(t).Client(t)
	for _, o := range []rwlock.Options{
		{Replicas: -1},
		{Replicas: primitives.MaxReplicas + 1},
		{Replicas: 1, ReplicaTimeout: -time.Millisecond},
		{Replicas: 1, ReplicaTimeout: primitives.MaxReplicaTimeout + time.Millisecond},
	} {
		if l, err := rwlock.New(c, o); l != nil || !errors.Is(err, primitives.ErrInvalidOptions) || !strings.Contains(err.Error(), "rwlock: Replica") {
			t.Errorf("%+v: %v", o, err)
		}
	}
}
