package policies

import "time"

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
type StarvationPolicy interface {
	WriterBound(StarvationRequest) time.Duration
}

// Unbounded is the bound meaning "never hold readers off".
const Unbounded = time.Duration(1<<63 - 1)

// StarvationFunc adapts a function to StarvationPolicy.
type StarvationFunc func(StarvationRequest) time.Duration

// WriterBound calls f(r).
func (f StarvationFunc) WriterBound(r StarvationRequest) time.Duration { return f(r) }
