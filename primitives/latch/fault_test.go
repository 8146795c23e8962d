package latch_test

// Fault tests: latches under lost replies, resets, blackholes and latency
// (internal/faulttest), every operation recorded and the history checked
// with porcupine against faulttest.LatchModel, whose central rule is the
// issue's: no Wait returns true before its generation's count reached
// zero.
//
// Model assumptions (see faulttest.LatchModel):
//   - Several clients, each through its own fault proxy with its own
//     Latches (and private Waiter), act on a few keys at once: one writer
//     goroutine per client (Create, Reset, Join, CountDown, Count, Delete,
//     and short Waits) and waiter goroutines (Join, then Wait).
//   - A write whose call fails (lost reply, reset, timeout) has an unknown
//     outcome: it may take effect at any time after its call, or never. A
//     client wrapper taps the generation token each Create and Reset
//     sends, so such a write is modelled with its generation; one that
//     sent nothing is left out.
//   - A read that fails (a Wait that timed out, a Count or Join that
//     failed) constrains nothing and is left out.
//   - TTLs are far longer than the run: expiry is not modelled.
//   - The proxy passes a client's close on after the bytes it sent (as TCP
//     does), so a command written on a connection that rueidis abandons
//     at a deadline can still run later.
//
// Independently of porcupine, faulttest.EarlyWakes counts Waits that
// returned true before as many count-downs of their generation as its
// count had even been called.

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/coordhost/coordhost/internal/faulttest"
	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/primitives/latch"
)

// realWait is the latch's own Wait.
func realWait(ctx context.Context, l *latch.Latch) (bool, error) { return l.Wait(ctx) }

// brokenWait is the control: it polls Count and reports completion one
// count-down early (an off-by-one any checker of the rule must
// catch).
func brokenWait(ctx context.Context, l *latch.Latch) (bool, error) {
	for {
		n, err := l.Count(ctx)
		switch {
		case err != nil:
			return false, err
		case n == -1:
			return false, nil
		case n <= 1:
			return true, nil
		}
		select {
		case <-time.After(2 * time.Millisecond):
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
}

// latchChaosFor is how long the chaos runs last: 3s recorded about 5,000
// operations on an idle machine and 4,900 under a loaded `make test` on 2
// cores, against the floor of 5,000; 4s keeps a margin.
const latchChaosFor = 4 * time.Second

func latchChaosConfig(seed uint64, d time.Duration) latchFaultConfig {
	return latchFaultConfig{
		clients:          6,
		waitersPerClient: 2,
		keys:             8,
		duration:         d,
		opTimeout:        60 * time.Millisecond,
		waitTimeout:      300 * time.Millisecond,
		wait:             realWait,
		chaos: faulttest.Chaos{
			Seed:     seed,
			Duration: d,
			Step:     100 * time.Millisecond,
			Faults: []faulttest.Fault{faulttest.Calm, faulttest.Latency, faulttest.ResetOne, faulttest.ResetAll,
				faulttest.Blackhole, faulttest.DropReply, faulttest.DropReply, faulttest.DropWindow},
			MaxLatency: 10 * time.Millisecond,
		},
	}
}

// latchMinChecked is how many checked operations make a chaos run count.
const latchMinChecked = 3000

func latchCheckChaos(t *testing.T, r *latchFaultResult, seed uint64, minChecked int) {
	t.Helper()
	r.log(t)
	if r.checked < minChecked {
		t.Errorf("only %d checked operations, want ≥ %d", r.checked, minChecked)
	}
	if r.counts["Wait true"] == 0 || r.counts["Wait false"] == 0 || r.counts["CountDown unknown"] == 0 {
		t.Errorf("the run exercised too little: %v", r.counts)
	}
	if r.check != porcupine.Ok {
		latchVisualize(t, r)
		t.Fatalf("history check: %v (seed %d; replay with %s=%d)", r.check, seed, faulttest.SeedEnv, seed)
	}
	if len(r.early) > 0 {
		t.Fatalf("%d waits returned true before their count-downs were called (seed %d)", len(r.early), seed)
	}
}

func latchVisualize(t *testing.T, r *latchFaultResult) {
	t.Helper()
	path, err := faulttest.LatchModel{}.Visualize(r.ops, 30*time.Second, "")
	if err != nil {
		t.Logf("visualization: %v", err)
		return
	}
	t.Logf("history visualization: %s", path)
}

// TestLatchFaultHistory: six clients, each through its own fault proxy,
// work on eight latches under a seeded chaos schedule of latency, resets,
// blackholes and lost replies; the history must be linearizable against
// the latch model (no Wait true before the count reached zero), with
// ≥ 3,000 checked operations (3,192-4,516 seen when the suite shared
// the 2 cores with other work; more on an idle machine).
func TestLatchFaultHistory(t *testing.T) {
	srv := redistest.Start(t)
	seed := faulttest.Seed(t)
	r := runLatchFaults(t, latchFaultTarget{client: srv.Client, nodes: []*redistest.Server{srv}}, latchChaosConfig(seed, latchChaosFor))
	latchCheckChaos(t, r, seed, latchMinChecked)
}

// TestLatchFaultHistoryCluster is the same, shorter, on a 3-master
// cluster (waiters wake by the latch channel there); also ≥ 3,000 checked
// operations.
func TestLatchFaultHistoryCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	seed := faulttest.Seed(t)
	r := runLatchFaults(t, latchFaultTarget{client: cl.Client, nodes: cl.Servers}, latchChaosConfig(seed, latchChaosFor))
	latchCheckChaos(t, r, seed, latchMinChecked)
}

// TestLatchFaultControl runs a waiter that reports completion one
// count-down early through the same harness: the checker must flag it.
func TestLatchFaultControl(t *testing.T) {
	srv := redistest.Start(t)
	seed := faulttest.Seed(t)
	cfg := latchChaosConfig(seed, time.Second)
	cfg.wait = brokenWait
	cfg.chaos.Faults = []faulttest.Fault{faulttest.Calm, faulttest.Latency}
	cfg.chaos.MaxLatency = 2 * time.Millisecond
	r := runLatchFaults(t, latchFaultTarget{client: srv.Client, nodes: []*redistest.Server{srv}}, cfg)
	r.log(t)
	if r.check != porcupine.Illegal {
		t.Fatalf("the checker accepted a waiter that wakes one count-down early: %v (seed %d)", r.check, seed)
	}
	if len(r.early) == 0 {
		t.Errorf("EarlyWakes found none in the broken waiter's history")
	}
	if os.Getenv("COORDHOST_FAULT_VISUALIZE") != "" {
		latchVisualize(t, r)
	}
}
