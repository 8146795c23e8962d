package latch_test

// The fault harness of fault_test.go: the clients, the operations each
// records, and the check of the history.

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
	"github.com/coordhost/coordhost/primitives/latch"
	"github.com/redis/rueidis"
)

// latchSetGeneration is a faulttest.Tap Pick: the generation token of a
// latch_set call (Create, Reset), else "".
func latchSetGeneration(args []string) string {
	if len(args) >= 6 && (args[0] == "EVALSHA" || args[0] == "EVAL") && args[2] == "1" &&
		(args[4] == "create" || args[4] == "reset") {
		return strings.Clone(args[5])
	}
	return ""
}

// faultWaiter is how the harness waits: the real Latch.Wait, or the
// broken control's.
type faultWaiter func(ctx context.Context, l *latch.Latch) (bool, error)

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

// faultRun is one run of the harness: its clients, history and tallies.
type faultRun struct {
	cfg     latchFaultConfig
	h       *faulttest.History
	proxies []*faulttest.Proxy
	lss     []*latch.Latches
	taps    []*faulttest.Tap
	keys    []string

	mu          sync.Mutex
	counts      map[string]int
	harnessErrs []string
	gens        map[string][]string // key -> generations seen, newest last
}

// runLatchFaults drives cfg.clients clients, each through its own proxy,
// against cfg.keys latches under cfg.chaos, and checks the history.
func runLatchFaults(t *testing.T, target latchFaultTarget, cfg latchFaultConfig) *latchFaultResult {
	t.Helper()
	r := &faultRun{cfg: cfg, h: faulttest.NewHistory(), counts: map[string]int{}, gens: map[string][]string{},
		proxies: make([]*faulttest.Proxy, cfg.clients), lss: make([]*latch.Latches, cfg.clients), taps: make([]*faulttest.Tap, cfg.clients)}
	proxies, lss, taps := r.proxies, r.lss, r.taps
	for i := range proxies {
		proxies[i] = faulttest.New(t)
		c := target.client(t, proxies[i].Option(), func(o *rueidis.ClientOption) {
			o.DisableRetry = true
			o.ClientName = "coordhost-fault"
		})
		taps[i] = &faulttest.Tap{Client: c, Pick: latchSetGeneration}
		ls, err := latch.New(taps[i], latch.Options{TTL: 10 * time.Minute, RecheckInterval: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		lss[i] = ls
	}
	for i := range cfg.keys {
		r.keys = append(r.keys, "fault:"+strconv.Itoa(i))
	}

	deadline := time.Now().Add(cfg.duration)
	var wg sync.WaitGroup
	for id := range cfg.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.writer(id, deadline)
		}()
		for w := range cfg.waitersPerClient {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.waiter(id, cfg.clients+id*cfg.waitersPerClient+w, deadline)
			}()
		}
	}
	chaosDone := make(chan faulttest.Report, 1)
	ctx, stopChaos := context.WithCancel(context.Background())
	defer stopChaos()
	go func() { chaosDone <- cfg.chaos.Run(ctx, proxies...) }()
	wg.Wait()
	stopChaos()
	out := &latchFaultResult{chaos: <-chaosDone, counts: r.counts}
	for _, e := range r.harnessErrs {
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

	out.ops = r.h.Ops()
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

// count tallies one outcome for the log.
func (r *faultRun) count(k string) {
	r.mu.Lock()
	r.counts[k]++
	r.mu.Unlock()
}

func (r *faultRun) harnessErr(format string, args ...any) {
	r.mu.Lock()
	r.harnessErrs = append(r.harnessErrs, fmt.Sprintf(format, args...))
	r.mu.Unlock()
}

// seen notes gen as key's newest generation.
func (r *faultRun) seen(key, gen string) {
	r.mu.Lock()
	if g := r.gens[key]; len(g) == 0 || g[len(g)-1] != gen {
		r.gens[key] = append(g, gen)
	}
	r.mu.Unlock()
}

// pickGen returns a known generation of key: usually the newest, at times
// an older one (its waits and count-downs must say "gone").
func (r *faultRun) pickGen(rng *mrand.Rand, key string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.gens[key]
	switch {
	case len(g) == 0:
		return ""
	case len(g) > 1 && rng.IntN(5) == 0:
		return g[rng.IntN(len(g)-1)]
	}
	return g[len(g)-1]
}

func (r *faultRun) opCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), r.cfg.opTimeout)
}

