package rwlock_test

// Fault tests: read and write leases under lost replies, resets, blackholes
// and latency (internal/faulttest), every operation recorded and the
// history checked with porcupine against faulttest.RWModel.
//
// Model assumptions (see faulttest.RWModel and faulttest.LeaseModel):
//   - One key; non-waiting TryAcquireRead and TryAcquireWrite, so no
//     pending-writer entry ever exists and only a holding writer refuses a
//     reader; one TTL for every grant; no renewals; every holder releases
//     explicitly (once more after an unknown release outcome).
//   - Expiry is modelled from real time, with 5ms of slack (Go's monotonic
//     clock and Redis' clock run on one machine).
//   - A call failing with anything but ErrNotAcquired has an unknown
//     outcome. A client wrapper taps the token each acquire script carries
//     as it is sent; after the run, once the server has no test connection
//     left, the grant log (each grant's member, appended by the script that
//     granted it) settles every unknown acquire: granted (then ended by its
//     cleanup or its TTL at an unknown time) or not granted at all.
//   - A release that fails may take effect at any time after its call, or
//     never, the TTL ending the lease instead.
//
// Independently of porcupine, RWDefiniteOverlaps checks the intervals a
// lease certainly held (acquire returned → release answered Released): a
// writer's may meet no other.

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/coordhost/coordhost/internal/faulttest"
	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/internal/base"
	"github.com/coordhost/coordhost/primitives/internal/keys"
	"github.com/coordhost/coordhost/primitives/rwlock"
	"github.com/redis/rueidis"
)

type faultConfig struct {
	clients   int
	duration  time.Duration
	ttl       time.Duration
	opTimeout time.Duration
	pause     time.Duration // bounds the random pause after a refusal
	readShare int           // of 10 acquisitions, how many are reads
	broken    bool          // the control: readers ignore a holding writer
	chaos     faulttest.Chaos
}

type faultResult struct {
	ops       []faulttest.Op
	checked   int // operations porcupine checked (settled, unknown releases folded)
	settle    faulttest.Settlement
	check     porcupine.CheckResult
	checkTook time.Duration
	overlaps  []faulttest.RWOverlap
	counts    map[string]int
	errKinds  map[string]int
	chaos     faulttest.Report
	proxies   faulttest.Stats
	model     faulttest.RWModel
}

func (r *faultResult) log(t *testing.T) {
	t.Helper()
	t.Logf("%d ops, %d checked: %v", len(r.ops), r.checked, r.counts)
	t.Logf("settlement: %+v", r.settle)
	t.Logf("unknown-outcome errors: %v", r.errKinds)
	t.Logf("chaos: %v", r.chaos)
	t.Logf("proxies: %+v", r.proxies)
	t.Logf("porcupine: %v in %v; definite overlaps: %d", r.check, r.checkTook.Round(time.Millisecond), len(r.overlaps))
	for i, o := range r.overlaps {
		if i == 5 {
			t.Logf("  ... %d more", len(r.overlaps)-5)
			break
		}
		t.Logf("  %v", o)
	}
}

// faultTarget is where a run happens: a standalone server or a cluster.
type faultTarget struct {
	client  func(t testing.TB, opts ...func(*rueidis.ClientOption)) rueidis.Client
	nodes   []*redistest.Server
	keyNode func(t testing.TB, key string) *redistest.Server
}

func faultStandalone(srv *redistest.Server) faultTarget {
	return faultTarget{client: srv.Client, nodes: []*redistest.Server{srv},
		keyNode: func(testing.TB, string) *redistest.Server { return srv }}
}

