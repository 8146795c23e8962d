package lock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/lock"
)

// hostileCluster starts a 3-master cluster with one replica per master, a
// cluster client that has learnt the slot map, and a key whose slot is
// owned by master from; to is another master.
func hostileCluster(t *testing.T, key string) (cl *redistest.Cluster, from, to int) {
	t.Helper()
	cl = redistest.StartCluster(t, 3, redistest.WithReplicas(1))
	slot := redistest.SlotOf(key)
	from = cl.Owner(slot)
	return cl, from, (from + 1) % len(cl.Servers)
}

// FINDING 1 (high): on a Cluster, Locker.TryAcquire with Options.Replicas
// sends the acquire script and WAIT through the cluster client's DoMulti,
// not through the dedicated connection docs/failover.md and package replica
// promise. attemptFirst wraps the client in wait.Conn{CoreClient: client},
// and replica.Wait.Run's `c.(rueidis.Client)` check fails on that struct, so
// the cluster branch (Dedicated) is never taken for a lock or an rwlock.
// When the client's slot map is stale (the key's slot moved to another
// master: a reshard, or a failover the client has not seen yet), rueidis
// follows the script's MOVED to the new master and re-sends the script
// alone, while WAIT is answered by the old master about a connection that
// wrote nothing there: the grant is confirmed by replicas that never saw
// it. Here the new master's only replica is stopped (SIGSTOP), so nothing
// can confirm the grant, yet TryAcquire returns it with a nil error.
func TestHostile12ClusterWaitAnsweredByOldMaster(t *testing.T) {
	const key = "hostile12-moved"
	cl, from, to := hostileCluster(t, key)
	c := cl.Client(t)
	ctx := xtest.Ctx(t, 60*time.Second)
	l := newLocker(t, c, lock.Options{Replicas: 1, ReplicaTimeout: 200 * time.Millisecond})

	// Load the acquire script on every master and teach the client the
	// slot map: one confirmed grant per master.
	for i := range cl.Servers {
		k := cl.KeyOn(t, "warm", i)
		lk, err := l.TryAcquire(ctx, k, time.Minute)
		if err != nil {
			t.Fatalf("warm-up on master %d (%s): %v", i, k, err)
		}
		if _, err := lk.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	lk, err := l.TryAcquire(ctx, key, time.Minute)
	if err != nil {
		t.Fatalf("before the migration: %v", err)
	}
	if _, err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// Move the key's slot behind the client's back and stop the new
	// owner's only replica: no grant on the new owner can be confirmed.
	cl.MigrateSlot(t, redistest.SlotOf(key), to)
	rep := cl.Replicas[to][0]
	rep.Pause()
	defer rep.Resume()

	lk, err = l.TryAcquire(ctx, key, time.Minute)
	held := get(t, cl.Servers[to], key)
	t.Logf("slot moved from master %d to %d (replica %s stopped): TryAcquire = %v, %v; new owner holds %q", from, to, rep.Addr, lk != nil, err, held)
	if err == nil {
		t.Fatalf("granted and reported confirmed (token %q on the new master %s) although the new master's only replica is stopped: WAIT was answered by the old master %s", lk.Token(), cl.Servers[to].Addr, cl.Servers[from].Addr)
	}
	if !errors.Is(err, primitives.ErrNotReplicated) {
		t.Fatalf("error %v, want ErrNotReplicated", err)
	}
}

// FINDING 3 (high): the same path (FINDING 1: the script and WAIT in one
// cluster-client DoMulti) panics during a slot migration. rueidis' mux
// marks the first command of a DoMulti that holds a blocking command
// (WAIT) as blocking, in place (cmds.ToBlock(&multi[0])): the EVALSHA.
// When the migrating master answers ASK, the cluster client re-sends that
// EVALSHA behind ASKING (askingMulti); the pair now holds a "blocking"
// command, so the mux marks ASKING in place too, askingMulti no longer
// recognises it and returns two results for one command, and doresultfn
// indexes past its slice: "index out of range [1] with length 1" in the
// caller's goroutine. Every TryAcquire/Acquire of a free plain lock (or an
// rwlock) whose slot is migrating panics: a library user's process dies, a
// CLI "lock hold" dies, the daemon's handler goroutine panics. The script
// has run by then on the importing master, so the lock is also left held
// by no one until its TTL. With Replicas = 0 there is no WAIT and no
// panic (the control).
func TestHostile12ClusterAskPanics(t *testing.T) {
	const tag = "{hostile12-ask}"
	cl, from, to := hostileCluster(t, tag)
	c := cl.Client(t)
	ctx := xtest.Ctx(t, 60*time.Second)
	on := newLocker(t, c, lock.Options{Replicas: 1, ReplicaTimeout: 200 * time.Millisecond})
	off := newLocker(t, c, lock.Options{})
	for i := range cl.Servers { // load the script everywhere, learn the map
		for _, l := range []*lock.Locker{on, off} {
			lk, err := l.TryAcquire(ctx, cl.KeyOn(t, "warm", i), time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			lk.Release(ctx)
		}
	}
	cl.StartMigration(t, redistest.SlotOf(tag), from, to)

	try := func(l *lock.Locker, key string) (lk *lock.Lock, err error, panicked any) {
		defer func() { panicked = recover() }()
		lk, err = l.TryAcquire(ctx, key, time.Minute)
		return
	}
	// Control: without replicas the acquire follows ASK and is granted.
	if lk, err, p := try(off, tag+"off"); p != nil || err != nil {
		t.Fatalf("control (Replicas = 0) during the migration: %v %v, panic %v", lk, err, p)
	}
	lk, err, p := try(on, tag+"on")
	held := asking(t, cl.Servers[to], tag+"on")
	if p != nil {
		t.Fatalf("TryAcquire with Replicas = 1 while the slot migrates from master %d to %d panicked: %v (the importing master now holds the key for no one: %q)", from, to, p, held)
	}
	t.Logf("Replicas = 1 during the migration: %v %v (importing master holds %q)", lk != nil, err, held)
}

// asking reads key on the importing master s (ASKING first, on the same
// admin connection): "" when absent.
func asking(t *testing.T, s *redistest.Server, key string) string {
	t.Helper()
	s.MustCmd(t, "ASKING")
	return get(t, s, key)
}

// FINDING 2 (medium): on a Cluster, with Options.Replicas a renewal goes
// on a dedicated connection that follows no redirection (replica.Run), and
// any error loses the handle (handle.State.Renew). So once a held lock's
// slot has moved to another master (a reshard, or a CLUSTER FAILOVER the
// client's slot map has not caught up with), the next Renew gets MOVED and
// the handle is lost (Done closes, KeepAlive ends) although the lock is
// still held, by us, on its new master. With Replicas = 0 the same renewal
// follows MOVED and succeeds (the control below). docs/failover.md only
// says a moving slot "fails the attempt"; it says nothing of renewals.
func TestHostile12ClusterRenewLostAfterSlotMove(t *testing.T) {
	const key = "hostile12-renew"
	cl, _, to := hostileCluster(t, key)
	ctx := xtest.Ctx(t, 60*time.Second)

	c0 := cl.Client(t)
	off := newLocker(t, c0, lock.Options{})
	c1 := cl.Client(t)
	on := newLocker(t, c1, lock.Options{Replicas: 1, ReplicaTimeout: time.Second})

	lkOff, err := off.TryAcquire(ctx, key+"{a}", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	lkOn, err := on.TryAcquire(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// Move both keys' slots.
	cl.MigrateSlot(t, redistest.SlotOf(key+"{a}"), (cl.Owner(redistest.SlotOf(key+"{a}"))+1)%3)
	cl.MigrateSlot(t, redistest.SlotOf(key), to)

	okOff, errOff := lkOff.Renew(ctx, time.Minute)
	okOn, errOn := lkOn.Renew(ctx, time.Minute)
	t.Logf("Replicas=0 renew: %v %v; Replicas=1 renew: %v %v", okOff, errOff, okOn, errOn)
	if !okOff || errOff != nil {
		t.Fatalf("control (Replicas = 0): renewal after the slot moved: %v %v", okOff, errOff)
	}
	if !okOn || errOn != nil {
		select {
		case <-lkOn.Done():
			t.Fatalf("Replicas = 1: renewal after the slot moved failed (%v, %v) and the handle is lost, though the lock is still ours on the new master (%q == %q)", okOn, errOn, get(t, cl.Servers[to], key), lkOn.Token())
		default:
		}
		t.Fatalf("Replicas = 1: renewal after the slot moved: %v %v", okOn, errOn)
	}
}

// FINDING 2, through a CLUSTER FAILOVER (a rolling upgrade, say): the
// client's slot map still names the demoted master, which answers the
// dedicated connection's renewal with MOVED, and every held lock with
// Replicas loses its handle at its next renewal; with Replicas = 0 the
// cluster client follows MOVED and renews.
func TestHostile12ClusterRenewLostAfterFailover(t *testing.T) {
	const key = "hostile12-failover"
	cl, from, _ := hostileCluster(t, key)
	ctx := xtest.Ctx(t, 60*time.Second)
	off := newLocker(t, cl.Client(t), lock.Options{})
	on := newLocker(t, cl.Client(t), lock.Options{Replicas: 1, ReplicaTimeout: time.Second})
	lkOff, err := off.TryAcquire(ctx, key+"{x}", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if cl.Owner(redistest.SlotOf(key+"{x}")) != from {
		lkOff.Release(ctx)
		t.Skip("control key on another master; pick another")
	}
	lkOn, err := on.TryAcquire(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	cl.Failover(t, from)
	okOff, errOff := lkOff.Renew(ctx, time.Minute)
	okOn, errOn := lkOn.Renew(ctx, time.Minute)
	t.Logf("after CLUSTER FAILOVER of master %d: Replicas=0 renew %v %v; Replicas=1 renew %v %v; new master holds %q", from, okOff, errOff, okOn, errOn, get(t, cl.Servers[from], key))
	if !okOff || errOff != nil {
		t.Fatalf("control (Replicas = 0): %v %v", okOff, errOff)
	}
	if !okOn || errOn != nil {
		t.Fatalf("Replicas = 1: renewal after the failover failed (%v, %v), handle lost (Done closed: %v), though the new master holds our token (%v)", okOn, errOn, isClosed(lkOn.Done()), get(t, cl.Servers[from], key) == lkOn.Token())
	}
}
