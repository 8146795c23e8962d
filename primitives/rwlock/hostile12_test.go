package rwlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/internal/leasetest"
	"github.com/coordhost/coordhost/primitives/rwlock"
)

// FINDING 1 (high), rwlock's reproduction: Locker.try wraps the client in
// wait.Conn{CoreClient: client}, so replica.Wait.Run never takes its
// Cluster branch (a dedicated connection) and sends the script and WAIT
// through the cluster client's DoMulti. With a stale slot map rueidis
// follows the script's MOVED to the new master and WAIT is answered by the
// old one: a write grant is reported confirmed while the new master's only
// replica is stopped.
func TestHostile12ClusterWaitAnsweredByOldMaster(t *testing.T) {
	const key = "hostile12-rw"
	cl := redistest.StartCluster(t, 3, redistest.WithReplicas(1))
	slot := redistest.SlotOf(key)
	from := cl.Owner(slot)
	to := (from + 1) % len(cl.Servers)
	c := cl.Client(t)
	ctx := xtest.Ctx(t, 60*time.Second)
	l := newLocker(t, c, rwlock.Options{Replicas: 1, ReplicaTimeout: 200 * time.Millisecond})

	// Load the write script on every master (and learn the slot map).
	for i := range cl.Servers {
		lease, err := l.TryAcquireWrite(ctx, cl.KeyOn(t, "warm", i), time.Minute)
		if err != nil {
			t.Fatalf("warm-up on master %d: %v", i, err)
		}
		if _, err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	lease, err := l.TryAcquireWrite(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}

	cl.MigrateSlot(t, slot, to)
	rep := cl.Replicas[to][0]
	rep.Pause()
	defer rep.Resume()

	lease, err = l.TryAcquireWrite(ctx, key, time.Minute)
	t.Logf("slot moved from master %d to %d, its replica stopped: TryAcquireWrite = %v, %v", from, to, lease != nil, err)
	if err == nil {
		t.Fatalf("write grant reported confirmed although the new master's only replica is stopped (on the new master: %q)", leasetest.Read(t, cl.Servers[to], "ZSCORE", key, "w:"+lease.Token()))
	}
	if !errors.Is(err, primitives.ErrNotReplicated) {
		t.Fatalf("error %v, want ErrNotReplicated", err)
	}
}
