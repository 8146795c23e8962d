package wait_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/policies"
	"github.com/coordhost/coordhost/primitives/internal/wait"
	"github.com/redis/rueidis"
)

func TestMain(m *testing.M) { xtest.Main(m) }

// getAttempt "acquires" when the key is absent; it reads the key on the
// connection it is given, which registers tracking in ModeTrack.
func getAttempt(key string, calls *atomic.Int64) wait.Attempt {
	return func(ctx context.Context, c wait.Conn) (wait.Outcome, error) {
		calls.Add(1)
		err := c.Do(ctx, c.B().Get().Key(key).Build()).Error()
		if rueidis.IsRedisNil(err) {
			return wait.Outcome{Acquired: true}, nil
		}
		if err != nil {
			return wait.Outcome{}, &wait.Retryable{Err: err}
		}
		return wait.Outcome{HolderTTL: -1}, nil
	}
}

// Many local waiters on one key: only the head attempts, so an unrelated
// wake costs one attempt, not one per waiter.
func TestOnlyHeadAttempts(t *testing.T) {
	for _, mode := range []wait.Mode{wait.ModeTrack, wait.ModeChannel} {
		t.Run(mode.String(), func(t *testing.T) {
			s := redistest.Start(t)
			c := s.Client(t)
			e := wait.New(c, wait.Options{Mode: mode})
			defer e.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s.MustCmd(t, "SET", "k", "held")
			var calls, finished atomic.Int64 // attempts started, ended
			get := getAttempt("k", &calls)
			attempt := func(ctx context.Context, c wait.Conn) (wait.Outcome, error) {
				defer finished.Add(1)
				return get(ctx, c)
			}
			var wg sync.WaitGroup
			const waiters = 20
			for range waiters {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := e.Wait(ctx, wait.Request{Key: "k", Channel: "ch:k", Start: time.Now(), HolderTTL: -1}, attempt); err != nil {
						t.Error(err)
					}
				}()
			}
			// Every waiter queued, and the head's registration (its
			// attempt right after subscribing or tracking) done, so the
			// touch below wakes it. Then, for a while, nobody else
			// attempts.
			xtest.Eventually(t, 5*time.Second, "every waiter queued and the head's first attempt done", func() bool {
				return wait.QueueLen(e, "k") == waiters && finished.Load() >= 1
			})
			time.Sleep(100 * time.Millisecond)
			if n := calls.Load(); n != 1 {
				t.Fatalf("%d attempts before any wake, want 1 (the head's registration)", n)
			}
			// Touch the key without freeing it: one wake, one attempt.
			s.MustCmd(t, "SET", "k", "still-held")
			s.MustCmd(t, "PUBLISH", "ch:k", "")
			xtest.Eventually(t, 5*time.Second, "the head's attempt after the wake", func() bool { return finished.Load() >= 2 })
			time.Sleep(100 * time.Millisecond)
			if n := calls.Load(); n != 2 {
				t.Fatalf("%d attempts after one wake, want 2", n)
			}
			s.MustCmd(t, "DEL", "k")
			s.MustCmd(t, "PUBLISH", "ch:k", "")
			wg.Wait()
			if n := calls.Load(); n > 2+waiters {
				t.Fatalf("%d attempts for %d waiters", n, waiters)
			}
			if got := e.Mode(); got != mode {
				t.Fatalf("engine mode %v, want %v", got, mode)
			}
		})
	}
}

func TestWaitEndsOnContextAndClose(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client(t)
	e := wait.New(c, wait.Options{})
	s.MustCmd(t, "SET", "k", "held")
	var calls atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := e.Wait(ctx, wait.Request{Key: "k", Start: time.Now(), HolderTTL: -1}, getAttempt("k", &calls)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v", err)
	}
	done := make(chan error, 2)
	for range 2 {
		go func() {
			done <- e.Wait(context.Background(), wait.Request{Key: "k", Start: time.Now(), HolderTTL: -1}, getAttempt("k", &calls))
		}()
	}
	time.Sleep(100 * time.Millisecond)
	e.Close()
	e.Close()
	for range 2 {
		if err := <-done; !errors.Is(err, wait.ErrClosed) {
			t.Fatalf("after Close: %v", err)
		}
	}
	if err := e.Wait(context.Background(), wait.Request{Key: "k"}, getAttempt("k", &calls)); !errors.Is(err, wait.ErrClosed) {
		t.Fatalf("Wait on a closed engine: %v", err)
	}
}

// A RetryAfter decision ends on Close, and a zero delay cannot spin.
func TestRetryAfterHonoursCloseAndFloor(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client(t)
	e := wait.New(c, wait.Options{})
	s.MustCmd(t, "SET", "k", "held")
	var calls atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- e.Wait(ctx, wait.Request{Key: "k", Start: time.Now(), HolderTTL: -1,
			Policy: policies.RetryFunc(func(context.Context, policies.RetryRequest) policies.RetryDecision {
				return policies.RetryDecision{Action: policies.RetryAfter}
			})}, getAttempt("k", &calls))
	}()
	time.Sleep(200 * time.Millisecond)
	e.Close()
	select {
	case err := <-done:
		if !errors.Is(err, wait.ErrClosed) {
			t.Fatalf("after Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a RetryAfter waiter ignored Close")
	}
	if n := calls.Load(); n > 60 {
		t.Fatalf("%d attempts in 200ms with RetryAfter 0: the floor did not hold", n)
	}
	t.Logf("%d attempts in 200ms", calls.Load())
}
