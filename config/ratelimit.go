package config

import (
	"fmt"
	"math/big"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
)

// Rate-limit defaults and bounds. They match package primitives/ratelimit,
// which config does not import; a host test keeps them equal and checks
// that config accepts exactly the options the ratelimit constructors
// accept, so `coordhost validate` refuses what the host would refuse.
const (
	// RateLimitPrefix is the prefix of every rate limit's keys (after
	// redis.key_prefix); unlike the other blocks it cannot be changed, so
	// that no rate_limit block can reach another one's keys. A key is
	// RateLimitPrefix + algorithm + ":" + name, followed by "/" and the
	// partition key when the block names a partition policy.
	RateLimitPrefix = "coordhost:ratelimit:"
	// MaxRateLimit is the largest limit, tokens_per_period or queue limit
	// (10^15, ratelimit.MaxLimit).
	MaxRateLimit = 1_000_000_000_000_000
	// MaxRateLimitWindow is the longest window or period, and the longest
	// time an empty token bucket may take to fill (100 years,
	// ratelimit.MaxWindow).
	MaxRateLimitWindow = 3_153_600_000_000 * time.Millisecond
	// MaxRateLimitSegments is the most segments of a sliding window
	// (ratelimit.MaxSegments).
	MaxRateLimitSegments = 1000
	// DefaultRateLimitSegments is a sliding window's segments when not set
	// (ratelimit.DefaultSegments).
	DefaultRateLimitSegments = 10
	// DefaultRateLimitIdleTimeout is idle_timeout when not set
	// (ratelimit.DefaultIdleTimeout).
	DefaultRateLimitIdleTimeout = time.Minute
)

// RateLimitAlgorithm is a rate_limit block's algorithm.
type RateLimitAlgorithm string

// The algorithms (see package primitives/ratelimit).
const (
	FixedWindow   RateLimitAlgorithm = "fixed_window"
	SlidingWindow RateLimitAlgorithm = "sliding_window"
	TokenBucket   RateLimitAlgorithm = "token_bucket"
)

// QueueOrder is the order of a rate limit's queue.
type QueueOrder string

// The queue orders (ratelimit.OldestFirst and ratelimit.NewestFirst).
const (
	OldestFirst QueueOrder = "oldest_first"
	NewestFirst QueueOrder = "newest_first"
)

// RateLimit is a `rate_limit "NAME"` block: a named rate limit the host
// serves, one limiter per partition key.
//
//	rate_limit "NAME" {
//	  algorithm = "sliding_window"  # required: fixed_window | sliding_window | token_bucket
//	  limit     = 100               # required: permits per window, or the bucket's size
//	  window    = "1m"              # fixed_window and sliding_window (required there)
//	  segments  = 10                # sliding_window only; default 10
//	  tokens_per_period = 10        # token_bucket only (required there)
//	  period    = "1s"              # token_bucket only (required there)
//	  partition = policy.partition.NAME  # optional
//	  queue {                       # optional: Acquire queues up to limit permits
//	    limit = 20
//	    order = "oldest_first"      # oldest_first (default) | newest_first
//	  }
//	  idle_timeout = "1m"           # a partition's limiter idle this long is dropped
//	}
type RateLimit struct {
	Name      string
	Algorithm RateLimitAlgorithm
	// Limit is the permits per window, or a token bucket's size, in
	// [1, MaxRateLimit].
	Limit int64
	// Window is the window of a fixed or sliding window, in
	// [1ms, MaxRateLimitWindow] and whole milliseconds; 0 for a token
	// bucket.
	Window time.Duration
	// Segments divide a sliding window: in [1, MaxRateLimitSegments] and
	// at most one per millisecond of the window; DefaultRateLimitSegments
	// when not set, 0 for the other algorithms.
	Segments int
	// TokensPerPeriod and Period are a token bucket's refill: in
	// [1, Limit] and [1ms, MaxRateLimitWindow] (whole milliseconds), an
	// empty bucket filling within MaxRateLimitWindow; 0 for the other
	// algorithms.
	TokensPerPeriod int64
	Period          time.Duration
	// Partition names the partition policy whose key, after the name and
	// "/", is the limiter's key; nil when not set (one limiter for all).
	Partition *PolicyRef
	// QueueLimit is how many permits Acquire calls may queue in a
	// limiter, in [0, MaxRateLimit]; 0 (also without a queue block) means
	// no queue. QueueOrder is OldestFirst when not set.
	QueueLimit int64
	QueueOrder QueueOrder
	// IdleTimeout is how long a partition's limiter stays idle before the
	// host drops it (its state stays in Redis); DefaultRateLimitIdleTimeout
	// when not set.
	IdleTimeout time.Duration
	// Range is the block header's range.
	Range hcl.Range
}

