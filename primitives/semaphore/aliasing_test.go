package semaphore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/primitives/semaphore"
)

// Unrelated semaphores never share a capacity key: "{" and "{{}" once did
// (found by a hostile review), and a release of one deleted the other's.
func TestUnrelatedKeysKeepTheirCapacity(t *testing.T) {
	srv := redistest.Start(t, redistest.Version(7))
	c := srv.Client(t)
	s := newSems(t, c, semaphore.Options{})
	ctx := context.Background()
	// Semaphore "{{}" has capacity 2, one permit live.
	p1, err := s.TryAcquire(ctx, "{{}", 2, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer p1.Close()
	// Unrelated semaphore "{" with capacity 1: take and release a permit.
	q, err := s.TryAcquire(ctx, "{", 1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("capacity keys: %q", srv.MustCmd(t, "KEYS", "*capacity*"))
	if _, err := q.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// "{"'s release deleted the shared capacity key: "{{}" now admits a
	// contender with capacity 100 although a permit taken with 2 is live.
	var ps []*semaphore.Permit
	for i := 0; i < 5; i++ {
		p, err := s.TryAcquire(ctx, "{{}", 100, time.Minute)
		if err != nil {
			t.Logf("acquire %d: %v", i, err)
			break
		}
		ps = append(ps, p)
	}
	if len(ps) > 0 {
		t.Errorf("capacity 2 semaphore {{} now has %d live permits (taken with capacities 2 and 100)", 1+len(ps))
	}
}

// "invoice" and "{invoice}" are two semaphores, each with its own capacity.
func TestTaggedAndPlainKeysKeepTheirCapacity(t *testing.T) {
	srv := redistest.Start(t, redistest.Version(7))
	s := newSems(t, srv.Client(t), semaphore.Options{})
	ctx := context.Background()
	p1, err := s.TryAcquire(ctx, "invoice", 1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer p1.Close()
	q, err := s.TryAcquire(ctx, "{invoice}", 4, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("keys: %q", srv.MustCmd(t, "KEYS", "*"))
	if _, err := s.TryAcquire(ctx, "invoice", 1, time.Minute); errors.Is(err, semaphore.ErrCapacityMismatch) {
		t.Errorf("semaphore invoice refuses its own capacity 1 after unrelated {invoice} took a permit: %v", err)
	}
	q.Release(ctx) // deletes the shared capacity key
	if p2, err := s.TryAcquire(ctx, "invoice", 100, time.Minute); err == nil {
		t.Errorf("semaphore invoice (capacity 1, one live permit) granted a second permit with capacity 100")
		p2.Close()
	}
}

// "a{" and "{a{}" are two semaphores, each with its own capacity.
func TestUnbalancedKeysKeepTheirCapacity(t *testing.T) {
	srv := redistest.Start(t, redistest.Version(7))
	s := newSems(t, srv.Client(t), semaphore.Options{})
	ctx := context.Background()
	p1, err := s.TryAcquire(ctx, "a{", 3, time.Minute) // unrelated semaphore "a{"
	if err != nil {
		t.Fatal(err)
	}
	defer p1.Close()
	q, err := s.TryAcquire(ctx, "{a{}", 5, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	// "a{" still has its permit, but its capacity was overwritten by "{a{}".
	_, err = s.TryAcquire(ctx, "a{", 3, time.Minute)
	if errors.Is(err, semaphore.ErrCapacityMismatch) {
		t.Errorf("semaphore \"a{\" now refuses its own capacity: %v", err)
	}
}
