// Package reshard tests every primitive on a Redis Cluster whose topology
// changes under load (issue 12 §3): the slot of the primitives' keys
// migrates between masters, pausing midway with the keys split between
// source and target (the state a crashed redis-cli --cluster reshard
// leaves), and masters fail over to their replicas, by CLUSTER FAILOVER or
// by being killed and revived.
//
// Each scenario runs its workloads through one schedule of changes
// (churn), then checks each history:
//
//   - locks (plain, with the Locker's fencing counter, with a caller-named
//     counter, FIFO): porcupine against faulttest.LeaseModel (never two
//     holders, fencing tokens strictly increasing and, for non-waiting
//     acquires, contiguous), and no definite overlap of validity;
//   - hash-field leases (Redis 8 cluster): the same model per field;
//   - semaphores: faulttest.SemaphoreModel (no permit over capacity) and
//     no definite excess; no release errs;
//   - rate limiters (fixed window, sliding window, token bucket, each with a
//     limit reached midway and no refill): grants exactly the limit;
//   - latches: every waiter of every generation wakes with true, and the
//     count-downs return exactly count-1 .. 0;
//   - read-write locks: porcupine against faulttest.RWModel, no definite
//     overlap of a writer with anyone;
//   - for all: no panic, no cross-slot error, and no error but the
//     explained ones: contention (ErrNotAcquired) and refusals that
//     outlasted the resending (ErrUnavailable: a fenced or FIFO lock or a
//     semaphore, whose keys a paused migration split, cannot be granted
//     until it finishes). An operation with an unknown outcome fails the
//     test: none of these changes loses a reply on the keys' own node (the
//     kills hit a master that does not own the slot; the owner fails over
//     by CLUSTER FAILOVER, which loses nothing).
//
// Flags (go test ./internal/reshard -args -reshard.rounds=10): rounds of
// churn per scenario, default 2 (one CLUSTER FAILOVER of the slot's owner,
// one kill and revive of another master), about 12 s of churn per
// scenario. Longer runs: -reshard.rounds=N, or -reshard.pause for a longer
// midway pause.
package reshard

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/coordhost/coordhost/internal/faulttest"
	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/latch"
	"github.com/coordhost/coordhost/primitives/lease"
	"github.com/coordhost/coordhost/primitives/lock"
	"github.com/coordhost/coordhost/primitives/ratelimit"
	"github.com/coordhost/coordhost/primitives/rwlock"
	"github.com/coordhost/coordhost/primitives/semaphore"
	"github.com/redis/rueidis"
)

var (
	rounds = flag.Int("reshard.rounds", 2, "rounds of topology changes per scenario (each: a migration paused midway, then a failover; even rounds CLUSTER FAILOVER the keys' master, odd ones kill and revive another)")
	pause  = flag.Duration("reshard.pause", 1500*time.Millisecond, "how long a migration stays paused midway, with the keys split between two masters")
)

func TestMain(m *testing.M) { xtest.Main(m) }

// tag puts every key of a scenario in one slot.
const tag = "{reshard}"

// opTimeout bounds one operation: longer than script.ReleaseRefusedWait
// would be needed only if a cluster stayed down that long.
const opTimeout = 8 * time.Second

// tally counts a workload's operations and errors.
type tally struct {
	name string
	mu   sync.Mutex
	ops  int
	// explained errors, by kind; unexplained ones, by message.
	explained   map[string]int
	unexplained map[string]int
	unknown     int
}

func newTally(name string) *tally {
	return &tally{name: name, explained: map[string]int{}, unexplained: map[string]int{}}
}

// note counts one operation and classifies its error: nil, contention,
// a refusal, or unexplained.
func (t *tally) note(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ops++
	switch {
	case err == nil:
	case errors.Is(err, primitives.ErrNotAcquired):
		t.explained["not acquired"]++
	case errors.Is(err, primitives.ErrUnavailable):
		t.explained["unavailable (refused for ~1s)"]++
	default:
		if errors.Is(err, primitives.ErrUncertain) {
			t.unknown++
		}
		msg := err.Error()
		if len(msg) > 200 {
			msg = msg[:200]
		}
		t.unexplained[msg]++
	}
}

func (t *tally) fail(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.unexplained[fmt.Sprintf(format, args...)]++
}

