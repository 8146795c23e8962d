// Package lock implements owner-checked Redis locks over rueidis, with
// opt-in fencing tokens and waiting driven by server notifications.
//
// A Locker takes a caller-owned rueidis.Client and never closes it. A lock
// is one Redis string key holding a random ownership token with a TTL
// (SET NX PX semantics); renew and release compare the token in one script.
// With Options.Fencing, each grant also increments a per-key counter in the
// same script and returns it as the fencing token, which a protected
// resource compares to reject writes from a holder that lost the lock.
//
// Waiting (Acquire) never polls blindly: it sleeps on a primitives.Waiter
// until a client-tracking invalidation or a release-channel message says
// the key changed, or until the holder's TTL runs out, bounded by the retry
// policy. The Waiter keeps one dedicated connection (CLIENT SETNAME
// coordhost-wait) for every primitive that shares it, and per key only the
// oldest local waiter re-attempts after a wake, so a release costs a few
// commands per process whatever the number of local waiters. Which client
// options give which wake-up source is in the Waiter's documentation.
//
// # What the guarantees rest on
//
// Mutual exclusion and increasing fencing tokens hold while the Redis
// server keeps every write coordhost made. Each of these breaks that:
//
//   - A restart that loses writes: without persistence it forgets every
//     lock and counter, a second holder can be granted the lock while the
//     first still works, and fencing tokens restart from 1
//     (TestFencingTokensAcrossRestart reproduces it). Snapshots alone
//     (save without appendonly) lose everything since the last snapshot;
//     appendfsync no leaves the flush to the OS. Run with appendonly yes:
//     appendfsync always keeps every grant, everysec may lose the last
//     second.
//   - Eviction: with maxmemory set, any maxmemory-policy other than
//     noeviction may evict lock keys (they carry TTLs, so volatile-*
//     policies pick them too) or counters. With noeviction a full server
//     refuses writes instead: acquisitions fail with Redis' OOM error,
//     which is the safe way to fail.
//   - A failover to a replica that had not received the latest writes
//     loses them; replication is asynchronous. By default coordhost
//     reports a grant once the primary made it. With Options.Replicas = N
//     a grant, renewal or fencing increment counts only once N replicas
//     acknowledged it (WAIT), so a failover that promotes one of them
//     keeps it; a grant they do not confirm in time is released and fails
//     with primitives.ErrNotReplicated. WAIT makes no write durable on
//     disk, and a promoted replica that was not among the N can still
//     miss a grant: docs/failover.md says what to configure.
//   - Anyone deleting or rewriting the keys under Options.Prefix (or the
//     counter of a fenced lock). Keys starting with ReservedPrefix after
//     the prefix are coordhost's own and refused as lock keys.
//
// The ACL a coordhost user needs: the commands of the scripts (EVALSHA,
// EVAL, and inside them GET, SET, DEL, PEXPIRE, PTTL, INCR, TIME, the
// sorted-set commands for FIFO, PUBLISH), SUBSCRIBE (or client tracking)
// for waiting, CLIENT INFO and CLIENT KILL for the cleanup of an uncertain
// attempt on a waiting connection, WAIT with Options.Replicas, all on the
// keys and channels under Options.Prefix; CONFIG GET and INFO for the
// host's settings check. (A server that refuses WAIT makes every grant
// fail with primitives.ErrNotReplicated, naming the refusal.)
//
// What coordhost does about them: the host (package host and the coordhost
// daemon) checks maxmemory, maxmemory-policy, persistence and replicas at
// start and logs a warning for each hazard (host.ServerHazards); the
// scripts refuse a fencing counter that has a TTL, is not a plain decimal
// or would overflow; a fenced protected resource rejects any token not
// above the last one it saw, which turns a reused token into a refused
// write rather than a silent overlap. Redis stores absolute expiry times,
// so a jump of the server's wall clock moves every lock's expiry with it;
// keep server clocks slewed, not stepped. A client paused longer than its
// TTL loses the lock, which Done and the fencing token make visible.
//
// docs/hazards.md catalogues these hazards with what each did when
// reproduced (the tests are in internal/hazards): how many fencing tokens
// a restart or a promotion issues again, which keys each maxmemory-policy
// evicts (a volatile-* policy every held lock but no fencing counter, an
// allkeys-* policy the counters too), what a clock jump does to a held
// lock and to its handle's estimate.
package lock

import (
	"context"
	"crypto/rand"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordhost/coordhost/lua"
	"github.com/coordhost/coordhost/policies"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/internal/clock"
	"github.com/coordhost/coordhost/primitives/internal/handle"
	"github.com/coordhost/coordhost/primitives/internal/keys"
	"github.com/coordhost/coordhost/primitives/internal/replica"
	"github.com/coordhost/coordhost/primitives/internal/script"
	"github.com/coordhost/coordhost/primitives/internal/wait"
	"github.com/redis/rueidis"
)

