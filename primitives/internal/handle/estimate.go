package handle

import "time"

// Estimator is an optional extension of Ops. A Handle whose Ops implement
// it takes Estimate(ttl), not ttl, as the local estimate after a renewal
// the server accepted for ttl: Redlock subtracts its clock-drift allowance
// (the lease is valid for ttl - drift after the renewal was sent). The
// Handle never lets the estimate exceed ttl, and an estimate of zero or
// less makes an accepted renewal end the handle's estimate at once.
type Estimator interface {
	Estimate(ttl time.Duration) time.Duration
}

// estimate returns the local estimate of a renewal accepted for ttl; ops
// is a pointer to the Handle's Ops (a pointer, so the check allocates
// nothing).
func estimate(ops any, ttl time.Duration) time.Duration {
	if e, ok := ops.(Estimator); ok {
		return min(e.Estimate(ttl), ttl)
	}
	return ttl
}
