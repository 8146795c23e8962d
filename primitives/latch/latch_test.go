package latch_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives/latch"
	"github.com/redis/rueidis"
)

// fleet is one server setup a behaviour test runs against.
type fleet struct {
	name string
	// start starts the servers and returns a factory of clients (each a
	// separate "process") and a command runner.
	start func(t *testing.T) (newClient func(opts ...func(*rueidis.ClientOption)) rueidis.Client, cmd func(args ...string) string)
}

func standalone(k redistest.Kind) fleet {
	return fleet{name: k.String(), start: func(t *testing.T) (func(...func(*rueidis.ClientOption)) rueidis.Client, func(...string) string) {
		s := redistest.Start(t, redistest.WithKind(k))
		return func(o ...func(*rueidis.ClientOption)) rueidis.Client { return s.Client(t, o...) },
			func(args ...string) string { return s.MustCmd(t, args...) }
	}}
}

func cluster() fleet {
	return fleet{name: "cluster", start: func(t *testing.T) (func(...func(*rueidis.ClientOption)) rueidis.Client, func(...string) string) {
		c := redistest.StartCluster(t, 3)
		admin := c.Client(t)
		return func(o ...func(*rueidis.ClientOption)) rueidis.Client { return c.Client(t, o...) },
			func(args ...string) string {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				v, err := admin.Do(ctx, admin.B().Arbitrary(args...).Build()).ToAny()
				if err != nil && !rueidis.IsRedisNil(err) {
					t.Fatalf("%v: %v", args, err)
				}
				return fmt.Sprint(v)
			}
	}}
}

// fleets is every server kind standalone (Redis 7.0, 8.0, 8.6, Valkey 8.1)
// and a 3-master Redis 7.0 cluster.
func fleets() []fleet {
	var fs []fleet
	for _, k := range redistest.Kinds() {
		fs = append(fs, standalone(k))
	}
	return append(fs, cluster())
}

func newLatches(t *testing.T, c rueidis.Client, o latch.Options) *latch.Latches {
	t.Helper()
	ls, err := latch.New(c, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ls.Close() })
	return ls
}

// waitAsync runs l.Wait in the background; the channel gets its result.
type waitResult struct {
	ok  bool
	err error
}

func waitAsync(ctx context.Context, l *latch.Latch) <-chan waitResult {
	ch := make(chan waitResult, 1)
	go func() {
		ok, err := l.Wait(ctx)
		ch <- waitResult{ok, err}
	}()
	return ch
}

// mustReturn waits for a waiter's result.
func mustReturn(t *testing.T, ch <-chan waitResult, want bool, within time.Duration) {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil || r.ok != want {
			t.Fatalf("Wait = %v, %v; want %v", r.ok, r.err, want)
		}
	case <-time.After(within):
		t.Fatalf("Wait did not return within %v", within)
	}
}

// mustWait checks that a waiter is still waiting.
func mustWait(t *testing.T, ch <-chan waitResult) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("Wait returned %v, %v early", r.ok, r.err)
	case <-time.After(30 * time.Millisecond):
	}
}