// DefaultCloseTimeout, 2s, bounds the best-effort release of Lock.Close and the
// cleanup after an uncertain acquire.
const DefaultCloseTimeout = handle.CloseTimeout

// MaxTTL is the longest lease Acquire, TryAcquire and Renew accept: 100
// years. A longer ttl fails with primitives.ErrInvalidTTL before anything
// is sent (counted in milliseconds it would overflow, and a negative
// PEXPIRE deletes the key).
const MaxTTL = handle.MaxTTL

// ReservedPrefix is the namespace, right after Options.Prefix, where the
// Locker keeps fencing counters and release channels. Lock keys may not
// start with it.
const ReservedPrefix = keys.Reserved

// Scripts are immutable after init.
var (
	acquireScript = script.New("lock_acquire", lua.LockAcquire)
	fifoScript    = script.New("lock_acquire_fifo", lua.LockAcquireFIFO)
	leaveScript   = script.New("lock_leave_fifo", lua.LockLeaveFIFO).WithRefusedWait(script.ReleaseRefusedWait)
	releaseScript = script.New("lock_release", lua.LockRelease).WithRefusedWait(script.ReleaseRefusedWait)
	renewScript   = script.New("lock_renew", lua.LockRenew)
)

// Options configure a Locker. The zero value is a valid configuration:
// no prefix, no fencing, exponential backoff waiting.
type Options struct {
	// Prefix is prepended to every lock key (e.g. "app:locks:").
	Prefix string
	// Fencing makes every grant increment a per-key counter (kept under
	// Prefix+ReservedPrefix) and return it as Lock.FencingToken.
	Fencing bool
	// Retry decides how Acquire waits after a failed attempt. Nil means
	// builtin.Exponential{} (10ms base, 1s cap, full jitter, never gives
	// up). Whatever it says, a waiter also wakes at the holder's expiry
	// and on server notifications.
	Retry policies.RetryPolicy
	// Waiter is the waiting machinery Acquire sleeps on: give every
	// primitive on a client the same one (primitives.NewWaiter) so that
	// they share one waiting connection. Nil means a private Waiter that
	// Close closes. New refuses (primitives.ErrInvalidOptions) a Waiter
	// made for another client, a closed one, or a zero Waiter.
	Waiter *primitives.Waiter
	// FIFO grants the lock to waiters in order of arrival across every
	// process, ordered by server time at the first attempt plus a
	// per-process sequence. The queue lives in two sorted sets under
	// Prefix+ReservedPrefix in the lock's slot; a waiter that stops
	// refreshing its entry (crashed) is dropped after QueueEntryTTL.
	// FIFO waiters give up local coalescing: each re-attempts on every
	// wake, so a release costs O(local waiters) commands. TryAcquire never
	// queues and never barges past waiters.
	FIFO bool
	// Observer, if not nil, is told about every acquisition and about the
	// renewals, releases and losses of the locks granted (see Observer).
	Observer Observer
	// Replicas, when above 0, makes every grant (and so every fencing
	// increment, made by the same script) and every renewal count only
	// once that many replicas acknowledge it: the script is followed on
	// its connection, in the same round trip, by WAIT Replicas
	// ReplicaTimeout. A grant fewer replicas confirm in time is released
	// (owner-checked) and the acquire fails with an error matching
	// primitives.ErrNotReplicated (a fenced grant's token is then skipped,
	// never handed out); an unconfirmed renewal returns such an error and
	// loses the handle (Done closes). Waiting acquires stop at that error
	// too. Each confirmed write costs the replicas' round trip, and every
	// attempt holds a rueidis blocking-pool connection while WAIT waits:
	// with a replica down every attempt takes ReplicaTimeout. At most
	// primitives.MaxReplicas; 0 (the default) is off: a plain lock's
	// first attempt is then one SET, as without this option. See
	// docs/failover.md for what it does and does not guarantee.
	Replicas int
	// ReplicaTimeout bounds WAIT when Replicas is above 0, rounded up to
	// whole milliseconds, at most primitives.MaxReplicaTimeout; 0 means
	// primitives.DefaultReplicaTimeout (1s). Keep it well below the TTLs
	// you use (the local estimate runs from before the grant was sent) and
	// below the ctx deadlines of acquires and renewals (a ctx that ends
	// during WAIT makes the outcome uncertain: the grant is released best
	// effort, a renewal loses the handle).
	ReplicaTimeout time.Duration
}

// QueueEntryTTL is how long a FIFO waiter's queue entry outlives its last
// attempt. Waiters re-attempt at least every third of it.
const QueueEntryTTL = 15 * time.Second

