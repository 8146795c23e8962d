package reshard

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/policies"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/lock"
)

// wakeOnly never bounds a waiter's sleep: only a release message (or the
// holder's TTL, a minute here) wakes it, so a lost wake-up shows as a
// wait of a minute instead of the policy's next retry.
var wakeOnly = policies.RetryFunc(func(context.Context, policies.RetryRequest) policies.RetryDecision {
	return policies.RetryDecision{Action: policies.WaitForWake}
})

// maxWake is how long a blocked Acquire may take to return after the
// holder released: a release message, not a timer.
const maxWake = 2 * time.Second

// TestWaiterWakesThroughChanges blocks an Acquire on a cluster client
// (whose wake-ups come over one pub/sub connection to one node) and
// releases the lock after a slot migration, after a CLUSTER FAILOVER of
// the key's master, and after the node carrying the waiter's pub/sub
// connection was killed (or, if it is a replica, stopped): each time the
// waiter must be granted within maxWake, not at the holder's TTL.
func TestWaiterWakesThroughChanges(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3, redistest.WithReplicas(1))
	holder, err := lock.New(c.Client(t), lock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	waiter, err := lock.New(c.Client(t), lock.Options{Retry: wakeOnly})
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	const key = tag + "wake"
	slot := redistest.SlotOf(key)

	// Each round takes contexts of its own: the change (a failover waits up
	// to redistest.ClusterTimeout for the takeover and as long again for
	// the cluster to agree) can take many seconds on a loaded machine, and
	// must not use up the next step's time.
	round := func(name string, change func()) {
		t.Helper()
		// ctx bounds the holder's TryAcquire and the waiter's Acquire, so
		// it must outlast the change; a lost wake-up still shows at maxWake.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		xtest.Eventually(t, 10*time.Second, name+": the previous round's waiter unsubscribed", func() bool { return waitSubs(t, c) == 0 })
		lk, err := holder.TryAcquire(ctx, key, time.Minute)
		if err != nil {
			t.Fatalf("%s: holder: %v", name, err)
		}
		got := make(chan error, 1)
		go func() {
			w, err := waiter.Acquire(ctx, key, time.Minute)
			if err == nil {
				_, err = w.Release(context.Background())
			}
			got <- err
		}()
		// The change comes after the waiter subscribed to the release
		// channel, or the round would not test a wake-up through it.
		xtest.Eventually(t, 10*time.Second, name+": the waiter subscribed", func() bool { return waitSubs(t, c) > 0 })
		time.Sleep(100 * time.Millisecond) // the waiter sleeps
		change()
		time.Sleep(200 * time.Millisecond)
		// After a failover the holder's client keeps routing the key to the
		// old master until its lazy slot-map refresh (up to a second after
		// a MOVED); when the last round stops that node (it carried the
		// waiter's connection), the release fails on the dead connection
		// with an unknown outcome (EOF). The holder is not under test:
		// releasing again settles it, and the waiter's time counts from the
		// release that succeeded.
		rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
		for {
			_, err := lk.Release(rctx)
			if err == nil {
				break
			}
			if !errors.Is(err, primitives.ErrUncertain) || rctx.Err() != nil {
				t.Fatalf("%s: release: %v", name, err)
			}
			t.Logf("%s: release: %v; releasing again", name, err)
			time.Sleep(50 * time.Millisecond)
		}
		rcancel()
		released := time.Now()
		select {
		case err := <-got:
			if err != nil {
				t.Fatalf("%s: waiter: %v", name, err)
			}
			t.Logf("%s: the waiter was granted %v after the release", name, time.Since(released).Round(time.Millisecond))
		case <-time.After(maxWake):
			t.Errorf("%s: the waiter still waits %v after the release (a lost wake-up)", name, maxWake)
			if err := <-got; err != nil {
				t.Fatalf("%s: waiter: %v", name, err)
			}
		}
	}

	round("after a slot migration", func() {
		c.MigrateSlot(t, slot, (c.Owner(slot)+1)%3)
	})
	round("after CLUSTER FAILOVER of the key's master", func() {
		c.Failover(t, c.Owner(slot))
	})
	round("after the waiter's pub/sub node died", func() {
		node := waitNode(t, c)
		for i, m := range c.Servers {
			if m == node {
				ft := c.KillMaster(t, i)
				t.Logf("killed master %d %s, which carried the waiter's connection; replica promoted in %v", i, node.Addr, ft.Promoted.Round(time.Millisecond))
				return
			}
		}
		node.Stop()
		t.Logf("stopped replica %s, which carried the waiter's connection", node.Addr)
	})
	for _, s := range c.Nodes() {
		if s.PID() == 0 {
			s.Restart(t)
		}
	}
	c.Revive(t)
}

// waitNode returns the node holding the waiting connection (CLIENT
// SETNAME coordhost-wait).
func waitNode(t *testing.T, c *redistest.Cluster) *redistest.Server {
	t.Helper()
	for _, s := range c.Nodes() {
		if _, ok := s.ClientField(t, "coordhost-wait", "id"); ok {
			return s
		}
	}
	t.Fatal("no node has the coordhost-wait connection")
	return nil
}

// waitSubs returns how many channels the waiting connection (CLIENT
// SETNAME coordhost-wait) is subscribed to, on whichever node holds it; 0
// without one.
func waitSubs(t *testing.T, c *redistest.Cluster) int {
	t.Helper()
	for _, s := range c.Nodes() {
		if v, ok := s.ClientField(t, "coordhost-wait", "sub"); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}
