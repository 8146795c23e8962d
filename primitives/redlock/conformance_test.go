package redlock_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/internal/leasetest"
	"github.com/coordhost/coordhost/primitives/redlock"
)

// *redlock.Lock keeps the primitives.Lease contract on 3 nodes of every
// server kind. The multi-node handle fits the suite's Subject as it is:
// Steal and Delete act on every node, Snapshot covers every node, the
// server TTL is the quorum's (the time until fewer than a majority keep
// the token), and Pause stops every node. A failed or uncertain renewal
// removes the token from every node, which the suite allows with
// RenewFailureEnds. The restart guard is off: the suite renews to MaxTTL
// (2h here) on servers seconds old; the guard has tests of its own.
func TestLockConformance(t *testing.T) {
	for _, k := range redistest.Kinds() {
		t.Run(k.String(), func(t *testing.T) {
			f := startFleet(t, 3, k)
			g := newGroup(t, f.clients, redlock.Options{Prefix: "c:", MaxTTL: 2 * time.Hour})
			var n atomic.Int64
			key := func(h primitives.Lease) string { return strings.TrimPrefix(h.Key(), "c:") }
			leasetest.Run(t, leasetest.Subject{
				Acquire: func(ctx context.Context, ttl time.Duration) (primitives.Lease, error) {
					return g.TryAcquire(ctx, fmt.Sprintf("k%d", n.Add(1)), ttl)
				},
				Steal: func(t *testing.T, h primitives.Lease) {
					for _, s := range f.servers {
						s.MustCmd(t, "SET", h.Key(), "stranger", "PX", "60000")
					}
				},
				Delete: func(t *testing.T, h primitives.Lease) {
					for _, s := range f.servers {
						s.MustCmd(t, "DEL", h.Key())
					}
				},
				Snapshot: f.keyspace,
				MaxTTL:   g.MaxTTL(),
				ServerTTL: func(t *testing.T, h primitives.Lease) time.Duration {
					return quorumTTL(t, f, g, h.Key(), h.Token())
				},
				Reacquire: func(ctx context.Context, h primitives.Lease, ttl time.Duration) (primitives.Lease, error) {
					return g.TryAcquire(ctx, key(h), ttl)
				},
				Pause: func(*testing.T) func() {
					for _, s := range f.servers {
						s.Pause()
					}
					return func() {
						for _, s := range f.servers {
							s.Resume()
						}
					}
				},
				RenewFailureEnds: true,
			})
		})
	}
}

// quorumTTL is how long a majority of f keeps token at key: the
// quorum-th longest PTTL among the nodes holding it; negative when fewer
// than a majority hold it.
func quorumTTL(t *testing.T, f *fleet, g *redlock.Group, key, token string) time.Duration {
	t.Helper()
	var ttls []time.Duration
	for i, v := range f.get(t, key) {
		if v == token {
			ttls = append(ttls, f.pttl(t, i, key))
		}
	}
	if len(ttls) < g.Quorum() {
		return -2 * time.Millisecond
	}
	slices.Sort(ttls)
	slices.Reverse(ttls)
	return ttls[g.Quorum()-1]
}
