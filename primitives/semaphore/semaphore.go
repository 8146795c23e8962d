// Package semaphore implements counting semaphores whose permits expire
// on their own (or never), over a caller-owned rueidis.Client.
//
// A semaphore is one sorted set of permits: each member is a permit's
// random ownership token, scored by its deadline in server milliseconds
// (+inf for a permit taken with NoExpiry). Every acquisition prunes the
// expired permits and counts the live ones in one atomic script, so a
// holder that dies frees its place when its ttl runs out, without a
// cleanup worker. The set's key expires with its longest-lived permit and
// never while a permit without expiry lives.
//
// Every contender must use the same capacity: it is stored next to the set
// (a companion key in the same cluster slot) and, while any permit is live,
// an acquisition with another capacity fails with ErrCapacityMismatch. Once
// every permit is released or expired, the next acquisition sets a new
// one. A lower capacity never revokes live permits.
//
// An acquisition whose reply is lost is fenced, never replayed: it runs on
// a dedicated connection whose CLIENT ID is known, and on uncertainty
// another connection sends CLIENT KILL ID before an owner-checked release,
// so a delayed command cannot recreate a permit after its cleanup (this
// matters most for permits without expiry, which nothing else would ever
// free). That needs the CLIENT INFO and CLIENT KILL commands: without CLIENT
// INFO every acquisition fails with an error wrapping
// ErrNoClientPermission.
//
// Permit.Close waits about one second (DefaultCloseWait) for its release;
// when the outcome stays unknown it keeps retrying in the background with
// capped, jittered backoff for up to a minute (DefaultCleanupFor). A
// cleanup that gives up is reported to Options.OnAbandon and logged as a
// warning through Options.Logger. Semaphores.Close ends those retries (see
// there).
//
// Waiters (Acquire) sleep on the shared wait engine: they wake when a
// permit is released (client-tracking invalidation or release-channel
// message) and at the earliest live permit's expiry, never by blind
// polling; see package lock for which client options give which wake-up
// source.
//
// # What the guarantees rest on
//
// Live permits never exceed the capacity while Redis keeps every write
// (appendonly yes, maxmemory-policy noeviction; a failover may lose the
// latest grants, and deadlines are absolute server timestamps, so a replica
// with a skewed clock expires permits early or late after a failover). A
// DEL or ZREM from outside frees permits at once. Prefer a finite ttl: a
// NoExpiry permit whose holder crashes, or whose background release gave
// up, holds its place (and the capacity) until someone removes it: stop
// every holder and delete the key, or ZREM the stale members.
package semaphore

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/coordhost/coordhost/lua"
	"github.com/coordhost/coordhost/policies"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/internal/clock"
	"github.com/coordhost/coordhost/primitives/internal/fence"
	"github.com/coordhost/coordhost/primitives/internal/handle"
	"github.com/coordhost/coordhost/primitives/internal/keys"
	"github.com/coordhost/coordhost/primitives/internal/replica"
	"github.com/coordhost/coordhost/primitives/internal/script"
	"github.com/coordhost/coordhost/primitives/internal/wait"
	"github.com/redis/rueidis"
)

// NoExpiry, given as the ttl of TryAcquire or Acquire, makes a permit that
// expires only when released. Any other ttl below 1ms is refused with
// primitives.ErrInvalidTTL, and so is NoExpiry given to Permit.Renew (a
// renewal always sets a finite lifetime).
const NoExpiry time.Duration = -1

// MaxTTL is the longest finite ttl accepted: 100 years. A longer one fails
// with primitives.ErrInvalidTTL before anything is sent.
const MaxTTL = handle.MaxTTL

// MaxCapacity is the largest capacity accepted (one billion); a larger one,
// zero or a negative one fails with ErrInvalidCapacity before anything is
// sent.
const MaxCapacity = 1_000_000_000

// Defaults of Permit.Close and the background release.
const (
	// DefaultCloseWait bounds how long Permit.Close waits for its release.
	DefaultCloseWait = time.Second
	// DefaultCleanupFor bounds the background retries of a release whose
	// outcome Close could not learn.
	DefaultCleanupFor = time.Minute
	// DefaultCleanupMaxBackoff caps the pause between background retries
	// (each pause is drawn at random up to the exponential bound).
	DefaultCleanupMaxBackoff = 5 * time.Second
)

