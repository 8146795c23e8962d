package primitives_test

import (
	"context"
	"fmt"
	"time"

	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/lock"
	"github.com/redis/rueidis"
)

// KeepAlive renews a lock at a third of its TTL while the work runs; the
// work stops when Done closes (the lock was lost) or when it finishes.
func ExampleKeepAlive() {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{exampleAddr}})
	if err != nil {
		panic(err)
	}
	defer client.Close()
	locker, err := lock.New(client, lock.Options{Prefix: "example:"})
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	ctx := context.Background()
	const ttl = 600 * time.Millisecond
	l, err := locker.Acquire(ctx, "nightly-report", ttl)
	if err != nil {
		panic(err)
	}
	stop := primitives.KeepAlive(ctx, l, ttl)

	work := time.After(5 * ttl / 2) // longer than one TTL: only renewals keep it
	select {
	case <-work:
		fmt.Println("work done while holding the lock")
	case <-l.Done():
		fmt.Println("lock lost: stop working")
	}
	stop()
	fmt.Println(l.Release(ctx))
	// Output:
	// work done while holding the lock
	// Released <nil>
}
