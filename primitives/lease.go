package primitives

import (
	"context"
	"time"

	"github.com/coordhost/coordhost/primitives/internal/base"
)

// ReleaseResult says what an owner-checked release found on the server:
// Released (this call deleted the caller's own lease), AlreadyReleased
// (nothing left to delete: released earlier through this handle, or
// expired and free) or NotOwned (another owner holds the key; nothing was
// deleted).
type ReleaseResult = base.ReleaseResult

// The release results.
const (
	// Released means this call deleted the caller's own lease.
	Released = base.Released
	// AlreadyReleased means there was nothing left to delete: the lease was
	// released earlier through this handle or has expired and nobody holds
	// it now.
	AlreadyReleased = base.AlreadyReleased
	// NotOwned means another owner holds the key; nothing was deleted.
	NotOwned = base.NotOwned
)

// Lease is a granted lock, lease or permit. All methods are safe for
// concurrent use.
type Lease interface {
	// Key returns the Redis key of the lease, including any prefix.
	Key() string
	// Token returns the random ownership token.
	Token() string
	// Remaining returns the local estimate of the time left, measured from
	// before the acquire (or last accepted renewal) was sent. Zero once the
	// lease is lost or released.
	Remaining() time.Duration
	// Done is closed when the estimate runs out, ownership is lost or
	// uncertain, or the lease is released.
	Done() <-chan struct{}
	// Renew extends the lease to ttl from now if the caller still owns it.
	Renew(ctx context.Context, ttl time.Duration) (bool, error)
	// Verify asks the server whether the caller still owns the lease.
	Verify(ctx context.Context) (bool, error)
	// Release deletes the lease if the caller still owns it.
	Release(ctx context.Context) (ReleaseResult, error)
	// Close releases the lease best effort with a short bound. It never
	// deletes another owner's lease and is idempotent.
	Close() error
}