// Errors of this package (see also the primitives sentinels).
var (
	// ErrCapacityMismatch: live permits were taken with another capacity.
	// Nothing was written; the error names both capacities.
	ErrCapacityMismatch = errors.New("semaphore: capacity differs from the one the live permits were taken with")
	// ErrInvalidCapacity: a capacity below 1 or above MaxCapacity. It
	// matches primitives.ErrInvalidOptions.
	ErrInvalidCapacity = fmt.Errorf("%w: semaphore: capacity must be in [1, %d]", primitives.ErrInvalidOptions, MaxCapacity)
	// ErrNoClientPermission: CLIENT INFO / CLIENT KILL are refused, so an
	// uncertain acquisition could not be fenced. It matches
	// primitives.ErrNoPermission.
	ErrNoClientPermission = fence.ErrNoPermission
)

var (
	acquireScript = script.New("semaphore_acquire", lua.SemaphoreAcquire)
	renewScript   = script.New("semaphore_renew", lua.SemaphoreRenew)
	releaseScript = script.New("semaphore_release", lua.SemaphoreRelease).WithRefusedWait(script.ReleaseRefusedWait)
	verifyScript  = script.New("semaphore_verify", lua.SemaphoreVerify)
)

// Abandon describes a background cleanup that gave up: a permit that may
// stay held by nobody until its ttl runs out (forever for NoExpiry).
type Abandon struct {
	Key   string // the permit set's key, prefix included
	Token string // the permit's ownership token (its member in the set)
	// Stage is what gave up: "release" (Permit.Close's background
	// release) or "acquire" (the cleanup of an acquisition whose outcome
	// was unknown and could not be settled at once).
	Stage string
	// Reason is why, one of "timeout" (the server did not answer in
	// time), "noperm" (an ACL refused a command), "closed"
	// (Semaphores.Close ended the retries) or "error" (another error
	// reply).
	Reason   string
	Attempts int   // releases tried in the background
	Err      error // the last error
}

// Options configure Semaphores. The zero value is valid: no prefix,
// exponential backoff waiting, a private Waiter, slog.Default() and no
// abandon hook.
type Options struct {
	// Prefix is prepended to every semaphore key.
	Prefix string
	// Retry decides how Acquire waits after a refused attempt; nil means
	// builtin.Exponential{}. Waiters also wake at the earliest permit's
	// expiry and on releases whatever it says.
	Retry policies.RetryPolicy
	// Waiter is the waiting machinery Acquire sleeps on: give every
	// primitive on a client the same one (primitives.NewWaiter). Nil means
	// a private Waiter that Close closes. New refuses
	// (primitives.ErrInvalidOptions) a Waiter made for another client, a
	// closed one, or a zero Waiter.
	Waiter *primitives.Waiter
	// Logger receives a warning for every cleanup that gives up; nil means
	// slog.Default().
	Logger *slog.Logger
	// OnAbandon, when not nil, is called (from the cleanup's goroutine)
	// for every cleanup that gives up; the host counts these in a
	// Prometheus counter labelled with stage and reason. It must not block.
	OnAbandon func(Abandon)
	// Observer, if not nil, is told about every acquisition and about the
	// renewals, releases and losses of the permits granted (see Observer).
	Observer Observer
	// Replicas, when above 0, makes every grant and every renewal count
	// only once that many replicas acknowledge it: the acquire or renew
	// script is followed on its connection, in the same round trip, by
	// WAIT Replicas ReplicaTimeout. A permit fewer replicas confirm in
	// time is released (owner-checked) and the acquire fails with an
	// error matching primitives.ErrNotReplicated (waiting acquires stop
	// at it too); an unconfirmed renewal returns such an error and loses
	// the handle (Done closes). Refused attempts wait too, for the expired
	// permits they pruned. At most primitives.MaxReplicas; 0 (the default)
	// is off, one script per attempt as without this option. See
	// docs/failover.md.
	Replicas int
	// ReplicaTimeout bounds WAIT when Replicas is above 0, rounded up to
	// whole milliseconds, at most primitives.MaxReplicaTimeout; 0 means
	// primitives.DefaultReplicaTimeout (1s). Keep it well below the TTLs
	// and below the ctx deadlines of acquires and renewals.
	ReplicaTimeout time.Duration
}

