package policies

import (
	"context"
	"time"
)

// StarvationRequest describes a read-write lease's contention.
type StarvationRequest struct {
	// Readers holding the lease now.
	Readers int
	// Writers waiting for it.
	Writers int
	// OldestWriterWait is how long the longest-waiting writer has waited.
	OldestWriterWait time.Duration
}

// StarvationPolicy bounds how long writers wait before new readers are held
// off: once the oldest writer has waited longer than the bound, readers
// stop being admitted. 0 is strict writer preference; Unbounded is reader
// preference. Implementations must be pure and safe for concurrent use.
// ctx is the waiting writer's: an implementation that can block must
// return promptly once it is done.
type StarvationPolicy interface {
	WriterBound(ctx context.Context, r StarvationRequest) time.Duration
}

// Unbounded is the bound meaning "never hold readers off".
const Unbounded = time.Duration(1<<63 - 1)

// StarvationFunc adapts a function to StarvationPolicy.
type StarvationFunc func(context.Context, StarvationRequest) time.Duration

// WriterBound calls f(ctx, r).
func (f StarvationFunc) WriterBound(ctx context.Context, r StarvationRequest) time.Duration {
	return f(ctx, r)
}
