package ratelimit

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/coordhost/coordhost/lua"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/internal/clock"
	"github.com/coordhost/coordhost/primitives/internal/keys"
	"github.com/coordhost/coordhost/primitives/internal/script"
	"github.com/redis/rueidis"
)

// Bounds of the options, checked by the Limiters' constructors before
// anything is sent.
const (
	// MaxLimit is the largest limit, bucket size, TokensPerPeriod or
	// QueueLimit accepted (10^15): every sum of counts stays exact on the
	// server.
	MaxLimit = lua.MaxCount
	// MaxWindow is the longest window or period accepted: 100 years. A
	// token bucket must also fill from empty within it.
	MaxWindow = time.Duration(lua.MaxTTLMillis) * time.Millisecond
	// MaxSegments is the most segments a sliding window may have: each
	// decision reads every live segment.
	MaxSegments = 1000
	// DefaultSegments is a sliding window's segment count when
	// SlidingWindowOptions.Segments is 0.
	DefaultSegments = 10
)

// Errors of this package (see also the primitives sentinels).
var (
	// ErrInvalidPermits: a negative permit count. Nothing was sent.
	ErrInvalidPermits = errors.New("ratelimit: permit count must not be negative")
	// ErrExceedsLimit: Wait or WaitN asked for more permits than the
	// limit, which can never be granted.
	ErrExceedsLimit = errors.New("ratelimit: more permits than the limit")
	// ErrQueueFull: Wait or WaitN could not queue (the queue holds
	// QueueLimit permits already) and its ctx ends before the server said
	// the permits would be back; the error also matches
	// ErrWouldExceedDeadline.
	ErrQueueFull = errors.New("ratelimit: queue full")
	// ErrWouldExceedDeadline: Wait or WaitN was refused, and the permits
	// will not be back before its ctx's deadline.
	ErrWouldExceedDeadline = errors.New("ratelimit: permits not available before the context's deadline")
)

// QueueOrder is the order in which a Limiter's queued Acquire calls are
// served.
type QueueOrder int

const (
	// OldestFirst serves queued calls in arrival order, and a new call
	// queues behind them when any is queued.
	OldestFirst QueueOrder = iota
	// NewestFirst serves the latest call first; when the queue is full,
	// the oldest queued calls are refused to make room.
	NewestFirst
)

func (o QueueOrder) String() string {
	switch o {
	case OldestFirst:
		return "oldest_first"
	case NewestFirst:
		return "newest_first"
	}
	return "QueueOrder(" + strconv.Itoa(int(o)) + ")"
}

// Algorithm names a limiter's algorithm.
type Algorithm int

// The algorithms, as Policy.Algorithm reports them.
const (
	FixedWindowAlgorithm   Algorithm = iota + 1 // Limiters.FixedWindow
	SlidingWindowAlgorithm                      // Limiters.SlidingWindow
	TokenBucketAlgorithm                        // Limiters.TokenBucket
)

func (a Algorithm) String() string {
	switch a {
	case FixedWindowAlgorithm:
		return "fixed_window"
	case SlidingWindowAlgorithm:
		return "sliding_window"
	case TokenBucketAlgorithm:
		return "token_bucket"
	}
	return "Algorithm(" + strconv.Itoa(int(a)) + ")"
}

// Options configure Limiters. The zero value is valid: no key prefix.
type Options struct {
	// Prefix is prepended to every limiter key.
	Prefix string
}

// Limiters makes rate limiters on one client, and holds what they share:
// the key prefix and whether the server has INCREX. Safe for concurrent
// use; create one per client. It owns no goroutines and needs no Close.
type Limiters struct {
	client rueidis.Client
	space  keys.Space
	clk    clock.Clock
	fast   fastPath
}

// New returns Limiters on client. It sends nothing. Errors wrap
// primitives.ErrInvalidOptions.
func New(client rueidis.Client, opts Options) (*Limiters, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: ratelimit: nil rueidis client", primitives.ErrInvalidOptions)
	}
	l := &Limiters{client: client, space: keys.Space{Prefix: opts.Prefix}, clk: clock.Real}
	l.fast.interval = DefaultProbeInterval
	return l, nil
}

// FixedWindowOptions configure a fixed-window limiter: at most Limit
// permits per Window, the window starting with the first permit consumed.
type FixedWindowOptions struct {
	Limit      int64         // permits per window, in [1, MaxLimit]; required
	Window     time.Duration // in [1ms, MaxWindow], whole milliseconds; required
	QueueLimit int64         // permits Acquire may queue, in [0, MaxLimit]; 0 means no queue
	QueueOrder QueueOrder    // OldestFirst (the zero value) or NewestFirst
}

// SlidingWindowOptions configure a sliding-window limiter: at most Limit
// permits in any interval of length Window, counted in Segments.
type SlidingWindowOptions struct {
	Limit  int64         // permits per window, in [1, MaxLimit]; required
	Window time.Duration // in [1ms, MaxWindow], whole milliseconds; required
	// Segments divide the window; a permit comes back at most one segment
	// (Window/Segments) late. 0 means DefaultSegments; at most MaxSegments
	// and at most one per millisecond of the window.
	Segments   int
	QueueLimit int64      // permits Acquire may queue, in [0, MaxLimit]; 0 means no queue
	QueueOrder QueueOrder // OldestFirst (the zero value) or NewestFirst
}

// TokenBucketOptions configure a token-bucket limiter: a bucket of Limit
// tokens, TokensPerPeriod added after every whole Period.
type TokenBucketOptions struct {
	Limit           int64         // the bucket's size, in [1, MaxLimit]; required
	TokensPerPeriod int64         // tokens added per period, in [1, Limit]; required
	Period          time.Duration // in [1ms, MaxWindow], whole milliseconds; required
	QueueLimit      int64         // permits Acquire may queue, in [0, MaxLimit]; 0 means no queue
	QueueOrder      QueueOrder    // OldestFirst (the zero value) or NewestFirst
}

