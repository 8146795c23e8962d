package primitives

import "errors"

// Sentinel errors shared by all primitives. Errors returned by the primitive
// packages wrap these with details; match them with errors.Is.
var (
	// ErrNotAcquired means the resource is held by someone else and the call
	// was not allowed to wait (TryAcquire) or gave up by policy.
	ErrNotAcquired = errors.New("coordhost: not acquired")

	// ErrInvalidOptions is wrapped by constructors whose options fail
	// validation.
	ErrInvalidOptions = errors.New("coordhost: invalid options")

	// ErrInvalidKey means a key is empty, enters the reserved namespace, or
	// cannot be placed in one cluster slot with the keys derived from it.
	ErrInvalidKey = errors.New("coordhost: invalid key")

	// ErrInvalidTTL means a lease duration is zero, negative, below one
	// millisecond, or above the primitive's MaxTTL.
	ErrInvalidTTL = errors.New("coordhost: invalid ttl")

	// ErrWrongType means the key already holds a value of a type the
	// primitive does not manage (Redis WRONGTYPE). Nothing was written.
	ErrWrongType = errors.New("coordhost: key holds a value of the wrong type")

	// ErrCorruptCounter means a fencing counter exists but is not a plain
	// non-negative decimal integer, has a TTL, or would overflow int64.
	// Nothing was written.
	ErrCorruptCounter = errors.New("coordhost: fencing counter is unusable")

	// ErrClosed means the primitive (not the client) has been closed.
	ErrClosed = errors.New("coordhost: closed")
)
