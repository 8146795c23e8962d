package rwlock_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/internal/leasetest"
	"github.com/coordhost/coordhost/primitives/rwlock"
)

// memberTTL is the time the server keeps a lease's member: its deadline
// minus the server's now; negative when the member is gone.
const memberTTL = `local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not s then return -1 end
local t = redis.call('TIME')
return tonumber(s) - (tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))`

// Read and write leases keep the primitives.Lease contract on every server
// kind. Each handle is on a key of its own; the conformance suite's "a
// second grant" is a writer, the one grant a read lease excludes.
func TestConformance(t *testing.T) {
	for _, k := range redistest.Kinds() {
		t.Run(k.String(), func(t *testing.T) {
			s := redistest.Start(t, redistest.WithKind(k))
			l := newLocker(t, s.Client(t), rwlock.Options{Prefix: "c:"})
			for _, mode := range []rwlock.Mode{rwlock.Read, rwlock.Write} {
				t.Run(mode.String(), func(t *testing.T) {
					var n atomic.Int64
					acquire := l.TryAcquireRead
					prefix := "r:"
					if mode == rwlock.Write {
						acquire, prefix = l.TryAcquireWrite, "w:"
					}
					member := func(h primitives.Lease) string { return prefix + h.Token() }
					leasetest.Run(t, leasetest.Subject{
						Acquire: func(ctx context.Context, ttl time.Duration) (primitives.Lease, error) {
							return acquire(ctx, fmt.Sprintf("%s%d", mode, n.Add(1)), ttl)
						},
						Steal: func(t *testing.T, h primitives.Lease) {
							s.MustCmd(t, "ZREM", h.Key(), member(h))
							s.MustCmd(t, "ZADD", h.Key(), "99999999999999", prefix+"stranger")
						},
						Delete:   func(t *testing.T, h primitives.Lease) { s.MustCmd(t, "ZREM", h.Key(), member(h)) },
						Snapshot: func(t *testing.T) string { return leasetest.Keyspace(t, s) },
						MaxTTL:   rwlock.MaxTTL,
						ServerTTL: func(t *testing.T, h primitives.Lease) time.Duration {
							ms, _ := strconv.ParseInt(s.MustCmd(t, "EVAL", memberTTL, "1", h.Key(), member(h)), 10, 64)
							return time.Duration(ms) * time.Millisecond
						},
						Reacquire: func(ctx context.Context, h primitives.Lease, ttl time.Duration) (primitives.Lease, error) {
							return l.TryAcquireWrite(ctx, h.Key()[len("c:"):], ttl)
						},
						Pause: func(*testing.T) func() { s.Pause(); return s.Resume },
					})
				})
			}
		})
	}
}