var (
	fixedScript   = script.New("ratelimit_fixed", lua.RateLimitFixed)
	slidingScript = script.New("ratelimit_sliding", lua.RateLimitSliding)
	bucketScript  = script.New("ratelimit_bucket", lua.RateLimitBucket)
)

// FixedWindow returns a fixed-window limiter for key. It sends nothing.
// Errors: primitives.ErrInvalidKey, primitives.ErrInvalidOptions naming the
// field.
func (l *Limiters) FixedWindow(key string, o FixedWindowOptions) (*Limiter, error) {
	if err := l.check(); err != nil {
		return nil, err
	}
	if err := checkCount("Limit", o.Limit, 1); err != nil {
		return nil, err
	}
	window, err := checkDuration("Window", o.Window)
	if err != nil {
		return nil, err
	}
	pol := Policy{Algorithm: FixedWindowAlgorithm, Limit: o.Limit, Window: o.Window}
	return l.newLimiter(key, pol, o.QueueLimit, o.QueueOrder, fixedScript, []string{window}, true)
}

// SlidingWindow returns a sliding-window limiter for key. It sends
// nothing. Errors: primitives.ErrInvalidKey, primitives.ErrInvalidOptions
// naming the field.
func (l *Limiters) SlidingWindow(key string, o SlidingWindowOptions) (*Limiter, error) {
	if err := l.check(); err != nil {
		return nil, err
	}
	if err := checkCount("Limit", o.Limit, 1); err != nil {
		return nil, err
	}
	window, err := checkDuration("Window", o.Window)
	if err != nil {
		return nil, err
	}
	segments := o.Segments
	if segments == 0 {
		segments = DefaultSegments
	}
	if segments < 1 || segments > MaxSegments {
		return nil, fmt.Errorf("%w: ratelimit: Segments %d is outside [1, %d]", primitives.ErrInvalidOptions, o.Segments, MaxSegments)
	}
	if time.Duration(segments)*time.Millisecond > o.Window {
		return nil, fmt.Errorf("%w: ratelimit: Segments %d exceed the Window of %v (a segment is at least 1ms)", primitives.ErrInvalidOptions, segments, o.Window)
	}
	pol := Policy{Algorithm: SlidingWindowAlgorithm, Limit: o.Limit, Window: o.Window, Segments: segments}
	return l.newLimiter(key, pol, o.QueueLimit, o.QueueOrder, slidingScript, []string{window, strconv.Itoa(segments)}, false)
}

// TokenBucket returns a token-bucket limiter for key. It sends nothing.
// Errors: primitives.ErrInvalidKey, primitives.ErrInvalidOptions naming the
// field (also when filling an empty bucket would take longer than
// MaxWindow).
func (l *Limiters) TokenBucket(key string, o TokenBucketOptions) (*Limiter, error) {
	if err := l.check(); err != nil {
		return nil, err
	}
	if err := checkCount("Limit", o.Limit, 1); err != nil {
		return nil, err
	}
	if err := checkCount("TokensPerPeriod", o.TokensPerPeriod, 1); err != nil {
		return nil, err
	}
	if o.TokensPerPeriod > o.Limit {
		return nil, fmt.Errorf("%w: ratelimit: TokensPerPeriod %d exceeds the Limit %d", primitives.ErrInvalidOptions, o.TokensPerPeriod, o.Limit)
	}
	period, err := checkDuration("Period", o.Period)
	if err != nil {
		return nil, err
	}
	periods := (o.Limit + o.TokensPerPeriod - 1) / o.TokensPerPeriod
	if periods > int64(MaxWindow/o.Period) {
		return nil, fmt.Errorf("%w: ratelimit: an empty bucket of %d tokens takes %d periods of %v to fill, longer than %v", primitives.ErrInvalidOptions, o.Limit, periods, o.Period, MaxWindow)
	}
	pol := Policy{Algorithm: TokenBucketAlgorithm, Limit: o.Limit, Window: time.Duration(periods) * o.Period, TokensPerPeriod: o.TokensPerPeriod, Period: o.Period}
	return l.newLimiter(key, pol, o.QueueLimit, o.QueueOrder, bucketScript, []string{strconv.FormatInt(o.TokensPerPeriod, 10), period}, false)
}

func (l *Limiters) check() error {
	if l == nil || l.client == nil {
		return fmt.Errorf("%w: ratelimit: nil or zero Limiters (use New)", primitives.ErrInvalidOptions)
	}
	return nil
}

func checkCount(field string, n, min int64) error {
	if n < min || n > MaxLimit {
		return fmt.Errorf("%w: ratelimit: %s %d is outside [%d, %d]", primitives.ErrInvalidOptions, field, n, min, int64(MaxLimit))
	}
	return nil
}

// checkDuration validates a window or period and returns it in
// milliseconds for the script.
func checkDuration(field string, d time.Duration) (string, error) {
	if d < time.Millisecond || d > MaxWindow {
		return "", fmt.Errorf("%w: ratelimit: %s %v is outside [1ms, %v]", primitives.ErrInvalidOptions, field, d, MaxWindow)
	}
	if d%time.Millisecond != 0 {
		return "", fmt.Errorf("%w: ratelimit: %s %v is not a whole number of milliseconds", primitives.ErrInvalidOptions, field, d)
	}
	return strconv.FormatInt(d.Milliseconds(), 10), nil
}
