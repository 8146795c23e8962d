package lock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/policies"
	"github.com/coordhost/coordhost/policies/builtin"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/lock"
	"github.com/redis/rueidis"
)

// recorder is a lock.Observer that writes every event as a line.
type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) add(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, fmt.Sprintf(format, args...))
}

// take returns the events since the last take.
func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.events
	r.events = nil
	return e
}

func (r *recorder) ObserveAcquire(key string, o lock.AcquireOutcome, wait time.Duration, err error) {
	if (o == lock.AcquireAcquired) != (err == nil) || wait < 0 {
		r.add("acquire %s %v: inconsistent err %v, wait %v", key, o, err, wait)
		return
	}
	r.add("acquire %s %v", key, o)
}

func (r *recorder) ObserveRenew(l *lock.Lock, o lock.RenewOutcome, err error) {
	if (o == lock.RenewError) != (err != nil) {
		r.add("renew %s %v: inconsistent err %v", l.Key(), o, err)
		return
	}
	r.add("renew %s %v", l.Key(), o)
}

func (r *recorder) ObserveRelease(l *lock.Lock, res primitives.ReleaseResult, held time.Duration, err error) {
	if held <= 0 || (res == 0) != (err != nil) {
		r.add("release %s %v: inconsistent err %v, held %v", l.Key(), res, err, held)
		return
	}
	if err != nil {
		r.add("release %s error", l.Key())
		return
	}
	r.add("release %s %v", l.Key(), res)
}

func (r *recorder) ObserveLost(l *lock.Lock, reason lock.LostReason) {
	r.add("lost %s %v", l.Key(), reason)
}

func expectEvents(t *testing.T, r *recorder, want ...string) {
	t.Helper()
	if got := r.take(); !slices.Equal(got, want) {
		t.Fatalf("events:\n got %q\nwant %q", got, want)
	}
}

