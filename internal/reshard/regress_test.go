package reshard

// Deterministic reproductions of the defects the churn runs found, each on
// a cluster slot held in one migration state while one call runs.

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/latch"
	"github.com/coordhost/coordhost/primitives/lock"
	"github.com/coordhost/coordhost/primitives/rwlock"
	"github.com/coordhost/coordhost/primitives/semaphore"
)

// TestMigratingSourceScripts: with a slot MIGRATING and every key still on
// the source (so the source runs the scripts), each release or reset whose
// script deleted a key and then touched it again failed with "Script
// attempted to access a non local key" after its writes: a semaphore
// releasing its last permit, a read-write lock its last holder, a latch
// reset over an old generation.
func TestMigratingSourceScripts(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3)
	cl := c.Client(t)
	ctx := xtest.Ctx(t, 20*time.Second)
	const key = "{src}"
	slot := redistest.SlotOf(key)

	sems, err := semaphore.New(cl, semaphore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer sems.Close()
	rw, err := rwlock.New(cl, rwlock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Close()
	ls, err := latch.New(cl, latch.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Close()

	permit, err := sems.TryAcquire(ctx, key+"sem", 2, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	rl, err := rw.TryAcquireWrite(ctx, key+"rw", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ls.Create(ctx, key+"latch", 2); err != nil {
		t.Fatal(err)
	}

	from := c.Owner(slot)
	c.StartMigration(t, slot, from, (from+1)%3)
	if r, err := permit.Release(ctx); err != nil || r != primitives.Released {
		t.Errorf("semaphore Release of the last permit on a migrating source: %v, %v", r, err)
	}
	if r, err := rl.Release(ctx); err != nil || r != primitives.Released {
		t.Errorf("rwlock Release of the last holder on a migrating source: %v, %v", r, err)
	}
	if _, err := ls.Reset(ctx, key+"latch", 3); err != nil {
		t.Errorf("latch Reset on a migrating source: %v", err)
	}
	c.Finish(t)
}

// TestSplitSlotWaitsForMigration: a fenced lock whose counter a paused
// migration moved while the lock key is free is refused with TRYAGAIN
// (multi-key command on keys split between two masters) until the
// migration finishes. TryAcquireFenced came back with that TRYAGAIN at
// once; it now resends for up to a second, and a migration that finishes
// meanwhile grants it. One that does not finish in time fails with
// ErrUnavailable, having written nothing.
func TestSplitSlotWaitsForMigration(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3)
	cl := c.Client(t)
	ctx := xtest.Ctx(t, 20*time.Second)
	l, err := lock.New(cl, lock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const lease, counter = "{split}lease", "{split}counter"
	lk, err := l.TryAcquireFenced(ctx, lease, counter, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	slot := redistest.SlotOf(lease)
	from := c.Owner(slot)
	c.StartMigration(t, slot, from, (from+1)%3)
	if moved, left := c.MoveKeys(t, 0); moved != 1 || left != 0 {
		t.Fatalf("moved %d keys, %d left; want the counter alone", moved, left)
	}

	start := time.Now()
	_, err = l.TryAcquireFenced(ctx, lease, counter, time.Minute)
	if !errors.Is(err, primitives.ErrUnavailable) {
		t.Fatalf("TryAcquireFenced on a split slot: %v, want ErrUnavailable", err)
	}
	t.Logf("refused after %v: %v", time.Since(start).Round(time.Millisecond), err)

	type result struct {
		lk  *lock.Lock
		err error
	}
	done := make(chan result, 1)
	go func() {
		lk, err := l.TryAcquireFenced(ctx, lease, counter, time.Minute)
		done <- result{lk, err}
	}()
	time.Sleep(200 * time.Millisecond)
	c.Finish(t)
	r := <-done
	if r.err != nil {
		t.Fatalf("TryAcquireFenced while the migration finished: %v", r.err)
	}
	if r.lk.FencingToken() != 2 {
		t.Errorf("fencing token %d, want 2", r.lk.FencingToken())
	}
}

// TestFencedConnectionFollowsRedirects: a semaphore acquire runs on a
// dedicated connection (fenced with CLIENT KILL if its reply is lost),
// which rueidis binds to the node its slot map names and never redirects.
// With the semaphore's keys moved to the target of a paused migration
// (ASK) and, after the migration, with a client whose slot map is stale
// (MOVED), every attempt came back "acquire outcome unknown (no
// connection, nothing sent): ASK ...".
func TestFencedConnectionFollowsRedirects(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3)
	ctx := xtest.Ctx(t, 20*time.Second)
	cl := c.Client(t)
	sems, err := semaphore.New(cl, semaphore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer sems.Close()
	const key = "{redir}sem"
	p, err := sems.TryAcquire(ctx, key, 3, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	slot := redistest.SlotOf(key)
	from := c.Owner(slot)
	to := (from + 1) % 3
	c.StartMigration(t, slot, from, to)
	c.MoveKeys(t, 0)
	for i := range 3 {
		q, err := sems.TryAcquire(ctx, key, 3, time.Minute)
		if err != nil {
			t.Fatalf("acquire %d with the keys on the importing target (ASK): %v", i, err)
		}
		if _, err := q.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	c.Finish(t)
	// A second client that learnt the slot map before the move: its first
	// dedicated connection goes to the old owner, which answers MOVED.
	stale := c.Client(t)
	stale.Do(ctx, stale.B().Get().Key(key+strconv.Itoa(slot)).Build())
	c.MigrateSlot(t, slot, from)
	sems2, err := semaphore.New(stale, semaphore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer sems2.Close()
	q, err := sems2.TryAcquire(ctx, key, 3, time.Minute)
	if err != nil {
		t.Fatalf("acquire through a client whose slot map is stale (MOVED): %v", err)
	}
	q.Release(ctx)
	p.Release(ctx)
}

// TestReleaseAfterMasterKilled: a lock's master is killed and its replica
// promoted; the holder's client still maps the slot to the dead node, so
// its release fails to connect ("dial tcp ...: connection refused"). That
// was taken for a lost reply: Release reported an unknown outcome and
// closed the handle, leaving the lock held until its TTL. A dial error
// means nothing was sent: the release is resent until the client's map
// follows the failover, and releases.
func TestReleaseAfterMasterKilled(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3, redistest.WithReplicas(1))
	ctx := xtest.Ctx(t, 20*time.Second)
	l, err := lock.New(c.Client(t), lock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const key = "{killed}lock"
	lk, err := l.TryAcquire(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// The lock must have reached the replica before its master dies, or
	// the promoted replica has no lock to release. WAIT counts replicas
	// that have the connection's own last write, so write a key of the same
	// slot first on the admin connection: replication is in order, and the
	// lock came before it.
	i := c.Owner(redistest.SlotOf(key))
	m := c.Servers[i]
	m.MustCmd(t, "SET", "{killed}sync", "1")
	if n := m.MustCmd(t, "WAIT", "1", "5000"); n != "1" {
		t.Fatalf("%s: WAIT 1 5000 counts %s replicas", m.Addr, n)
	}
	c.KillMaster(t, i)
	ctx = xtest.Ctx(t, 20*time.Second) // the failover may have used up the first one
	if r, err := lk.Release(ctx); err != nil || r != primitives.Released {
		t.Fatalf("Release after the master was killed and replaced: %v, %v", r, err)
	}
	c.Revive(t)
}
