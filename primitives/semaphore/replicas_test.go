package semaphore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/semaphore"
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

// With Replicas = 1 a permit and its renewal are on the replica when the
// calls return; with the replica paused, acquires fail with
// ErrNotReplicated and leave no permit, and a renewal loses the handle.
func TestReplicas(t *testing.T) {
	p := redistest.Start(t)
	r := redistest.StartReplicaOf(t, p)
	c := p.Client(t)
	ctx := xtest.Ctx(t, 30*time.Second)
	const timeout = 200 * time.Millisecond
	s := newSems(t, c, semaphore.Options{Replicas: 1, ReplicaTimeout: timeout})

	pm, err := s.TryAcquire(ctx, "jobs", 2, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	before := score(t, r, "jobs", pm.Token())
	if before == "" {
		t.Fatal("the permit is not on the replica")
	}
	if ok, err := pm.Renew(ctx, time.Hour); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if after := score(t, r, "jobs", pm.Token()); after <= before {
		t.Fatalf("replica's deadline %s after a renewal, %s before", after, before)
	}

	r.Pause()
	defer r.Resume()
	ok, err := pm.Renew(ctx, time.Minute)
	if ok || !errors.Is(err, primitives.ErrNotReplicated) || !strings.Contains(err.Error(), `semaphore "jobs": renew not confirmed by replicas (handle lost)`) {
		t.Fatalf("Renew with the replica paused: %v %v", ok, err)
	}
	select {
	case <-pm.Done():
	default:
		t.Fatal("Done open after an unconfirmed renewal")
	}
	if res, err := pm.Release(ctx); res != primitives.Released || err != nil {
		t.Fatal(res, err)
	}
	for name, try := range map[string]func() (*semaphore.Permit, error){
		"TryAcquire":         func() (*semaphore.Permit, error) { return s.TryAcquire(ctx, "jobs", 2, time.Minute) },
		"TryAcquireNoExpiry": func() (*semaphore.Permit, error) { return s.TryAcquire(ctx, "jobs", 2, semaphore.NoExpiry) },
	} {
		start := time.Now()
		pm, err := try()
		if pm != nil || !errors.Is(err, primitives.ErrNotReplicated) || !strings.Contains(err.Error(), `semaphore "jobs": acquire not confirmed by replicas (released)`) {
			t.Fatalf("%s: %v %v", name, pm, err)
		}
		if took := time.Since(start); took < timeout {
			t.Errorf("%s: failed after %v, before the %v timeout", name, took, timeout)
		}
		if n := p.MustCmd(t, "ZCARD", "jobs"); n != "0" {
			t.Fatalf("%s: %s permit(s) left on the primary", name, n)
		}
	}
	// A waiting Acquire does not stop at an unconfirmed grant: it gives
	// each one back and tries again, until its ctx ends, holding nothing.
	actx, cancel := context.WithTimeout(ctx, 3*timeout)
	defer cancel()
	pm, err = s.Acquire(actx, "jobs", 2, time.Minute)
	if pm != nil || !errors.Is(err, context.DeadlineExceeded) || p.MustCmd(t, "ZCARD", "jobs") != "0" {
		t.Fatalf("a waiting Acquire with the replica paused: %v %v", pm, err)
	}
}

func TestReplicasBadOptions(t *testing.T) {
	c := redistest.Start(t).Client(t)
	for _, o := range []semaphore.Options{
		{Replicas: -1},
		{Replicas: primitives.MaxReplicas + 1},
		{Replicas: 1, ReplicaTimeout: -time.Millisecond},
		{Replicas: 1, ReplicaTimeout: primitives.MaxReplicaTimeout + time.Millisecond},
	} {
		if s, err := semaphore.New(c, o); s != nil || !errors.Is(err, primitives.ErrInvalidOptions) || !strings.Contains(err.Error(), "semaphore: Replica") {
			t.Errorf("%+v: %v", o, err)
		}
	}
}
