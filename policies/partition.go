package policies

import (
	"context"
	"errors"
)

// PartitionRequest names a resource and carries the caller's attributes
// (tenant, route, user ...). Policies must not keep or modify it.
type PartitionRequest struct {
	// Kind is the primitive asking ("lock", "rate_limit", ...).
	Kind string
	// Name is the configured name of the resource.
	Name string
	// Attributes are the caller's key/value attributes.
	Attributes map[string]string
}

// PartitionPolicy maps a request to the partition key the primitive uses
// (appended to the resource's key). It must be a pure function of its input.
// An error fails the acquisition closed: a policy never guesses a key.
// Implementations must be safe for concurrent use. ctx is the caller's: an
// implementation that can block must return promptly once it is done, with
// an error (the acquisition then fails).
type PartitionPolicy interface {
	PartitionKey(ctx context.Context, r PartitionRequest) (string, error)
}

// PartitionFunc adapts a function to PartitionPolicy.
type PartitionFunc func(context.Context, PartitionRequest) (string, error)

// PartitionKey calls f(ctx, r).
func (f PartitionFunc) PartitionKey(ctx context.Context, r PartitionRequest) (string, error) {
	return f(ctx, r)
}

// ErrPartition is wrapped by partition errors, from any backend.
var ErrPartition = errors.New("policies: partition key unavailable")
