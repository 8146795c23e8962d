package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/internal/script"
	"github.com/redis/rueidis"
)

// Policy describes a limiter's limit, e.g. for RateLimit-Policy headers.
type Policy struct {
	Algorithm Algorithm
	// Limit is the permits per window, or a token bucket's size.
	Limit int64
	// Window is the window's length; for a token bucket, the time an
	// empty bucket takes to fill (whole periods).
	Window          time.Duration
	Segments        int           // sliding window only
	TokensPerPeriod int64         // token bucket only
	Period          time.Duration // token bucket only
}

// Result is one decision.
type Result struct {
	// Acquired reports whether the permits were granted.
	Acquired bool
	// Remaining is the permits available after the decision, as the
	// server counted them (other processes may take some at once). For a
	// request of more permits than the limit whose peek failed, it is the
	// latest count known.
	Remaining int64
	// RetryAfter, when not acquired, is how long until the permits asked
	// for would be available if nobody else took any, as the server
	// computed it, so a retry is never early. It is 0 when acquired and
	// when the request can never succeed (more permits than the limit).
	RetryAfter time.Duration
	// ResetAfter is how long until more permits become available: the
	// end of the fixed window, the end of the sliding window's oldest
	// segment still counted, or the bucket's next refill; 0 when nothing
	// is consumed.
	ResetAfter time.Duration
	// Limit is the limiter's limit, and Window its window (a token
	// bucket's time to fill from empty): what RateLimit-Policy headers
	// announce.
	Limit  int64
	Window time.Duration
	// ServerTime is the server's clock when it decided; zero when the
	// server was not asked, or answered through INCREX (no clock in its
	// reply).
	ServerTime time.Time
}

// Statistics are a Limiter's counts since it was made.
type Statistics struct {
	// Available is the permits available in the latest reply (other
	// processes may have taken some since).
	Available int64
	// Queued is the permits of the Acquire calls queued now.
	Queued int64
	// Granted and Rejected count decisions: TryAcquire, Acquire and their
	// conveniences that returned acquired or not acquired. Calls that
	// ended with an error count in neither.
	Granted, Rejected int64
}

// Limiter is one key's rate limit. Its methods are safe for concurrent
// use. Close it when done to refuse queued and later calls; it holds a
// goroutine only while calls are queued.
type Limiter struct {
	ls     *Limiters
	key    string // prefix included
	policy Policy
	script *script.Script
	args   []string // the script's arguments after consume, need and limit
	limit  string
	fixed  bool // may use INCREX
	window string

	queueLimit int64
	order      QueueOrder

	available atomic.Int64
	granted   atomic.Int64
	rejected  atomic.Int64

	mu       sync.Mutex
	q        queue
	inflight *waiter       // the queued call whose retry the dispatcher has sent
	running  bool          // the dispatcher goroutine runs
	kick     chan struct{} // tells the dispatcher its head changed
	closed   chan struct{}
	isClosed bool
	busy     int       // calls under way (TryAcquire or Acquire)
	idleFrom time.Time // when busy and the queue last became 0
	done     sync.WaitGroup
	stop     context.CancelFunc // cancels the dispatcher's attempt on Close
	stopCtx  context.Context
}

func (l *Limiters) newLimiter(key string, pol Policy, queueLimit int64, order QueueOrder, s *script.Script, args []string, fixed bool) (*Limiter, error) {
	full, err := l.space.Key(key)
	if err != nil {
		return nil, fmt.Errorf("%w: ratelimit: %w", primitives.ErrInvalidKey, err)
	}
	if err := checkCount("QueueLimit", queueLimit, 0); err != nil {
		return nil, err
	}
	if order != OldestFirst && order != NewestFirst {
		return nil, fmt.Errorf("%w: ratelimit: QueueOrder %d is neither OldestFirst nor NewestFirst", primitives.ErrInvalidOptions, int(order))
	}
	lim := &Limiter{
		ls: l, key: full, policy: pol, script: s, args: args,
		limit: strconv.FormatInt(pol.Limit, 10), fixed: fixed,
		queueLimit: queueLimit, order: order,
		kick: make(chan struct{}, 1), closed: make(chan struct{}),
		idleFrom: l.clk.Now(),
	}
	if fixed {
		lim.window = args[0]
	}
	lim.stopCtx, lim.stop = context.WithCancel(context.Background())
	lim.available.Store(pol.Limit)
	return lim, nil
}

// usable reports whether l was made by a Limiters method. A nil or zero
// Limiter answers empty accessors, and its calls fail with
// primitives.ErrInvalidOptions instead of panicking.
func (l *Limiter) usable() bool { return l != nil && l.ls != nil }

// Key returns the limiter's Redis key, prefix included.
func (l *Limiter) Key() string {
	if !l.usable() {
		return ""
	}
	return l.key
}

