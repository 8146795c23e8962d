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
	a, err := sems.Acquire(ctx, "batch:42", 2, 30*time.Second)
	if err != nil {
		panic(err)
	}
	b, err := sems.TryAcquire(ctx, "batch:42", 2, semaphore.NoExpiry) // until released
	if err != nil {
		panic(err)
	}
	_, err = sems.TryAcquire(ctx, "batch:42", 2, time.Second)
	fmt.Println("third worker refused:", errors.Is(err, primitives.ErrNotAcquired))
	_, err = sems.TryAcquire(ctx, "batch:42", 5, time.Second)
	fmt.Println("other capacity refused:", errors.Is(err, semaphore.ErrCapacityMismatch))

	// Stop the work when a.Done() closes; renew to keep the permit longer.
	ok, err := a.Renew(ctx, time.Minute)
	fmt.Println("renewed:", ok, err)
	fmt.Println(a.Release(ctx))
	fmt.Println(b.Release(ctx))
	// Output:
	// third worker refused: true
	// other capacity refused: true
	// renewed: true <nil>
	// Released <nil>
	// Released <nil>
}