func (t *tally) report(tb testing.TB) {
	tb.Helper()
	t.mu.Lock()
	defer t.mu.Unlock()
	tb.Logf("%-22s %6d ops; explained: %v", t.name, t.ops, t.explained)
	for msg, n := range t.unexplained {
		tb.Errorf("%s: %d× unexplained: %s", t.name, n, msg)
	}
}

// scenario is a set of workloads run through one churn.
type scenario struct {
	c       *redistest.Cluster
	clients []rueidis.Client
	wg      sync.WaitGroup
	stop    chan struct{}
	tallies []*tally
	checks  []func(t *testing.T)
}

func newScenario(t *testing.T, c *redistest.Cluster, nclients int) *scenario {
	s := &scenario{c: c, stop: make(chan struct{})}
	for range nclients {
		s.clients = append(s.clients, c.Client(t))
	}
	return s
}

func (s *scenario) stopped() bool {
	select {
	case <-s.stop:
		return true
	default:
		return false
	}
}

// spawn runs f on a goroutine until the churn ends; a panic fails the
// workload with its stack.
func (s *scenario) spawn(tl *tally, f func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() {
			if r := recover(); r != nil {
				tl.fail("panic: %v\n%s", r, debug.Stack())
			}
		}()
		for !s.stopped() {
			f()
		}
	}()
}

func (s *scenario) add(tl *tally, check func(t *testing.T)) {
	s.tallies = append(s.tallies, tl)
	s.checks = append(s.checks, check)
}

// run churns the topology (on the test's goroutine, as redistest wants),
// then stops the workloads and checks each.
func (s *scenario) run(t *testing.T) {
	begin := time.Now()
	churn(t, s.c, redistest.SlotOf(tag))
	close(s.stop)
	s.wg.Wait()
	t.Logf("churn and workloads: %v", time.Since(begin).Round(time.Millisecond))
	for i, tl := range s.tallies {
		tl.report(t)
		s.checks[i](t)
	}
}

// churn changes the cluster under the workloads: per round, a migration of
// slot to the next master, paused midway with about half the keys moved,
// then finished; then a failover: even rounds CLUSTER FAILOVER the slot's
// new owner, odd rounds kill another master (it holds none of the
// workloads' keys, but its death makes the whole cluster answer
// CLUSTERDOWN until its replica takes over) and revive it.
func churn(t *testing.T, c *redistest.Cluster, slot int) {
	time.Sleep(*pause / 2) // warm up
	for r := range *rounds {
		from := c.Owner(slot)
		to := (from + 1) % len(c.Servers)
		c.StartMigration(t, slot, from, to)
		n := countKeys(t, c.Servers[from], slot)
		moved, left := c.MoveKeys(t, max(1, n/2))
		t.Logf("round %d: slot %d migrating from master %d to %d, paused with %d keys moved, %d left", r, slot, from, to, moved, left)
		time.Sleep(*pause)
		c.Finish(t)
		time.Sleep(*pause / 3)
		if r%2 == 0 {
			ft := c.Failover(t, c.Owner(slot))
			t.Logf("round %d: CLUSTER FAILOVER of the slot's master: promoted in %v, settled in %v", r, ft.Promoted.Round(time.Millisecond), ft.Settled.Round(time.Millisecond))
		} else {
			victim := (c.Owner(slot) + 1) % len(c.Servers)
			ft := c.KillMaster(t, victim)
			t.Logf("round %d: master %d killed: its replica promoted in %v", r, victim, ft.Promoted.Round(time.Millisecond))
			time.Sleep(*pause / 3)
			t.Logf("round %d: revived in %v", r, c.Revive(t).Round(time.Millisecond))
		}
		time.Sleep(*pause / 3)
	}
}

func countKeys(t *testing.T, s *redistest.Server, slot int) int {
	var n int
	fmt.Sscan(s.MustCmd(t, "CLUSTER", "COUNTKEYSINSLOT", fmt.Sprint(slot)), &n)
	return n
}

func opCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), opTimeout)
}

// leaseHistory records acquire/release operations for the lease models.
type leaseHistory struct {
	h       *faulttest.History
	granted atomic.Int64
}

