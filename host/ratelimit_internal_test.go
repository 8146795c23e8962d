package host

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/config"
	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/primitives/ratelimit"
)

// config keeps copies of package ratelimit's bounds and defaults: they
// must agree.
func TestRateLimitConfigLimitsMatch(t *testing.T) {
	if config.MaxRateLimit != ratelimit.MaxLimit || config.MaxRateLimitWindow != ratelimit.MaxWindow ||
		config.MaxRateLimitSegments != ratelimit.MaxSegments || config.DefaultRateLimitSegments != ratelimit.DefaultSegments ||
		config.DefaultRateLimitIdleTimeout != ratelimit.DefaultIdleTimeout {
		t.Fatalf("config %v %v %v %v %v, ratelimit %v %v %v %v %v",
			int64(config.MaxRateLimit), config.MaxRateLimitWindow, config.MaxRateLimitSegments, config.DefaultRateLimitSegments, config.DefaultRateLimitIdleTimeout,
			int64(ratelimit.MaxLimit), ratelimit.MaxWindow, ratelimit.MaxSegments, ratelimit.DefaultSegments, ratelimit.DefaultIdleTimeout)
	}
}

// omit marks an argument a case leaves out of its block.
const omit = math.MinInt64

// rlCase is one rate_limit block's values, written as HCL and handed to
// the ratelimit constructors as they are.
type rlCase struct {
	algo              string
	limit, tpp, queue int64
	window, period    time.Duration
	segments          int64
	order             string // "" leaves it out
}

func (c rlCase) hcl() string {
	var b strings.Builder
	fmt.Fprintf(&b, "rate_limit \"r\" {\n  algorithm = %q\n  limit = %d\n", c.algo, c.limit)
	if c.window != omit {
		fmt.Fprintf(&b, "  window = %q\n", c.window.String())
	}
	if c.segments != omit {
		fmt.Fprintf(&b, "  segments = %d\n", c.segments)
	}
	if c.tpp != omit {
		fmt.Fprintf(&b, "  tokens_per_period = %d\n", c.tpp)
	}
	if c.period != omit {
		fmt.Fprintf(&b, "  period = %q\n", c.period.String())
	}
	if c.queue != omit || c.order != "" {
		b.WriteString("  queue {\n")
		if c.queue != omit {
			fmt.Fprintf(&b, "    limit = %d\n", c.queue)
		}
		if c.order != "" {
			fmt.Fprintf(&b, "    order = %q\n", c.order)
		}
		b.WriteString("  }\n")
	}
	b.WriteString("}\n")
	return b.String()
}

// direct builds the limiter from the case's values with no config in
// between: what ratelimit itself accepts.
func (c rlCase) direct(ls *ratelimit.Limiters) (*ratelimit.Limiter, error) {
	val := func(v int64) int64 {
		if v == omit {
			return 0
		}
		return v
	}
	q := val(c.queue)
	order := ratelimit.OldestFirst
	if c.order == "newest_first" {
		order = ratelimit.NewestFirst
	}
	switch c.algo {
	case "fixed_window":
		return ls.FixedWindow("k", ratelimit.FixedWindowOptions{Limit: c.limit, Window: time.Duration(val(int64(c.window))), QueueLimit: q, QueueOrder: order})
	case "sliding_window":
		return ls.SlidingWindow("k", ratelimit.SlidingWindowOptions{Limit: c.limit, Window: time.Duration(val(int64(c.window))),
			Segments: int(val(c.segments)), QueueLimit: q, QueueOrder: order})
	case "token_bucket":
		return ls.TokenBucket("k", ratelimit.TokenBucketOptions{Limit: c.limit, TokensPerPeriod: val(c.tpp), Period: time.Duration(val(int64(c.period))),
			QueueLimit: q, QueueOrder: order})
	}
	return nil, fmt.Errorf("no algorithm %q", c.algo)
}