// Locker acquires locks on one client. Safe for concurrent use; create one
// per configuration (prefix, fencing, retry policy) and share it. Lockers
// (and other primitives) on one client should share a primitives.Waiter
// (Options.Waiter), so that they hold one waiting connection between them.
type Locker struct {
	client rueidis.Client
	space  keys.Space
	fence  bool
	retry  policies.RetryPolicy
	fifo   bool
	rep    replica.Wait // Options.Replicas; off when zero
	// grantLog makes the acquire script append "token fence" to a list in
	// the lock's slot on every grant. Set only by tests (export_test.go):
	// the fault-history checker settles lost replies from it.
	grantLog bool
	seq      atomic.Uint64
	// freshQueueEntry is set only by tests (export_test.go): the control
	// for the FIFO stall fix.
	freshQueueEntry bool
	noSecondCleanup bool          // tests only: the control for settleLater
	closed          atomic.Bool   // Close was called
	closing         chan struct{} // closed by Close: ends this Locker's waits
	closeOnce       sync.Once
	engine          *wait.Engine
	ownsEngine      bool        // a private Waiter, closed by Close
	cleanups        *cleanups   // background cleanups (settle.go)
	clk             clock.Clock // local estimates; the system clock but in tests (export_test.go)
	obs             Observer    // Options.Observer; nil means none (observe.go)
}

// New returns a Locker on client. It does not dial anything. Errors wrap
// primitives.ErrInvalidOptions.
func New(client rueidis.Client, opts Options) (*Locker, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: lock: nil rueidis client", primitives.ErrInvalidOptions)
	}
	l, err := configure(client, opts)
	if err != nil {
		return nil, err
	}
	if l.engine, l.ownsEngine, err = wait.For(client, (*wait.Engine)(opts.Waiter)); err != nil {
		return nil, fmt.Errorf("lock: Options.Waiter: %w", err)
	}
	return l, nil
}

func configure(client rueidis.Client, opts Options) (*Locker, error) {
	retry, err := wait.Policy(opts.Retry)
	if err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	rep, err := replica.New("lock", opts.Replicas, opts.ReplicaTimeout)
	if err != nil {
		return nil, err
	}
	return &Locker{
		rep:      rep,
		client:   client,
		space:    keys.Space{Prefix: opts.Prefix},
		fence:    opts.Fencing,
		retry:    retry,
		fifo:     opts.FIFO,
		obs:      opts.Observer,
		cleanups: newCleanups(),
		closing:  make(chan struct{}),
		clk:      clock.Real,
	}, nil
}

// Close ends the Locker: blocked Acquire calls return primitives.ErrClosed
// and new calls are refused. Locks already granted keep working. It closes
// the Locker's private Waiter (not one given in Options.Waiter) and never
// the client, and returns once the cleanups of uncertain attempts that run
// in the background are done (each bounded by DefaultCloseTimeout); a call
// still in flight does its own cleanups before it returns. Idempotent.
func (l *Locker) Close() error {
	l.closed.Store(true)
	l.closeOnce.Do(func() { close(l.closing) })
	l.cleanups.close()
	if l.ownsEngine {
		return l.engine.Close()
	}
	return nil
}

// isClosed reports whether this Locker was closed. (A closed shared
// Waiter ends waiting, not TryAcquire.)
func (l *Locker) isClosed() bool {
	return l.closed.Load() || l.ownsEngine && l.engine.Closed()
}

// TryAcquire makes one attempt to take the lock key for ttl and never
// waits. Contention returns an error matching primitives.ErrNotAcquired.
// ttl is rounded up to whole milliseconds and must be at least 1ms and at
// most MaxTTL.
//
// Other errors: primitives.ErrInvalidKey, primitives.ErrInvalidTTL (nothing
// sent), primitives.ErrWrongType, primitives.ErrCorruptCounter (nothing
// written), primitives.ErrNotReplicated (Options.Replicas: granted, not
// confirmed by enough replicas, released), ctx.Err(), or a transport
// error.
//
// Uncertain outcomes: when ctx ends or the connection fails while the
// attempt is in flight, the lock may have been granted after all.
// TryAcquire then releases it with an owner check, bounded by
// DefaultCloseTimeout (so the call can outlast ctx by that much), and once
// more lateGrantWindow (100ms) later in the background, because rueidis
// spreads commands over several connections and the grant can land behind
// the first release. Measured with 2000 randomly cancelled calls per
// configuration (TestAcquireCancelledMidFlight): with the first release
// alone, up to 0.9% of calls left a lock held by no handle; with both,
// none. A grant delayed longer than that (a stalled connection or server)
// can still land after both: the key then stays held, by no handle, until
// its TTL runs out, and a fenced lock's counter shows a gap. Keep TTLs
// short and renew (primitives.KeepAlive). Hash-field leases fence this
// case with CLIENT KILL; locks do not, to keep the fast path one command.
//
// A reply that arrives is always honoured: if the command completes after
// ctx was cancelled (rueidis does not interrupt a command already written
// on a client with DisableAutoPipelining, only a deadline does), TryAcquire
// returns the granted lock with a nil error. Check ctx.Err() yourself if a
// cancelled caller must not start work.
func (l *Locker) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*Lock, error) {
	req, err := l.prepare(ctx, key, ttl)
	if err != nil {
		return nil, err
	}
	return l.observe(ctx, req, false, (*Locker).tryAcquire)
}

