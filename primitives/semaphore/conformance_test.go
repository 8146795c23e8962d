package semaphore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/internal/leasetest"
	"github.com/coordhost/coordhost/primitives/semaphore"
)

// *semaphore.Permit keeps the primitives.Lease contract on every server
// kind, for permits of a one-place semaphore (so that "taken by another
// owner" has its lock meaning: the place went to someone else).
func TestPermitConformance(t *testing.T) {
	for _, k := range redistest.Kinds() {
		t.Run(k.String(), func(t *testing.T) {
			s := redistest.Start(t, redistest.WithKind(k))
			sems := newSems(t, s.Client(t), semaphore.Options{Prefix: "c:"})
			var n atomic.Int64
			leasetest.Run(t, leasetest.Subject{
				Acquire: func(ctx context.Context, ttl time.Duration) (primitives.Lease, error) {
					return sems.TryAcquire(ctx, fmt.Sprintf("k%d", n.Add(1)), 1, ttl)
				},
				Steal: func(t *testing.T, h primitives.Lease) {
					s.MustCmd(t, "ZREM", h.Key(), h.Token())
					s.MustCmd(t, "ZADD", h.Key(), "+inf", "stranger")
				},
				Delete:   func(t *testing.T, h primitives.Lease) { s.MustCmd(t, "ZREM", h.Key(), h.Token()) },
				Snapshot: func(t *testing.T) string { return leasetest.Keyspace(t, s) },
				MaxTTL:   semaphore.MaxTTL,
				ServerTTL: func(t *testing.T, h primitives.Lease) time.Duration {
					// One permit per key: the set lives exactly as long as it.
					return time.Duration(ms(t, s.MustCmd(t, "PTTL", h.Key()))) * time.Millisecond
				},
				Reacquire: func(ctx context.Context, h primitives.Lease, ttl time.Duration) (primitives.Lease, error) {
					return sems.TryAcquire(ctx, h.Key()[len("c:"):], 1, ttl)
				},
				Pause: func(*testing.T) func() { s.Pause(); return s.Resume },
			})
		})
	}
}
