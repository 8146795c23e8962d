package rwlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coordhost/coordhost/policies/builtin"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/rwlock"
	"github.com/redis/rueidis"
)

// Shared readers, an exclusive writer, and a starvation bound: once a
// writer has waited 100ms, new readers are held off until it is done.
func Example() {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{exampleAddr}})
	if err != nil {
		panic(err)
	}
	defer client.Close() // the caller owns the client

	locks, err := rwlock.New(client, rwlock.Options{
		Prefix:     "example:",
		Starvation: builtin.WriterPreference{Bound: 100 * time.Millisecond},
	})
	if err != nil {
		panic(err)
	}
	defer locks.Close()

	ctx := context.Background()
	r1, err := locks.AcquireRead(ctx, "{account:42}:rw", 10*time.Second)
	if err != nil {
		panic(err)
	}
	r2, err := locks.TryAcquireRead(ctx, "{account:42}:rw", 10*time.Second)
	if err != nil {
		panic(err)
	}
	_, err = locks.TryAcquireWrite(ctx, "{account:42}:rw", 10*time.Second)
	fmt.Println("writer refused while read:", errors.Is(err, primitives.ErrNotAcquired))

	granted := make(chan *rwlock.Lease)
	go func() {
		w, err := locks.AcquireWrite(ctx, "{account:42}:rw", 10*time.Second)
		if err != nil {
			panic(err)
		}
		granted <- w
	}()
	time.Sleep(500 * time.Millisecond) // the writer has waited past its bound
	_, err = locks.TryAcquireRead(ctx, "{account:42}:rw", 10*time.Second)
	fmt.Println("new reader held off:", errors.Is(err, primitives.ErrNotAcquired))
	ok, err := r1.Renew(ctx, 10*time.Second)
	fmt.Println("a holding reader renews:", ok, err)

	r1.Release(ctx)
	r2.Release(ctx) // the last reader leaves: the writer is granted
	w := <-granted
	fmt.Println("write lease:", w.Mode())
	fmt.Println(w.Release(ctx))
	// Output:
	// writer refused while read: true
	// new reader held off: true
	// a holding reader renews: true <nil>
	// write lease: write
	// Released <nil>
}
