package faulttest_test

import (
	"context"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/faulttest"
	"github.com/coordhost/coordhost/internal/redistest"
)

func TestChaosPlanDeterministic(t *testing.T) {
	c := faulttest.Chaos{Seed: 42, Duration: 5 * time.Second, Step: 50 * time.Millisecond}
	a, b := c.Plan(6), c.Plan(6)
	if len(a) != 100 || !reflect.DeepEqual(a, b) {
		t.Fatalf("same seed, different plans (%d, %d steps)", len(a), len(b))
	}
	c.Seed = 43
	if reflect.DeepEqual(a, c.Plan(6)) {
		t.Fatal("different seeds, same plan")
	}
	seen := map[faulttest.Fault]bool{}
	for _, x := range a {
		seen[x.Fault] = true
		if x.Target < -1 || x.Target >= 6 {
			t.Errorf("%v: target out of range", x)
		}
		if x.Hold > c.Step {
			t.Errorf("%v: hold longer than a step", x)
		}
		if x.Fault == faulttest.Latency && (x.Latency[0] <= 0 || x.Latency[1] <= 0 || x.Latency[0] > 11*time.Millisecond) {
			t.Errorf("%v: latency out of range", x)
		}
	}
	if len(seen) != len(faulttest.AllFaults) {
		t.Errorf("100 steps drew only %v", seen)
	}
	only := faulttest.Chaos{Seed: 1, Duration: time.Second, Faults: []faulttest.Fault{faulttest.Latency}}
	for _, x := range only.Plan(2) {
		if x.Fault != faulttest.Latency {
			t.Fatalf("Faults ignored: %v", x)
		}
	}
}

func TestChaosSeedFromEnv(t *testing.T) {
	t.Setenv(faulttest.SeedEnv, "12345")
	if got := faulttest.Seed(t); got != 12345 {
		t.Fatalf("Seed = %d, want 12345 from $%s", got, faulttest.SeedEnv)
	}
	t.Setenv(faulttest.SeedEnv, "")
	if a, b := faulttest.Seed(t), faulttest.Seed(t); a == b {
		t.Fatalf("two random seeds are both %d", a)
	}
}

// TestChaosRun drives traffic through two proxies under every fault and
// checks that the run applies its plan, that traffic survives it, and that
// everything is healed at the end.
func TestChaosRun(t *testing.T) {
	s := redistest.Start(t)
	ps := []*faulttest.Proxy{faulttest.New(t), faulttest.New(t)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var ok, failed atomic.Int64
	var wg sync.WaitGroup
	for _, p := range ps {
		c := client(t, s, p)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				octx, ocancel := context.WithTimeout(ctx, 50*time.Millisecond)
				err := c.Do(octx, c.B().Incr().Key("n").Build()).Error()
				ocancel()
				if err != nil {
					failed.Add(1)
				} else {
					ok.Add(1)
				}
			}
		}()
	}
	ch := faulttest.Chaos{Seed: faulttest.Seed(t), Duration: 1500 * time.Millisecond, Step: 50 * time.Millisecond, Logf: t.Logf}
	rep := ch.Run(context.Background(), ps...)
	cancel()
	wg.Wait()
	t.Logf("%v; %d ok, %d failed", rep, ok.Load(), failed.Load())
	if len(rep.Applied) != len(ch.Plan(2)) {
		t.Fatalf("applied %d of %d steps", len(rep.Applied), len(ch.Plan(2)))
	}
	if ok.Load() == 0 {
		t.Fatal("no command got through")
	}
	// Healed: a command goes through each proxy at once.
	for _, p := range ps {
		r := dialRaw(t, p, s.Addr)
		r.send("PING")
		r.mustLine("+PONG")
	}
}
