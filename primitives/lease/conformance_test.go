package lease_test

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
	"github.com/coordhost/coordhost/primitives/lease"
)

// *lease.Lease keeps the primitives.Lease contract on every server kind
// with hash-field expiry; its fields share one hash.
func TestLeaseConformance(t *testing.T) {
	for _, k := range redistest.Kinds() {
		if !k.Has(redistest.HashFieldExpiry) {
			continue
		}
		t.Run(k.String(), func(t *testing.T) {
			s := redistest.Start(t, redistest.WithKind(k))
			ls := newLeases(t, s.Client(t), lease.Options{Prefix: "c:"})
			var n atomic.Int64
			field := func(h primitives.Lease) string { return h.(*lease.Lease).Field() }
			leasetest.Run(t, leasetest.Subject{
				Acquire: func(ctx context.Context, ttl time.Duration) (primitives.Lease, error) {
					return ls.TryAcquire(ctx, "workers", fmt.Sprintf("f%d", n.Add(1)), ttl)
				},
				Steal:    func(t *testing.T, h primitives.Lease) { s.MustCmd(t, "HSET", h.Key(), field(h), "stranger") },
				Delete:   func(t *testing.T, h primitives.Lease) { s.MustCmd(t, "HDEL", h.Key(), field(h)) },
				Snapshot: func(t *testing.T) string { return leasetest.Keyspace(t, s) },
				MaxTTL:   lease.MaxTTL,
				ServerTTL: func(t *testing.T, h primitives.Lease) time.Duration {
					v := strings.Trim(s.MustCmd(t, "HPTTL", h.Key(), "FIELDS", "1", field(h)), "[] \n")
					ms, _ := strconv.ParseInt(v, 10, 64)
					return time.Duration(ms) * time.Millisecond
				},
				Reacquire: func(ctx context.Context, h primitives.Lease, ttl time.Duration) (primitives.Lease, error) {
					return ls.TryAcquire(ctx, "workers", field(h), ttl)
				},
				Pause: func(*testing.T) func() { s.Pause(); return s.Resume },
			})
		})
	}
}
