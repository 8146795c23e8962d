package rwlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/policies"
	"github.com/coordhost/coordhost/primitives/rwlock"
)

// Locks "invoice" and "{invoice}" are unrelated: a writer waiting on one
// does not hold readers off the other (they once shared the pending-writer
// hash; found by a hostile review).
func TestWaitingWriterHoldsOffOnlyItsLock(t *testing.T) {
	srv := redistest.Start(t, redistest.Version(7))
	c := srv.Client(t)
	l := newLocker(t, c, rwlock.Options{Starvation: policies.StarvationFunc(func(context.Context, policies.StarvationRequest) time.Duration { return 0 })})
	ctx := context.Background()
	r, err := l.TryAcquireRead(ctx, "invoice", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	wctx, cancel := context.WithTimeout(ctx, 600*time.Millisecond)
	defer cancel()
	go l.AcquireWrite(wctx, "invoice", time.Second) // waits behind the reader, bound 0
	time.Sleep(200 * time.Millisecond)
	t.Logf("keys: %q", srv.MustCmd(t, "KEYS", "*"))
	// "{invoice}" is another lock, with no holder and no writer.
	if _, err := l.TryAcquireRead(ctx, "{invoice}", time.Second); err != nil {
		t.Errorf("reader of unrelated, free lock {invoice} refused: %v", err)
	}
}
