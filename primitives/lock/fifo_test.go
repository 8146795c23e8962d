package lock_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/lock"
)

// Waiters from two "processes" (two clients, two Lockers) get the lock in
// the order they arrived.
func TestFIFOOrderAcrossLockers(t *testing.T) {
	for _, f := range fleets() {
		t.Run(f.name, func(t *testing.T) {
			c1, _ := f.client(t)
			ctx := xtest.Ctx(t, 30*time.Second)
			a := newLocker(t, c1, lock.Options{FIFO: true, Fencing: true})
			b := newLocker(t, c1, lock.Options{FIFO: true, Fencing: true})
			holder, err := a.TryAcquire(ctx, "{q}", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			const n = 6
			var mu sync.Mutex
			var order []int
			var wg sync.WaitGroup
			for i := range n {
				lk := a
				if i%2 == 1 {
					lk = b
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					w, err := lk.Acquire(ctx, "{q}", time.Minute)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					order = append(order, i)
					mu.Unlock()
					time.Sleep(5 * time.Millisecond)
					w.Release(ctx)
				}()
				time.Sleep(40 * time.Millisecond) // arrive one after another
			}
			holder.Release(ctx)
			wg.Wait()
			want := fmt.Sprint([]int{0, 1, 2, 3, 4, 5})
			if got := fmt.Sprint(order); got != want {
				t.Fatalf("grant order %s, want %s", got, want)
			}
		})
	}
}

// A waiter that crashed (its queue entry is never refreshed) holds up the
// queue only until its entry expires; TryAcquire never barges past a live
// waiter and leaves no entry behind.
func TestFIFOStaleWaiterAndNoBarging(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client(t)
	ctx := xtest.Ctx(t, 20*time.Second)
	l := newLocker(t, c, lock.Options{FIFO: true})
	queue, deadlines := lock.ReservedPrefix+"queue:{k}", lock.ReservedPrefix+"queue-deadlines:{k}"
	at := func(d time.Duration) string {
		now, _ := s.Cmd(t, "TIME")
		var sec, usec int64
		fmt.Sscan(now, &sec, &usec)
		return fmt.Sprint(sec*1000 + usec/1000 + d.Milliseconds())
	}
	s.MustCmd(t, "ZADD", queue, "1", "ghost")
	s.MustCmd(t, "ZADD", deadlines, at(time.Hour), "ghost")
	if _, err := l.TryAcquire(ctx, "k", time.Second); !errors.Is(err, primitives.ErrNotAcquired) {
		t.Fatalf("TryAcquire barged past a queued waiter: %v", err)
	}
	if got := s.MustCmd(t, "ZCARD", queue); got != "1" {
		t.Fatalf("TryAcquire left a queue entry: ZCARD %s", got)
	}
	s.MustCmd(t, "ZADD", deadlines, at(300*time.Millisecond), "ghost")
	start := time.Now()
	w, err := l.Acquire(ctx, "k", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("acquired %v after a ghost waiter with 300ms left", time.Since(start))
	w.Release(ctx)
	// A cancelled waiter leaves the queue.
	h, err := l.TryAcquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := ctxWithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := l.Acquire(short, "k", time.Second); err == nil {
		t.Fatal("acquired a held lock")
	}
	if got := s.MustCmd(t, "ZCARD", queue); got != "0" {
		t.Fatalf("cancelled waiter left %s queue entries", got)
	}
	h.Release(ctx)
}