func latchIn(kind faulttest.LatchKind, key, gen string, n int64) faulttest.LatchInput {
	return faulttest.LatchInput{Kind: kind, Key: key, Gen: gen, Count: n}
}

func (r *faultRun) unknown(p *faulttest.Pending, kind faulttest.LatchKind, err error) {
	p.Unknown(faulttest.LatchOutput{Unknown: true}, err)
	r.count(kind.String() + " unknown")
}

// set records one Create or Reset, with the generation it sent.
func (r *faultRun) set(id int, kind faulttest.LatchKind, key string, n int64) {
	p := r.h.Begin(id, latchIn(kind, key, "", n))
	ctx, cancel := r.opCtx()
	var l *latch.Latch
	var err error
	if kind == faulttest.LatchCreate {
		l, err = r.lss[id].Create(ctx, key, n)
	} else {
		l, err = r.lss[id].Reset(ctx, key, n)
	}
	cancel()
	sent := r.taps[id].Take()
	for _, g := range sent[min(1, len(sent)):] {
		if g != sent[0] { // EVALSHA then EVAL after NOSCRIPT send one token twice
			r.harnessErr("one %v sent generations %q and %q", kind, sent[0], g)
		}
	}
	gen := ""
	if len(sent) > 0 {
		gen = sent[0]
	}
	p.SetInput(latchIn(kind, key, gen, n))
	switch {
	case err == nil:
		if l.Generation() != gen {
			r.harnessErr("%v returned generation %q but sent %q", kind, l.Generation(), gen)
		}
		p.Return(faulttest.LatchOutput{})
		r.count(kind.String() + " ok")
		r.seen(key, gen)
	case errors.Is(err, latch.ErrExists):
		p.Return(faulttest.LatchOutput{Exists: true})
		r.count(kind.String() + " exists")
	default:
		r.unknown(p, kind, err)
		if gen != "" {
			r.seen(key, gen)
		}
	}
}

func (r *faultRun) join(id int, key string) {
	p := r.h.Begin(id, latchIn(faulttest.LatchJoin, key, "", 0))
	ctx, cancel := r.opCtx()
	l, err := r.lss[id].Join(ctx, key)
	cancel()
	switch {
	case err == nil:
		p.Return(faulttest.LatchOutput{Gen: l.Generation()})
		r.count("Join ok")
		r.seen(key, l.Generation())
	case errors.Is(err, latch.ErrNotFound):
		p.Return(faulttest.LatchOutput{NotFound: true})
		r.count("Join not found")
	default:
		r.unknown(p, faulttest.LatchJoin, err)
	}
}

func (r *faultRun) handle(id int, key, gen string) *latch.Latch {
	l, err := r.lss[id].Attach(key, gen)
	if err != nil {
		r.harnessErr("Attach: %v", err)
	}
	return l
}

// countDown reports whether the generation was complete.
func (r *faultRun) countDown(id int, key, gen string) bool {
	p := r.h.Begin(id, latchIn(faulttest.LatchCountDown, key, gen, 0))
	ctx, cancel := r.opCtx()
	n, err := r.handle(id, key, gen).CountDown(ctx)
	cancel()
	switch {
	case err == nil:
		p.Return(faulttest.LatchOutput{N: n})
		r.count(map[bool]string{true: "CountDown -1", false: "CountDown ok"}[n == -1])
	case errors.Is(err, latch.ErrCompleted):
		p.Return(faulttest.LatchOutput{Completed: true})
		r.count("CountDown completed")
		return true
	default:
		r.unknown(p, faulttest.LatchCountDown, err)
	}
	return false
}

