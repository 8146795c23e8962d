// Package latch implements distributed countdown latches over a
// caller-owned rueidis.Client: a count that participants decrement and
// waiters wait on, in generations.
//
// A latch is one Redis hash holding its current generation (a random
// token) and that generation's remaining count. Create starts a generation
// where there is none; Reset starts a new one whatever is there (create or
// replace); Join returns the current one. CountDown decrements the count of
// its handle's generation, atomically and never below zero; Wait returns
// true once that generation's count reached zero and false once the
// generation was replaced or the key deleted (or expired). Because every
// handle names its generation, a late count-down from earlier work can
// never decrement a replacement: it returns -1.
//
// # How long a latch lives
//
// Every change (Create, Reset, CountDown) sets the key to expire
// Options.TTL after it: DefaultTTL, 24 hours, unless configured; NoExpiry
// keeps it until it is deleted. So a latch in use never expires under its
// participants, an abandoned one is gone a TTL after its last change, and a
// completed one stays readable for a whole TTL after its final count-down:
// a late Join finds it (count 0) and a late Wait returns true. Reads (Join,
// Count, Wait) never extend it. Delete ends a generation early. When the
// key expires, its waiters return false, CountDown returns -1 and Join
// fails with ErrNotFound, as after a delete. Create refuses to overwrite a
// latch that is still there, completed or not (ErrExists); Reset replaces
// it.
//
// A Reset right after a completion does not rob slow waiters of it: the
// hash remembers the most recent replaced generation that had completed,
// and that generation's waiters (and Count) still report completion. Older
// completions are forgotten; their waiters return false.
//
// # Waiting
//
// Wait never polls blindly. A waiter registers with the wait engine
// (primitives.Waiter) before it reads: in tracking mode the read itself,
// made on the engine's tracking connection, registers the key, so any
// later change of it sends an invalidation; in channel mode (cluster or
// RESP2 clients) the engine has SUBSCRIBEd to the latch's channel, on which
// the final count-down, a reset and a delete publish. After every wake-up
// the waiter reads again. It also reads again at the key's expiry and at
// least every Options.RecheckInterval (2 s by default) without any
// notification: notifications are hints that can be lost (a reconnect, a
// DEL from outside in channel mode), and that bounded re-read turns a lost
// one into a delay of at most the interval instead of a waiter that never
// returns. It costs one read per interval per latch per process, not per
// waiter: local waiters of one generation share one reader (only the
// oldest reads; the others take the outcome it found).
//
// # What the guarantees rest on
//
// The count and generation live in Redis and follow its persistence and
// failover guarantees (see package lock): a failover or restore can roll
// back count-downs and resets. A write (Create, Reset, CountDown, Delete)
// whose reply is lost may or may not have happened: the error matches
// primitives.ErrUncertain, and Join or Count tell what the latch holds now.
// Writes are never retried: a decrement is not idempotent, and a create,
// reset or delete sent again could land after another client's reset or
// delete and take effect twice. Options.Retry retries reads only. Every
// script validates its arguments and the hash before writing, and
// touches one key, so latches work in Redis Cluster without hash tags.
// The ACL a user needs: EVALSHA and EVAL with, inside, HMGET, EXISTS,
// HSET, HINCRBY, DEL, PEXPIRE, PERSIST, PTTL and PUBLISH on the keys and
// channels under Options.Prefix, plus SUBSCRIBE or client tracking for
// waiting.
package latch

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordhost/coordhost/lua"
	"github.com/coordhost/coordhost/policies"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/internal/base"
	"github.com/coordhost/coordhost/primitives/internal/handle"
	"github.com/coordhost/coordhost/primitives/internal/keys"
	"github.com/coordhost/coordhost/primitives/internal/script"
	"github.com/coordhost/coordhost/primitives/internal/wait"
	"github.com/redis/rueidis"
)

// Defaults and limits.
const (
	// DefaultTTL is how long a latch outlives its last change when
	// Options.TTL is 0.
	DefaultTTL = 24 * time.Hour
	// NoExpiry, as Options.TTL, keeps latches until they are deleted.
	NoExpiry time.Duration = -1
	// MaxTTL is the longest Options.TTL: 100 years.
	MaxTTL = handle.MaxTTL
	// MaxCount is the largest count: 2^53-1, the largest integer the
	// scripts' Lua numbers hold exactly.
	MaxCount = 1<<53 - 1
	// DefaultRecheckInterval bounds how long a waiter goes without reading
	// the latch when no notification comes (Options.RecheckInterval).
	DefaultRecheckInterval = 2 * time.Second
	// MinRecheckInterval is the shortest Options.RecheckInterval.
	MinRecheckInterval = 10 * time.Millisecond
)