// lockVariant is one way of taking a lock.
type lockVariant struct {
	name    string
	opts    lock.Options
	fenced  bool // fencing tokens to check
	waiting bool // Acquire (FIFO), not TryAcquire
	acquire func(l *lock.Locker, ctx context.Context) (*lock.Lock, error)
}

var lockVariants = []lockVariant{
	{name: "lock plain", acquire: func(l *lock.Locker, ctx context.Context) (*lock.Lock, error) {
		return l.TryAcquire(ctx, tag+"plain", lockTTL)
	}},
	{name: "lock fenced", opts: lock.Options{Fencing: true}, fenced: true, acquire: func(l *lock.Locker, ctx context.Context) (*lock.Lock, error) {
		return l.TryAcquire(ctx, tag+"fenced", lockTTL)
	}},
	{name: "lock caller-fenced", fenced: true, acquire: func(l *lock.Locker, ctx context.Context) (*lock.Lock, error) {
		return l.TryAcquireFenced(ctx, tag+"cf", tag+"cf-counter", lockTTL)
	}},
	{name: "lock FIFO", opts: lock.Options{FIFO: true, Fencing: true}, fenced: true, waiting: true, acquire: func(l *lock.Locker, ctx context.Context) (*lock.Lock, error) {
		return l.Acquire(ctx, tag+"fifo", lockTTL)
	}},
}

// lockTTL is long enough that no lease runs out while its holder works
// (a millisecond), its release waits out a CLUSTERDOWN, or a waiter's
// Acquire returns.
const lockTTL = 10 * time.Second

