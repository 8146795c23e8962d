package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/redlock"
	"github.com/redis/rueidis"
)

// A lock held on a majority of three independent servers. The servers in
// this example have just started, so the first Acquire waits out the
// restart guard (MaxTTL + drift, here about a second): a server that
// restarted within the longest lease may have forgotten a grant.
func Example() {
	var clients []rueidis.Client
	for _, addr := range exampleAddrs { // three independent servers
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
		if err != nil {
			panic(err)
		}
		defer c.Close() // the caller owns the clients
		clients = append(clients, c)
	}

	group, err := redlock.New(clients, redlock.Options{
		Prefix:      "example:",
		NodeTimeout: 50 * time.Millisecond,
		MaxTTL:      time.Second, // the longest lease, and how long a restarted node sits out
	})
	if err != nil {
		panic(err)
	}
	defer group.Close()

	ctx := context.Background()
	l, err := group.Acquire(ctx, "invoice:42", time.Second)
	if err != nil {
		panic(err)
	}
	// Stop protected work when l.Done() closes: the validity ran out or a
	// renewal failed.
	fmt.Println("held on a majority, validity left:", l.Remaining() > 900*time.Millisecond)

	_, err = group.TryAcquire(ctx, "invoice:42", time.Second)
	fmt.Println("second holder refused:", errors.Is(err, primitives.ErrNotAcquired))

	ok, err := l.Renew(ctx, time.Second)
	fmt.Println("renewed on a majority:", ok, err)
	fmt.Println(l.Release(ctx))
	// Output:
	// held on a majority, validity left: true
	// second holder refused: true
	// renewed on a majority: true <nil>
	// Released <nil>
}