func TestLatchLifecycle(t *testing.T) {
	for _, f := range fleets() {
		t.Run(f.name, func(t *testing.T) {
			newClient, cmd := f.start(t)
			ctx := xtest.Ctx(t, 20*time.Second)
			coord := newLatches(t, newClient(), latch.Options{Prefix: "app:"})
			worker := newLatches(t, newClient(), latch.Options{Prefix: "app:"})

			l, err := coord.Create(ctx, "batch", 3)
			if err != nil {
				t.Fatal(err)
			}
			if l.Key() != "app:batch" || l.Generation() == "" {
				t.Fatalf("key %q generation %q", l.Key(), l.Generation())
			}
			if got := cmd("HGET", "app:batch", "gen"); got != l.Generation() {
				t.Fatalf("hash gen %q", got)
			}
			if pttl, _ := strconv.ParseInt(cmd("PTTL", "app:batch"), 10, 64); pttl < latch.DefaultTTL.Milliseconds()-60_000 {
				t.Fatalf("PTTL %d, want about DefaultTTL", pttl)
			}
			_, err = coord.Create(ctx, "batch", 5)
			if !errors.Is(err, latch.ErrExists) {
				t.Fatalf("second Create: %v", err)
			}
			if got := cmd("HGET", "app:batch", "count"); got != "3" {
				t.Fatalf("count %s after a refused Create", got)
			}

			// Waiters in two processes, registered before the count-downs.
			w1, w2 := waitAsync(ctx, l), waitAsync(ctx, l)
			j, err := worker.Join(ctx, "batch")
			if err != nil || j.Generation() != l.Generation() {
				t.Fatalf("Join: %v, %v", j, err)
			}
			w3 := waitAsync(ctx, j)
			for want := int64(2); want >= 1; want-- {
				if n, err := j.CountDown(ctx); n != want || err != nil {
					t.Fatalf("CountDown = %d, %v; want %d", n, err, want)
				}
				mustWait(t, w1)
				if n, err := l.Count(ctx); n != want || err != nil {
					t.Fatalf("Count = %d, %v", n, err)
				}
			}
			if n, err := l.CountDown(ctx); n != 0 || err != nil {
				t.Fatalf("last CountDown = %d, %v", n, err)
			}
			for _, w := range []<-chan waitResult{w1, w2, w3} {
				mustReturn(t, w, true, 5*time.Second)
			}
			// No underflow.
			if _, err := j.CountDown(ctx); !errors.Is(err, latch.ErrCompleted) {
				t.Fatalf("CountDown on a completed generation: %v", err)
			}
			if got := cmd("HGET", "app:batch", "count"); got != "0" {
				t.Fatalf("count %s after a refused CountDown", got)
			}
			// A completed latch stays readable: late Join and Wait.
			late, err := worker.Join(ctx, "batch")
			if err != nil || late.Generation() != l.Generation() {
				t.Fatalf("late Join: %v", err)
			}
			if ok, err := late.Wait(ctx); !ok || err != nil {
				t.Fatalf("late Wait = %v, %v", ok, err)
			}
			if _, err := coord.Create(ctx, "batch", 1); !errors.Is(err, latch.ErrExists) {
				t.Fatalf("Create over a completed latch: %v", err)
			}
			// Delete: only the current generation's handle deletes.
			if ok, err := l.Delete(ctx); !ok || err != nil {
				t.Fatalf("Delete = %v, %v", ok, err)
			}
			if ok, err := l.Delete(ctx); ok || err != nil {
				t.Fatalf("second Delete = %v, %v", ok, err)
			}
			if _, err := worker.Join(ctx, "batch"); !errors.Is(err, latch.ErrNotFound) {
				t.Fatalf("Join after Delete: %v", err)
			}
			if n, err := l.CountDown(ctx); n != -1 || err != nil {
				t.Fatalf("CountDown after Delete = %d, %v", n, err)
			}
			if n := cmd("EXISTS", "app:batch"); n != "0" {
				t.Fatal("a CountDown recreated the deleted latch")
			}
		})
	}
}

