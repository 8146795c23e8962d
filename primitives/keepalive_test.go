package primitives_test

import (
	"context"
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
	stop := primitives.KeepAlive(ctx, a, ttl)
	time.Sleep(5 * ttl)
	select {
	case <-a.Done():
		t.Fatal("kept-alive lock ran out")
	default:
	}
	if ok, err := a.Verify(ctx); !ok || err != nil {
		t.Fatalf("Verify: %v %v", ok, err)
	}
	stop()
	stop() // idempotent
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
	stop = primitives.KeepAlive(ctx, b, time.Second)
	defer stop()
	s.MustCmd(t, "SET", "kb", "someone-else")
	select {
	case <-b.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("Done stayed open after a refused renewal")
	}
}
