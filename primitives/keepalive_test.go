package primitives_test

import (
	"context"
	"errors"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/lock"
)

// Redis 8: the examples use leases too.
func TestMain(m *testing.M) { xtest.Main(m, xtest.ExampleServer(8, &exampleAddr)) }

// exampleAddr is the server the runnable examples talk to.
var exampleAddr string

func TestKeepAlive(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := lock.New(c, lock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	const ttl = 150 * time.Millisecond
	a, err := l.TryAcquire(ctx, "ka", ttl)
	if err != nil {
		t.Fatal(err)
	}
	stop, err := primitives.KeepAlive(ctx, a, ttl)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * ttl)
	select {
	case <-a.Done():
		t.Fatal("kept-alive lock ran out")
	default:
	}
	if ok, err := a.Verify(ctx); !ok || err != nil {
		t.Fatalf("Verify: %v %v", ok, err)
	}
	if err := stop(); err != nil {
		t.Errorf("stop() = %v, want nil: nothing failed", err)
	}
	if err := stop(); err != nil { // idempotent
		t.Errorf("second stop() = %v", err)
	}
	select {
	case <-a.Done():
	case <-time.After(2 * ttl):
		t.Fatal("lock outlived its ttl after KeepAlive stopped")
	}

	// A failed renewal (the key was taken away) ends KeepAlive and closes Done.
	b, err := l.TryAcquire(ctx, "kb", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	stop, err = primitives.KeepAlive(ctx, b, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	s.MustCmd(t, "SET", "kb", "someone-else")
	select {
	case <-b.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("Done stayed open after a refused renewal")
	}
	if err := stop(); !errors.Is(err, primitives.ErrLost) {
		t.Errorf("stop() after a refused renewal = %v, want ErrLost", err)
	}
}

// Bad input fails at once, starts nothing and writes nothing.
func TestKeepAliveBadInput(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client(t)
	ctx := xtest.Ctx(t, 20*time.Second)
	l, err := lock.New(c, lock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	a, err := l.TryAcquire(ctx, "ka", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	pttl, _ := strconv.Atoi(s.MustCmd(t, "PTTL", "ka"))
	for _, tc := range []struct {
		name  string
		lease primitives.Lease
		ttl   time.Duration
		want  error
	}{
		{"zero ttl", a, 0, primitives.ErrInvalidTTL},
		{"negative ttl", a, -time.Second, primitives.ErrInvalidTTL},
		{"below 1ms", a, 500 * time.Microsecond, primitives.ErrInvalidTTL},
		{"above MaxTTL", a, lock.MaxTTL + time.Millisecond, primitives.ErrInvalidTTL},
		{"max int64", a, math.MaxInt64, primitives.ErrInvalidTTL},
		{"nil lease", nil, time.Second, primitives.ErrInvalidOptions},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stop, err := primitives.KeepAlive(ctx, tc.lease, tc.ttl)
			if !errors.Is(err, tc.want) || stop != nil {
				t.Fatalf("KeepAlive = %v, %v; want nil stop and %v", stop != nil, err, tc.want)
			}
		})
	}
	if got, _ := strconv.Atoi(s.MustCmd(t, "PTTL", "ka")); got > pttl || got <= 0 {
		t.Errorf("PTTL went from %d to %d: something renewed or removed it", pttl, got)
	}
}