// addLock runs v on every client (two goroutines each) and checks its
// history.
func (s *scenario) addLock(t *testing.T, v lockVariant) {
	tl := newTally(v.name)
	h := faulttest.NewHistory()
	for id, cl := range s.clients {
		l, err := lock.New(cl, v.opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		for g := range 2 {
			client := 2*id + g
			s.spawn(tl, func() {
				leaseOp(h, tl, client, func(ctx context.Context) (grant, error) {
					lk, err := v.acquire(l, ctx)
					if err != nil {
						return grant{}, err
					}
					return grant{token: lk.Token(), fence: lk.FencingToken(), release: lk.Release}, nil
				})
			})
		}
	}
	s.add(tl, func(t *testing.T) {
		checkLeaseHistory(t, v.name, h.Ops(), faulttest.LeaseModel{TTL: lockTTL, Fencing: v.fenced, Contiguous: v.fenced && !v.waiting})
	})
}

// grant is what an acquire that succeeded hands back: its ownership token,
// its fencing token (0 if none) and its release.
type grant struct {
	token   string
	fence   int64
	release func(context.Context) (primitives.ReleaseResult, error)
}

// leaseOp makes one acquire as client and records it in h: a grant is held
// a millisecond and released (releaseLease); contention waits a
// millisecond; a refusal that outlasted the resending ran nothing and is
// no operation; any other error has an unknown outcome.
func leaseOp(h *faulttest.History, tl *tally, client int, acquire func(context.Context) (grant, error)) {
	p := h.Begin(client, faulttest.LeaseInput{Kind: faulttest.Acquire})
	ctx, cancel := opCtx()
	g, err := acquire(ctx)
	cancel()
	tl.note(err)
	switch {
	case err == nil:
		p.SetInput(faulttest.LeaseInput{Kind: faulttest.Acquire, Token: g.token})
		p.Return(faulttest.LeaseOutput{Result: faulttest.Granted, Token: g.token, Fence: g.fence})
		time.Sleep(time.Millisecond)
		releaseLease(h, tl, client, g.token, g.release)
	case errors.Is(err, primitives.ErrNotAcquired):
		p.Return(faulttest.LeaseOutput{Result: faulttest.NotGranted})
		time.Sleep(time.Millisecond)
	case errors.Is(err, primitives.ErrUnavailable):
		// Refused before running: no effect, no operation.
	default:
		p.Unknown(faulttest.LeaseOutput{Result: faulttest.Unknown}, err)
	}
}

// releaseResults maps a release's answer to the models' result.
var releaseResults = map[primitives.ReleaseResult]faulttest.LeaseResult{
	primitives.Released:        faulttest.Released,
	primitives.AlreadyReleased: faulttest.AlreadyReleased,
	primitives.NotOwned:        faulttest.NotOwned,
}

// releaseLease releases a grant and records it; a release that errs is
// recorded with an unknown outcome and tried once more.
func releaseLease(h *faulttest.History, tl *tally, client int, token string, release func(context.Context) (primitives.ReleaseResult, error)) {
	for range 2 {
		p := h.Begin(client, faulttest.LeaseInput{Kind: faulttest.Release, Token: token})
		ctx, cancel := opCtx()
		r, err := release(ctx)
		cancel()
		if err != nil {
			tl.fail("release: %v", err)
			p.Unknown(faulttest.LeaseOutput{Result: faulttest.Unknown}, err)
			continue
		}
		p.Return(faulttest.LeaseOutput{Result: releaseResults[r]})
		if r != primitives.Released {
			tl.fail("release answered %v", r)
		}
		return
	}
}

// checkLeaseHistory checks a lock or lease history that has no acquire of
// unknown outcome (every one would be an unexplained error already).
func checkLeaseHistory(t *testing.T, name string, ops []faulttest.Op, m faulttest.LeaseModel) {
	t.Helper()
	granted, fences := 0, []int64{}
	for _, op := range ops {
		if in := op.Input.(faulttest.LeaseInput); in.Kind == faulttest.Acquire && op.Output.(faulttest.LeaseOutput).Result == faulttest.Granted {
			granted++
			fences = append(fences, op.Output.(faulttest.LeaseOutput).Fence)
		}
	}
	start := time.Now()
	res, err := m.Check(ops, 60*time.Second)
	overlaps := faulttest.DefiniteOverlaps(ops)
	dup := 0
	if m.Fencing {
		slices.Sort(fences)
		for i := 1; i < len(fences); i++ {
			if fences[i] == fences[i-1] {
				dup++
			}
		}
	}
	t.Logf("%-22s %d ops, %d grants, porcupine %v in %v, %d definite overlaps, %d duplicate fencing tokens", name, len(ops), granted, res, time.Since(start).Round(time.Millisecond), len(overlaps), dup)
	switch {
	case err != nil:
		t.Errorf("%s: history: %v", name, err)
	case res != porcupine.Ok:
		t.Errorf("%s: history check: %v", name, res)
	}
	for i, o := range overlaps {
		if i == 3 {
			break
		}
		t.Errorf("%s: %v", name, o)
	}
	if dup > 0 {
		t.Errorf("%s: %d duplicate fencing tokens", name, dup)
	}
	if granted < 100 {
		t.Errorf("%s: only %d grants", name, granted)
	}
}

// semCapacity is the semaphore's capacity (six contenders).
const semCapacity = 2

func (s *scenario) addSemaphore(t *testing.T) {
	tl := newTally("semaphore")
	h := faulttest.NewHistory()
	const key = tag + "sem"
	for id, cl := range s.clients {
		sems, err := semaphore.New(cl, semaphore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sems.Close() })
		for g := range 2 {
			client := 2*id + g
			s.spawn(tl, func() {
				leaseOp(h, tl, client, func(ctx context.Context) (grant, error) {
					pm, err := sems.TryAcquire(ctx, key, semCapacity, lockTTL)
					if err != nil {
						return grant{}, err
					}
					return grant{token: pm.Token(), release: pm.Release}, nil
				})
			})
		}
	}
	s.add(tl, func(t *testing.T) {
		ops := h.Ops()
		m := faulttest.SemaphoreModel{Capacity: semCapacity, TTL: lockTTL}
		start := time.Now()
		res, err := m.Check(ops, 60*time.Second)
		excess := faulttest.DefiniteExcess(ops, semCapacity)
		t.Logf("%-22s %d ops, porcupine %v in %v, %d instants over capacity", "semaphore", len(ops), res, time.Since(start).Round(time.Millisecond), len(excess))
		if err != nil || res != porcupine.Ok || len(excess) > 0 {
			t.Errorf("semaphore: history check %v (%v), over capacity at %v", res, err, excess)
		}
	})
}

// limiterLimit is every limiter's limit: reached midway through the churn
// at the rates seen here, so both grants and refusals cross the changes.
const limiterLimit = 3000

