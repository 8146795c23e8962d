package lock_test

// Fault tests: locks under lost replies, resets, blackholes and latency
// (internal/faulttest), with every operation recorded and the history
// checked with porcupine against faulttest.LeaseModel.
//
// Model assumptions (see faulttest.LeaseModel for the rules):
//   - One key, non-waiting TryAcquire with one TTL for all grants, no
//     renewals; every holder releases explicitly (once more after an
//     unknown release outcome), except the few that stall past the TTL on
//     purpose, so the TTL decides ownership only where the test means it to.
//   - Expiry is modelled from real time: a grant to an acquire called at c
//     may be taken over only by an operation that returned after c+TTL
//     (minus 5ms of clock slack), and linearization points never go back.
//     Go's monotonic clock and Redis' clock run on one machine.
//   - A TryAcquire that fails with anything but ErrNotAcquired has an
//     unknown outcome. A client wrapper taps the acquire script's token as
//     it is sent; after the run, once the server has no connection left
//     from the test clients (so nothing is still in flight), the grant log
//     (written atomically with every grant) settles each unknown acquire:
//     granted (with its fence, at an unknown time after its call, and ended
//     by its own best-effort cleanup or the TTL at an unknown time) or not
//     granted at all (no effect). Every logged grant must match exactly one
//     recorded acquire, and known grants must match the log's fence.
//   - A release that fails has an unknown outcome: it may take effect at
//     any time after its call, or never, the TTL ending the grant instead.
//     The model folds it into the grant ("may be gone from the release's
//     call on") rather than checking an operation that returns at infinity.
//     The handle is released once more after such an outcome, as its doc
//     says ("calling Release again settles ownership").
//   - ErrNotAcquired is a definite answer: somebody held the key.
//   - Fencing counters start at 0 on a fresh server and only grants bump
//     them, so the fences of the (settled) history are exactly 1..n.
//   - The proxy passes a client's close on after the bytes it sent (as TCP
//     does), so a command written on a connection that rueidis abandons
//     at a deadline can still run later, after commands sent on a newer
//     connection: the chaos run includes such delayed grants.
//
// Independently of porcupine, each holder writes its fencing token to an
// in-test resource that accepts a write only if the token is at least the
// highest seen: a rejected write while the handle's local estimate (which
// starts before the acquire was sent) still had time left means another
// grant happened while this one was live.

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/coordhost/coordhost/internal/faulttest"
	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/internal/keys"
	"github.com/coordhost/coordhost/primitives/lock"
	"github.com/redis/rueidis"
)

// faultClientName marks the test clients' connections in CLIENT LIST.
const faultClientName = "coordhost-fault"

// faultLock is what the harness drives: the real Locker or the broken
// control lock.
type faultLock interface {
	// tryAcquire makes one non-waiting attempt; contention returns an
	// error matching primitives.ErrNotAcquired.
	tryAcquire(ctx context.Context) (faultHandle, error)
	// sentTokens returns the acquire tokens sent since the last call.
	sentTokens() []string
	close()
}

type faultHandle interface {
	Token() string
	FencingToken() int64
	Remaining() time.Duration
	Release(ctx context.Context) (primitives.ReleaseResult, error)
}

type faultRealLock struct {
	l   *lock.Locker
	tap *faulttest.Tap
	key string
	ttl time.Duration
}

func (r *faultRealLock) tryAcquire(ctx context.Context) (faultHandle, error) {
	lk, err := r.l.TryAcquire(ctx, r.key, r.ttl)
	if err != nil {
		return nil, err
	}
	return lk, nil
}

func (r *faultRealLock) sentTokens() []string { return r.tap.Take() }
func (r *faultRealLock) close()               { r.l.Close() }

