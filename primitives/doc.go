// Package primitives holds the contracts shared by every coordhost primitive:
// the [Lease] handle interface, [ReleaseResult] and the sentinel errors that
// callers match with [errors.Is].
//
// The primitives themselves live in sub-packages (lock, ...). Each takes a
// caller-owned rueidis.Client and never closes it.
package primitives