// Policy returns the limiter's limit.
func (l *Limiter) Policy() Policy {
	if !l.usable() {
		return Policy{}
	}
	return l.policy
}

// Statistics returns the limiter's counts. Safe to call at any time.
func (l *Limiter) Statistics() Statistics {
	if !l.usable() {
		return Statistics{}
	}
	l.mu.Lock()
	queued := l.q.permits
	l.mu.Unlock()
	return Statistics{Available: l.available.Load(), Queued: queued, Granted: l.granted.Load(), Rejected: l.rejected.Load()}
}

// IdleDuration reports how long the limiter has had no call under way and
// nothing queued, and false while it has (a partitioned limiter closes
// limiters idle for long enough; their state stays in Redis).
func (l *Limiter) IdleDuration() (time.Duration, bool) {
	if !l.usable() {
		return 0, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.busy > 0 || l.q.len() > 0 {
		return 0, false
	}
	return l.ls.clk.Now().Sub(l.idleFrom), true
}

// Close refuses later calls and ends queued Acquire calls with an error
// matching primitives.ErrClosed; it waits for the queue's goroutine to
// end. A call whose script was already sent may still consume permits.
// State in Redis is left alone. Idempotent.
func (l *Limiter) Close() error {
	if !l.usable() {
		return fmt.Errorf("%w: ratelimit: nil or zero Limiter (use a Limiters method)", primitives.ErrInvalidOptions)
	}
	l.mu.Lock()
	if l.isClosed {
		l.mu.Unlock()
		return nil
	}
	l.isClosed = true
	close(l.closed)
	for w := l.q.popFront(); w != nil; w = l.q.popFront() {
		w.finish(Result{}, l.closedErr())
	}
	l.mu.Unlock()
	l.stop()
	l.done.Wait()
	return nil
}

func (l *Limiter) closedErr() error {
	return fmt.Errorf("%w: ratelimit: limiter %q was closed", primitives.ErrClosed, l.key)
}

// begin marks a call under way; end marks it over.
func (l *Limiter) begin() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.isClosed {
		return l.closedErr()
	}
	l.busy++
	return nil
}

func (l *Limiter) end() {
	l.mu.Lock()
	l.busy--
	if l.busy == 0 && l.q.len() == 0 {
		l.idleFrom = l.ls.clk.Now()
	}
	l.mu.Unlock()
}

// checkCall validates a call's arguments. It reports whether n can never
// be granted.
func (l *Limiter) checkCall(ctx context.Context, n int64) (never bool, err error) {
	if !l.usable() {
		return false, fmt.Errorf("%w: ratelimit: nil or zero Limiter (use a Limiters method)", primitives.ErrInvalidOptions)
	}
	if err := checkArgs(ctx, n); err != nil {
		return false, err
	}
	return n > l.policy.Limit, nil
}

// checkArgs checks the arguments every decision takes: a context and a
// permit count that is not negative.
func checkArgs(ctx context.Context, n int64) error {
	if ctx == nil {
		return fmt.Errorf("%w: ratelimit: nil context", primitives.ErrInvalidOptions)
	}
	if n < 0 {
		return fmt.Errorf("%w: %d", ErrInvalidPermits, n)
	}
	return nil
}

// never is the result for more permits than the limit: refused without
// RetryAfter. A peek (consuming nothing) fills in Remaining and
// ResetAfter, so headers built from it do not claim quota is back now;
// if the peek fails, the latest count known stands in, without an error,
// since the answer does not depend on the server.
func (l *Limiter) never(ctx context.Context) Result {
	l.rejected.Add(1)
	res, _, err := l.decide(ctx, 0, 1)
	if err != nil {
		res = Result{Remaining: l.available.Load(), Limit: l.policy.Limit, Window: l.policy.Window}
	}
	res.Acquired, res.RetryAfter = false, 0
	return res
}

// TryAcquire decides once whether n permits are granted, and never waits
// or queues. n = 0 consumes nothing and reports whether a permit is
// available. More permits than the limit are refused (Acquired false,
// RetryAfter 0, no error; a peek that consumes nothing fills in
// Remaining and ResetAfter).
//
// Errors: ErrInvalidPermits (n < 0), primitives.ErrClosed,
// primitives.ErrWrongType (the key holds something this limiter did not
// write; nothing written), ctx.Err() and transport errors. After an error
// the permits may have been consumed on the server.
func (l *Limiter) TryAcquire(ctx context.Context, n int64) (Result, error) {
	return l.run(ctx, n, (*Limiter).tryAcquire)
}

// run checks a call's arguments, marks it under way for its whole length
// and runs decide (tryAcquire or acquire).
func (l *Limiter) run(ctx context.Context, n int64, decide func(*Limiter, context.Context, int64, bool) (Result, error)) (Result, error) {
	never, err := l.checkCall(ctx, n)
	if err != nil {
		return Result{}, err
	}
	if err := l.begin(); err != nil {
		return Result{}, err
	}
	defer l.end()
	return decide(l, ctx, n, never)
}

