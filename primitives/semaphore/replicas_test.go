package semaphore_test

import (
	"context"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/internal/leasetest"
	"github.com/coordhost/coordhost/primitives/semaphore"
)

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
	before := leasetest.Read(t, r, "ZSCORE", "jobs", pm.Token())
	if before == "" {
		t.Fatal("the permit is not on the replica")
	}
	if ok, err := pm.Renew(ctx, time.Hour); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if after := leasetest.Read(t, r, "ZSCORE", "jobs", pm.Token()); after <= before {
		t.Fatalf("replica's deadline %s after a renewal, %s before", after, before)
	}

	r.Pause()
	defer r.Resume()
	leasetest.Unreplicated{
		Held:       pm,
		Timeout:    timeout,
		RenewErr:   `semaphore "jobs": renew not confirmed by replicas (handle lost)`,
		AcquireErr: `semaphore "jobs": acquire not confirmed by replicas (released)`,
		Try: map[string]func(context.Context) (primitives.Lease, error){
			"TryAcquire": func(ctx context.Context) (primitives.Lease, error) { return s.TryAcquire(ctx, "jobs", 2, time.Minute) },
			"TryAcquireNoExpiry": func(ctx context.Context) (primitives.Lease, error) {
				return s.TryAcquire(ctx, "jobs", 2, semaphore.NoExpiry)
			},
		},
		Wait: map[string]func(context.Context) (primitives.Lease, error){
			"Acquire": func(ctx context.Context) (primitives.Lease, error) { return s.Acquire(ctx, "jobs", 2, time.Minute) },
		},
		Left: func(t *testing.T) string {
			if n := p.MustCmd(t, "ZCARD", "jobs"); n != "0" {
				return n + " permit(s)"
			}
			return ""
		},
	}.Check(t, ctx)
}

func TestReplicasBadOptions(t *testing.T) {
	c := redistest.Start(t).Client(t)
	leasetest.BadReplicaOptions(t, "semaphore", func(n int, timeout time.Duration) (bool, error) {
		s, err := semaphore.New(c, semaphore.Options{Replicas: n, ReplicaTimeout: timeout})
		return s != nil, err
	})
}
