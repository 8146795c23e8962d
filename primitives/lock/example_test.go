package lock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/lock"
	"github.com/redis/rueidis"
)

func Example() {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{exampleAddr}})
	if err != nil {
		panic(err)
	}
	defer client.Close() // the caller owns the client

	locker, err := lock.New(client, lock.Options{Prefix: "example:", Fencing: true})
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	ctx := context.Background()
	l, err := locker.Acquire(ctx, "invoice:42", 10*time.Second)
	if err != nil {
		panic(err)
	}
	// Stop protected work when l.Done() closes; send the fencing token with
	// every write so the resource can reject a holder that lost the lock.
	fmt.Println("fencing token:", l.FencingToken())

	_, err = locker.TryAcquire(ctx, "invoice:42", time.Second)
	fmt.Println("second holder refused:", errors.Is(err, primitives.ErrNotAcquired))

	res, err := l.Release(ctx)
	fmt.Println(res, err)
	// Output:
	// fencing token: 1
	// second holder refused: true
	// Released <nil>
}

// A fenced lock whose counter the caller names: the lease key and the
// counter share a hash tag, so they live in one cluster slot.
func ExampleLocker_AcquireFenced() {
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
	for range 2 {
		l, err := locker.AcquireFenced(ctx, "{report}:lease", "{report}:writes", 10*time.Second)
		if err != nil {
			panic(err)
		}
		fmt.Println("fencing token:", l.FencingToken())
		l.Release(ctx)
	}
	// Output:
	// fencing token: 1
	// fencing token: 2
}