// RateLimit returns the rate limit declared as `rate_limit "NAME"`, or
// nil.
func (c *Config) RateLimit(name string) *RateLimit { return c.rateLimits[name] }

var (
	rateLimitSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{
			{Name: "algorithm", Required: true},
			{Name: "limit", Required: true},
			{Name: "window"},
			{Name: "segments"},
			{Name: "tokens_per_period"},
			{Name: "period"},
			{Name: "partition"},
			{Name: "idle_timeout"},
		},
		Blocks: []hcl.BlockHeaderSchema{{Type: "queue"}},
	}
	rateLimitQueueSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{
			{Name: "limit", Required: true},
			{Name: "order"},
		},
	}
	// rateLimitArgs are the arguments only some algorithms take.
	rateLimitArgs = map[RateLimitAlgorithm][]string{
		FixedWindow:   {"window"},
		SlidingWindow: {"window", "segments"},
		TokenBucket:   {"tokens_per_period", "period"},
	}
	// rateLimitRequired are those of rateLimitArgs an algorithm requires.
	rateLimitRequired = map[RateLimitAlgorithm][]string{
		FixedWindow:   {"window"},
		SlidingWindow: {"window"},
		TokenBucket:   {"tokens_per_period", "period"},
	}
)

func (d *decoder) decodeRateLimit(b *hcl.Block) {
	name, ok := d.keyedName(b, "Rate limit")
	if !ok {
		return
	}
	if prev := d.cfg.rateLimits[name]; prev != nil {
		d.duplicate(b.DefRange, "Duplicate rate_limit",
			fmt.Sprintf("Rate limit %q was already declared at %s; names must be unique.", name, where(prev.Range)))
		return
	}
	r := &RateLimit{Name: name, IdleTimeout: DefaultRateLimitIdleTimeout, QueueOrder: OldestFirst, Range: b.DefRange}
	d.cfg.rateLimits[name] = r
	d.cfg.RateLimits = append(d.cfg.RateLimits, r)

	content, diags := b.Body.Content(rateLimitSchema)
	d.add(diags...)
	at := content.Attributes
	algoKnown := false
	if a := at["algorithm"]; a != nil {
		if v, ok := d.enum(a, string(FixedWindow), string(SlidingWindow), string(TokenBucket)); ok {
			r.Algorithm, algoKnown = RateLimitAlgorithm(v), true
		}
	}
	limitOK := false
	if a := at["limit"]; a != nil {
		r.Limit, limitOK = d.rateCount(a, "limit", 1, "A rate limit's limit is the permits per window, or a token bucket's size")
	}
	if algoKnown {
		// Arguments of another algorithm are mistakes, not ignored: a
		// window on a token bucket would silently do nothing.
		for _, arg := range []string{"window", "segments", "tokens_per_period", "period"} {
			a := at[arg]
			if a == nil || slices.Contains(rateLimitArgs[r.Algorithm], arg) {
				continue
			}
			d.add(&hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Unsupported argument",
				Detail: fmt.Sprintf("Argument %q does not apply to algorithm %q, which takes %s.",
					arg, r.Algorithm, rateLimitTakes(r.Algorithm)),
				Subject: a.NameRange.Ptr(),
			})
			delete(at, arg)
		}
		for _, arg := range rateLimitRequired[r.Algorithm] {
			if at[arg] == nil {
				d.add(&hcl.Diagnostic{
					Severity: hcl.DiagError,
					Summary:  "Missing required argument",
					Detail:   fmt.Sprintf("The argument %q is required for algorithm %q, but no definition was found.", arg, r.Algorithm),
					Subject:  b.Body.MissingItemRange().Ptr(),
				})
			}
		}
	}
	windowOK := false
	if a := at["window"]; a != nil {
		r.Window, windowOK = d.rateDuration(a, "window")
	}
	if a := at["segments"]; a != nil {
		if n, ok := d.segments(a); ok {
			switch {
			case windowOK && time.Duration(n)*time.Millisecond > r.Window:
				d.errorAt(a, "Invalid segments", "A sliding window of %v has at most %d segments (a segment is at least 1ms); got %d.", r.Window, r.Window.Milliseconds(), n)
			default:
				r.Segments = int(n)
			}
		}
	} else if r.Algorithm == SlidingWindow {
		r.Segments = DefaultRateLimitSegments
		if windowOK && time.Duration(r.Segments)*time.Millisecond > r.Window {
			d.errorAt(at["window"], "Invalid window", "A sliding window with the default %d segments must be at least %dms (a segment is at least 1ms); got %v. Set segments to divide it in fewer.",
				DefaultRateLimitSegments, DefaultRateLimitSegments, r.Window)
		}
	}
	if a := at["tokens_per_period"]; a != nil {
		if n, ok := d.rateCount(a, "tokens_per_period", 1, "A token bucket's tokens_per_period are the tokens added after every period"); ok {
			if limitOK && n > r.Limit {
				d.errorAt(a, "Invalid tokens_per_period", "A token bucket's tokens_per_period may not exceed its limit, %d (the bucket's size); got %d.", r.Limit, n)
			} else {
				r.TokensPerPeriod = n
			}
		}
	}
	if a := at["period"]; a != nil {
		if p, ok := d.rateDuration(a, "period"); ok {
			r.Period = p
			if limitOK && r.TokensPerPeriod > 0 {
				// The same integer arithmetic as ratelimit.TokenBucket.
				periods := (r.Limit + r.TokensPerPeriod - 1) / r.TokensPerPeriod
				if periods > int64(MaxRateLimitWindow/p) {
					d.errorAt(a, "Invalid period", "An empty bucket of %d tokens, %d per period of %v, takes %d periods to fill: longer than 100 years. Use a shorter period or more tokens_per_period.",
						r.Limit, r.TokensPerPeriod, p, periods)
				}
			}
		}
	}
	if a := at["partition"]; a != nil {
		r.Partition = d.policyRefOf(a, "rate_limit", name)
	}
	if a := at["idle_timeout"]; a != nil {
		if t, ok := d.positiveDuration(a); ok {
			r.IdleTimeout = t
		}
	}
	var queue *hcl.Block
	for _, qb := range content.Blocks {
		if queue != nil {
			d.duplicate(qb.DefRange, "Duplicate queue block", "A rate_limit has at most one queue block; the first is at "+where(queue.DefRange)+".")
			continue
		}
		queue = qb
		qc, diags := qb.Body.Content(rateLimitQueueSchema)
		d.add(diags...)
		if a := qc.Attributes["limit"]; a != nil {
			r.QueueLimit, _ = d.rateCount(a, "limit", 0, "A queue's limit is how many permits Acquire calls may queue in one limiter (0: no queue)")
		}
		if a := qc.Attributes["order"]; a != nil {
			if v, ok := d.enum(a, string(OldestFirst), string(NewestFirst)); ok {
				r.QueueOrder = QueueOrder(v)
			}
		}
	}
}