func (r *faultRun) readCount(id int, key, gen string) {
	p := r.h.Begin(id, latchIn(faulttest.LatchCount, key, gen, 0))
	ctx, cancel := r.opCtx()
	n, err := r.handle(id, key, gen).Count(ctx)
	cancel()
	if err != nil {
		r.unknown(p, faulttest.LatchCount, err)
		return
	}
	p.Return(faulttest.LatchOutput{N: n})
	r.count("Count ok")
}

func (r *faultRun) del(id int, key, gen string) {
	p := r.h.Begin(id, latchIn(faulttest.LatchDelete, key, gen, 0))
	ctx, cancel := r.opCtx()
	ok, err := r.handle(id, key, gen).Delete(ctx)
	cancel()
	if err != nil {
		r.unknown(p, faulttest.LatchDelete, err)
		return
	}
	p.Return(faulttest.LatchOutput{OK: ok})
	r.count("Delete ok")
}

func (r *faultRun) wait(id, client int, key, gen string, d time.Duration) {
	p := r.h.Begin(client, latchIn(faulttest.LatchWait, key, gen, 0))
	ctx, cancel := context.WithTimeout(context.Background(), d)
	start := time.Now()
	ok, err := r.cfg.wait(ctx, r.handle(id, key, gen))
	took := time.Since(start)
	cancel()
	switch {
	case err == nil:
		p.Return(faulttest.LatchOutput{OK: ok})
		r.count(fmt.Sprintf("Wait %v", ok))
		if took > 5*time.Millisecond {
			r.count(fmt.Sprintf("Wait %v after waiting", ok))
		}
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, primitives.ErrClosed):
		r.unknown(p, faulttest.LatchWait, err)
	default:
		// Under faults a waiter keeps re-reading until ctx ends;
		// any other error is a bug.
		r.unknown(p, faulttest.LatchWait, err)
		r.harnessErr("Wait: %v", err)
	}
}

// writer is client id's writing goroutine: creates, resets, joins,
// count-downs, counts, deletes and short waits on random keys.
func (r *faultRun) writer(id int, deadline time.Time) {
	rng := mrand.New(mrand.NewPCG(r.cfg.chaos.Seed, uint64(id)))
	complete := map[string]bool{} // keys this writer found complete
	for time.Now().Before(deadline) {
		key := r.keys[rng.IntN(len(r.keys))]
		gen := r.pickGen(rng, key)
		switch n := rng.IntN(100); {
		case complete[key] && n < 70:
			// Keep most latches counting: start a new round.
			r.set(id, faulttest.LatchReset, key, 1+rng.Int64N(5))
			delete(complete, key)
		case gen == "" && n < 50:
			r.set(id, faulttest.LatchCreate, key, 1+rng.Int64N(4))
		case gen == "":
			r.join(id, key)
		case n < 6:
			r.set(id, faulttest.LatchCreate, key, 1+rng.Int64N(4))
		case n < 11:
			r.set(id, faulttest.LatchReset, key, rng.Int64N(5))
		case n < 20:
			r.join(id, key)
		case n < 62:
			if r.countDown(id, key, gen) {
				complete[key] = true
			}
		case n < 82:
			r.readCount(id, key, gen)
		case n < 84:
			r.del(id, key, gen)
		default:
			r.wait(id, id, key, gen, r.cfg.opTimeout)
		}
	}
}

// waiter is a waiting goroutine of client id, recorded as client: it
// joins now and then and waits on a known generation of a random key.
func (r *faultRun) waiter(id, client int, deadline time.Time) {
	rng := mrand.New(mrand.NewPCG(r.cfg.chaos.Seed, uint64(client)))
	for time.Now().Before(deadline) {
		key := r.keys[rng.IntN(len(r.keys))]
		if rng.IntN(3) == 0 {
			r.join(id, key) // recorded under the writer's id: Join is quick
		}
		gen := r.pickGen(rng, key)
		if gen == "" {
			time.Sleep(time.Millisecond)
			continue
		}
		r.wait(id, client, key, gen, r.cfg.waitTimeout)
	}
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
