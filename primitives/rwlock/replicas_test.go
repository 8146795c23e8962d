package rwlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/internal/leasetest"
	"github.com/coordhost/coordhost/primitives/rwlock"
)

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
	before := leasetest.Read(t, r, "ZSCORE", "k", "r:"+rd.Token())
	if before == "" {
		t.Fatal("the read grant is not on the replica")
	}
	if ok, err := rd.Renew(ctx, time.Hour); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if after := leasetest.Read(t, r, "ZSCORE", "k", "r:"+rd.Token()); after <= before {
		t.Fatalf("replica's deadline %s after a renewal, %s before", after, before)
	}
	if _, err := rd.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wr, err := l.AcquireWrite(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if leasetest.Read(t, r, "ZSCORE", "k", "w:"+wr.Token()) == "" {
		t.Fatal("the write grant is not on the replica")
	}

	r.Pause()
	defer r.Resume()
	leasetest.Unreplicated{
		Held:       wr,
		Timeout:    timeout,
		RenewErr:   "renew not confirmed by replicas (handle lost)",
		AcquireErr: `rwlock "k": acquire not confirmed by replicas (released)`,
		Try: map[string]func(context.Context) (primitives.Lease, error){
			"TryAcquireRead":  func(ctx context.Context) (primitives.Lease, error) { return l.TryAcquireRead(ctx, "k", time.Minute) },
			"TryAcquireWrite": func(ctx context.Context) (primitives.Lease, error) { return l.TryAcquireWrite(ctx, "k", time.Minute) },
		},
		Wait: map[string]func(context.Context) (primitives.Lease, error){
			"AcquireRead":  func(ctx context.Context) (primitives.Lease, error) { return l.AcquireRead(ctx, "k", time.Minute) },
			"AcquireWrite": func(ctx context.Context) (primitives.Lease, error) { return l.AcquireWrite(ctx, "k", time.Minute) },
		},
		Left: func(t *testing.T) string {
			if n := p.MustCmd(t, "ZCARD", "k"); n != "0" {
				return n + " member(s)"
			}
			return ""
		},
	}.Check(t, ctx)
}

func TestReplicasBadOptions(t *testing.T) {
	c := redistest.Start(t).Client(t)
	leasetest.BadReplicaOptions(t, "rwlock", func(n int, timeout time.Duration) (bool, error) {
		l, err := rwlock.New(c, rwlock.Options{Replicas: n, ReplicaTimeout: timeout})
		return l != nil, err
	})
}
