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
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/coordhost/coordhost/internal/faulttest"
	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/latch"
	"github.com/redis/rueidis"
)

// faultTap is a rueidis client that notes the generation token of every
// latch_set call (Create, Reset) before sending it.
type faultTap struct {
	rueidis.Client
	mu   sync.Mutex
	sent []string
}

func (c *faultTap) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	if args := cmd.Commands(); len(args) >= 6 && (args[0] == "EVALSHA" || args[0] == "EVAL") && args[2] == "1" &&
		(args[4] == "create" || args[4] == "reset") {
		c.mu.Lock()
		c.sent = append(c.sent, strings.Clone(args[5]))
		c.mu.Unlock()
	}
	return c.Client.Do(ctx, cmd)
}

func (c *faultTap) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.sent
	c.sent = nil
	return out
}

// faultWaiter is how the harness waits: the real Latch.Wait, or the
// broken control's.
type faultWaiter func(ctx context.Context, l *latch.Latch) (bool, error)

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

type latchFaultConfig struct {
	clients, waitersPerClient int
	keys                      int
	duration                  time.Duration
	opTimeout, waitTimeout    time.Duration
	chaos                     faulttest.Chaos
	wait                      faultWaiter
}

type latchFaultResult struct {
	ops       []faulttest.Op
	checked   int
	check     porcupine.CheckResult
	checkTook time.Duration
	early     []faulttest.EarlyWake
	counts    map[string]int
	chaos     faulttest.Report
	proxies   faulttest.Stats
}

func (r *latchFaultResult) log(t *testing.T) {
	t.Helper()
	t.Logf("%d ops recorded, %d checked: %v", len(r.ops), r.checked, r.counts)
	t.Logf("chaos: %v", r.chaos)
	t.Logf("proxies: %+v", r.proxies)
	t.Logf("porcupine: %v in %v; early wakes: %d", r.check, r.checkTook.Round(time.Millisecond), len(r.early))
	for i, e := range r.early {
		if i == 5 {
			t.Logf("  ... %d more", len(r.early)-5)
			break
		}
		t.Logf("  %v", e)
	}
}

// latchFaultTarget is a standalone server or a cluster.
type latchFaultTarget struct {
	client func(t testing.TB, opts ...func(*rueidis.ClientOption)) rueidis.Client
	nodes  []*redistest.Server
}