func (s *scenario) addRateLimits(t *testing.T) {
	type algo struct {
		name string
		make func(ls *ratelimit.Limiters) (*ratelimit.Limiter, error)
	}
	for _, a := range []algo{
		{"ratelimit fixed", func(ls *ratelimit.Limiters) (*ratelimit.Limiter, error) {
			return ls.FixedWindow(tag+"fixed", ratelimit.FixedWindowOptions{Limit: limiterLimit, Window: time.Hour})
		}},
		{"ratelimit sliding", func(ls *ratelimit.Limiters) (*ratelimit.Limiter, error) {
			return ls.SlidingWindow(tag+"sliding", ratelimit.SlidingWindowOptions{Limit: limiterLimit, Window: time.Hour, Segments: 6})
		}},
		{"ratelimit bucket", func(ls *ratelimit.Limiters) (*ratelimit.Limiter, error) {
			return ls.TokenBucket(tag+"bucket", ratelimit.TokenBucketOptions{Limit: limiterLimit, TokensPerPeriod: 1, Period: time.Hour})
		}},
	} {
		tl := newTally(a.name)
		var granted, refused, failed atomic.Int64
		for _, cl := range s.clients {
			ls, err := ratelimit.New(cl, ratelimit.Options{})
			if err != nil {
				t.Fatal(err)
			}
			lim, err := a.make(ls)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { lim.Close() })
			for range 2 {
				s.spawn(tl, func() {
					ctx, cancel := opCtx()
					r, err := lim.TryAcquire(ctx, 1)
					cancel()
					tl.note(err)
					switch {
					case err != nil:
						failed.Add(1)
					case r.Acquired:
						granted.Add(1)
					default:
						refused.Add(1)
						time.Sleep(2 * time.Millisecond)
					}
				})
			}
		}
		s.add(tl, func(t *testing.T) {
			t.Logf("%-22s %d granted, %d refused, %d failed (limit %d)", a.name, granted.Load(), refused.Load(), failed.Load(), limiterLimit)
			if g := granted.Load(); g != limiterLimit || refused.Load() == 0 {
				t.Errorf("%s: %d granted, %d refused, want exactly %d granted and some refused", a.name, g, refused.Load(), limiterLimit)
			}
		})
	}
}

// addLatches: per client, generations of a latch of count 3: two waiters
// (on other clients, through Attach) wait while this client counts down.
func (s *scenario) addLatches(t *testing.T) {
	tl := newTally("latch")
	var gens, wakes atomic.Int64
	all := make([]*latch.Latches, len(s.clients))
	for i, cl := range s.clients {
		ls, err := latch.New(cl, latch.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ls.Close() })
		all[i] = ls
	}
	for id := range s.clients {
		key := fmt.Sprintf("%slatch%d", tag, id)
		s.spawn(tl, func() {
			ctx, cancel := opCtx()
			defer cancel()
			l, err := all[id].Reset(ctx, key, 3)
			tl.note(err)
			if err != nil {
				return
			}
			var wg sync.WaitGroup
			for w := 1; w <= 2; w++ {
				other, err := all[(id+w)%len(all)].Attach(key, l.Generation())
				if err != nil {
					tl.note(err)
					continue
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					ok, err := other.Wait(ctx)
					tl.note(err)
					if err == nil && !ok {
						tl.fail("a waiter of a completed generation returned false")
					}
					if ok {
						wakes.Add(1)
					}
				}()
			}
			for want := int64(2); want >= 0; {
				n, err := l.CountDown(ctx)
				tl.note(err)
				switch {
				case errors.Is(err, primitives.ErrUnavailable):
					continue // refused, nothing ran: count down again
				case err != nil:
					cancel() // the waiters cannot complete
				case n != want:
					tl.fail("count-down returned %d, want %d", n, want)
				}
				if err != nil {
					break
				}
				want--
			}
			wg.Wait()
			gens.Add(1)
		})
	}
	s.add(tl, func(t *testing.T) {
		t.Logf("%-22s %d generations, %d waiters woken", "latch", gens.Load(), wakes.Load())
		if gens.Load() < 50 {
			t.Errorf("latch: only %d generations", gens.Load())
		}
	})
}