// runFaultHistory runs cfg.clients workers doing TryAcquireRead or
// TryAcquireWrite, then Release, on one key, each through its own proxy,
// under cfg.chaos; then settles and checks the history.
func runFaultHistory(t *testing.T, target faultTarget, cfg faultConfig) *faultResult {
	t.Helper()
	const key = "{fault}rw"
	grantsKey, err := keys.Space{}.Derived("rw-grants", key)
	if err != nil {
		t.Fatal(err)
	}
	h := faulttest.NewHistory()
	proxies := make([]*faulttest.Proxy, cfg.clients)
	lockers := make([]*rwlock.Locker, cfg.clients)
	taps := make([]*faulttest.Tap, cfg.clients)
	for i := range proxies {
		proxies[i] = faulttest.New(t)
		c := target.client(t, proxies[i].Option(), func(o *rueidis.ClientOption) {
			o.DisableRetry = true
			o.ClientName = "coordhost-fault"
		})
		taps[i] = &faulttest.Tap{Client: c, Pick: faulttest.ScriptArgWithKey(grantsKey)}
		l, err := rwlock.New(taps[i], rwlock.Options{})
		if err != nil {
			t.Fatal(err)
		}
		rwlock.EnableGrantLog(l)
		if cfg.broken {
			rwlock.BreakReaders(l)
		}
		lockers[i] = l
	}

	var (
		mu          sync.Mutex
		counts      = map[string]int{}
		errKinds    = map[string]int{}
		harnessErrs []string
	)
	count := func(k string) {
		mu.Lock()
		counts[k]++
		mu.Unlock()
	}
	errKind := func(err error) {
		k := err.Error()
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			k = "deadline"
		case strings.Contains(k, "reset by peer"):
			k = "reset"
		case strings.Contains(k, "EOF"):
			k = "eof"
		case strings.Contains(k, "ran out locally"):
			k = "late grant"
		case len(k) > 60:
			k = k[:60]
		}
		mu.Lock()
		errKinds[k]++
		mu.Unlock()
	}
	release := func(id int, mode faulttest.RWMode, l *rwlock.Lease) {
		for range 2 {
			p := h.Begin(id, faulttest.RWInput{Kind: faulttest.Release, Mode: mode, Token: l.Token()})
			ctx, cancel := context.WithTimeout(context.Background(), cfg.opTimeout)
			r, err := l.Release(ctx)
			cancel()
			if err != nil {
				p.Unknown(faulttest.RWOutput{Result: faulttest.Unknown}, err)
				count("release unknown")
				errKind(err)
				continue
			}
			out := map[primitives.ReleaseResult]faulttest.LeaseResult{
				primitives.Released: faulttest.Released, primitives.AlreadyReleased: faulttest.AlreadyReleased,
				primitives.NotOwned: faulttest.NotOwned,
			}[r]
			p.Return(faulttest.RWOutput{Result: out})
			count(mode.String() + " release " + out.String())
			return
		}
	}

	deadline := time.Now().Add(cfg.duration)
	var wg sync.WaitGroup
	for id := range cfg.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, tap := lockers[id], taps[id]
			rng := mrand.New(mrand.NewPCG(cfg.chaos.Seed, uint64(id)))
			for time.Now().Before(deadline) {
				mode, try := faulttest.RWRead, l.TryAcquireRead
				if rng.IntN(10) >= cfg.readShare {
					mode, try = faulttest.RWWrite, l.TryAcquireWrite
				}
				p := h.Begin(id, faulttest.RWInput{Kind: faulttest.Acquire, Mode: mode})
				ctx, cancel := context.WithTimeout(context.Background(), cfg.opTimeout)
				lease, err := try(ctx, key, cfg.ttl)
				cancel()
				sent := tap.Take()
				tok := ""
				if len(sent) > 0 {
					tok = sent[0]
				}
				for _, s := range sent[min(1, len(sent)):] {
					if s != tok {
						mu.Lock()
						harnessErrs = append(harnessErrs, fmt.Sprintf("one try sent tokens %q and %q", tok, s))
						mu.Unlock()
					}
				}
				switch {
				case err == nil:
					p.SetInput(faulttest.RWInput{Kind: faulttest.Acquire, Mode: mode, Token: lease.Token()})
					p.Return(faulttest.RWOutput{Result: faulttest.Granted, Token: lease.Token()})
					count(mode.String() + " granted")
					time.Sleep(time.Duration(rng.Int64N(int64(time.Millisecond))))
					release(id, mode, lease)
				case errors.Is(err, primitives.ErrNotAcquired) && !errors.As(err, new(*base.LateGrant)):
					p.SetInput(faulttest.RWInput{Kind: faulttest.Acquire, Mode: mode, Token: tok})
					p.Return(faulttest.RWOutput{Result: faulttest.NotGranted})
					count(mode.String() + " not-granted")
					if cfg.pause > 0 {
						time.Sleep(time.Duration(rng.Int64N(int64(cfg.pause))))
					}
				default: // a lost reply, or a grant that came too late (settled from the log)
					p.SetInput(faulttest.RWInput{Kind: faulttest.Acquire, Mode: mode, Token: tok})
					p.Unknown(faulttest.RWOutput{Result: faulttest.Unknown}, err)
					count(mode.String() + " unknown")
					errKind(err)
				}
			}
		}()
	}
	chaosDone := make(chan faulttest.Report, 1)
	ctx, stopChaos := context.WithCancel(context.Background())
	defer stopChaos()
	go func() { chaosDone <- cfg.chaos.Run(ctx, proxies...) }()
	wg.Wait()
	stopChaos()
	out := &faultResult{chaos: <-chaosDone, counts: counts, errKinds: errKinds, model: faulttest.RWModel{TTL: cfg.ttl}}
	for _, e := range harnessErrs {
		t.Error(e)
	}

	// Quiesce: close the lockers (their background cleanups run now) and
	// the proxies, and wait until the server has dropped every test
	// connection, so no command of the run can still take effect.
	for _, l := range lockers {
		l.Close()
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
		faultQuiesce(t, srv)
	}

	var grants []string
	if s := target.keyNode(t, key).MustCmd(t, "LRANGE", grantsKey, "0", "-1"); s != "" {
		grants = strings.Split(s, "\n")
	}
	ops, st, err := faulttest.SettleRW(h.Ops(), grants)
	out.settle = st
	if err != nil {
		t.Fatal(err)
	}
	out.ops = ops
	pops, err := out.model.Operations(ops)
	if err != nil {
		t.Fatal(err)
	}
	out.checked = len(pops)
	start := time.Now()
	out.check, err = out.model.Check(ops, 60*time.Second)
	out.checkTook = time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	out.overlaps = faulttest.RWDefiniteOverlaps(ops)
	return out
}