// rateLimitTakes lists the algorithm-specific arguments algo takes, for
// messages.
func rateLimitTakes(algo RateLimitAlgorithm) string {
	args := rateLimitArgs[algo]
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = fmt.Sprintf("%q", a)
	}
	return strings.Join(quoted, " and ")
}

// rateCount decodes a count of a rate limit: a whole number in
// [min, MaxRateLimit]. what introduces the message.
func (d *decoder) rateCount(a *hcl.Attribute, arg string, min int64, what string) (int64, bool) {
	v, ok := d.eval(a, cty.Number, true)
	if !ok {
		return 0, false
	}
	bf := v.AsBigFloat()
	n, acc := bf.Int64()
	if !bf.IsInt() || acc != big.Exact || n < min || n > MaxRateLimit {
		d.errorAt(a, "Invalid "+arg, "%s: a whole number from %d to %d; got %s.", what, min, int64(MaxRateLimit), bf.Text('f', -1))
		return 0, false
	}
	return n, true
}

// segments decodes a sliding window's segments: a whole number in
// [1, MaxRateLimitSegments]. (ratelimit takes 0 for the default; here the
// default is asked for by leaving the argument out.)
func (d *decoder) segments(a *hcl.Attribute) (int64, bool) {
	v, ok := d.eval(a, cty.Number, true)
	if !ok {
		return 0, false
	}
	bf := v.AsBigFloat()
	n, acc := bf.Int64()
	if !bf.IsInt() || acc != big.Exact || n < 1 || n > MaxRateLimitSegments {
		d.errorAt(a, "Invalid segments", "A sliding window's segments must be a whole number from 1 to %d (leave it out for the default, %d); got %s.",
			MaxRateLimitSegments, DefaultRateLimitSegments, bf.Text('f', -1))
		return 0, false
	}
	return n, true
}

// rateDuration decodes a window or period: in [1ms, MaxRateLimitWindow],
// whole milliseconds (the scripts count in milliseconds).
func (d *decoder) rateDuration(a *hcl.Attribute, arg string) (time.Duration, bool) {
	v, ok := d.duration(a)
	if !ok {
		return 0, false
	}
	switch {
	case v < time.Millisecond || v > MaxRateLimitWindow:
		d.errorAt(a, "Invalid "+arg, "A rate limit's %s must be from 1ms to 100 years; got %v.", arg, v)
	case v%time.Millisecond != 0:
		d.errorAt(a, "Invalid "+arg, "A rate limit's %s must be a whole number of milliseconds; got %v.", arg, v)
	default:
		return v, true
	}
	return 0, false
}