// runLatchFaults drives cfg.clients clients, each through its own proxy,
// against cfg.keys latches under cfg.chaos, and checks the history.
func runLatchFaults(t *testing.T, target latchFaultTarget, cfg latchFaultConfig) *latchFaultResult {
	t.Helper()
	h := faulttest.NewHistory()
	proxies := make([]*faulttest.Proxy, cfg.clients)
	lss := make([]*latch.Latches, cfg.clients)
	taps := make([]*faultTap, cfg.clients)
	for i := range proxies {
		proxies[i] = faulttest.New(t)
		c := target.client(t, proxies[i].Option(), func(o *rueidis.ClientOption) {
			o.DisableRetry = true
			o.ClientName = "coordhost-fault"
		})
		taps[i] = &faultTap{Client: c}
		ls, err := latch.New(taps[i], latch.Options{TTL: 10 * time.Minute, RecheckInterval: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		lss[i] = ls
	}
	keys := make([]string, cfg.keys)
	for i := range keys {
		keys[i] = "fault:" + strconv.Itoa(i)
	}

	var (
		mu          sync.Mutex
		counts      = map[string]int{}
		harnessErrs []string
		gens        = map[string][]string{} // key -> generations seen, newest last
	)
	count := func(k string) {
		mu.Lock()
		counts[k]++
		mu.Unlock()
	}
	harnessErr := func(format string, args ...any) {
		mu.Lock()
		harnessErrs = append(harnessErrs, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	seen := func(key, gen string) {
		mu.Lock()
		if g := gens[key]; len(g) == 0 || g[len(g)-1] != gen {
			gens[key] = append(g, gen)
		}
		mu.Unlock()
	}
	// pickGen returns a known generation of key: usually the newest, at
	// times an older one (its waits and count-downs must say "gone").
	pickGen := func(rng *mrand.Rand, key string) string {
		mu.Lock()
		defer mu.Unlock()
		g := gens[key]
		switch {
		case len(g) == 0:
			return ""
		case len(g) > 1 && rng.IntN(5) == 0:
			return g[rng.IntN(len(g)-1)]
		}
		return g[len(g)-1]
	}
	opCtx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), cfg.opTimeout)
	}
	in := func(kind faulttest.LatchKind, key, gen string, n int64) faulttest.LatchInput {
		return faulttest.LatchInput{Kind: kind, Key: key, Gen: gen, Count: n}
	}
	unknown := func(p *faulttest.Pending, kind faulttest.LatchKind, err error) {
		p.Unknown(faulttest.LatchOutput{Unknown: true}, err)
		count(kind.String() + " unknown")
	}

	set := func(id int, kind faulttest.LatchKind, key string, n int64) {
		p := h.Begin(id, in(kind, key, "", n))
		ctx, cancel := opCtx()
		var l *latch.Latch
		var err error
		if kind == faulttest.LatchCreate {
			l, err = lss[id].Create(ctx, key, n)
		} else {
			l, err = lss[id].Reset(ctx, key, n)
		}
		cancel()
		sent := taps[id].take()
		for _, g := range sent[min(1, len(sent)):] {
			if g != sent[0] { // EVALSHA then EVAL after NOSCRIPT send one token twice
				harnessErr("one %v sent generations %q and %q", kind, sent[0], g)
			}
		}
		gen := ""
		if len(sent) > 0 {
			gen = sent[0]
		}
		p.SetInput(in(kind, key, gen, n))
		switch {
		case err == nil:
			if l.Generation() != gen {
				harnessErr("%v returned generation %q but sent %q", kind, l.Generation(), gen)
			}
			p.Return(faulttest.LatchOutput{})
			count(kind.String() + " ok")
			seen(key, gen)
		case errors.Is(err, latch.ErrExists):
			p.Return(faulttest.LatchOutput{Exists: true})
			count(kind.String() + " exists")
		default:
			unknown(p, kind, err)
			if gen != "" {
				seen(key, gen)
			}
		}
	}
	join := func(id int, key string) {
		p := h.Begin(id, in(faulttest.LatchJoin, key, "", 0))
		ctx, cancel := opCtx()
		l, err := lss[id].Join(ctx, key)
		cancel()
		switch {
		case err == nil:
			p.Return(faulttest.LatchOutput{Gen: l.Generation()})
			count("Join ok")
			seen(key, l.Generation())
		case errors.Is(err, latch.ErrNotFound):
			p.Return(faulttest.LatchOutput{NotFound: true})
			count("Join not found")
		default:
			unknown(p, faulttest.LatchJoin, err)
		}
	}
	handle := func(id int, key, gen string) *latch.Latch {
		l, err := lss[id].Attach(key, gen)
		if err != nil {
			harnessErr("Attach: %v", err)
		}
		return l
	}
	// countDown reports whether the generation was complete.
	countDown := func(id int, key, gen string) bool {
		p := h.Begin(id, in(faulttest.LatchCountDown, key, gen, 0))
		ctx, cancel := opCtx()
		n, err := handle(id, key, gen).CountDown(ctx)
		cancel()
		switch {
		case err == nil:
			p.Return(faulttest.LatchOutput{N: n})
			count(map[bool]string{true: "CountDown -1", false: "CountDown ok"}[n == -1])
		case errors.Is(err, latch.ErrCompleted):
			p.Return(faulttest.LatchOutput{Completed: true})
			count("CountDown completed")
			return true
		default:
			unknown(p, faulttest.LatchCountDown, err)
		}
		return false
	}
	readCount := func(id int, key, gen string) {
		p := h.Begin(id, in(faulttest.LatchCount, key, gen, 0))
		ctx, cancel := opCtx()
		n, err := handle(id, key, gen).Count(ctx)
		cancel()
		if err != nil {
			unknown(p, faulttest.LatchCount, err)
			return
		}
		p.Return(faulttest.LatchOutput{N: n})
		count("Count ok")
	}
	del := func(id int, key, gen string) {
		p := h.Begin(id, in(faulttest.LatchDelete, key, gen, 0))
		ctx, cancel := opCtx()
		ok, err := handle(id, key, gen).Delete(ctx)
		cancel()
		if err != nil {
			unknown(p, faulttest.LatchDelete, err)
			return
		}
		p.Return(faulttest.LatchOutput{OK: ok})
		count("Delete ok")
	}
	wait := func(id, client int, key, gen string, d time.Duration) {
		p := h.Begin(client, in(faulttest.LatchWait, key, gen, 0))
		ctx, cancel := context.WithTimeout(context.Background(), d)
		start := time.Now()
		ok, err := cfg.wait(ctx, handle(id, key, gen))
		took := time.Since(start)
		cancel()
		switch {
		case err == nil:
			p.Return(faulttest.LatchOutput{OK: ok})
			count(fmt.Sprintf("Wait %v", ok))
			if took > 5*time.Millisecond {
				count(fmt.Sprintf("Wait %v after waiting", ok))
			}
		case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, primitives.ErrClosed):
			unknown(p, faulttest.LatchWait, err)
		default:
			// Under faults a waiter keeps re-reading until ctx ends;
			// any other error is a bug.
			unknown(p, faulttest.LatchWait, err)
			harnessErr("Wait: %v", err)
		}
	}

	deadline := time.Now().Add(cfg.duration)
	var wg sync.WaitGroup
	for id := range cfg.clients {
		wg.Add(1)
		go func() { // the writer
			defer wg.Done()
			rng := mrand.New(mrand.NewPCG(cfg.chaos.Seed, uint64(id)))
			complete := map[string]bool{} // keys this writer found complete
			for time.Now().Before(deadline) {
				key := keys[rng.IntN(len(keys))]
				gen := pickGen(rng, key)
				switch r := rng.IntN(100); {
				case complete[key] && r < 70:
					// Keep most latches counting: start a new round.
					set(id, faulttest.LatchReset, key, 1+rng.Int64N(5))
					delete(complete, key)
				case gen == "" && r < 50:
					set(id, faulttest.LatchCreate, key, 1+rng.Int64N(4))
				case gen == "":
					join(id, key)
				case r < 6:
					set(id, faulttest.LatchCreate, key, 1+rng.Int64N(4))
				case r < 11:
					set(id, faulttest.LatchReset, key, rng.Int64N(5))
				case r < 20:
					join(id, key)
				case r < 62:
					if countDown(id, key, gen) {
						complete[key] = true
					}
				case r < 82:
					readCount(id, key, gen)
				case r < 84:
					del(id, key, gen)
				default:
					wait(id, id, key, gen, cfg.opTimeout)
				}
			}
		}()
		for w := range cfg.waitersPerClient {
			wg.Add(1)
			client := cfg.clients + id*cfg.waitersPerClient + w
			go func() { // a waiter
				defer wg.Done()
				rng := mrand.New(mrand.NewPCG(cfg.chaos.Seed, uint64(client)))
				for time.Now().Before(deadline) {
					key := keys[rng.IntN(len(keys))]
					if rng.IntN(3) == 0 {
						join(id, key) // recorded under the writer's id: Join is quick
					}
					gen := pickGen(rng, key)
					if gen == "" {
						time.Sleep(time.Millisecond)
						continue
					}
					wait(id, client, key, gen, cfg.waitTimeout)
				}
			}()
		}
	}
	chaosDone := make(chan faulttest.Report, 1)
	ctx, stopChaos := context.WithCancel(context.Background())
	defer stopChaos()
	go func() { chaosDone <- cfg.chaos.Run(ctx, proxies...) }()
	wg.Wait()
	stopChaos()
	out := &latchFaultResult{chaos: <-chaosDone, counts: counts}
	for _, e := range harnessErrs {
		t.Error(e)
	}
	// Quiesce: no command of the run may still be on its way when the
	// history is checked (it would not change the verdict, but the
	// server's connections would outlive the test).
	for _, ls := range lss {
		ls.Close()
	}
	for _, p := range proxies {
		st := p.Stats()
		out.proxies.Conns += st.Conns
		out.proxies.Resets += st.Resets
		out.proxies.DroppedReplies += st.DroppedReplies
		out.proxies.DroppedBytes += st.DroppedBytes
		out.proxies.Blackholes += st.Blackholes
		p.Close()
	}
	for _, srv := range target.nodes {
		latchQuiesce(t, srv)
	}

	out.ops = h.Ops()
	m := faulttest.LatchModel{}
	pops, err := m.Operations(out.ops)
	if err != nil {
		t.Fatal(err)
	}
	out.checked = len(pops)
	start := time.Now()
	out.check, err = m.Check(out.ops, 60*time.Second)
	out.checkTook = time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	out.early = faulttest.EarlyWakes(out.ops)
	return out
}

