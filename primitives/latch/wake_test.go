package latch_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/latch"
	"github.com/redis/rueidis"
)

// wakeSetup is a server setup for the wake-up tests, with the wake-up
// source its Waiters use.
type wakeSetup struct {
	name string
	f    fleet
	mode primitives.WaitMode
}

// TestWakeLatency: 100 waiters in 4 processes (clients, each with its own
// Waiter) wait on one generation and must all be woken by the last
// count-down, with client tracking (standalone), the latch channel
// (standalone, forced) and a 3-master cluster (channel). RecheckInterval
// is a minute, so a waiter that returns within wakeBound was woken by the
// notification; one that does not is a lost wake-up and fails the test.
// Latency is measured per waiter from just before the last CountDown is
// sent to the moment its Wait returns, over several rounds, and logged
// (the goal is 50 ms at p99). It is not asserted: a pause of the
// whole process (GC, -race, a loaded CI machine) delays every waiter of a
// round at once, and speed goals are checked by benchmarks in bench/,
// never by timed assertions in unit tests.
func TestWakeLatency(t *testing.T) {
	const procs, perProc, rounds = 4, 25, 6
	const wakeBound = 5 * time.Second // far below RecheckInterval
	setups := []wakeSetup{
		{name: "tracking", f: standalone(redistest.Redis70), mode: primitives.WaitAuto},
		{name: "channel", f: standalone(redistest.Redis80), mode: primitives.WaitChannel},
		{name: "cluster", f: cluster(), mode: primitives.WaitAuto},
	}
	for _, su := range setups {
		t.Run(su.name, func(t *testing.T) {
			newClient, _ := su.f.start(t)
			ctx := xtest.Ctx(t, 60*time.Second)
			var lss []*latch.Latches
			for range procs {
				c := newClient()
				w, err := primitives.NewWaiter(c, primitives.WaiterOptions{Mode: su.mode})
				if err != nil {
					t.Fatal(err)
				}
				lss = append(lss, newLatches(t, c, latch.Options{Waiter: w, RecheckInterval: time.Minute}))
				t.Cleanup(func() { w.Close() })
			}
			coord := newLatches(t, newClient(), latch.Options{})
			var all []time.Duration
			for r := range rounds {
				key := fmt.Sprintf("wake:%d", r)
				l, err := coord.Create(ctx, key, 2)
				if err != nil {
					t.Fatal(err)
				}
				var mu sync.Mutex
				var woke []time.Time
				var wg sync.WaitGroup
				// The waiters' own context, cancelled to end them when
				// some are not woken in time.
				wctx, wcancel := context.WithCancel(ctx)
				defer wcancel()
				handles := make([]*latch.Latch, procs)
				for p, ls := range lss {
					h, err := ls.Attach(key, l.Generation())
					if err != nil {
						t.Fatal(err)
					}
					handles[p] = h
					for range perProc {
						wg.Add(1)
						go func() {
							defer wg.Done()
							ok, err := h.Wait(wctx)
							at := time.Now()
							if !ok || err != nil {
								if wctx.Err() != nil { // cancelled below: reported there
									return
								}
								t.Errorf("Wait = %v, %v", ok, err)
							}
							mu.Lock()
							woke = append(woke, at)
							mu.Unlock()
						}()
					}
				}
				for p, ls := range lss {
					xtest.Eventually(t, 5*time.Second, "waiters registered", func() bool {
						return latch.LocalWaiters(ls, handles[p]) == perProc
					})
				}
				if _, err := l.CountDown(ctx); err != nil { // not the last: nobody wakes for good
					t.Fatal(err)
				}
				time.Sleep(30 * time.Millisecond) // the heads' first reads are done
				start := time.Now()
				if n, err := l.CountDown(ctx); n != 0 || err != nil {
					t.Fatalf("last CountDown = %d, %v", n, err)
				}
				done := make(chan struct{})
				go func() { wg.Wait(); close(done) }()
				select {
				case <-done:
				case <-time.After(wakeBound):
					mu.Lock()
					n := len(woke)
					mu.Unlock()
					wcancel()
					<-done
					t.Fatalf("round %d: %d of %d waiters woken %v after the last CountDown: a lost wake-up", r, n, procs*perProc, wakeBound)
				}
				if len(woke) != procs*perProc {
					t.Fatalf("%d waiters woke", len(woke))
				}
				for _, at := range woke {
					all = append(all, at.Sub(start))
				}
			}
			slices.Sort(all)
			p := func(q float64) time.Duration { return all[min(len(all)-1, int(q*float64(len(all))))] }
			t.Logf("%s: %d wake-ups (%d waiters x %d rounds): p50 %v, p90 %v, p99 %v, max %v", su.name, len(all), procs*perProc, rounds,
				p(0.50).Round(10*time.Microsecond), p(0.90).Round(10*time.Microsecond), p(0.99).Round(10*time.Microsecond), all[len(all)-1].Round(10*time.Microsecond))
		})
	}
}

// evalCalls sums EVAL and EVALSHA calls in INFO commandstats.
func evalCalls(t *testing.T, s *redistest.Server) int {
	t.Helper()
	n := 0
	for _, line := range strings.Split(s.MustCmd(t, "INFO", "commandstats"), "\n") {
		if strings.HasPrefix(line, "cmdstat_evalsha:") || strings.HasPrefix(line, "cmdstat_eval:") {
			i := strings.Index(line, "calls=")
			j := strings.IndexByte(line[i:], ',')
			k, _ := strconv.Atoi(line[i+6 : i+j])
			n += k
		}
	}
	return n
}

