package lease_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/lease"
	"github.com/redis/rueidis"
)

// Named leases as fields of one hash (Redis 7.4 or newer): each worker slot
// is a field with its own expiry.
func Example() {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{exampleAddr}})
	if err != nil {
		panic(err)
	}
	defer client.Close() // the caller owns the client

	leases, err := lease.New(client, lease.Options{Prefix: "example:"})
	if err != nil {
		panic(err)
	}
	defer leases.Close()

	ctx := context.Background()
	a, err := leases.Acquire(ctx, "workers", "slot-1", 10*time.Second)
	if err != nil {
		panic(err)
	}
	b, err := leases.TryAcquire(ctx, "workers", "slot-2", 10*time.Second)
	if err != nil {
		panic(err)
	}
	_, err = leases.TryAcquire(ctx, "workers", "slot-1", time.Second)
	fmt.Println("slot-1 taken:", errors.Is(err, primitives.ErrNotAcquired))

	ok, err := a.Renew(ctx, 30*time.Second)
	fmt.Println("renewed:", ok, err)
	fmt.Println(a.Release(ctx))
	fmt.Println(b.Release(ctx))
	// Output:
	// slot-1 taken: true
	// renewed: true <nil>
	// Released <nil>
	// Released <nil>
}
