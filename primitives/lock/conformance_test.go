package lock_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/internal/leasetest"
	"github.com/coordhost/coordhost/primitives/lock"
)

// *lock.Lock keeps the primitives.Lease contract, plain and fenced, on
// every server kind.
func TestLockConformance(t *testing.T) {
	for _, k := range redistest.Kinds() {
		for _, fencing := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/fencing=%v", k, fencing), func(t *testing.T) {
				s := redistest.Start(t, redistest.WithKind(k))
				l := newLocker(t, s.Client(t), lock.Options{Prefix: "c:", Fencing: fencing})
				var n atomic.Int64
				leasetest.Run(t, leasetest.Subject{
					Acquire: func(ctx context.Context, ttl time.Duration) (primitives.Lease, error) {
						return l.TryAcquire(ctx, fmt.Sprintf("k%d", n.Add(1)), ttl)
					},
					Steal:    func(t *testing.T, h primitives.Lease) { s.MustCmd(t, "SET", h.Key(), "stranger", "PX", "60000") },
					Delete:   func(t *testing.T, h primitives.Lease) { s.MustCmd(t, "DEL", h.Key()) },
					Snapshot: func(t *testing.T) string { return leasetest.Keyspace(t, s) },
					MaxTTL:   lock.MaxTTL,
					ServerTTL: func(t *testing.T, h primitives.Lease) time.Duration {
						ms, _ := strconv.ParseInt(s.MustCmd(t, "PTTL", h.Key()), 10, 64)
						return time.Duration(ms) * time.Millisecond
					},
					Reacquire: func(ctx context.Context, h primitives.Lease, ttl time.Duration) (primitives.Lease, error) {
						return l.TryAcquire(ctx, strings.TrimPrefix(h.Key(), "c:"), ttl)
					},
					Pause: func(*testing.T) func() { s.Pause(); return s.Resume },
				})
			})
		}
	}
}