// tryAcquire is TryAcquire after its checks and begin.
func (l *Limiter) tryAcquire(ctx context.Context, n int64, never bool) (Result, error) {
	if never {
		return l.never(ctx), nil
	}
	res, _, err := l.decide(ctx, n, max(n, 1))
	return l.count(res, err)
}

// count records a decision in the statistics.
func (l *Limiter) count(res Result, err error) (Result, error) {
	switch {
	case err != nil:
	case res.Acquired:
		l.granted.Add(1)
	default:
		l.rejected.Add(1)
	}
	return res, err
}

// decide runs one decision on the server: consume permits if need are
// available. It also returns when the reply arrived, which RetryAfter
// counts from.
func (l *Limiter) decide(ctx context.Context, consume, need int64) (Result, time.Time, error) {
	if l.fixed && consume > 0 && l.ls.fast.try(l.ls.clk.Now()) {
		res, ok, err := l.increx(ctx, consume)
		if ok || err != nil {
			return res, l.ls.clk.Now(), matchCtx(ctx, err)
		}
	}
	args := make([]string, 0, 3+len(l.args))
	args = append(args, strconv.FormatInt(consume, 10), strconv.FormatInt(need, 10), l.limit)
	args = append(args, l.args...)
	vals, err := l.script.Run(ctx, l.ls.client, []string{l.key}, args).ToArray()
	got := l.ls.clk.Now()
	if err != nil {
		return Result{}, got, matchCtx(ctx, l.scriptErr(err))
	}
	res, err := l.parse(vals, need)
	if err != nil {
		return Result{}, got, err
	}
	l.available.Store(res.Remaining)
	return res, got, nil
}

func (l *Limiter) scriptErr(err error) error {
	err = l.script.Classify(err)
	var se *script.Error
	if errors.As(err, &se) {
		switch se.Code {
		case script.CodeWrongType, script.CodeWrongKind:
			return fmt.Errorf("%w: ratelimit: key %q: %s", primitives.ErrWrongType, l.key, se.Msg)
		}
	}
	return fmt.Errorf("ratelimit: key %q: %w", l.key, err)
}

// matchCtx makes an error that ended a call whose ctx is over match
// ctx.Err() (DESIGN §2), e.g. a dial timeout rueidis hit on the caller's
// ctx, or one a shared dial handed to every waiter.
func matchCtx(ctx context.Context, err error) error {
	if err == nil {
		return err
	}
	cause := ctx.Err()
	if dl, ok := ctx.Deadline(); cause == nil && ok && !time.Now().Before(dl) {
		// The deadline has passed, but ctx's timer has not fired yet.
		cause = context.DeadlineExceeded
	}
	if cause == nil || errors.Is(err, cause) {
		return err
	}
	return fmt.Errorf("%w: %w", cause, err)
}

// parse reads the scripts' {granted, remaining, retry_us, reset_us,
// now_us}, refusing a reply of another shape, and a refusal that does not
// say when to retry (need is at most the limit, so it can come back).
func (l *Limiter) parse(vals []rueidis.RedisMessage, need int64) (Result, error) {
	if len(vals) != 5 {
		return Result{}, fmt.Errorf("ratelimit: key %q: script %s answered %d values, want 5", l.key, l.script.Name(), len(vals))
	}
	var n [5]int64
	for i := range vals {
		v, err := vals[i].AsInt64()
		if err != nil || v < 0 {
			return Result{}, fmt.Errorf("ratelimit: key %q: script %s answered an unreadable value %d", l.key, l.script.Name(), i+1)
		}
		n[i] = v
	}
	if n[0] > 1 || n[1] > l.policy.Limit || (n[0] == 0 && need <= l.policy.Limit && n[2] == 0) {
		return Result{}, fmt.Errorf("ratelimit: key %q: script %s answered granted=%d remaining=%d retry_us=%d for a limit of %d", l.key, l.script.Name(), n[0], n[1], n[2], l.policy.Limit)
	}
	return Result{
		Acquired:   n[0] == 1,
		Remaining:  n[1],
		RetryAfter: micros(n[2]),
		ResetAfter: micros(n[3]),
		Limit:      l.policy.Limit,
		Window:     l.policy.Window,
		ServerTime: time.UnixMicro(n[4]),
	}, nil
}

// micros converts a count of microseconds from a reply, capped so it
// cannot overflow a Duration.
func micros(us int64) time.Duration {
	if us > int64(MaxWindow/time.Microsecond)*2 {
		us = int64(MaxWindow/time.Microsecond) * 2
	}
	return time.Duration(us) * time.Microsecond
}