// faultQuiesce waits until srv has no connection but redistest's own admin
// connections: the server frees a client only after processing what it
// read from it.
func faultQuiesce(t *testing.T, srv *redistest.Server) {
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

// faultVisualize saves porcupine's visualization of a failed check.
func faultVisualize(t *testing.T, r *faultResult) {
	t.Helper()
	path, err := r.model.Visualize(r.ops, 30*time.Second, "")
	if err != nil {
		t.Logf("visualization: %v", err)
		return
	}
	t.Logf("history visualization: %s", path)
}

func faultChaosConfig(seed uint64, d time.Duration) faultConfig {
	return faultConfig{
		clients:   6,
		duration:  d,
		ttl:       250 * time.Millisecond,
		opTimeout: 60 * time.Millisecond,
		pause:     2 * time.Millisecond,
		readShare: 6,
		chaos: faulttest.Chaos{
			Seed:     seed,
			Duration: d,
			Step:     100 * time.Millisecond,
			// Lost replies weighted up: they are what settling is for.
			Faults: []faulttest.Fault{faulttest.Calm, faulttest.Latency, faulttest.ResetOne, faulttest.ResetAll,
				faulttest.Blackhole, faulttest.Blackhole, faulttest.DropReply, faulttest.DropReply, faulttest.DropWindow},
			MaxLatency: 10 * time.Millisecond,
		},
	}
}

func faultCheck(t *testing.T, r *faultResult, seed uint64, minOps int) {
	t.Helper()
	r.log(t)
	if r.checked < minOps {
		t.Errorf("only %d checked operations, want ≥ %d", r.checked, minOps)
	}
	if r.counts["read granted"] == 0 || r.counts["write granted"] == 0 || r.settle.UnknownAcquires == 0 {
		t.Errorf("the run exercised too little: %v, %+v", r.counts, r.settle)
	}
	if r.check != porcupine.Ok {
		faultVisualize(t, r)
		t.Fatalf("history check: %v (seed %d; replay with %s=%d)", r.check, seed, faulttest.SeedEnv, seed)
	}
	if len(r.overlaps) > 0 {
		t.Fatalf("a writer overlapped another holder %d times (seed %d)", len(r.overlaps), seed)
	}
}

// TestFaultHistoryChaos: six clients, each through its own fault proxy,
// take read and write leases on one key under a seeded chaos schedule; the
// history must be linearizable against the read-write model.
func TestFaultHistoryChaos(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	seed := faulttest.Seed(t)
	r := runFaultHistory(t, faultStandalone(srv), faultChaosConfig(seed, 4*time.Second))
	faultCheck(t, r, seed, 5000)
}

// TestFaultHistoryChaosCluster is TestFaultHistoryChaos, shorter, on a
// 3-master cluster.
func TestFaultHistoryChaosCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster chaos run skipped in -short mode")
	}
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	seed := faulttest.Seed(t)
	target := faultTarget{client: cl.Client, nodes: cl.Servers, keyNode: cl.NodeForKey}
	r := runFaultHistory(t, target, faultChaosConfig(seed, 2*time.Second))
	faultCheck(t, r, seed, 2000)
}

// TestFaultControlBrokenReaders runs lockers whose read script ignores a
// holding writer through the same harness: the checker must flag it.
func TestFaultControlBrokenReaders(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	seed := faulttest.Seed(t)
	cfg := faultChaosConfig(seed, 1500*time.Millisecond)
	cfg.broken = true
	cfg.opTimeout = 250 * time.Millisecond
	// Latency only: it leaves no outcome unknown, so the control fails for
	// one reason.
	cfg.chaos.Faults = []faulttest.Fault{faulttest.Calm, faulttest.Latency}
	cfg.chaos.MaxLatency = 2 * time.Millisecond
	r := runFaultHistory(t, faultStandalone(srv), cfg)
	r.log(t)
	if r.check != porcupine.Illegal {
		t.Fatalf("the checker accepted readers that ignore a holding writer: %v (seed %d)", r.check, seed)
	}
	if len(r.overlaps) == 0 {
		t.Errorf("no definite overlap found in the broken run")
	}
	if os.Getenv("COORDHOST_FAULT_VISUALIZE") != "" {
		faultVisualize(t, r)
	}
}