// The Observer sees every acquisition outcome, renewal, release and loss,
// each loss once, with the reason the handle found it by.
func TestObserverSeesEachEvent(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client(t, func(o *rueidis.ClientOption) { o.DisableRetry = true })
	ctx := xtest.Ctx(t, 30*time.Second)
	rec := &recorder{}
	l := newLocker(t, c, lock.Options{Prefix: "p:", Observer: rec})

	// Acquisitions: granted, contended, gave up, deadline, cancelled.
	a, err := l.TryAcquire(ctx, "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryAcquire(ctx, "a", time.Minute); !errors.Is(err, primitives.ErrNotAcquired) {
		t.Fatal(err)
	}
	never, err := lock.New(c, lock.Options{Prefix: "p:", Observer: rec, Retry: builtin.NoRetry{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { never.Close() })
	if _, err := never.Acquire(ctx, "a", time.Minute); !errors.Is(err, primitives.ErrNotAcquired) {
		t.Fatal(err)
	}
	// (The deadline leaves ample time for the call to get past its input
	// checks, which run before anything is reported.)
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = l.Acquire(short, "a", time.Minute)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatal(err)
	}
	// The retry policy cancels the call after its first attempt.
	cctx, cancel := context.WithCancel(ctx)
	cancelling, err := lock.New(c, lock.Options{Prefix: "p:", Observer: rec, Retry: policies.RetryFunc(
		func(context.Context, policies.RetryRequest) policies.RetryDecision {
			cancel()
			return policies.RetryDecision{Action: policies.WaitForWake}
		})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancelling.Close() })
	if _, err := cancelling.Acquire(cctx, "a", time.Minute); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	expectEvents(t, rec, "acquire p:a acquired", "acquire p:a not_acquired", "acquire p:a gave_up",
		"acquire p:a deadline_exceeded", "acquire p:a cancelled")

	// Renewed; then the key is deleted from outside: the renewal is
	// refused and the loss reported once, however often it is retried.
	if ok, err := a.Renew(ctx, time.Minute); !ok || err != nil {
		t.Fatal(ok, err)
	}
	s.MustCmd(t, "DEL", "p:a")
	for range 2 {
		if ok, err := a.Renew(ctx, time.Minute); ok || err != nil {
			t.Fatal(ok, err)
		}
	}
	if r, err := a.Release(ctx); r != primitives.AlreadyReleased || err != nil {
		t.Fatal(r, err)
	}
	if r, err := a.Release(ctx); r != primitives.AlreadyReleased || err != nil {
		t.Fatal(r, err) // answered locally: not reported
	}
	expectEvents(t, rec, "renew p:a renewed", "renew p:a lost", "lost p:a renew_refused", "renew p:a lost",
		"release p:a AlreadyReleased")

	// Released normally: no loss; renewing afterwards is not a renewal.
	b, err := l.TryAcquire(ctx, "b", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := b.Release(ctx); r != primitives.Released || err != nil {
		t.Fatal(r, err)
	}
	if ok, _ := b.Renew(ctx, time.Minute); ok {
		t.Fatal("renewed a released lock")
	}
	expectEvents(t, rec, "acquire p:b acquired", "release p:b Released")

	// Verify finds another owner.
	v, err := l.TryAcquire(ctx, "v", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	s.MustCmd(t, "SET", "p:v", "someone-else")
	if ok, err := v.Verify(ctx); ok || err != nil {
		t.Fatal(ok, err)
	}
	if r, err := v.Release(ctx); r != primitives.NotOwned || err != nil {
		t.Fatal(r, err)
	}
	expectEvents(t, rec, "acquire p:v acquired", "lost p:v verify", "release p:v NotOwned")

	// Release finds another owner, or no key, while the estimate runs.
	n, err := l.TryAcquire(ctx, "n", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	s.MustCmd(t, "SET", "p:n", "someone-else")
	if r, err := n.Release(ctx); r != primitives.NotOwned || err != nil {
		t.Fatal(r, err)
	}
	d, err := l.TryAcquire(ctx, "d", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	s.MustCmd(t, "DEL", "p:d")
	if r, err := d.Release(ctx); r != primitives.AlreadyReleased || err != nil {
		t.Fatal(r, err)
	}
	expectEvents(t, rec, "acquire p:n acquired", "release p:n NotOwned", "lost p:n release_not_owned",
		"acquire p:d acquired", "release p:d AlreadyReleased", "lost p:d release_absent")

	// The estimate runs out before Release: lost as expired, whatever the
	// server answers; a Renew after the estimate ran out says the same.
	e, err := l.TryAcquire(ctx, "e", 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	<-e.Done()
	e.Release(ctx)
	f, err := l.TryAcquire(ctx, "f", 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	<-f.Done()
	if ok, err := f.Renew(ctx, time.Minute); ok || err != nil {
		t.Fatal(ok, err)
	}
	got := rec.take()
	if len(got) != 6 || got[0] != "acquire p:e acquired" || got[2] != "lost p:e expired" ||
		!slices.Equal(got[3:], []string{"acquire p:f acquired", "renew p:f lost", "lost p:f expired"}) {
		// got[1] is the server's answer: Released or AlreadyReleased.
		t.Fatalf("events %q", got)
	}
	f.Release(ctx)
	if got := rec.take(); len(got) != 1 || !strings.HasPrefix(got[0], "release p:f ") {
		t.Fatalf("after the loss, Release reported %q", got)
	}

	// A renewal with an unknown outcome loses the handle; the release that
	// settles it later is reported, with no second loss.
	u, err := l.TryAcquire(ctx, "u", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	s.MustCmd(t, "CLIENT", "PAUSE", "10000", "WRITE")
	short, cancel = context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = u.Renew(short, time.Minute)
	cancel()
	s.MustCmd(t, "CLIENT", "UNPAUSE")
	if err == nil {
		t.Fatal("renewal against a paused server succeeded")
	}
	if r, err := u.Release(ctx); r != primitives.Released || err != nil {
		t.Fatal(r, err)
	}
	expectEvents(t, rec, "acquire p:u acquired", "renew p:u error", "lost p:u renew_uncertain", "release p:u Released")

	// A release with an unknown outcome is no loss by itself, nor is the
	// answer of the release that settles it.
	w, err := l.TryAcquire(ctx, "w", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	s.MustCmd(t, "CLIENT", "PAUSE", "10000", "WRITE")
	short, cancel = context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = w.Release(short)
	cancel()
	s.MustCmd(t, "CLIENT", "UNPAUSE")
	if err == nil {
		t.Fatal("release against a paused server succeeded")
	}
	if r, err := w.Release(ctx); err != nil || r == primitives.NotOwned {
		t.Fatal(r, err)
	}
	got = rec.take()
	if len(got) != 3 || got[0] != "acquire p:w acquired" || got[1] != "release p:w error" ||
		(got[2] != "release p:w Released" && got[2] != "release p:w AlreadyReleased") {
		t.Fatalf("events %q", got)
	}

	// A waiter whose Locker closes.
	held, err := l.TryAcquire(ctx, "c", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan struct{})
	var once sync.Once
	closing, err := lock.New(c, lock.Options{Prefix: "p:", Observer: rec, Retry: policies.RetryFunc(
		func(context.Context, policies.RetryRequest) policies.RetryDecision {
			once.Do(func() { close(waiting) })
			return policies.RetryDecision{Action: policies.WaitForWake}
		})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancelling.Close() })
	done := make(chan error, 1)
	go func() { _, err := closing.Acquire(ctx, "c", time.Minute); done <- err }()
	<-waiting // the waiter made its first attempt
	closing.Close()
	if err := <-done; !errors.Is(err, primitives.ErrClosed) {
		t.Fatal(err)
	}
	held.Release(ctx)
	expectEvents(t, rec, "acquire p:c acquired", "acquire p:c closed", "release p:c Released")
}

// Two Releases of one handle racing each other report no loss: the one
// that finds the key gone was beaten by the other.
func TestObserverConcurrentReleasesAreNoLoss(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client(t)
	ctx := xtest.Ctx(t, 30*time.Second)
	rec := &recorder{}
	l := newLocker(t, c, lock.Options{Observer: rec})
	for i := range 200 {
		k, err := l.TryAcquire(ctx, "k", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				if _, err := k.Release(ctx); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		released := 0
		for _, e := range rec.take() {
			switch e {
			case "acquire k acquired", "release k AlreadyReleased":
			case "release k Released":
				released++
			default:
				t.Fatalf("round %d: event %q", i, e)
			}
		}
		if released != 1 {
			t.Fatalf("round %d: %d releases answered Released", i, released)
		}
	}
}
