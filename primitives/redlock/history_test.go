package redlock_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/faulttest"
	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/redlock"
	"github.com/redis/rueidis"
)

// historyRun is one fault run: workers, each a Group of its own (its own
// clients, as separate processes would have) on the same nodes, every
// node behind its own faulttest proxy, contend for one key.
type historyRun struct {
	nodes    int
	workers  int
	duration time.Duration
	chaos    bool
	quorum   int // 0: a majority; else a broken Group (SetQuorum)
	minOps   int64
}

// run records every worker's holds: from the return of a grant to the
// earliest of its release call, the end of its validity (Remaining read
// after each success), and the moment a failed renewal's cleanup was let
// go (EndedAt; the handle had failed closed before).
func (hr historyRun) run(t *testing.T) *faulttest.Holds {
	t.Helper()
	var servers []*redistest.Server
	var proxies []*faulttest.Proxy
	kinds := redistest.Kinds()
	for i := range hr.nodes {
		servers = append(servers, redistest.Start(t, redistest.WithKind(kinds[i%len(kinds)])))
		proxies = append(proxies, faulttest.New(t))
	}
	aged(t, servers...)
	const ttl = 150 * time.Millisecond
	opts := redlock.Options{NodeTimeout: 30 * time.Millisecond, MaxTTL: guardMaxTTL}
	groups := make([]*redlock.Group, hr.workers)
	for w := range groups {
		clients := make([]rueidis.Client, hr.nodes)
		for i, s := range servers {
			clients[i] = s.Client(t, proxies[i].Option())
		}
		groups[w] = newGuardedGroup(t, clients, opts)
		if hr.quorum > 0 {
			redlock.SetQuorum(groups[w], hr.quorum)
		}
	}
	ctx := xtest.Ctx(t, hr.duration+30*time.Second)
	holds := faulttest.NewHolds()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	if hr.chaos {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rep := faulttest.Chaos{Seed: faulttest.Seed(t), Duration: hr.duration, MaxLatency: 20 * time.Millisecond}.Run(ctx, proxies...)
			t.Logf("chaos: %v", rep)
		}()
	}
	for w, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for {
				select {
				case <-stop:
					return
				default:
				}
				holds.Op()
				var l *redlock.Lock
				var err error
				if r.IntN(16) == 0 {
					actx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
					l, err = g.Acquire(actx, "k", ttl)
					cancel()
				} else {
					l, err = g.TryAcquire(ctx, "k", ttl)
				}
				if err != nil {
					time.Sleep(time.Duration(r.IntN(2000)) * time.Microsecond)
					continue
				}
				h := faulttest.Hold{Client: w, Token: l.Token(), From: holds.Now()}
				deadline := holds.Now() + l.Remaining()
				end := time.Duration(-1)
				for range r.IntN(3) {
					time.Sleep(time.Duration(r.IntN(5000)) * time.Microsecond)
					holds.Op()
					ok, _ := l.Renew(ctx, ttl)
					if !ok {
						end = deadline
						if e := redlock.EndedAt(l); !e.IsZero() {
							end = min(end, holds.Since(e))
						}
						break
					}
					h.Renewals++
					deadline = holds.Now() + l.Remaining()
				}
				if end < 0 {
					time.Sleep(time.Duration(r.IntN(3000)) * time.Microsecond)
					end = min(deadline, holds.Now())
				}
				holds.Op()
				l.Release(ctx)
				h.To = end
				holds.Add(h)
			}
		}()
	}
	// At least the chaos' duration, and until enough happened (a loaded
	// machine runs fewer operations per second), at most three times it.
	for start := time.Now(); time.Since(start) < hr.duration || holds.Ops() < hr.minOps && time.Since(start) < 3*hr.duration; {
		time.Sleep(50 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	return holds
}

// Mutual exclusion under faults: 3 nodes, each behind its own proxy
// driven by a seeded Chaos schedule (latency, resets, blackholes, lost
// replies), 6 workers with Groups of their own taking, renewing and
// releasing one key: no two holds overlap. The broken control, a Group
// that takes a single node's grant for a quorum, is flagged by the same
// check.
func TestHistoryUnderFaults(t *testing.T) {
	t.Run("majority", func(t *testing.T) {
		holds := historyRun{nodes: 3, workers: 6, duration: 5 * time.Second, chaos: true, minOps: 4000}.run(t)
		all := holds.All()
		renewed := 0
		for _, h := range all {
			renewed += h.Renewals
		}
		t.Logf("%d operations, %d grants (%d renewals)", holds.Ops(), len(all), renewed)
		if holds.Ops() < 3000 || len(all) < 100 {
			t.Fatalf("too little happened: %d operations, %d grants", holds.Ops(), len(all))
		}
		if o := faulttest.Overlaps(all); len(o) > 0 {
			for _, x := range o[:min(len(o), 10)] {
				t.Error(x)
			}
			t.Fatalf("%d overlapping holds", len(o))
		}
	})
	t.Run("broken control", func(t *testing.T) {
		holds := historyRun{nodes: 3, workers: 6, duration: 2 * time.Second, quorum: 1}.run(t)
		o := faulttest.Overlaps(holds.All())
		t.Logf("%d operations, %d grants, %d overlaps flagged", holds.Ops(), len(holds.All()), len(o))
		if len(o) == 0 {
			t.Fatal("the checker flagged no overlap in a Group whose quorum is one node")
		}
		t.Logf("e.g. %v", o[0])
	})
}

// Many waiters on one key, each holding briefly: every one gets its turn
// (the jitter after a wake keeps contenders from splitting the nodes'
// votes for ever) and no two holds overlap.
func TestContendersTakeTurns(t *testing.T) {
	f := startFleet(t, 3)
	// Each worker its own Group on its own clients: separate processes.
	groups := make([]*redlock.Group, 8)
	for w := range groups {
		groups[w] = newGroup(t, f.newClients(t), redlock.Options{})
	}
	ctx := xtest.Ctx(t, 30*time.Second)
	holds := faulttest.NewHolds()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w, mine := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				holds.Op()
				l, err := mine.Acquire(ctx, "k", time.Second)
				if err != nil {
					errs <- err
					return
				}
				h := faulttest.Hold{Client: w, Token: l.Token(), From: holds.Now()}
				time.Sleep(2 * time.Millisecond)
				h.To = holds.Now()
				if r, err := l.Release(ctx); r != primitives.Released || err != nil {
					errs <- fmt.Errorf("release: %v, %w", r, err)
					return
				}
				holds.Add(h)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := len(holds.All()); n != 40 {
		t.Fatalf("%d grants, want 40", n)
	}
	if o := faulttest.Overlaps(holds.All()); len(o) > 0 {
		t.Fatalf("overlap: %v", o[0])
	}
}
