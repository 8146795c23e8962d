package handle

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestEstimateRunsOut(t *testing.T) {
	s := New(time.Now(), 30*time.Millisecond)
	if closed(s.Done()) || s.Remaining() <= 0 || !s.CanRenew(time.Now()) {
		t.Fatal("fresh handle should be live")
	}
	select {
	case <-s.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("Done did not close after the estimate ran out")
	}
	if s.CanRenew(time.Now()) || s.Remaining() != 0 {
		t.Fatal("expired handle must refuse renewals")
	}
}

func TestAcquiredTooLate(t *testing.T) {
	s := New(time.Now().Add(-time.Second), 500*time.Millisecond)
	if !closed(s.Done()) || s.CanRenew(time.Now()) {
		t.Fatal("a handle whose estimate ran out before the reply must start closed")
	}
}

func TestRenewMovesDeadline(t *testing.T) {
	s := New(time.Now(), 40*time.Millisecond)
	s.Renewed(time.Now(), time.Hour)
	time.Sleep(80 * time.Millisecond)
	if closed(s.Done()) {
		t.Fatal("renewed handle closed at the old deadline")
	}
	if s.Remaining() < 59*time.Minute {
		t.Fatalf("remaining %v", s.Remaining())
	}
}

func TestLostAndReleasedAreFinal(t *testing.T) {
	s := New(time.Now(), time.Hour)
	s.Lost()
	if !closed(s.Done()) || s.CanRenew(time.Now()) || s.Remaining() != 0 {
		t.Fatal("lost handle must be closed and refuse renewals")
	}
	s.Renewed(time.Now(), time.Hour) // an in-flight renewal accepted late
	if !closed(s.Done()) || s.CanRenew(time.Now()) {
		t.Fatal("closing must stay final")
	}
	r := New(time.Now(), time.Hour)
	r.Released()
	r.Released()
	if !closed(r.Done()) || !r.IsReleased() {
		t.Fatal("released handle must be closed")
	}
}

// Renewals answered out of order: the later-sent one decides.
func TestRenewalsAppliedInSendOrder(t *testing.T) {
	s := New(time.Now(), time.Minute)
	early, late := time.Now(), time.Now().Add(time.Millisecond)
	s.Renewed(late, time.Second)
	s.Renewed(early, time.Hour) // sent first, answered last
	if r := s.Remaining(); r > 2*time.Second {
		t.Fatalf("remaining %v: the older renewal's TTL won", r)
	}
}

// Concurrent renewals run one at a time, so the estimate follows the
// renewal the server applied last.
func TestConcurrentRenewalsSerialised(t *testing.T) {
	s := New(time.Now(), time.Minute)
	var inFlight, most atomic.Int32
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ttl := time.Duration(i+1) * time.Minute
			s.Renew(context.Background(), ttl, func(context.Context) (int64, error) {
				n := inFlight.Add(1)
				for {
					m := most.Load()
					if n <= m || most.CompareAndSwap(m, n) {
						break
					}
				}
				time.Sleep(time.Millisecond)
				inFlight.Add(-1)
				return 1, nil
			})
		}()
	}
	wg.Wait()
	if m := most.Load(); m != 1 {
		t.Fatalf("%d renewals were on the wire at once", m)
	}
	// A renewal waiting its turn gives up with its context.
	s2 := New(time.Now(), time.Minute)
	release := make(chan struct{})
	go s2.Renew(context.Background(), time.Minute, func(context.Context) (int64, error) { <-release; return 1, nil })
	time.Sleep(20 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	sent := false
	if ok, err := s2.Renew(ctx, time.Minute, func(context.Context) (int64, error) { sent = true; return 1, nil }); ok || err == nil || sent {
		t.Fatalf("waiting renewal: %v, %v, sent %v", ok, err, sent)
	}
	close(release)
}

func TestUnknownEstimate(t *testing.T) {
	var s State
	s.InitUnknown(nil)
	done := s.Done() // made before any estimate: no timer yet
	if closed(done) || s.Remaining() != 0 || !s.CanRenew(time.Now()) {
		t.Fatal("a resumed handle must be open, with no estimate, and renewable")
	}
	s.Renewed(time.Now(), 40*time.Millisecond)
	if r := s.Remaining(); r <= 0 || r > 40*time.Millisecond {
		t.Fatalf("remaining after the first renewal: %v", r)
	}
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("Done made while unknown did not close when the first renewal's estimate ran out")
	}
	if s.CanRenew(time.Now()) {
		t.Fatal("expired handle must refuse renewals")
	}

	var r State
	r.InitUnknown(nil)
	r.Released()
	if !closed(r.Done()) || r.CanRenew(time.Now()) {
		t.Fatal("a released resumed handle must be closed")
	}
}