func faultGrantKey(t *testing.T, key string) string {
	t.Helper()
	g, err := keys.Space{}.Derived("grants", key)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func newFaultRealLock(t *testing.T, c rueidis.Client, key string, ttl time.Duration) faultLock {
	tap := &faulttest.Tap{Client: c, Pick: faulttest.ScriptArgWithKey(faultGrantKey(t, key))}
	l, err := lock.New(tap, lock.Options{Fencing: true})
	if err != nil {
		t.Fatal(err)
	}
	lock.EnableGrantLog(l)
	return &faultRealLock{l: l, tap: tap, key: key, ttl: ttl}
}

// faultResource is the protected resource: it accepts a write only if its
// fencing token is at least the highest seen.
type faultResource struct {
	mu       sync.Mutex
	highest  int64
	accepted int
	rejected int
}

func (r *faultResource) write(fence int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if fence < r.highest {
		r.rejected++
		return false
	}
	r.highest = fence
	r.accepted++
	return true
}

type faultConfig struct {
	clients   int
	duration  time.Duration
	ttl       time.Duration
	opTimeout time.Duration
	// pause bounds the random pause after a refused acquire (paces the
	// run so the history stays a size porcupine checks in seconds).
	pause time.Duration
	// stallOneIn makes one grant in that many sleep past the TTL before
	// its write and release (0: never).
	stallOneIn int
	chaos      faulttest.Chaos
	newLock    func(t *testing.T, c rueidis.Client, key string, ttl time.Duration) faultLock
	fencing    bool
}

type faultResult struct {
	ops         []faulttest.Op
	settle      faulttest.Settlement
	check       porcupine.CheckResult
	checkTook   time.Duration
	overlaps    []faulttest.Overlap
	ownedReject int // fenced writes rejected while the handle had time left
	staleReject int // fenced writes rejected after a stall past the TTL
	stalls      int
	counts      map[string]int
	errKinds    map[string]int
	chaos       faulttest.Report
	proxies     faulttest.Stats
	model       faulttest.LeaseModel
}

func (r *faultResult) log(t *testing.T) {
	t.Helper()
	t.Logf("%d ops: %v", len(r.ops), r.counts)
	t.Logf("settlement: %+v", r.settle)
	t.Logf("unknown-outcome errors: %v", r.errKinds)
	t.Logf("chaos: %v", r.chaos)
	t.Logf("proxies: %+v", r.proxies)
	t.Logf("fenced resource: %d rejected while owned, %d stale writes rejected after %d stalls", r.ownedReject, r.staleReject, r.stalls)
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

// runFaultHistory runs cfg.clients workers doing TryAcquire/Release loops
// on one key, each through its own proxy, under cfg.chaos; then settles
// and checks the history.
func runFaultHistory(t *testing.T, target faultTarget, cfg faultConfig) *faultResult {
	t.Helper()
	const key = "{fault}lock"
	h := faulttest.NewHistory()
	res := &faultResource{}
	proxies := make([]*faulttest.Proxy, cfg.clients)
	locks := make([]faultLock, cfg.clients)
	for i := range proxies {
		proxies[i] = faulttest.New(t)
		c := target.client(t, proxies[i].Option(), func(o *rueidis.ClientOption) {
			o.DisableRetry = true
			o.ClientName = faultClientName
		})
		locks[i] = cfg.newLock(t, c, key, cfg.ttl)
	}

	var (
		mu          sync.Mutex
		counts      = map[string]int{}
		errKinds    = map[string]int{}
		ownedReject atomic.Int64
		staleReject atomic.Int64
		stalls      atomic.Int64
		harnessErrs []string
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
	errKind := func(err error) {
		k := err.Error()
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			k = "deadline"
		case strings.Contains(k, "reset by peer"):
			k = "reset"
		case strings.Contains(k, "EOF"):
			k = "eof"
		case strings.Contains(k, "late") || strings.Contains(k, "ran out locally"):
			k = "late grant"
		case len(k) > 60:
			k = k[:60]
		}
		mu.Lock()
		errKinds[k]++
		mu.Unlock()
	}

	release := func(id int, lk faultHandle) {
		for attempt := 0; attempt < 2; attempt++ {
			p := h.Begin(id, faulttest.LeaseInput{Kind: faulttest.Release, Token: lk.Token()})
			ctx, cancel := context.WithTimeout(context.Background(), cfg.opTimeout)
			r, err := lk.Release(ctx)
			cancel()
			if err != nil {
				p.Unknown(faulttest.LeaseOutput{Result: faulttest.Unknown}, err)
				count("release unknown")
				errKind(err)
				continue
			}
			out := map[primitives.ReleaseResult]faulttest.LeaseResult{
				primitives.Released: faulttest.Released, primitives.AlreadyReleased: faulttest.AlreadyReleased,
				primitives.NotOwned: faulttest.NotOwned,
			}[r]
			if out == 0 {
				harnessErr("Release returned %v", r)
			}
			p.Return(faulttest.LeaseOutput{Result: out})
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
			fl := locks[id]
			rng := mrand.New(mrand.NewPCG(cfg.chaos.Seed, uint64(id)))
			for time.Now().Before(deadline) {
				p := h.Begin(id, faulttest.LeaseInput{Kind: faulttest.Acquire})
				ctx, cancel := context.WithTimeout(context.Background(), cfg.opTimeout)
				lk, err := fl.tryAcquire(ctx)
				cancel()
				sent := fl.sentTokens()
				tok := ""
				if len(sent) > 0 {
					tok = sent[0]
				}
				for _, s := range sent[min(1, len(sent)):] {
					if s != tok {
						harnessErr("one TryAcquire sent tokens %q and %q", tok, s)
					}
				}
				switch {
				case err == nil:
					if tok != "" && tok != lk.Token() {
						harnessErr("granted %q but sent %q", lk.Token(), tok)
					}
					p.SetInput(faulttest.LeaseInput{Kind: faulttest.Acquire, Token: lk.Token()})
					p.Return(faulttest.LeaseOutput{Result: faulttest.Granted, Token: lk.Token(), Fence: lk.FencingToken()})
					count("acquire granted")
					if cfg.stallOneIn > 0 && rng.IntN(cfg.stallOneIn) == 0 {
						stalls.Add(1)
						time.Sleep(cfg.ttl + 50*time.Millisecond)
						if lk.Remaining() != 0 {
							harnessErr("handle reports %v left after sleeping past its TTL", lk.Remaining())
						}
						if !res.write(lk.FencingToken()) {
							staleReject.Add(1)
						}
					} else if lk.Remaining() > 20*time.Millisecond {
						if !res.write(lk.FencingToken()) {
							ownedReject.Add(1)
						}
					}
					release(id, lk)
				case errors.Is(err, primitives.ErrNotAcquired):
					p.SetInput(faulttest.LeaseInput{Kind: faulttest.Acquire, Token: tok})
					p.Return(faulttest.LeaseOutput{Result: faulttest.NotGranted})
					count("acquire not-granted")
					if cfg.pause > 0 {
						time.Sleep(time.Duration(rng.Int64N(int64(cfg.pause))))
					}
				default:
					p.SetInput(faulttest.LeaseInput{Kind: faulttest.Acquire, Token: tok})
					p.Unknown(faulttest.LeaseOutput{Result: faulttest.Unknown}, err)
					count("acquire unknown")
					if tok != "" {
						count("acquire unknown, token sent")
					}
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
	out := &faultResult{chaos: <-chaosDone, counts: counts, errKinds: errKinds,
		model: faulttest.LeaseModel{TTL: cfg.ttl, Fencing: cfg.fencing, Contiguous: cfg.fencing}}
	out.ownedReject, out.staleReject, out.stalls = int(ownedReject.Load()), int(staleReject.Load()), int(stalls.Load())
	for _, e := range harnessErrs {
		t.Error(e)
	}

	// Quiesce: close the proxies, so no byte of an acquire can still be on
	// its way, and wait until the server has dropped every test
	// connection (it processes what it read before it frees a client).
	for _, l := range locks {
		l.close()
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

	var entries []string
	if out := target.keyNode(t, key).MustCmd(t, "LRANGE", faultGrantKey(t, key), "0", "-1"); out != "" {
		entries = strings.Split(out, "\n")
	}
	grants, err := faulttest.ParseGrants(entries)
	if err != nil {
		t.Fatal(err)
	}
	ops, st, err := faulttest.SettleLeases(h.Ops(), grants, cfg.fencing)
	out.settle = st
	if err != nil {
		t.Fatal(err)
	}
	out.ops = ops
	start := time.Now()
	out.check, err = out.model.Check(ops, 60*time.Second)
	out.checkTook = time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	out.overlaps = faulttest.DefiniteOverlaps(ops)
	return out
}

// faultQuiesce waits until srv has no connection but redistest's own admin
// connections: the server frees a client only after processing what it
// read from it, so no command of the run can still take effect.
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

// faultVisualize saves the history of a failed check (JSON, re-checkable
// with COORDHOST_FAULT_HISTORY=file go test ./internal/faulttest -run
// HistoryFile) and porcupine's visualization of it, and logs where.
func faultVisualize(t *testing.T, r *faultResult) {
	t.Helper()
	if f, err := os.CreateTemp("", "coordhost-lease-history-*.json"); err != nil {
		t.Logf("saving the history: %v", err)
	} else {
		err := r.model.WriteHistory(f, r.ops)
		f.Close()
		t.Logf("history saved to %s (%v); re-check: COORDHOST_FAULT_HISTORY=%s go test ./internal/faulttest -run HistoryFile -v", f.Name(), err, f.Name())
	}
	path, err := r.model.Visualize(r.ops, 30*time.Second, "")
	if err != nil {
		t.Logf("visualization: %v", err)
		return
	}
	t.Logf("history visualization: %s", path)
}

// faultChaosConfig is the chaos run of TestFaultHistoryChaos*.
func faultChaosConfig(seed uint64, d time.Duration) faultConfig {
	return faultConfig{
		clients:    6,
		duration:   d,
		ttl:        250 * time.Millisecond,
		opTimeout:  60 * time.Millisecond,
		pause:      2 * time.Millisecond,
		stallOneIn: 400,
		fencing:    true,
		newLock:    newFaultRealLock,
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

// TestFaultHistoryChaos: six clients, each through its own fault proxy,
// race for one fenced lock under a seeded chaos schedule of latency,
// resets, blackholes and lost replies; the history must be linearizable
// against the lease model with no violation.
func TestFaultHistoryChaos(t *testing.T) {
	srv := redistest.Start(t)
	seed := faulttest.Seed(t)
	r := runFaultHistory(t, faultStandalone(srv), faultChaosConfig(seed, 8*time.Second))
	faultCheckChaos(t, r, seed, 5000)
}

// TestFaultHistoryChaosCluster is TestFaultHistoryChaos, shorter, on a
// 3-master cluster: each client's proxy carries its connections to every
// node.
func TestFaultHistoryChaosCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster chaos run skipped in -short mode")
	}
	cl := redistest.StartCluster(t, 3)
	seed := faulttest.Seed(t)
	target := faultTarget{client: cl.Client, nodes: cl.Servers, keyNode: cl.NodeForKey}
	r := runFaultHistory(t, target, faultChaosConfig(seed, 3*time.Second))
	faultCheckChaos(t, r, seed, 2000)
}

func faultCheckChaos(t *testing.T, r *faultResult, seed uint64, minOps int) {
	t.Helper()
	r.log(t)
	if len(r.ops) < minOps {
		t.Errorf("only %d operations, want ≥ %d", len(r.ops), minOps)
	}
	if r.counts["acquire granted"] == 0 || r.settle.UnknownAcquires == 0 {
		t.Errorf("the run exercised too little: %v, %+v", r.counts, r.settle)
	}
	if r.check != porcupine.Ok {
		faultVisualize(t, r)
		t.Fatalf("history check: %v (seed %d; replay with %s=%d)", r.check, seed, faulttest.SeedEnv, seed)
	}
	if len(r.overlaps) > 0 || r.ownedReject > 0 {
		t.Fatalf("mutual exclusion violated: %d overlaps, %d fenced writes rejected while owned (seed %d)", len(r.overlaps), r.ownedReject, seed)
	}
}

// faultBrokenLock is a deliberately broken lock for the control test: it
// reads the key with GET and, in a second round trip after a pause, writes
// it with a plain SET (no NX). The fencing counter and the grant log are
// updated atomically with each other (the harness's instrumentation must
// be right even when the lock is not).
type faultBrokenLock struct {
	c                  rueidis.Client
	key, fence, grants string
	ttl, gap           time.Duration
	mu                 sync.Mutex
	sent               []string
}

const faultBrokenGrant = `local f = redis.call('INCR', KEYS[1])
redis.call('RPUSH', KEYS[2], ARGV[1] .. ' ' .. f)
return f`

func newFaultBrokenLock(gap time.Duration) func(t *testing.T, c rueidis.Client, key string, ttl time.Duration) faultLock {
	return func(t *testing.T, c rueidis.Client, key string, ttl time.Duration) faultLock {
		fence, err := keys.Space{}.Derived("fence", key)
		if err != nil {
			t.Fatal(err)
		}
		return &faultBrokenLock{c: c, key: key, fence: fence, grants: faultGrantKey(t, key), ttl: ttl, gap: gap}
	}
}

func (b *faultBrokenLock) tryAcquire(ctx context.Context) (faultHandle, error) {
	start := time.Now()
	err := b.c.Do(ctx, b.c.B().Get().Key(b.key).Build()).Error()
	if err == nil {
		return nil, fmt.Errorf("%w: broken lock: held", primitives.ErrNotAcquired)
	}
	if !rueidis.IsRedisNil(err) {
		return nil, err
	}
	time.Sleep(b.gap) // the race window between the read and the write
	tok := rand.Text()
	b.mu.Lock()
	b.sent = append(b.sent, tok)
	b.mu.Unlock()
	if err := b.c.Do(ctx, b.c.B().Set().Key(b.key).Value(tok).Px(b.ttl).Build()).Error(); err != nil {
		return nil, err
	}
	fence, err := b.c.Do(ctx, b.c.B().Eval().Script(faultBrokenGrant).Numkeys(2).Key(b.fence, b.grants).Arg(tok).Build()).AsInt64()
	if err != nil {
		return nil, err
	}
	return &faultBrokenHandle{b: b, token: tok, fence: fence, deadline: start.Add(b.ttl)}, nil
}

func (b *faultBrokenLock) sentTokens() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.sent
	b.sent = nil
	return out
}

func (b *faultBrokenLock) close() {}

type faultBrokenHandle struct {
	b        *faultBrokenLock
	token    string
	fence    int64
	deadline time.Time
}

func (h *faultBrokenHandle) Token() string            { return h.token }
func (h *faultBrokenHandle) FencingToken() int64      { return h.fence }
func (h *faultBrokenHandle) Remaining() time.Duration { return max(time.Until(h.deadline), 0) }

func (h *faultBrokenHandle) Release(ctx context.Context) (primitives.ReleaseResult, error) {
	c := h.b.c
	v, err := c.Do(ctx, c.B().Get().Key(h.b.key).Build()).ToString()
	switch {
	case rueidis.IsRedisNil(err):
		return primitives.AlreadyReleased, nil
	case err != nil:
		return 0, err
	case v != h.token:
		return primitives.NotOwned, nil
	}
	if err := c.Do(ctx, c.B().Del().Key(h.b.key).Build()).Error(); err != nil {
		return 0, err
	}
	return primitives.Released, nil
}

// TestFaultControlBrokenLock runs a lock without atomicity through the same
// harness; the checker must report the violation.
func TestFaultControlBrokenLock(t *testing.T) {
	srv := redistest.Start(t)
	seed := faulttest.Seed(t)
	cfg := faultConfig{
		clients:   6,
		duration:  1500 * time.Millisecond,
		ttl:       250 * time.Millisecond,
		opTimeout: 250 * time.Millisecond,
		pause:     2 * time.Millisecond,
		fencing:   true,
		newLock:   newFaultBrokenLock(time.Millisecond),
		chaos: faulttest.Chaos{
			Seed:     seed,
			Duration: 1500 * time.Millisecond,
			Step:     100 * time.Millisecond,
			// Latency only: it widens the race window and leaves no
			// outcome unknown, so the control fails for one reason.
			Faults:     []faulttest.Fault{faulttest.Calm, faulttest.Latency},
			MaxLatency: 2 * time.Millisecond,
		},
	}
	r := runFaultHistory(t, faultStandalone(srv), cfg)
	r.log(t)
	if r.check != porcupine.Illegal {
		t.Fatalf("the checker accepted a lock without atomicity: %v (seed %d)", r.check, seed)
	}
	if r.ownedReject == 0 {
		t.Errorf("the fenced resource rejected no write of a live holder of the broken lock")
	}
	if os.Getenv("COORDHOST_FAULT_VISUALIZE") != "" {
		faultVisualize(t, r)
	}
}

// TestFaultProtectedResource: a holder whose network stops for longer than
// its TTL loses the lock to another client; its stale fencing token is
// rejected by the protected resource and its Release reports NotOwned.
func TestFaultProtectedResource(t *testing.T) {
	srv := redistest.Start(t)
	const key = "protected"
	const ttl = 300 * time.Millisecond
	var res faultResource
	newClient := func(p *faulttest.Proxy) *lock.Locker {
		c := srv.Client(t, p.Option(), func(o *rueidis.ClientOption) { o.DisableRetry = true })
		l, err := lock.New(c, lock.Options{Fencing: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
	pa, pb := faulttest.New(t), faulttest.New(t)
	la, lb := newClient(pa), newClient(pb)
	ctx := context.Background()

	a, err := la.TryAcquire(ctx, key, ttl)
	if err != nil {
		t.Fatal(err)
	}
	if !res.write(a.FencingToken()) {
		t.Fatal("first write rejected")
	}
	// A pauses: its network stops past the TTL.
	pa.Blackhole(true)
	time.Sleep(ttl + 100*time.Millisecond)
	select {
	case <-a.Done():
	default:
		t.Fatal("Done still open after the TTL ran out")
	}
	if a.Remaining() != 0 {
		t.Fatalf("Remaining = %v after the TTL", a.Remaining())
	}

	b, err := lb.TryAcquire(ctx, key, 10*ttl)
	if err != nil {
		t.Fatalf("B could not take the expired lock: %v", err)
	}
	if b.FencingToken() <= a.FencingToken() {
		t.Fatalf("fencing token %d after %d", b.FencingToken(), a.FencingToken())
	}
	if !res.write(b.FencingToken()) {
		t.Fatal("B's write rejected")
	}

	// A resumes and carries on with its stale token.
	pa.Blackhole(false)
	if res.write(a.FencingToken()) {
		t.Fatalf("stale write with fence %d accepted after fence %d", a.FencingToken(), b.FencingToken())
	}
	if ok, err := a.Renew(ctx, ttl); ok || err != nil {
		t.Fatalf("Renew of the expired lock: %v, %v", ok, err)
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if r, err := a.Release(rctx); err != nil || r != primitives.NotOwned {
		t.Fatalf("A's Release = %v, %v; want NotOwned", r, err)
	}
	if v := srv.MustCmd(t, "GET", key); v != b.Token() {
		t.Fatalf("A's release touched B's lock: key holds %q", v)
	}
	if r, err := b.Release(rctx); err != nil || r != primitives.Released {
		t.Fatalf("B's Release = %v, %v", r, err)
	}
	t.Logf("fences: A %d (stale, rejected), B %d; resource accepted %d, rejected %d", a.FencingToken(), b.FencingToken(), res.accepted, res.rejected)
}

// TestFaultLostReplies pins down what a lock does when one reply is lost,
// one fault at a time, with the server's state checked directly.
func TestFaultLostReplies(t *testing.T) {
	srv := redistest.Start(t)
	setup := func(t *testing.T, key string, ttl time.Duration) (*faulttest.Proxy, *faultRealLock) {
		p := faulttest.New(t)
		c := srv.Client(t, p.Option(), func(o *rueidis.ClientOption) {
			o.DisableRetry = true
			o.PipelineMultiplex = -1 // one connection: the test knows which
		})
		fl := newFaultRealLock(t, c, key, ttl).(*faultRealLock)
		t.Cleanup(fl.close)
		// Warm up: connect, and load the scripts, so that the reply lost
		// below is the script's own and not a NOSCRIPT error.
		lk, err := fl.l.TryAcquire(context.Background(), key+"-warm-up", ttl)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := lk.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		fl.sentTokens()
		return p, fl
	}
	grants := func(t *testing.T, key string) []faulttest.Grant {
		var entries []string
		if out := srv.MustCmd(t, "LRANGE", faultGrantKey(t, key), "0", "-1"); out != "" {
			entries = strings.Split(out, "\n")
		}
		g, err := faulttest.ParseGrants(entries)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	ctx := context.Background()

	t.Run("acquire", func(t *testing.T) {
		const key = "lost-acquire"
		p, fl := setup(t, key, 5*time.Second)
		p.DropReplies(1)
		lk, err := fl.tryAcquire(ctx)
		if err == nil || errors.Is(err, primitives.ErrNotAcquired) {
			t.Fatalf("TryAcquire with a lost reply: %v, %v; want an uncertain error", lk, err)
		}
		sent := fl.sentTokens()
		g := grants(t, key)
		if len(sent) != 1 || len(g) != 1 || g[0].Token != sent[0] {
			t.Fatalf("sent %q, grant log %v: the server should have granted the lost acquire", sent, g)
		}
		// The best-effort cleanup ran before TryAcquire returned.
		if _, err := srv.Cmd(t, "GET", key); !rueidis.IsRedisNil(err) {
			t.Errorf("after a lost grant reply the key is still held (cleanup failed): GET: %v, PTTL %s", err, srv.MustCmd(t, "PTTL", key))
		}
		t.Logf("lost grant reply: %v", err)
		lk, err = fl.tryAcquire(ctx)
		if err != nil {
			t.Fatalf("next TryAcquire: %v", err)
		}
		if lk.FencingToken() != g[0].Fence+1 {
			t.Errorf("fence %d after lost grant %d", lk.FencingToken(), g[0].Fence)
		}
	})

	t.Run("release", func(t *testing.T) {
		const key = "lost-release"
		p, fl := setup(t, key, 5*time.Second)
		lk, err := fl.l.TryAcquire(ctx, key, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		p.DropReplies(1)
		if r, err := lk.Release(ctx); err == nil {
			t.Fatalf("Release with a lost reply: %v", r)
		}
		select {
		case <-lk.Done():
		default:
			t.Error("Done still open after an uncertain release")
		}
		if _, err := srv.Cmd(t, "GET", key); !rueidis.IsRedisNil(err) {
			t.Fatalf("the release whose reply was lost did not run: GET: %v", err)
		}
		if r, err := lk.Release(ctx); err != nil || r != primitives.AlreadyReleased {
			t.Fatalf("second Release = %v, %v; want AlreadyReleased", r, err)
		}
	})

	t.Run("cleanup overtakes the held acquire", func(t *testing.T) {
		// The acquire is held in the network; the caller's deadline passes
		// and rueidis closes that connection (its bytes are still on their
		// way); the best-effort release goes out on a new connection and
		// arrives first; then the acquire arrives and grants the lock to a
		// token nobody holds, until its TTL runs out.
		const key = "overtaken-acquire"
		const ttl = time.Second
		p, fl := setup(t, key, ttl)
		old := p.Conns()
		if len(old) != 1 {
			t.Fatalf("%d connections after the warm-up, want 1", len(old))
		}
		p.Blackhole(true)
		done := make(chan error, 1)
		start := time.Now()
		go func() {
			cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			_, err := fl.tryAcquire(cctx)
			done <- err
		}()
		// Wait for the cleanup's new connection. (rueidis closes a
		// connection whose deadline passed while it was the only caller on
		// it; had it kept it, the cleanup would queue behind the acquire and
		// the test would only see the key freed.)
		for len(p.Conns()) < 2 && time.Since(start) < time.Second {
			time.Sleep(5 * time.Millisecond)
		}
		if len(p.Conns()) < 2 {
			t.Logf("rueidis kept the connection: the cleanup is queued behind the acquire")
		}
		old[0].Blackhole(true) // keep the acquire held
		p.Blackhole(false)     // let the cleanup through
		var err error
		select {
		case err = <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("TryAcquire did not return")
		}
		if err == nil || errors.Is(err, primitives.ErrNotAcquired) {
			t.Fatalf("TryAcquire = %v; want an uncertain error", err)
		}
		sent := fl.sentTokens()
		old[0].Blackhole(false) // the acquire arrives
		var g []faulttest.Grant
		for g = grants(t, key); len(g) == 0 && time.Since(start) < 5*time.Second; g = grants(t, key) {
			time.Sleep(5 * time.Millisecond)
		}
		if len(g) != 1 || len(sent) != 1 || g[0].Token != sent[0] {
			t.Fatalf("grant log %v, sent %q: the held acquire should have granted", g, sent)
		}
		v, gerr := srv.Cmd(t, "GET", key)
		switch {
		case rueidis.IsRedisNil(gerr):
			t.Logf("the key is free: the cleanup was not overtaken")
		case gerr != nil:
			t.Fatal(gerr)
		case v != g[0].Token:
			t.Fatalf("key holds %q, not the granted token %q", v, g[0].Token)
		default:
			// Safety holds (nobody has a handle, the TTL ends it), but the
			// key is blocked for a whole TTL by a grant that TryAcquire
			// reported as "released best effort".
			t.Logf("KNOWN ISSUE: TryAcquire returned %q, yet the key is held by its token with PTTL %sms: the cleanup release overtook the acquire on another connection", err, srv.MustCmd(t, "PTTL", key))
			if _, err := fl.tryAcquire(ctx); !errors.Is(err, primitives.ErrNotAcquired) {
				t.Fatalf("TryAcquire while the orphan grant lives: %v", err)
			}
			time.Sleep(ttl)
		}
		lk, err := fl.tryAcquire(ctx)
		if err != nil {
			t.Fatalf("TryAcquire after the orphan's TTL: %v", err)
		}
		if lk.FencingToken() <= g[0].Fence {
			t.Fatalf("fence %d after %d", lk.FencingToken(), g[0].Fence)
		}
	})
}