// Reset makes a new generation: the old one's waiters return false, its
// count-downs -1 and its Count -1; the new one counts from scratch.
func TestGenerations(t *testing.T) {
	for _, f := range fleets() {
		t.Run(f.name, func(t *testing.T) {
			newClient, cmd := f.start(t)
			ctx := xtest.Ctx(t, 20*time.Second)
			a := newLatches(t, newClient(), latch.Options{})
			b := newLatches(t, newClient(), latch.Options{})

			g1, err := a.Create(ctx, "{job}:done", 2)
			if err != nil {
				t.Fatal(err)
			}
			g1b, err := b.Attach("{job}:done", g1.Generation())
			if err != nil {
				t.Fatal(err)
			}
			old1, old2 := waitAsync(ctx, g1), waitAsync(ctx, g1b)
			if n, _ := g1.CountDown(ctx); n != 1 {
				t.Fatalf("CountDown = %d", n)
			}
			mustWait(t, old1)
			g2, err := b.Reset(ctx, "{job}:done", 1)
			if err != nil {
				t.Fatal(err)
			}
			if g2.Generation() == g1.Generation() {
				t.Fatal("Reset kept the generation")
			}
			mustReturn(t, old1, false, 5*time.Second)
			mustReturn(t, old2, false, 5*time.Second)
			for _, h := range []*latch.Latch{g1, g1b} {
				if n, err := h.CountDown(ctx); n != -1 || err != nil {
					t.Fatalf("old CountDown = %d, %v", n, err)
				}
				if n, err := h.Count(ctx); n != -1 || err != nil {
					t.Fatalf("old Count = %d, %v", n, err)
				}
				if ok, err := h.Wait(ctx); ok || err != nil {
					t.Fatalf("old Wait = %v, %v", ok, err)
				}
			}
			if got := cmd("HGET", "{job}:done", "count"); got != "1" {
				t.Fatalf("old count-downs reached the new generation: count %s", got)
			}

			// A generation that completed and was then replaced still
			// reports completion to its late waiters.
			if n, _ := g2.CountDown(ctx); n != 0 {
				t.Fatalf("CountDown = %d", n)
			}
			g3, err := a.Reset(ctx, "{job}:done", 4)
			if err != nil {
				t.Fatal(err)
			}
			if ok, err := g2.Wait(ctx); !ok || err != nil {
				t.Fatalf("Wait of a completed, replaced generation = %v, %v", ok, err)
			}
			if n, err := g2.Count(ctx); n != 0 || err != nil {
				t.Fatalf("Count of a completed, replaced generation = %d, %v", n, err)
			}
			if n, err := g2.CountDown(ctx); n != -1 || err != nil {
				t.Fatalf("CountDown of a completed, replaced generation = %d, %v", n, err)
			}
			// Only the most recent completion is remembered.
			if _, err := a.Reset(ctx, "{job}:done", 1); err != nil {
				t.Fatal(err)
			}
			if ok, err := g2.Wait(ctx); !ok || err != nil {
				t.Fatalf("g3 never completed, so g2 is still the last completion: %v, %v", ok, err)
			}
			if ok, err := g3.Wait(ctx); ok || err != nil {
				t.Fatalf("Wait of a replaced, incomplete generation = %v, %v", ok, err)
			}
			// Reset on a missing key creates.
			g5, err := a.Reset(ctx, "{job}:other", 1)
			if err != nil {
				t.Fatal(err)
			}
			if n, err := g5.Count(ctx); n != 1 || err != nil {
				t.Fatalf("Count = %d, %v", n, err)
			}
			// Attach to a generation that never existed.
			ghost, err := a.Attach("{job}:other", "nope")
			if err != nil {
				t.Fatal(err)
			}
			if n, err := ghost.CountDown(ctx); n != -1 || err != nil {
				t.Fatalf("CountDown of an unknown generation = %d, %v", n, err)
			}
		})
	}
}

// Many concurrent count-downs: each remaining count is returned exactly
// once, exactly one caller sees 0, and the extra ones fail with
// ErrCompleted; the count never goes below zero.
func TestNoUnderflow(t *testing.T) {
	for _, f := range []fleet{standalone(redistest.Redis70), cluster()} {
		t.Run(f.name, func(t *testing.T) {
			newClient, cmd := f.start(t)
			ctx := xtest.Ctx(t, 20*time.Second)
			const n, extra, goroutines = 200, 40, 8
			var lss []*latch.Latches
			for range 4 {
				lss = append(lss, newLatches(t, newClient(), latch.Options{}))
			}
			l, err := lss[0].Create(ctx, "race", n)
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var got []int64
			completed := 0
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					h, err := lss[g%len(lss)].Attach("race", l.Generation())
					if err != nil {
						t.Error(err)
						return
					}
					for range (n + extra) / goroutines {
						left, err := h.CountDown(ctx)
						mu.Lock()
						switch {
						case errors.Is(err, latch.ErrCompleted):
							completed++
						case err != nil:
							t.Error(err)
						default:
							got = append(got, left)
						}
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			slices.Sort(got)
			if len(got) != n || got[0] != 0 || got[n-1] != n-1 || len(slices.Compact(got)) != n || completed != extra {
				t.Fatalf("%d results (%v..%v), %d ErrCompleted", len(got), got[0], got[len(got)-1], completed)
			}
			if c := cmd("HGET", "race", "count"); c != "0" {
				t.Fatalf("count %s", c)
			}
		})
	}
}