func (s *scenario) addRWLock(t *testing.T) {
	tl := newTally("rwlock")
	h := faulttest.NewHistory()
	const key = tag + "rw"
	for id, cl := range s.clients {
		l, err := rwlock.New(cl, rwlock.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		for g := range 2 {
			client := 2*id + g
			mode := faulttest.RWRead
			if g == 1 {
				mode = faulttest.RWWrite
			}
			s.spawn(tl, func() {
				p := h.Begin(client, faulttest.RWInput{Kind: faulttest.Acquire, Mode: mode})
				ctx, cancel := opCtx()
				var le *rwlock.Lease
				var err error
				if mode == faulttest.RWWrite {
					le, err = l.TryAcquireWrite(ctx, key, lockTTL)
				} else {
					le, err = l.TryAcquireRead(ctx, key, lockTTL)
				}
				cancel()
				tl.note(err)
				switch {
				case err == nil:
					p.SetInput(faulttest.RWInput{Kind: faulttest.Acquire, Mode: mode, Token: le.Token()})
					p.Return(faulttest.RWOutput{Result: faulttest.Granted, Token: le.Token()})
					time.Sleep(time.Millisecond)
					rp := h.Begin(client, faulttest.RWInput{Kind: faulttest.Release, Mode: mode, Token: le.Token()})
					ctx, cancel := opCtx()
					r, err := le.Release(ctx)
					cancel()
					if err != nil {
						tl.fail("release: %v", err)
						rp.Unknown(faulttest.RWOutput{Result: faulttest.Unknown}, err)
						return
					}
					rp.Return(faulttest.RWOutput{Result: releaseResults[r]})
				case errors.Is(err, primitives.ErrNotAcquired):
					p.Return(faulttest.RWOutput{Result: faulttest.NotGranted})
					time.Sleep(time.Millisecond)
				case errors.Is(err, primitives.ErrUnavailable):
				default:
					p.Unknown(faulttest.RWOutput{Result: faulttest.Unknown}, err)
				}
			})
		}
	}
	s.add(tl, func(t *testing.T) {
		ops := h.Ops()
		start := time.Now()
		res, err := faulttest.RWModel{TTL: lockTTL}.Check(ops, 60*time.Second)
		overlaps := faulttest.RWDefiniteOverlaps(ops)
		t.Logf("%-22s %d ops, porcupine %v in %v, %d definite overlaps", "rwlock", len(ops), res, time.Since(start).Round(time.Millisecond), len(overlaps))
		if err != nil || res != porcupine.Ok || len(overlaps) > 0 {
			t.Errorf("rwlock: history check %v (%v), overlaps %v", res, err, overlaps)
		}
	})
}

// TestClusterUnderChange runs locks (plain, fenced, caller-fenced, FIFO),
// a semaphore, three rate limiters, latches and a read-write lock on a
// 3-master cluster with a replica each while the keys' slot migrates
// (paused midway) and masters fail over; see the package documentation
// for what is checked.
func TestClusterUnderChange(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3, redistest.WithReplicas(1))
	s := newScenario(t, c, 3)
	for _, v := range lockVariants {
		s.addLock(t, v)
	}
	s.addSemaphore(t)
	s.addRateLimits(t)
	s.addLatches(t)
	s.addRWLock(t)
	s.run(t)
}

// TestLeasesUnderChange runs hash-field leases (two fields of one hash,
// each a lock of its own) on a Redis 8 cluster through the same churn.
func TestLeasesUnderChange(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3, redistest.WithReplicas(1), redistest.WithKind(redistest.Redis80))
	s := newScenario(t, c, 3)
	for _, field := range []string{"a", "b"} {
		tl := newTally("lease " + field)
		h := faulttest.NewHistory()
		for id, cl := range s.clients {
			ls, err := lease.New(cl, lease.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ls.Close() })
			for g := range 2 {
				client := 2*id + g
				s.spawn(tl, func() {
					leaseOp(h, tl, client, func(ctx context.Context) (grant, error) {
						le, err := ls.TryAcquire(ctx, tag+"leases", field, lockTTL)
						if err != nil {
							return grant{}, err
						}
						return grant{token: le.Token(), release: le.Release}, nil
					})
				})
			}
		}
		s.add(tl, func(t *testing.T) {
			checkLeaseHistory(t, "lease "+field, h.Ops(), faulttest.LeaseModel{TTL: lockTTL})
		})
	}
	s.run(t)
}
