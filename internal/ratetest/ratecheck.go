// Package ratetest measures rate limiters from outside: given the
// instants at which permits were granted (by every client of one limiter,
// merged), it finds the most grants in any interval of a length, which is
// what a limit promises to bound. Used by the precision tests and by the
// benchmarks' side-by-side precision table.
package ratetest

import (
	"slices"
	"time"
)

// Grant is one decision that may have consumed permits: At is when (on
// one clock for every client: the server's, or one process's), N how many.
// Unknown outcomes count as grants.
type Grant struct {
	At time.Time
	N  int64
}

// MaxIn returns the most permits granted in any half-open interval
// [x, x+w), and where the first such interval starts. It sorts grants.
func MaxIn(grants []Grant, w time.Duration) (most int64, from time.Time) {
	slices.SortFunc(grants, func(a, b Grant) int { return a.At.Compare(b.At) })
	var sum int64
	j := 0
	for i := range grants {
		// An interval starting at a grant holds at least as many as one
		// starting between grants: slide its start over each grant.
		for j < len(grants) && grants[j].At.Before(grants[i].At.Add(w)) {
			sum += grants[j].N
			j++
		}
		if sum > most {
			most, from = sum, grants[i].At
		}
		sum -= grants[i].N
	}
	return most, from
}

// Total returns the permits granted.
func Total(grants []Grant) int64 {
	var n int64
	for _, g := range grants {
		n += g.N
	}
	return n
}

// BucketExcess checks a token bucket's promise on intervals of 1, 2, ...,
// k periods (k = spans): the permits in any interval of length D stay
// within limit + perPeriod×⌈D/period⌉. It returns the largest excess over
// that bound (0 or less when kept) and the span it was found at.
func BucketExcess(grants []Grant, limit, perPeriod int64, period time.Duration, spans int) (excess int64, at time.Duration) {
	excess = -1 << 62
	for k := 1; k <= spans; k++ {
		d := time.Duration(k) * period
		most, _ := MaxIn(grants, d)
		if e := most - (limit + perPeriod*int64(k)); e > excess {
			excess, at = e, d
		}
	}
	return excess, at
}
