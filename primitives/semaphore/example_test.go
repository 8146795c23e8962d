package semaphore_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/semaphore"
	"github.com/redis/rueidis"
)

// At most two workers of a batch at a time: every contender names the same
// capacity, and a permit expires on its own if its holder dies.
func Example() {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{exampleAddr}})
	if err != nil {
		panic(err)
	}
	defer client.Close() // the caller owns the client

	sems, err := semaphore.New(client, semaphore.Options{Prefix: "example:"})
	if err != nil {
		panic(err)
	}
	defer sems.Close()

	ctx := context.Background()
	a, err := sems.Acquire(ctx, "batch", 2, 30*time.Second)
	if err != nil {
		panic(err)
	}
	b, err := sems.TryAcquire(ctx, "batch", 2, semaphore.NoExpiry)
	if err != nil {
		panic(err)
	}
	_, err = sems.TryAcquire(ctx, "batch", 2, time.Second)
	fmt.Println("full:", errors.Is(err, primitives.ErrNotAcquired))
	_, err = sems.TryAcquire(ctx, "batch", 3, time.Second)
	fmt.Println("capacity mismatch:", errors.Is(err, semaphore.ErrCapacityMismatch))

	fmt.Println(a.Release(ctx))
	fmt.Println(b.Release(ctx))
	// Output:
	// full: true
	// capacity mismatch: true
	// Released <nil>
	// Released <nil>
}
