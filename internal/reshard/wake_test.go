package reshard

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/policies"
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
	ctx := xtest.Ctx(t, 20*time.Second)

	round := func(name string, change func()) {
		t.Helper()
		lk, err := holder.TryAcquire(ctx, key, time.Minute)
		if err != nil {
			t.Fatalf("%s: holder: %v", name, err)
		}
		got := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			w, err := waiter.Acquire(ctx, key, time.Minute)
			if err == nil {
				_, err = w.Release(context.Background())
			}
			got <- err
		}()
		time.Sleep(300 * time.Millisecond) // the waiter subscribes and sleeps
		change()
		time.Sleep(200 * time.Millisecond)
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if _, err := lk.Release(rctx); err != nil {
			t.Fatalf("%s: release: %v", name, err)
		}
		cancel()
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
		if strings.Contains(s.MustCmd(t, "CLIENT", "LIST"), "name=coordhost-wait") {
			return s
		}
	}
	t.Fatal("no node has the coordhost-wait connection")
	return nil
}