// TryAcquireFenced is TryAcquire for a fenced lock whose fencing counter the
// caller names: one script checks contention, validates the counter at
// counterKey (it must be absent or a plain non-negative decimal integer
// without a TTL, below math.MaxInt64), increments it and creates the lease
// at leaseKey. Lock.FencingToken returns the new counter value, exact for
// every positive int64. Both keys get Options.Prefix; they must differ and,
// after the prefix, share one cluster slot (use a hash tag), else the call
// fails with primitives.ErrInvalidKey before anything is sent. A counter
// that fails validation gives primitives.ErrCorruptCounter and no lease.
// When the reply is lost the lease is released best effort and the counter
// may have a gap.
func (l *Locker) TryAcquireFenced(ctx context.Context, leaseKey, counterKey string, ttl time.Duration) (*Lock, error) {
	req, err := l.prepareFenced(ctx, leaseKey, counterKey, ttl)
	if err != nil {
		return nil, err
	}
	return l.observe(ctx, req, false, (*Locker).tryAcquire)
}

// AcquireFenced is Acquire for a fenced lock; see TryAcquireFenced for the
// keys and the counter rules. It waits on the lease key.
func (l *Locker) AcquireFenced(ctx context.Context, leaseKey, counterKey string, ttl time.Duration) (*Lock, error) {
	req, err := l.prepareFenced(ctx, leaseKey, counterKey, ttl)
	if err != nil {
		return nil, err
	}
	return l.observe(ctx, req, true, (*Locker).acquire)
}

func (l *Locker) tryAcquire(ctx context.Context, req *request) (*Lock, error) {
	lk, holderTTL, err := l.attemptFirst(ctx, req)
	if err != nil {
		return nil, err
	}
	if lk == nil {
		return nil, notAcquired(req.key, holderTTL)
	}
	return lk, nil
}

// Acquire takes the lock key for ttl, waiting while another owner holds
// it, until ctx ends (the error then matches ctx.Err() and names the key),
// the retry policy gives up (primitives.ErrNotAcquired), or the Locker
// closes (primitives.ErrClosed). Bad input fails as in TryAcquire, before
// anything is sent.
//
// An attempt in flight when ctx ends (the first one, or a waiter's
// re-attempt) is an uncertain outcome exactly as in TryAcquire, with the
// same two cleanups and the same residual case: a grant delayed past both
// leaves the key held by no handle until its TTL.
func (l *Locker) Acquire(ctx context.Context, key string, ttl time.Duration) (*Lock, error) {
	req, err := l.prepare(ctx, key, ttl)
	if err != nil {
		return nil, err
	}
	return l.observe(ctx, req, true, (*Locker).acquire)
}

func (l *Locker) acquire(ctx context.Context, req *request) (*Lock, error) {
	start := time.Now()
	wreq := wait.Request{Key: req.key, Channel: req.channel, Policy: l.retry}
	if l.fifo {
		req.queueMs = strconv.FormatInt(QueueEntryTTL.Milliseconds(), 10)
		wreq.Also, wreq.Every, wreq.MaxSleep = []string{req.queue}, true, QueueEntryTTL/3
	}
	var last wait.Conn // where the latest attempt went, for the FIFO leave
	// FIFO waiters always attempt first, to take their place in the
	// server's queue.
	wreq.Closing = l.closing
	got, werr := wait.Acquire(ctx, l.engine, wreq, l.fifo, func(ctx context.Context, c wait.Conn) (*Lock, time.Duration, error) {
		if c.CoreClient == nil {
			return l.attemptFirst(ctx, req)
		}
		last = c
		return l.attempt(ctx, c, req)
	}, func() {
		req.token = rand.Text()
		if l.freshQueueEntry {
			req.waiter = rand.Text()
		}
	})
	if werr != nil && l.fifo {
		l.settle(ctx, last, req, true) // leave the queue behind our latest attempt
	}
	return got, wait.Final(ctx, fmt.Sprintf("lock %q", req.key), start, werr)
}