// Errors of this package (see also the primitives sentinels).
var (
	// ErrExists: Create found a latch at the key (completed or not);
	// nothing was written. Join it, or Reset it.
	ErrExists = errors.New("latch: a latch exists at the key")
	// ErrNotFound: Join found no latch at the key.
	ErrNotFound = errors.New("latch: no latch at the key")
	// ErrCompleted: CountDown on a generation whose count is already zero;
	// nothing was written.
	ErrCompleted = errors.New("latch: the generation is already complete")
	// ErrInvalidCount: a count below zero or above MaxCount; nothing was
	// sent.
	ErrInvalidCount = errors.New("latch: invalid count")
	// ErrInvalidGeneration: Attach with an empty generation; nothing was
	// sent.
	ErrInvalidGeneration = errors.New("latch: invalid generation")
)

var (
	setScript       = script.New("latch_set", lua.LatchSet)
	countDownScript = script.New("latch_count_down", lua.LatchCountDown)
	readScript      = script.New("latch_read", lua.LatchRead)
	deleteScript    = script.New("latch_delete", lua.LatchDelete)
)

// Options configure Latches. The zero value is valid: no prefix, latches
// expiring DefaultTTL after their last change, no retries, a private
// Waiter, a re-read every DefaultRecheckInterval while waiting.
type Options struct {
	// Prefix is prepended to every latch key.
	Prefix string
	// TTL is how long a latch outlives its last change (Create, Reset,
	// CountDown): 0 means DefaultTTL, NoExpiry means never; otherwise
	// whole milliseconds (rounded up) from 1ms to MaxTTL.
	TTL time.Duration
	// Retry decides how reads retry after a transient error (a lost
	// connection or reply): Join, Count and a waiter's re-reads. The
	// policy sees Reason policies.ReasonError only, with Attempt and
	// Elapsed counting the current run of failures; a GiveUp returns the
	// last error. It never bounds how long Wait waits for the count (use
	// ctx). Writes (Create, Reset, CountDown, Delete) are never retried
	// (see "What the guarantees rest on"). Nil means no retries, except
	// that a waiter keeps re-reading through errors, at most every
	// primitives.DefaultPollInterval, until ctx ends.
	Retry policies.RetryPolicy
	// Waiter is the waiting machinery Wait sleeps on: give every primitive
	// on a client the same one (primitives.NewWaiter). Nil means a private
	// Waiter that Close closes. New refuses (primitives.ErrInvalidOptions)
	// a Waiter made for another client, a closed one, or a zero Waiter.
	Waiter *primitives.Waiter
	// RecheckInterval bounds how long a waiter goes without reading the
	// latch when no notification arrives; 0 means DefaultRecheckInterval,
	// at least MinRecheckInterval.
	RecheckInterval time.Duration
}

// Latches creates and joins countdown latches on one client. Safe for
// concurrent use; create one per configuration and share it.
type Latches struct {
	client  rueidis.Client
	space   keys.Space
	ttlMs   string // "0" for NoExpiry
	retry   policies.RetryPolicy
	recheck time.Duration
	engine  *wait.Engine
	owns    bool // engine is private: Close closes it
	closed  atomic.Bool
	closing chan struct{} // closed by Close: ends this Latches' waits
	once    sync.Once

	// queueTag makes this Latches' wait queues its own on a shared Waiter,
	// so each queue's head re-reads at this Latches' RecheckInterval.
	queueTag string

	mu       sync.Mutex
	outcomes map[string]*outcome // by waitID, while local waiters wait
}

// latchesSeq numbers the Latches of a process (queueTag).
var latchesSeq atomic.Uint64

