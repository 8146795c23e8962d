package semaphore_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/semaphore"
)

// recorder is an Observer that writes each report as a line.
type recorder struct {
	mu  sync.Mutex
	got []string
}

func (r *recorder) add(f string, a ...any) {
	r.mu.Lock()
	r.got = append(r.got, fmt.Sprintf(f, a...))
	r.mu.Unlock()
}

func (r *recorder) ObserveAcquire(key string, o semaphore.AcquireOutcome, _ time.Duration, _ error) {
	r.add("acquire %s %s", key, o)
}
func (r *recorder) ObserveRenew(p *semaphore.Permit, o semaphore.RenewOutcome, _ error) {
	r.add("renew %s %s", p.Key(), o)
}
func (r *recorder) ObserveRelease(p *semaphore.Permit, res primitives.ReleaseResult, _ time.Duration, err error) {
	r.add("release %s %v %v", p.Key(), res, err != nil)
}
func (r *recorder) ObserveLost(p *semaphore.Permit, reason semaphore.LostReason) {
	r.add("lost %s %s", p.Key(), reason)
}

// The Observer hears every acquisition sent (not bad input) and the
// renewals, releases and losses of the permits granted.
func TestObserver(t *testing.T) {
	srv := redistest.Start(t)
	ctx := xtest.Ctx(t, 20*time.Second)
	rec := &recorder{}
	s := newSems(t, srv.Client(t), semaphore.Options{Prefix: "o:", Observer: rec})
	p, err := s.TryAcquire(ctx, "k", 1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.TryAcquire(ctx, "k", 1, time.Minute); !errors.Is(err, primitives.ErrNotAcquired) {
		t.Fatal(err)
	}
	if _, err := s.TryAcquire(ctx, "k", 0, time.Minute); err == nil {
		t.Fatal("capacity 0 accepted")
	}
	if _, err := s.TryAcquire(ctx, "k", 2, time.Minute); !errors.Is(err, semaphore.ErrCapacityMismatch) {
		t.Fatal(err)
	}
	if ok, err := p.Renew(ctx, time.Minute); !ok || err != nil {
		t.Fatal(ok, err)
	}
	p.Release(ctx)
	q, err := s.TryAcquire(ctx, "w", 1, semaphore.NoExpiry)
	if err != nil {
		t.Fatal(err)
	}
	srv.MustCmd(t, "DEL", "o:w")
	if ok, _ := q.Verify(ctx); ok {
		t.Fatal("verify after DEL")
	}
	want := []string{
		"acquire o:k acquired", "acquire o:k not_acquired", "acquire o:k error",
		"renew o:k renewed", "release o:k Released false",
		"acquire o:w acquired", "lost o:w verify",
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if fmt.Sprint(rec.got) != fmt.Sprint(want) {
		t.Fatalf("reports\n%q\nwant\n%q", rec.got, want)
	}
}