// For every case, `coordhost validate` (config) accepts the block exactly
// when the ratelimit constructor accepts its values, and what it accepts
// becomes the same limiter in the host. So a configuration that validates
// never fails to load for its rate limits, and validate refuses what the
// host would refuse. Constructors send nothing; the client is real
// because ratelimit.New needs one.
func TestRateLimitConfigAcceptsWhatRatelimitAccepts(t *testing.T) {
	s := redistest.Start(t)
	ls, err := ratelimit.New(s.Client(t), ratelimit.Options{Prefix: "p:"})
	if err != nil {
		t.Fatal(err)
	}
	const (
		ms      = time.Millisecond
		maxW    = ratelimit.MaxWindow
		maxL    = ratelimit.MaxLimit
		maxWms  = int64(ratelimit.MaxWindow / time.Millisecond)
		minInt  = math.MinInt64 + 1 // not omit
		o       = omit
		fixed   = "fixed_window"
		sliding = "sliding_window"
		bucket  = "token_bucket"
	)
	var cases []rlCase
	add := func(c rlCase) { cases = append(cases, c) }
	// Limits and queue limits, on every algorithm.
	for _, limit := range []int64{minInt, -1, 0, 1, 2, maxL - 1, maxL, maxL + 1, math.MaxInt64} {
		add(rlCase{algo: fixed, limit: limit, window: time.Second, segments: o, tpp: o, period: o, queue: o})
		add(rlCase{algo: sliding, limit: limit, window: time.Second, segments: o, tpp: o, period: o, queue: o})
		add(rlCase{algo: bucket, limit: limit, window: o, segments: o, tpp: 1, period: time.Second, queue: o})
	}
	for _, q := range []int64{-1, 0, 1, maxL, maxL + 1} {
		for _, order := range []string{"", "oldest_first", "newest_first"} {
			add(rlCase{algo: fixed, limit: 5, window: time.Second, segments: o, tpp: o, period: o, queue: q, order: order})
			add(rlCase{algo: bucket, limit: 5, window: o, segments: o, tpp: 5, period: ms, queue: q, order: order})
		}
	}
	// Windows, fixed and sliding (default segments: at least 10ms).
	for _, w := range []time.Duration{-time.Second, 0, 1, 999 * time.Microsecond, ms, 1500 * time.Microsecond, 9 * ms, 10 * ms,
		time.Second + time.Nanosecond, time.Minute, maxW - ms, maxW, maxW + ms, maxW + time.Nanosecond} {
		add(rlCase{algo: fixed, limit: 10, window: w, segments: o, tpp: o, period: o, queue: o})
		add(rlCase{algo: sliding, limit: 10, window: w, segments: o, tpp: o, period: o, queue: o})
	}
	// Segments against windows.
	for _, seg := range []int64{-1, 0, 1, 5, 6, 10, 999, 1000, 1001} {
		for _, w := range []time.Duration{ms, 5 * ms, 6 * ms, time.Second, 2 * time.Second} {
			add(rlCase{algo: sliding, limit: 10, window: w, segments: seg, tpp: o, period: o, queue: o})
		}
	}
	// Token buckets: tokens per period against the limit, periods, and
	// the time to fill from empty around 100 years.
	for _, tpp := range []int64{-1, 0, 1, 9, 10, 11, maxL, maxL + 1} {
		add(rlCase{algo: bucket, limit: 10, window: o, segments: o, tpp: tpp, period: time.Second, queue: o})
	}
	for _, p := range []time.Duration{-ms, 0, 1, ms, 1500 * time.Microsecond, time.Second, maxW, maxW + ms} {
		add(rlCase{algo: bucket, limit: 1, window: o, segments: o, tpp: 1, period: p, queue: o})
	}
	for _, c := range []struct {
		limit, tpp int64
		period     time.Duration
	}{
		{maxWms, 1, ms}, {maxWms + 1, 1, ms}, {2 * maxWms, 2, ms}, {2*maxWms + 1, 2, ms},
		{maxWms / 1000, 1, time.Second}, {maxWms/1000 + 1, 1, time.Second},
		{maxL, 1, time.Second}, {maxL, maxL, maxW}, {maxL, maxL - 1, maxW}, {maxL, maxL / 2, maxW / 2}, {maxL, maxL / 2, maxW/2 + ms},
	} {
		add(rlCase{algo: bucket, limit: c.limit, window: o, segments: o, tpp: c.tpp, period: c.period, queue: o})
	}

	accepted, refused := 0, 0
	for _, c := range cases {
		src := c.hcl()
		cfg, diags := config.Parse([]byte(src), "r.hcl", config.LoadOptions{})
		lim, libErr := c.direct(ls)
		if c.segments == 0 {
			// The one deliberate difference: ratelimit takes Segments 0
			// for the default, config asks for the argument to be left
			// out (which is Segments 0).
			if len(diags) != 1 || !strings.Contains(diags[0].Detail, "leave it out for the default") {
				t.Errorf("segments = 0: %v", diags)
			}
			if lim != nil {
				lim.Close()
			}
			continue
		}
		if diags.HasErrors() != (libErr != nil) {
			t.Errorf("config errors %v, ratelimit error %v, for\n%s", diags, libErr, src)
			continue
		}
		if libErr != nil {
			refused++
			continue
		}
		accepted++
		mk, err := limiterMaker(ls, cfg.RateLimit("r"), "")
		if err != nil {
			t.Fatalf("%v for\n%s", err, src)
		}
		got, err := mk("k")
		if err != nil {
			t.Fatalf("the host's limiter: %v for\n%s", err, src)
		}
		if got.Policy() != lim.Policy() {
			t.Errorf("the host's limiter has %+v, the options %+v, for\n%s", got.Policy(), lim.Policy(), src)
		}
		if got.Key() != "p:"+c.algo+":k" {
			t.Errorf("key %q", got.Key())
		}
		got.Close()
		lim.Close()
	}
	if accepted < 40 || refused < 40 {
		t.Errorf("%d accepted and %d refused of %d cases: the table tests too little of one side", accepted, refused, len(cases))
	}
	t.Logf("%d cases: %d accepted by both, %d refused by both", len(cases), accepted, refused)
}
