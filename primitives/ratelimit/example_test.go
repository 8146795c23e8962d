package ratelimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/coordhost/coordhost/primitives/ratelimit"
	"github.com/redis/rueidis"
)

// At most 3 requests of one user in any 10 seconds, shared by every
// process that uses the same key.
func Example() {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{exampleAddr}})
	if err != nil {
		panic(err)
	}
	defer client.Close() // the caller owns the client

	limiters, err := ratelimit.New(client, ratelimit.Options{Prefix: "example:"})
	if err != nil {
		panic(err)
	}
	limit, err := limiters.SlidingWindow("api:alice", ratelimit.SlidingWindowOptions{
		Limit: 3, Window: 10 * time.Second, Segments: 10,
	})
	if err != nil {
		panic(err)
	}
	defer limit.Close()

	ctx := context.Background()
	for i := 1; i <= 4; i++ {
		res, err := limit.TryAcquire(ctx, 1)
		if err != nil {
			panic(err) // Redis unreachable: fail open or closed, your choice
		}
		if res.Acquired {
			fmt.Printf("request %d: granted, %d left\n", i, res.Remaining)
		} else {
			// Permits come back at most one segment (1s) after they are
			// 10s old: RetryAfter says when, never too early.
			fmt.Printf("request %d: refused, retry in about %v\n", i, res.RetryAfter.Round(10*time.Second))
		}
	}
	// More than the limit can never be granted: refused, no RetryAfter.
	res, _ := limit.TryAcquire(ctx, 4)
	fmt.Println("4 at once:", res.Acquired, res.RetryAfter)
	// Output:
	// request 1: granted, 2 left
	// request 2: granted, 1 left
	// request 3: granted, 0 left
	// request 4: refused, retry in about 10s
	// 4 at once: false 0s
}
