package hazards_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/redlock"
	"github.com/redis/rueidis"
)

// The restart guard of package redlock keeps a node that restarted
// without persistence out of quorums for MaxTTL + drift (its tests:
// TestRestartGuard, TestRestartGuardFailover,
// TestRestartGuardCoversUptimeRounding, TestFreshDeploymentWaitsOutTheGuard
// in primitives/redlock). What it cannot see is the gap this test shows:
// a node that did not restart but whose wall clock jumped forward loses
// the holder's key just as a restart would, with the same run_id and a
// larger uptime (INFO's uptime is wall-clock seconds). Three nodes, the
// holder on two of them (the third briefly held by another owner); node
// 0's clock jumps 5 s forward; a second Group gets nodes 0 and 2 while
// the first holder's validity still runs. Redlock rests on bounded clock
// drift, and gives no fencing token to catch this.
func TestHazardRedlockClockJump(t *testing.T) {
	const maxTTL = time.Second
	jumper := startClockServer(t)
	nodes := append([]*redistest.Server{jumper.Server}, redistest.StartN(t, 2)...)
	// Old enough that a Group trusts every node at once: uptime at
	// least MaxTTL + drift + 1 s (the guard's rounding allowance).
	for _, s := range nodes {
		xtest.Eventually(t, 10*time.Second, "the node up for the guard's span", func() bool {
			up, _ := strconv.Atoi(infoField(t, s, "server", "uptime_in_seconds"))
			return up >= 3
		})
	}
	ctx := xtest.Ctx(t, 30*time.Second)
	group := func() *redlock.Group {
		clients := make([]rueidis.Client, len(nodes))
		for i, s := range nodes {
			clients[i] = s.Client(t)
		}
		g, err := redlock.New(clients, redlock.Options{MaxTTL: maxTTL, NodeTimeout: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { g.Close() })
		return g
	}
	first, second := group(), group()
	// Both Groups identify the nodes (and would refuse a young one).
	for _, g := range []*redlock.Group{first, second} {
		l, err := g.TryAcquire(ctx, "warm", 100*time.Millisecond)
		if err != nil {
			t.Fatalf("warming up: %v", err)
		}
		l.Release(ctx)
	}

	// A blocker on node 2 until after the control (no expiry: it must
	// still be there when the holder's TryAcquire reaches it): the holder
	// gets nodes 0 and 1.
	nodes[2].MustCmd(t, "SET", "k", "blocker")
	holder, err := first.TryAcquire(ctx, "k", maxTTL)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release(ctx)
	// The control: with no jump, the second Group is refused.
	if _, err := second.TryAcquire(ctx, "k", maxTTL); !errors.Is(err, primitives.ErrNotAcquired) && !errors.Is(err, redlock.ErrNoQuorum) {
		t.Fatalf("the second Group before the jump: %v, want a refusal", err)
	}
	jumper.jump(t, 5*time.Second)
	nodes[2].MustCmd(t, "DEL", "k") // the blocker on node 2 is gone
	l, err := second.TryAcquire(ctx, "k", maxTTL)
	if err != nil {
		t.Fatalf("after node 0's clock jumped: %v; want the second Group granted (the hazard)", err)
	}
	left := holder.Remaining()
	defer l.Release(ctx)
	var held []string
	for i, s := range nodes {
		v, _ := s.Cmd(t, "GET", "k")
		switch v {
		case holder.Token():
			held = append(held, "node "+strconv.Itoa(i)+": first")
		case l.Token():
			held = append(held, "node "+strconv.Itoa(i)+": second")
		}
	}
	t.Logf("node 0's clock jumped 5 s forward: a second Group holds the lock while the first holder's validity says %v left (%s); uptime on node 0 now %s s",
		left.Round(time.Millisecond), strings.Join(held, ", "), infoField(t, nodes[0], "server", "uptime_in_seconds"))
	if left <= 0 {
		t.Fatalf("the first holder ran out before the check (%v): too slow to tell", left)
	}
}
