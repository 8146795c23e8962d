package semaphore_test

// Fault tests: permits under lost replies, resets, blackholes and latency
// (internal/faulttest), every operation recorded and the history checked
// with porcupine against faulttest.SemaphoreModel: live permits never
// exceed the capacity.
//
// Model assumptions (see faulttest.SemaphoreModel and LeaseModel):
//   - One key, one capacity, non-waiting TryAcquire with one ttl, no
//     renewals; every holder releases explicitly (once more after an
//     unknown release outcome).
//   - Expiry is modelled from real time: a grant to an acquire called at c
//     may be counted gone only by an operation that returned after c+ttl
//     (minus 5ms of slack); Go's clock and Redis' run on one machine.
//   - A TryAcquire that fails with anything but ErrNotAcquired has an
//     unknown outcome. A client wrapper taps the acquire script's token as
//     it is sent (on the shared client and on the fenced dedicated
//     connections); after the run, once the server has no test connection
//     left, the grant log (appended atomically with every grant, tests
//     only) settles each: granted (it may have held a place from its call
//     until an unknown time: counted as possibly granted) or not granted.
//   - A release that fails has an unknown outcome: it may take effect at
//     any time after its call, or never (the ttl ends the grant).

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/coordhost/coordhost/internal/faulttest"
	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/internal/keys"
	"github.com/coordhost/coordhost/primitives/semaphore"
	"github.com/redis/rueidis"
)

const faultClientName = "coordhost-fault"

// faultSem is what the harness drives: the real Semaphores or the broken
// control.
type faultSem interface {
	tryAcquire(ctx context.Context) (faultPermit, error)
	sentTokens() []string
	close()
}

type faultPermit interface {
	Token() string
	Release(ctx context.Context) (primitives.ReleaseResult, error)
}

// faultTap is a faulttest.Tap that also notes the commands sent on its
// dedicated connections, where the semaphore's fenced acquires run: its
// own and, in a cluster, those of its nodes' clients (the fence pool
// keeps connections to a node, not to a slot).
type faultTap struct{ faulttest.Tap }

func (c *faultTap) Dedicate() (rueidis.DedicatedClient, func()) {
	d, cancel := c.Tap.Client.Dedicate()
	return &faultTapDedicated{DedicatedClient: d, tap: c}, cancel
}

func (c *faultTap) Nodes() map[string]rueidis.Client {
	nodes := c.Tap.Client.Nodes()
	tapped := make(map[string]rueidis.Client, len(nodes))
	for addr, n := range nodes {
		tapped[addr] = &faultTapNode{Client: n, tap: c}
	}
	return tapped
}

type faultTapNode struct {
	rueidis.Client
	tap *faultTap
}

func (n *faultTapNode) Dedicate() (rueidis.DedicatedClient, func()) {
	d, cancel := n.Client.Dedicate()
	return &faultTapDedicated{DedicatedClient: d, tap: n.tap}, cancel
}

type faultTapDedicated struct {
	rueidis.DedicatedClient
	tap *faultTap
}

func (d *faultTapDedicated) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	d.tap.Note(cmd)
	return d.DedicatedClient.Do(ctx, cmd)
}

