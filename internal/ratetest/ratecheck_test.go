package ratetest

import (
	"testing"
	"time"
)

func at(ms ...int) []Grant {
	base := time.Unix(1000, 0)
	g := make([]Grant, len(ms))
	for i, m := range ms {
		g[i] = Grant{At: base.Add(time.Duration(m) * time.Millisecond), N: 1}
	}
	return g
}

func TestMaxIn(t *testing.T) {
	for _, c := range []struct {
		ms   []int
		w    time.Duration
		want int64
	}{
		{nil, time.Second, 0},
		{[]int{0}, time.Second, 1},
		{[]int{0, 999}, time.Second, 2},
		{[]int{0, 1000}, time.Second, 1}, // half-open: 1000 is the next interval
		{[]int{500, 0, 1000, 1499}, time.Second, 3},
		{[]int{0, 0, 0, 2000, 2000}, time.Second, 3},
	} {
		if got, _ := MaxIn(at(c.ms...), c.w); got != c.want {
			t.Errorf("MaxIn(%v, %v) = %d, want %d", c.ms, c.w, got, c.want)
		}
	}
	g := at(0, 10)
	g[1].N = 5
	if got, _ := MaxIn(g, time.Second); got != 6 {
		t.Errorf("weighted MaxIn = %d, want 6", got)
	}
}

func TestBucketExcess(t *testing.T) {
	// A bucket of 2, one token per 100ms: 2 at once, then one per period.
	ok := at(0, 0, 100, 200, 300)
	if e, d := BucketExcess(ok, 2, 1, 100*time.Millisecond, 5); e > 0 {
		t.Errorf("kept bound reported excess %d at %v", e, d)
	}
	worse := at(0, 0, 0, 0)
	if e, _ := BucketExcess(worse, 2, 1, 100*time.Millisecond, 3); e != 1 {
		t.Errorf("4 grants at once in a bucket of 2 (+1 per period): excess %d, want 1", e)
	}
}