// New returns Latches on client. It sends nothing. Errors wrap
// primitives.ErrInvalidOptions (and primitives.ErrInvalidTTL for a bad
// TTL).
func New(client rueidis.Client, opts Options) (*Latches, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: latch: nil rueidis client", primitives.ErrInvalidOptions)
	}
	ls := &Latches{client: client, space: keys.Space{Prefix: opts.Prefix}, closing: make(chan struct{}),
		outcomes: map[string]*outcome{}, queueTag: "latch/" + strconv.FormatUint(latchesSeq.Add(1), 10) + "/"}
	switch ttl := opts.TTL; {
	case ttl == NoExpiry:
		ls.ttlMs = "0"
	case ttl == 0:
		ls.ttlMs = strconv.FormatInt(DefaultTTL.Milliseconds(), 10)
	default:
		_, ms, err := handle.Millis(ttl)
		if err != nil {
			return nil, fmt.Errorf("%w: latch: TTL (0 for DefaultTTL, NoExpiry for none): %w", primitives.ErrInvalidOptions, err)
		}
		ls.ttlMs = ms
	}
	if p := opts.Retry; p != nil {
		if v, ok := p.(interface{ Validate() error }); ok {
			if err := v.Validate(); err != nil {
				return nil, fmt.Errorf("%w: latch: retry policy: %w", primitives.ErrInvalidOptions, err)
			}
		}
		ls.retry = p
	}
	switch r := opts.RecheckInterval; {
	case r == 0:
		ls.recheck = DefaultRecheckInterval
	case r < MinRecheckInterval:
		return nil, fmt.Errorf("%w: latch: RecheckInterval %v is below %v", primitives.ErrInvalidOptions, r, MinRecheckInterval)
	default:
		ls.recheck = r
	}
	var err error
	if ls.engine, ls.owns, err = wait.For(client, (*wait.Engine)(opts.Waiter)); err != nil {
		return nil, fmt.Errorf("latch: Options.Waiter: %w", err)
	}
	return ls, nil
}

// Close ends the Latches: blocked Wait calls return an error matching
// primitives.ErrClosed, and so do later Create, Reset, Join, Attach and
// Wait calls. A Wait whose read is in flight at that moment returns when
// the read does (bounded by its ctx and the client's timeouts), not at
// once. CountDown, Count and Delete on handles already made keep
// working (they need only the client). It closes the private Waiter (not
// one given in Options.Waiter), never the client. Idempotent.
func (ls *Latches) Close() error {
	ls.closed.Store(true)
	ls.once.Do(func() { close(ls.closing) })
	if ls.owns {
		return ls.engine.Close()
	}
	return nil
}

// isClosed reports whether Close was called or the private Waiter closed.
func (ls *Latches) isClosed() bool {
	return ls.closed.Load() || ls.owns && ls.engine.Closed()
}

// Create starts a latch at key with count (0 to MaxCount; 0 makes a
// latch that is complete at once) and returns a handle on its generation.
// A latch already at key, completed or not, fails with an error matching
// ErrExists that names its generation and count, and nothing is written.
//
// Other errors, all before anything is written: ErrInvalidCount,
// primitives.ErrInvalidKey (empty key, or one in the reserved namespace),
// primitives.ErrInvalidOptions (nil ctx or receiver), primitives.ErrClosed,
// ctx.Err(), primitives.ErrWrongType (the key holds something that is not
// a latch). A transport error, or ctx ending while the script is in
// flight, leaves the outcome unknown: the error matches
// primitives.ErrUncertain, and the latch may exist with a generation no
// handle holds (Join finds it). It is not retried.
func (ls *Latches) Create(ctx context.Context, key string, count int64) (*Latch, error) {
	return ls.set(ctx, "create", key, count)
}

// Reset starts a new generation at key with count, replacing whatever
// latch is there (or creating one): the old generation's waiters return
// false and its count-downs return -1. Errors as for Create, except that
// there is no ErrExists.
func (ls *Latches) Reset(ctx context.Context, key string, count int64) (*Latch, error) {
	return ls.set(ctx, "reset", key, count)
}

func (ls *Latches) set(ctx context.Context, mode, key string, count int64) (*Latch, error) {
	if count < 0 || count > MaxCount {
		return nil, fmt.Errorf("%w: %d is outside [0, %d]", ErrInvalidCount, count, int64(MaxCount))
	}
	l, err := ls.prepare(ctx, key, rand.Text())
	if err != nil {
		return nil, err
	}
	vals, err := setScript.Run(ctx, ls.client, []string{l.key}, []string{mode, l.gen, strconv.FormatInt(count, 10), ls.ttlMs, l.channel}).ToArray()
	if err = setScript.Classify(err); err != nil {
		return nil, l.explain(mode, err)
	}
	if len(vals) < 2 {
		return nil, fmt.Errorf("%s: %s script returned %d values", l.describe(), mode, len(vals))
	}
	if ok, _ := vals[0].AsInt64(); ok == 0 && len(vals) == 3 {
		gen, _ := vals[1].ToString()
		n, _ := vals[2].ToString()
		state := "count " + n
		if n == "0" {
			state += ": completed"
		}
		return nil, fmt.Errorf("%w: latch %q has generation %s (%s); Join it, or Reset it to start a new generation", ErrExists, l.key, gen, state)
	}
	return l, nil
}

