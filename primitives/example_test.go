package primitives_test

import (
	"context"
	"fmt"
	"time"

	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/lease"
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
	stop, err := primitives.KeepAlive(ctx, l, ttl)
	if err != nil {
		panic(err)
	}

	work := time.After(5 * ttl / 2) // longer than one TTL: only renewals keep it
	select {
	case <-work:
		fmt.Println("work done while holding the lock")
	case <-l.Done():
		fmt.Println("lock lost: stop working")
	}
	if err := stop(); err != nil {
		fmt.Println("renewals ended:", err)
	}
	fmt.Println(l.Release(ctx))
	// Output:
	// work done while holding the lock
	// Released <nil>
}

// One Waiter shared by every primitive on a client: one waiting connection
// however many lockers and lease sets the process has.
func ExampleNewWaiter() {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{exampleAddr}})
	if err != nil {
		panic(err)
	}
	defer client.Close()

	waiter, err := primitives.NewWaiter(client, primitives.WaiterOptions{})
	if err != nil {
		panic(err)
	}
	defer waiter.Close() // after the primitives that use it
	locker, err := lock.New(client, lock.Options{Prefix: "example:", Waiter: waiter})
	if err != nil {
		panic(err)
	}
	defer locker.Close()
	leases, err := lease.New(client, lease.Options{Prefix: "example:", Waiter: waiter})
	if err != nil {
		panic(err)
	}
	defer leases.Close()

	ctx := context.Background()
	l, err := locker.Acquire(ctx, "nightly", 10*time.Second)
	if err != nil {
		panic(err)
	}
	defer l.Release(ctx)
	slot, err := leases.Acquire(ctx, "workers", "slot-1", 10*time.Second)
	if err != nil {
		panic(err)
	}
	defer slot.Release(ctx)
	fmt.Println(l.Key(), slot.Key(), slot.Field())
	// Output:
	// example:nightly example:workers slot-1
}