// Semaphores acquires permits of semaphores on one client. Safe for
// concurrent use; create one per client and share it.
type Semaphores struct {
	client rueidis.Client
	space  keys.Space
	retry  policies.RetryPolicy
	rep    replica.Wait // Options.Replicas; off when zero
	engine *wait.Engine
	owns   bool          // engine is private: Close closes it
	closed chan struct{} // closed by Close: ends waits and background cleanups
	once   sync.Once
	fences *fence.Pool
	log    *slog.Logger
	abandn func(Abandon)
	obs    Observer
	clk    clock.Clock // local estimates; the system clock but in tests

	bgMu      sync.Mutex
	bgStopped bool // Close began: no new background cleanups
	bgRunning int  // background cleanups under way
	cleanups  sync.WaitGroup
	limits    cleanupLimits
	grantLog  bool // tests: the acquire script appends each grant to a list
}

// New returns Semaphores on client. It sends nothing. Errors wrap
// primitives.ErrInvalidOptions.
func New(client rueidis.Client, opts Options) (*Semaphores, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: semaphore: nil rueidis client", primitives.ErrInvalidOptions)
	}
	retry, err := wait.Policy(opts.Retry)
	if err != nil {
		return nil, fmt.Errorf("semaphore: %w", err)
	}
	rep, err := replica.New("semaphore", opts.Replicas, opts.ReplicaTimeout)
	if err != nil {
		return nil, err
	}
	s := &Semaphores{
		rep:    rep,
		client: client,
		space:  keys.Space{Prefix: opts.Prefix},
		retry:  retry,
		closed: make(chan struct{}),
		fences: fence.NewPool(client),
		log:    opts.Logger,
		abandn: opts.OnAbandon,
		obs:    opts.Observer,
		clk:    clock.Real,
		limits: cleanupLimits{wait: DefaultCloseWait, total: DefaultCleanupFor, maxBackoff: DefaultCleanupMaxBackoff, base: 50 * time.Millisecond},
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.engine, s.owns, err = wait.For(client, (*wait.Engine)(opts.Waiter)); err != nil {
		return nil, fmt.Errorf("semaphore: Options.Waiter: %w", err)
	}
	return s, nil
}

// Close ends the Semaphores: blocked Acquire calls return
// primitives.ErrClosed and new calls are refused. Background releases
// still retrying (see Permit.Close) are cancelled, not waited out: each
// makes one last attempt, bounded by DefaultCloseWait, and if that fails
// too it is reported to OnAbandon with reason "closed". Close returns once
// every such goroutine has ended, so that part takes at most about
// DefaultCloseWait. (Closing idle connections to a server that does not
// answer may add about a second more.) It closes idle fenced connections and the private
// Waiter (not one given in Options.Waiter), never the client. Granted
// permits keep working. Idempotent.
func (s *Semaphores) Close() error {
	s.once.Do(func() { close(s.closed) })
	s.bgMu.Lock()
	s.bgStopped = true
	s.bgMu.Unlock()
	s.cleanups.Wait()
	s.fences.Close()
	if s.owns {
		return s.engine.Close()
	}
	return nil
}

// isClosed reports whether Close was called or the private Waiter closed.
func (s *Semaphores) isClosed() bool {
	select {
	case <-s.closed:
		return true
	default:
		return s.owns && s.engine.Closed()
	}
}

// TryAcquire makes one attempt to take a permit of the semaphore key of the
// given capacity for ttl (NoExpiry: until released) and never waits; a full
// semaphore returns an error matching primitives.ErrNotAcquired. A finite
// ttl is rounded up to whole milliseconds and must be at least 1ms and at
// most MaxTTL.
//
// Errors, all before anything is written: primitives.ErrInvalidKey (empty
// or reserved key, or one whose companion key cannot share its cluster
// slot), primitives.ErrInvalidTTL, ErrInvalidCapacity,
// ErrCapacityMismatch, primitives.ErrWrongType, ErrNoClientPermission,
// ctx.Err(), primitives.ErrClosed. A lost reply is fenced and settled; the
// error then matches primitives.ErrUncertain and no permit is held. With
// Options.Replicas, a permit too few replicas confirmed in time is
// released and the error matches primitives.ErrNotReplicated.
func (s *Semaphores) TryAcquire(ctx context.Context, key string, capacity int, ttl time.Duration) (*Permit, error) {
	req, err := s.prepare(ctx, key, capacity, ttl)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	p, out, err := s.attempt(ctx, wait.Conn{}, req)
	if err == nil && p == nil {
		err = fmt.Errorf("%w: semaphore %q is full (%d of %d permits live%s)", primitives.ErrNotAcquired, req.key, out.live, req.capacity, out.describeWait())
	}
	return s.observe(ctx, req, false, start, p, err)
}

