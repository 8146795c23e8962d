package primitives

import (
	"context"
	"time"
)

// ReleaseResult says what an owner-checked release found on the server.
type ReleaseResult int

const (
	// Released means this call deleted the caller's own lease.
	Released ReleaseResult = iota + 1
	// AlreadyReleased means there was nothing left to delete: the lease was
	// released earlier through this handle or has expired and nobody holds
	// it now.
	AlreadyReleased
	// NotOwned means another owner holds the key; nothing was deleted.
	NotOwned
)

// String returns the result's name.
func (r ReleaseResult) String() string {
	switch r {
	case Released:
		return "Released"
	case AlreadyReleased:
		return "AlreadyReleased"
	case NotOwned:
		return "NotOwned"
	}
	return "ReleaseResult(0)"
}

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