// latchQuiesce waits until srv has no connection left but redistest's
// admin connections.
func latchQuiesce(t *testing.T, srv *redistest.Server) {
	t.Helper()
	for start := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		list := srv.MustCmd(t, "CLIENT", "LIST")
		others := 0
		for _, line := range strings.Split(list, "\n") {
			if line != "" && !strings.Contains(line, " name=redistest-admin ") {
				others++
			}
		}
		if others == 0 {
			return
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("connections still open on the server:\n%s", list)
		}
	}
}

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
// ≥ 5,000 checked operations.
func TestLatchFaultHistory(t *testing.T) {
	srv := redistest.Start(t)
	seed := faulttest.Seed(t)
	r := runLatchFaults(t, latchFaultTarget{client: srv.Client, nodes: []*redistest.Server{srv}}, latchChaosConfig(seed, 3*time.Second))
	latchCheckChaos(t, r, seed, 5000)
}

// TestLatchFaultHistoryCluster is the same, shorter, on a 3-master
// cluster (waiters wake by the latch channel there); also ≥ 5,000 checked
// operations.
func TestLatchFaultHistoryCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	seed := faulttest.Seed(t)
	r := runLatchFaults(t, latchFaultTarget{client: cl.Client, nodes: cl.Servers}, latchChaosConfig(seed, 3*time.Second))
	latchCheckChaos(t, r, seed, 5000)
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