// observe reports one acquisition to the Observer, if any, and returns
// its result.
func (s *Semaphores) observe(ctx context.Context, req *request, waits bool, start time.Time, p *Permit, err error) (*Permit, error) {
	if err != nil {
		p = nil
	}
	if s.obs != nil {
		if p != nil {
			p.h.Observe(reporter{o: s.obs, p: p}, s.clk.Now())
		}
		s.obs.ObserveAcquire(req.key, handle.AcquireOutcomeOf(ctx, waits, err), time.Since(start), err)
	}
	return p, err
}

// Acquire takes a permit like TryAcquire, waiting while the semaphore is
// full, until ctx ends (the error matches ctx.Err()), the retry policy
// gives up (primitives.ErrNotAcquired) or the Semaphores close
// (primitives.ErrClosed). A waiter wakes when a permit is released and at
// the earliest live permit's expiry. Bad input, and a capacity mismatch,
// fail as in TryAcquire without waiting.
func (s *Semaphores) Acquire(ctx context.Context, key string, capacity int, ttl time.Duration) (*Permit, error) {
	req, err := s.prepare(ctx, key, capacity, ttl)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	got, err := wait.Acquire(ctx, s.engine, wait.Request{
		Key: req.key, Channel: req.channel, Policy: s.retry, Closing: s.closed,
	}, false, func(ctx context.Context, c wait.Conn) (*Permit, time.Duration, error) {
		p, out, err := s.attempt(ctx, c, req)
		return p, out.wait, err
	}, func() { req.token = rand.Text() })
	return s.observe(ctx, req, true, start, got, wait.Final(ctx, req.name(), start, err))
}

// request is one acquisition's validated arguments.
type request struct {
	key, capKey, channel string
	capacity             int
	capArg               string
	ttl                  time.Duration // MaxTTL for NoExpiry (the local estimate)
	ms                   string        // script ttl argument: ms or "none"
	forever              bool
	token                string
}

func (r *request) name() string { return fmt.Sprintf("semaphore %q", r.key) }

// ttlArg validates ttl: NoExpiry, or a finite ttl rounded up to whole ms.
func ttlArg(ttl time.Duration) (local time.Duration, arg string, forever bool, err error) {
	if ttl == NoExpiry {
		return MaxTTL, "none", true, nil
	}
	local, arg, err = handle.Millis(ttl)
	if err != nil {
		err = fmt.Errorf("%w (use semaphore.NoExpiry for a permit that expires only when released)", err)
	}
	return local, arg, false, err
}

func (s *Semaphores) prepare(ctx context.Context, key string, capacity int, ttl time.Duration) (*request, error) {
	if s == nil || s.client == nil {
		return nil, fmt.Errorf("%w: semaphore: nil Semaphores (use semaphore.New)", primitives.ErrInvalidOptions)
	}
	if ctx == nil {
		return nil, fmt.Errorf("%w: semaphore: nil context", primitives.ErrInvalidOptions)
	}
	full, capKey, channel, err := s.keysOf(key)
	if err != nil {
		return nil, err
	}
	if capacity < 1 || capacity > MaxCapacity {
		return nil, fmt.Errorf("semaphore %q: %w, not %d", full, ErrInvalidCapacity, capacity)
	}
	local, ms, forever, err := ttlArg(ttl)
	if err != nil {
		return nil, fmt.Errorf("semaphore %q: %w", full, err)
	}
	if s.isClosed() {
		return nil, fmt.Errorf("semaphore %q: %w", full, primitives.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("semaphore %q: %w", full, err)
	}
	return &request{
		key: full, capKey: capKey, capacity: capacity, capArg: strconv.Itoa(capacity),
		ttl: local, ms: ms, forever: forever, token: rand.Text(), channel: channel,
	}, nil
}

// keysOf returns the keys and channel every call on the semaphore key
// uses: the permit set, its capacity key (in the set's cluster slot) and
// the release channel. Errors match primitives.ErrInvalidKey; nothing is
// sent. Acquisitions (prepare) and Resume both derive their keys here.
func (s *Semaphores) keysOf(key string) (full, capKey, channel string, err error) {
	if full, err = s.space.Key(key); err != nil {
		return "", "", "", fmt.Errorf("semaphore: key: %w: %w", primitives.ErrInvalidKey, err)
	}
	if capKey, err = s.space.Derived("semaphore-capacity", key); err != nil {
		return "", "", "", fmt.Errorf("semaphore %q: %w: %w", full, primitives.ErrInvalidKey, err)
	}
	return full, capKey, s.space.Channel("semaphore-rel", key), nil
}
