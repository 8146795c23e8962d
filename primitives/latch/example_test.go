package latch_test

import (
	"context"
	"fmt"

	"github.com/coordhost/coordhost/primitives/latch"
	"github.com/redis/rueidis"
)

// A coordinator waits for three workers; a worker in another process would
// Join the latch by key (or Attach to the generation it was sent).
func Example() {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{exampleAddr}})
	if err != nil {
		panic(err)
	}
	defer client.Close() // the caller owns the client

	latches, err := latch.New(client, latch.Options{Prefix: "example:"})
	if err != nil {
		panic(err)
	}
	defer latches.Close()

	ctx := context.Background()
	done, err := latches.Create(ctx, "batch:42", 3)
	if err != nil {
		panic(err)
	}
	completed := make(chan bool)
	go func() {
		ok, err := done.Wait(ctx)
		if err != nil {
			panic(err)
		}
		completed <- ok
	}()

	for range 3 {
		worker, err := latches.Join(ctx, "batch:42")
		if err != nil {
			panic(err)
		}
		left, err := worker.CountDown(ctx)
		fmt.Println("left:", left, err)
	}
	fmt.Println("all workers finished:", <-completed)

	// A new generation: late count-downs of the old one do nothing.
	next, err := latches.Reset(ctx, "batch:42", 1)
	if err != nil {
		panic(err)
	}
	fmt.Println(done.CountDown(ctx))
	fmt.Println(next.Count(ctx))
	// Output:
	// left: 2 <nil>
	// left: 1 <nil>
	// left: 0 <nil>
	// all workers finished: true
	// -1 <nil>
	// 1 <nil>
}
