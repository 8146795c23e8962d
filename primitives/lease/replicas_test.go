package lease_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/internal/leasetest"
	"github.com/coordhost/coordhost/primitives/lease"
)

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
	if leasetest.Read(t, r, "HGET", "h", "f") != l.Token() {
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
	leasetest.Unreplicated{
		Held:       l,
		Timeout:    timeout,
		RenewErr:   `lease "h" field "f": renew not confirmed by replicas (handle lost)`,
		AcquireErr: `lease "h" field "f": acquire not confirmed by replicas (released)`,
		Try: map[string]func(context.Context) (primitives.Lease, error){
			"TryAcquire": func(ctx context.Context) (primitives.Lease, error) { return ls.TryAcquire(ctx, "h", "f", time.Minute) },
		},
		Wait: map[string]func(context.Context) (primitives.Lease, error){
			"Acquire": func(ctx context.Context) (primitives.Lease, error) { return ls.Acquire(ctx, "h", "f", time.Minute) },
		},
		Left: func(t *testing.T) string {
			if v := leasetest.Read(t, p, "HGET", "h", "f"); v != "" {
				return fmt.Sprintf("the field, held by %q,", v)
			}
			return ""
		},
	}.Check(t, ctx)
}

func TestReplicasBadOptions(t *testing.T) {
	c := redistest.Start(t).Client(t)
	leasetest.BadReplicaOptions(t, "lease", func(n int, timeout time.Duration) (bool, error) {
		ls, err := lease.New(c, lease.Options{Replicas: n, ReplicaTimeout: timeout})
		return ls != nil, err
	})
}