// Join returns a handle on the current generation of the latch at key,
// completed or not. No latch there fails with an error matching
// ErrNotFound. Other errors as for Create; a transport error is retried as
// Options.Retry says.
func (ls *Latches) Join(ctx context.Context, key string) (*Latch, error) {
	l, err := ls.prepare(ctx, key, "")
	if err != nil {
		return nil, err
	}
	var st state
	if err := ls.retrying(ctx, func() (err error) {
		st, err = read(ctx, ls.client, l.key)
		return err
	}); err != nil {
		return nil, l.explain("join", err)
	}
	if !st.exists {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, l.key)
	}
	l.gen = st.gen
	return l, nil
}

// Attach returns a handle on generation of the latch at key without
// asking the server: for a generation learnt elsewhere (Latch.Generation
// in another process), so that its count-downs and waits apply to exactly
// that generation. If it is not (or no longer) the current one, CountDown
// returns -1 and Wait false. Errors: primitives.ErrInvalidKey,
// ErrInvalidGeneration (empty), primitives.ErrClosed,
// primitives.ErrInvalidOptions (nil receiver).
func (ls *Latches) Attach(key, generation string) (*Latch, error) {
	if generation == "" {
		return nil, fmt.Errorf("%w: empty generation", ErrInvalidGeneration)
	}
	return ls.prepare(context.Background(), key, string([]byte(generation)))
}

// prepare validates the arguments every entry point shares and returns a
// handle for key with gen.
func (ls *Latches) prepare(ctx context.Context, key, gen string) (*Latch, error) {
	if ls == nil || ls.client == nil {
		return nil, fmt.Errorf("%w: latch: nil Latches (use latch.New)", primitives.ErrInvalidOptions)
	}
	if ctx == nil {
		return nil, fmt.Errorf("%w: latch: nil context", primitives.ErrInvalidOptions)
	}
	full, err := ls.space.Key(key)
	if err != nil {
		return nil, fmt.Errorf("%w: latch: %w", primitives.ErrInvalidKey, err)
	}
	if ls.isClosed() {
		return nil, fmt.Errorf("latch %q: %w", full, primitives.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("latch %q: %w", full, err)
	}
	// The channel is named after the key without the prefix, as the
	// other primitives' channels are; it lives under the prefix's
	// reserved namespace (keys.Space.Channel).
	return &Latch{ls: ls, key: full, gen: gen, channel: ls.space.Channel("latch", key)}, nil
}

// retrying runs op, and again after each transient error as Options.Retry
// says, until it succeeds, fails for good, the policy gives up or ctx
// ends. It returns op's last error.
func (ls *Latches) retrying(ctx context.Context, op func() error) error {
	start := time.Now()
	for attempt := 1; ; attempt++ {
		err := op()
		if err == nil || ls.retry == nil || !script.IsUncertain(err) || ctx.Err() != nil {
			return err
		}
		dec := ls.retry.DecideRetry(ctx, policies.RetryRequest{Attempt: attempt, Reason: policies.ReasonError,
			Elapsed: time.Since(start), HolderTTL: -1, Rand: randUint64()})
		if dec.Action == policies.GiveUp || ctx.Err() != nil {
			return err
		}
		d := dec.Delay
		if d <= 0 {
			d = primitives.DefaultPollInterval // nothing announces a server coming back
		}
		t := time.NewTimer(max(d, minRetryDelay))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		case <-ls.closing:
			t.Stop()
			return err
		}
	}
}

// minRetryDelay floors a retry policy's delay, so no policy can spin a
// call against Redis.
const minRetryDelay = 5 * time.Millisecond

// explain maps an error of op on l: an outcome left unknown by a
// transport error or a cancellation, for writes, matches
// primitives.ErrUncertain; server answers map to the shared sentinels.
func (l *Latch) explain(op string, err error) error {
	if script.IsUncertain(err) {
		if op == "join" || op == "count" || op == "wait" {
			return fmt.Errorf("%s: %s: %w", l.describe(), op, err)
		}
		return &base.Uncertain{Name: l.describe(), Op: op, Err: err}
	}
	var se *script.Error
	if errors.As(err, &se) && se.Code == script.CodeOther && strings.HasPrefix(se.Msg, notLatch) {
		return fmt.Errorf("%s: %w: %s", l.describe(), primitives.ErrWrongType, strings.TrimSpace(strings.TrimPrefix(se.Msg, notLatch)))
	}
	return handle.MapScriptErr(l.describe(), err)
}

// notLatch starts the error the scripts raise for a hash that is not a
// latch (latch_lib.lua).
const notLatch = "COORDHOST_NOTLATCH"