func faultGrantKey(t testing.TB, key string) string {
	t.Helper()
	g, err := keys.Space{}.Derived("grants", key)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

type faultRealSem struct {
	s        *semaphore.Semaphores
	tap      *faultTap
	key      string
	capacity int
	ttl      time.Duration
}

func (r *faultRealSem) tryAcquire(ctx context.Context) (faultPermit, error) {
	p, err := r.s.TryAcquire(ctx, r.key, r.capacity, r.ttl)
	if err != nil {
		return nil, err
	}
	return p, nil
}

func (r *faultRealSem) sentTokens() []string { return r.tap.Take() }
func (r *faultRealSem) close()               { r.s.Close() }

func newFaultRealSem(t *testing.T, c rueidis.Client, key string, capacity int, ttl time.Duration) faultSem {
	tap := &faultTap{faulttest.Tap{Client: c, Pick: faulttest.ScriptArgWithKey(faultGrantKey(t, key))}}
	s, err := semaphore.New(tap, semaphore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	semaphore.EnableGrantLog(s)
	return &faultRealSem{s: s, tap: tap, key: key, capacity: capacity, ttl: ttl}
}

type faultConfig struct {
	clients   int
	capacity  int
	duration  time.Duration
	ttl       time.Duration
	opTimeout time.Duration
	pause     time.Duration // bound of the random pause after a refusal
	hold      time.Duration // bound of the random hold of a permit
	chaos     faulttest.Chaos
	newSem    func(t *testing.T, c rueidis.Client, key string, capacity int, ttl time.Duration) faultSem
}

type faultResult struct {
	ops       []faulttest.Op
	settle    faulttest.Settlement
	check     porcupine.CheckResult
	checkTook time.Duration
	excess    []time.Duration
	counts    map[string]int
	errKinds  map[string]int
	chaos     faulttest.Report
}

func (r *faultResult) log(t *testing.T) {
	t.Helper()
	t.Logf("%d ops: %v", len(r.ops), r.counts)
	t.Logf("settlement: %+v", r.settle)
	t.Logf("unknown-outcome errors: %v", r.errKinds)
	t.Logf("chaos: %v", r.chaos)
	t.Logf("porcupine: %v in %v; definite excess episodes: %d", r.check, r.checkTook.Round(time.Millisecond), len(r.excess))
}

type faultTarget struct {
	client  func(t testing.TB, opts ...func(*rueidis.ClientOption)) rueidis.Client
	nodes   []*redistest.Server
	keyNode func(t testing.TB, key string) *redistest.Server
}

func faultStandalone(srv *redistest.Server) faultTarget {
	return faultTarget{client: srv.Client, nodes: []*redistest.Server{srv},
		keyNode: func(testing.TB, string) *redistest.Server { return srv }}
}

func runFaultHistory(t *testing.T, target faultTarget, cfg faultConfig, grantLog bool) *faultResult {
	t.Helper()
	const key = "{fault}sem"
	h := faulttest.NewHistory()
	proxies := make([]*faulttest.Proxy, cfg.clients)
	sems := make([]faultSem, cfg.clients)
	for i := range proxies {
		proxies[i] = faulttest.New(t)
		c := target.client(t, proxies[i].Option(), func(o *rueidis.ClientOption) {
			o.DisableRetry = true
			o.ClientName = faultClientName
		})
		sems[i] = cfg.newSem(t, c, key, cfg.capacity, cfg.ttl)
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
		case len(k) > 60:
			k = k[:60]
		}
		mu.Lock()
		errKinds[k]++
		mu.Unlock()
	}
	release := func(id int, p faultPermit) {
		for range 2 {
			pend := h.Begin(id, faulttest.LeaseInput{Kind: faulttest.Release, Token: p.Token()})
			ctx, cancel := context.WithTimeout(context.Background(), cfg.opTimeout)
			r, err := p.Release(ctx)
			cancel()
			if err != nil {
				pend.Unknown(faulttest.LeaseOutput{Result: faulttest.Unknown}, err)
				count("release unknown")
				errKind(err)
				continue
			}
			out := map[primitives.ReleaseResult]faulttest.LeaseResult{
				primitives.Released: faulttest.Released, primitives.AlreadyReleased: faulttest.AlreadyReleased,
				primitives.NotOwned: faulttest.NotOwned,
			}[r]
			pend.Return(faulttest.LeaseOutput{Result: out})
			count("release " + out.String())
			return
		}
	}
	deadline := time.Now().Add(cfg.duration)
	var wg sync.WaitGroup
	for id := range cfg.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fs := sems[id]
			rng := mrand.New(mrand.NewPCG(cfg.chaos.Seed, uint64(id)))
			for time.Now().Before(deadline) {
				pend := h.Begin(id, faulttest.LeaseInput{Kind: faulttest.Acquire})
				ctx, cancel := context.WithTimeout(context.Background(), cfg.opTimeout)
				p, err := fs.tryAcquire(ctx)
				cancel()
				sent := fs.sentTokens()
				tok := ""
				if len(sent) > 0 {
					tok = sent[0]
				}
				for _, x := range sent[min(1, len(sent)):] { // EVALSHA then EVAL: one token
					if x != tok {
						mu.Lock()
						harnessErrs = append(harnessErrs, fmt.Sprintf("one TryAcquire sent tokens %q and %q", tok, x))
						mu.Unlock()
					}
				}
				switch {
				case err == nil:
					pend.SetInput(faulttest.LeaseInput{Kind: faulttest.Acquire, Token: p.Token()})
					pend.Return(faulttest.LeaseOutput{Result: faulttest.Granted, Token: p.Token()})
					count("acquire granted")
					if cfg.hold > 0 {
						time.Sleep(time.Duration(rng.Int64N(int64(cfg.hold))))
					}
					release(id, p)
				case errors.Is(err, primitives.ErrNotAcquired):
					pend.SetInput(faulttest.LeaseInput{Kind: faulttest.Acquire, Token: tok})
					pend.Return(faulttest.LeaseOutput{Result: faulttest.NotGranted})
					count("acquire not-granted")
					if cfg.pause > 0 {
						time.Sleep(time.Duration(rng.Int64N(int64(cfg.pause))))
					}
				default:
					pend.SetInput(faulttest.LeaseInput{Kind: faulttest.Acquire, Token: tok})
					pend.Unknown(faulttest.LeaseOutput{Result: faulttest.Unknown}, err)
					count("acquire unknown")
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
	out := &faultResult{chaos: <-chaosDone, counts: counts, errKinds: errKinds}
	for _, e := range harnessErrs {
		t.Error(e)
	}
	for _, s := range sems {
		s.close()
	}
	for _, p := range proxies {
		p.Close()
	}
	for _, srv := range target.nodes {
		faultQuiesce(t, srv)
	}
	var grants []faulttest.Grant
	if grantLog {
		var entries []string
		if o := target.keyNode(t, key).MustCmd(t, "LRANGE", faultGrantKey(t, key), "0", "-1"); o != "" {
			entries = strings.Split(o, "\n")
		}
		for i := range entries {
			entries[i] += " " // "token fence" with no fence
		}
		var err error
		if grants, err = faulttest.ParseGrants(entries); err != nil {
			t.Fatal(err)
		}
	}
	ops := h.Ops()
	if grantLog {
		var err error
		if ops, out.settle, err = faulttest.SettleLeases(ops, grants, false); err != nil {
			t.Fatal(err)
		}
	}
	out.ops = ops
	model := faulttest.SemaphoreModel{Capacity: cfg.capacity, TTL: cfg.ttl}
	start := time.Now()
	var err error
	out.check, err = model.Check(ops, 60*time.Second)
	out.checkTook = time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	out.excess = faulttest.DefiniteExcess(ops, cfg.capacity)
	return out
}

// faultQuiesce waits until srv has no connection but redistest's own
// admin connections, so no command of the run can still take effect.
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

func faultChaosConfig(seed uint64, d time.Duration) faultConfig {
	return faultConfig{
		clients:   6,
		capacity:  2,
		duration:  d,
		ttl:       250 * time.Millisecond,
		opTimeout: 60 * time.Millisecond,
		pause:     2 * time.Millisecond,
		hold:      time.Millisecond,
		newSem:    newFaultRealSem,
		chaos: faulttest.Chaos{
			Seed:     seed,
			Duration: d,
			Step:     100 * time.Millisecond,
			Faults: []faulttest.Fault{faulttest.Calm, faulttest.Latency, faulttest.ResetOne, faulttest.ResetAll,
				faulttest.Blackhole, faulttest.Blackhole, faulttest.DropReply, faulttest.DropReply, faulttest.DropWindow},
			MaxLatency: 10 * time.Millisecond,
		},
	}
}

func faultCheck(t *testing.T, r *faultResult, seed uint64, minOps int) {
	t.Helper()
	r.log(t)
	if len(r.ops) < minOps {
		t.Errorf("only %d operations, want ≥ %d", len(r.ops), minOps)
	}
	if r.counts["acquire granted"] == 0 || r.counts["acquire not-granted"] == 0 || r.settle.UnknownAcquires == 0 {
		t.Errorf("the run exercised too little: %v, %+v", r.counts, r.settle)
	}
	if r.check != porcupine.Ok {
		t.Fatalf("history check: %v (seed %d; replay with %s=%d)", r.check, seed, faulttest.SeedEnv, seed)
	}
	if len(r.excess) > 0 {
		t.Fatalf("more than capacity permits held at once at %v (seed %d)", r.excess, seed)
	}
}

// TestFaultHistoryChaos: six clients, each through its own fault proxy,
// race for the two permits of one semaphore under a seeded chaos schedule;
// the history must be linearizable against the semaphore model.
func TestFaultHistoryChaos(t *testing.T) {
	srv := redistest.Start(t)
	seed := faulttest.Seed(t)
	r := runFaultHistory(t, faultStandalone(srv), faultChaosConfig(seed, 5*time.Second), true)
	faultCheck(t, r, seed, 5000)
}

// TestFaultHistoryChaosCluster is TestFaultHistoryChaos, shorter, on a
// 3-master cluster.
func TestFaultHistoryChaosCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	seed := faulttest.Seed(t)
	target := faultTarget{client: cl.Client, nodes: cl.Servers, keyNode: cl.NodeForKey}
	r := runFaultHistory(t, target, faultChaosConfig(seed, 2*time.Second), true)
	faultCheck(t, r, seed, 1500)
}

// faultBrokenSem is the control: a semaphore without atomicity (count,
// then add, in separate commands), which overcommits under contention.
type faultBrokenSem struct {
	c        rueidis.Client
	key      string
	capacity int
	ttl      time.Duration
	gap      time.Duration
}

type faultBrokenPermit struct {
	b     *faultBrokenSem
	token string
}

func newFaultBrokenSem(gap time.Duration) func(t *testing.T, c rueidis.Client, key string, capacity int, ttl time.Duration) faultSem {
	return func(t *testing.T, c rueidis.Client, key string, capacity int, ttl time.Duration) faultSem {
		return &faultBrokenSem{c: c, key: key, capacity: capacity, ttl: ttl, gap: gap}
	}
}

func (b *faultBrokenSem) tryAcquire(ctx context.Context) (faultPermit, error) {
	now := time.Now().UnixMilli()
	n, err := b.c.Do(ctx, b.c.B().Zcount().Key(b.key).Min("("+strconv.FormatInt(now, 10)).Max("+inf").Build()).AsInt64()
	if err != nil {
		return nil, err
	}
	if int(n) >= b.capacity {
		return nil, primitives.ErrNotAcquired
	}
	time.Sleep(b.gap)
	tok := strconv.FormatUint(mrand.Uint64(), 36)
	if err := b.c.Do(ctx, b.c.B().Zadd().Key(b.key).ScoreMember().ScoreMember(float64(now+b.ttl.Milliseconds()), tok).Build()).Error(); err != nil {
		return nil, err
	}
	return &faultBrokenPermit{b: b, token: tok}, nil
}

func (b *faultBrokenSem) sentTokens() []string { return nil }
func (b *faultBrokenSem) close()               {}

func (p *faultBrokenPermit) Token() string { return p.token }

func (p *faultBrokenPermit) Release(ctx context.Context) (primitives.ReleaseResult, error) {
	n, err := p.b.c.Do(ctx, p.b.c.B().Zrem().Key(p.b.key).Member(p.token).Build()).AsInt64()
	if err != nil {
		return 0, err
	}
	if n == 1 {
		return primitives.Released, nil
	}
	return primitives.AlreadyReleased, nil
}

// TestFaultControlBrokenSemaphore runs a semaphore without atomicity
// through the same harness and checker; the checker must flag it.
func TestFaultControlBrokenSemaphore(t *testing.T) {
	srv := redistest.Start(t)
	seed := faulttest.Seed(t)
	cfg := faultConfig{
		clients:   6,
		capacity:  2,
		duration:  1500 * time.Millisecond,
		ttl:       250 * time.Millisecond,
		opTimeout: 250 * time.Millisecond,
		pause:     2 * time.Millisecond,
		hold:      time.Millisecond,
		newSem:    newFaultBrokenSem(time.Millisecond),
		chaos: faulttest.Chaos{
			Seed: seed, Duration: 1500 * time.Millisecond, Step: 100 * time.Millisecond,
			// Latency only: no outcome is unknown, so the control fails
			// for one reason.
			Faults: []faulttest.Fault{faulttest.Calm, faulttest.Latency}, MaxLatency: 2 * time.Millisecond,
		},
	}
	r := runFaultHistory(t, faultStandalone(srv), cfg, false)
	r.log(t)
	if r.check != porcupine.Illegal {
		t.Fatalf("the checker accepted a semaphore without atomicity: %v (seed %d)", r.check, seed)
	}
	if len(r.excess) == 0 {
		t.Errorf("no definite excess found in the broken semaphore's history")
	}
}
