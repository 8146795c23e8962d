package host

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/coordhost/coordhost/policies"
	"github.com/coordhost/coordhost/primitives"
)

// named is one generation's instance of one configured primitive: its
// config block C, the primitive P built from it, and the partition policy
// its block names (nil for none). Adding a primitive kind to the host is a
// config block, a builder that returns a named[C, P], a map in generation,
// and a public type whose methods call withNamed.
type named[C any, P io.Closer] struct {
	kind      string // as in a partition request: "lock", "rate_limit", ...
	name      string
	cfg       C
	prim      P
	partition policies.PartitionPolicy
}

// key returns the key (below the primitive's prefix) for attrs: the name,
// or name "/" partition key when a partition policy is configured. A
// partition failure, or an empty key, fails closed with an error wrapping
// policies.ErrPartition.
func (n *named[C, P]) key(ctx context.Context, attrs map[string]string) (string, error) {
	if n.partition == nil {
		return n.name, nil
	}
	k, err := n.partition.PartitionKey(ctx, policies.PartitionRequest{Kind: n.kind, Name: n.name, Attributes: attrs})
	if err != nil {
		return "", fmt.Errorf("%s %q: %w", n.kind, n.name, err)
	}
	if k == "" {
		// An empty key would put every caller on one key: refuse it.
		return "", fmt.Errorf("%s %q: %w: the partition policy returned an empty key", n.kind, n.name, policies.ErrPartition)
	}
	return n.name + "/" + k, nil
}

// withNamed runs fn on the named primitive that lookup finds in the
// generation in use, counted as in flight so that a reload drains it. A
// call that a reload's retirement ends with primitives.ErrClosed carries on
// in the new generation; errNone (wrapped with the name) when the
// configuration in use has no such primitive.
func withNamed[C any, P io.Closer, T any](h *Host, kind, name string, errNone error,
	lookup func(*generation) *named[C, P], fn func(*named[C, P]) (T, error)) (T, error) {
	var zero T
	for {
		if h.closed.Load() {
			return zero, fmt.Errorf("%s %q: %w", kind, name, ErrClosed)
		}
		g := h.gen.Load()
		if !g.enter() {
			continue // a reload swapped g out just now
		}
		var got T
		var err error
		if n := lookup(g); n == nil {
			err = fmt.Errorf("%w: %q", errNone, name)
		} else {
			got, err = fn(n)
		}
		g.exit()
		if errors.Is(err, primitives.ErrClosed) && h.gen.Load() != g && !h.closed.Load() {
			// A reload retired g while we waited: carry on in the new one.
			continue
		}
		return got, err
	}
}

// current returns the named primitive in the generation in use, or nil.
func current[C any, P io.Closer](h *Host, lookup func(*generation) *named[C, P]) *named[C, P] {
	return lookup(h.gen.Load())
}