// Local waiters share their reads: waking 50 waiters of one process costs
// a few reads, not one per waiter.
func TestWaitersShareReads(t *testing.T) {
	for _, mode := range []primitives.WaitMode{primitives.WaitAuto, primitives.WaitChannel} {
		t.Run(fmt.Sprint("mode", mode), func(t *testing.T) {
			s := redistest.Start(t)
			ctx := xtest.Ctx(t, 20*time.Second)
			c := s.Client(t)
			w, err := primitives.NewWaiter(c, primitives.WaiterOptions{Mode: mode})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { w.Close() })
			ls := newLatches(t, c, latch.Options{Waiter: w})
			l, err := ls.Create(ctx, "shared", 3)
			if err != nil {
				t.Fatal(err)
			}
			const n = 50
			var wg sync.WaitGroup
			for range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if ok, err := l.Wait(ctx); !ok || err != nil {
						t.Errorf("Wait = %v, %v", ok, err)
					}
				}()
			}
			xtest.Eventually(t, 5*time.Second, "waiters registered", func() bool { return latch.LocalWaiters(ls, l) == n })
			time.Sleep(30 * time.Millisecond)
			s.MustCmd(t, "CONFIG", "RESETSTAT")
			for range 3 {
				if _, err := l.CountDown(ctx); err != nil {
					t.Fatal(err)
				}
			}
			wg.Wait()
			evals := evalCalls(t, s)
			t.Logf("%d script calls for 3 count-downs and %d waiters woken", evals, n)
			// 3 count-downs, plus one read per wake-up of the head (in
			// tracking mode each count-down wakes it), plus the odd extra.
			if evals > 12 {
				t.Fatalf("%d script calls: local waiters do not share reads", evals)
			}
		})
	}
}

// A notification that never comes only delays the answer: in channel mode
// a change made behind the latch's back (no PUBLISH) is found by the
// re-read every RecheckInterval; with tracking, the same change wakes the
// waiter at once by its invalidation.
func TestLostNotificationDelaysOnly(t *testing.T) {
	const recheck = 300 * time.Millisecond
	for _, tc := range []struct {
		mode    primitives.WaitMode
		notify  bool
		change  func(t *testing.T, s *redistest.Server, key string) // behind the latch's back
		want    bool
		comment string
	}{
		{primitives.WaitChannel, false, func(t *testing.T, s *redistest.Server, k string) { s.MustCmd(t, "HSET", k, "count", "0") }, true, "channel, count zeroed without PUBLISH"},
		{primitives.WaitChannel, false, func(t *testing.T, s *redistest.Server, k string) { s.MustCmd(t, "DEL", k) }, false, "channel, DEL without PUBLISH"},
		{primitives.WaitAuto, true, func(t *testing.T, s *redistest.Server, k string) { s.MustCmd(t, "HSET", k, "count", "0") }, true, "tracking, count zeroed"},
		{primitives.WaitAuto, true, func(t *testing.T, s *redistest.Server, k string) { s.MustCmd(t, "DEL", k) }, false, "tracking, DEL"},
	} {
		t.Run(tc.comment, func(t *testing.T) {
			s := redistest.Start(t)
			ctx := xtest.Ctx(t, 20*time.Second)
			c := s.Client(t)
			w, err := primitives.NewWaiter(c, primitives.WaiterOptions{Mode: tc.mode})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { w.Close() })
			ls := newLatches(t, c, latch.Options{Waiter: w, RecheckInterval: recheck})
			l, err := ls.Create(ctx, "k", 2)
			if err != nil {
				t.Fatal(err)
			}
			ch := waitAsync(ctx, l)
			xtest.Eventually(t, 5*time.Second, "waiter registered", func() bool { return latch.LocalWaiters(ls, l) == 1 })
			time.Sleep(50 * time.Millisecond) // its first read is done
			start := time.Now()
			tc.change(t, s, "k")
			mustReturn(t, ch, tc.want, 5*time.Second)
			took := time.Since(start)
			t.Logf("%s: returned %v after %v", tc.comment, tc.want, took)
			if tc.notify && took > recheck/2 {
				t.Errorf("took %v: the notification did not wake the waiter", took)
			}
			if !tc.notify && took > recheck+200*time.Millisecond {
				t.Errorf("took %v: the re-read every %v did not find the change", took, recheck)
			}
		})
	}
}

// The waiting connection dies (CLIENT KILL) while the latch completes:
// the waiter re-reads on a new connection and returns true.
func TestWaitSurvivesConnectionLoss(t *testing.T) {
	for _, mode := range []primitives.WaitMode{primitives.WaitAuto, primitives.WaitChannel} {
		t.Run(fmt.Sprint("mode", mode), func(t *testing.T) {
			s := redistest.Start(t)
			ctx := xtest.Ctx(t, 20*time.Second)
			c := s.Client(t, func(o *rueidis.ClientOption) { o.DisableRetry = true })
			w, err := primitives.NewWaiter(c, primitives.WaiterOptions{Mode: mode})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { w.Close() })
			ls := newLatches(t, c, latch.Options{Waiter: w, RecheckInterval: time.Minute})
			l, err := ls.Create(ctx, "k", 1)
			if err != nil {
				t.Fatal(err)
			}
			ch := waitAsync(ctx, l)
			mustWait(t, ch)
			if got := s.MustCmd(t, "CLIENT", "KILL", "ID", waitConnID(t, s)); got != "1" {
				t.Fatalf("CLIENT KILL: %s", got)
			}
			if _, err := l.CountDown(ctx); err != nil {
				t.Fatal(err)
			}
			mustReturn(t, ch, true, 5*time.Second)
		})
	}
}

// waitConnID finds the wait engine's connection in CLIENT LIST.
func waitConnID(t *testing.T, s *redistest.Server) string {
	t.Helper()
	id, ok := s.ClientField(t, "coordhost-wait", "id")
	if !ok {
		t.Fatal("no coordhost-wait connection")
	}
	return id
}
