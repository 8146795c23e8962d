// Package rwlock implements read-write leases over a caller-owned
// rueidis.Client: shared read leases that coexist, and an exclusive write
// lease, with a starvation policy that bounds how long a waiting writer
// lets new readers in.
//
// One Redis key per lock holds its owners: a sorted set of owner tokens ("r:<token>" for a
// reader, "w:<token>" for the writer), each scored by its deadline in server
// time. Every acquisition prunes the members whose deadline has passed in
// the same script, so an expired reader never blocks anyone and one
// reader's expiry never frees another's. The key expires at the latest
// deadline of its members: a short lease taken after a long one never
// shortens the set's life. A writer is granted when the set has no live
// member; a reader when it has no live writer and no waiting writer holds
// readers off (below). Renew, Verify and Release are owner-checked on the
// handle's own member.
//
// # Writer starvation
//
// Readers keep being admitted while any reader is live, so a steady stream
// of overlapping readers can keep a writer out forever. A writer that waits
// (AcquireWrite) therefore registers a pending-writer entry in a second key
// of the lock's cluster slot (Prefix + "__coordhost:rw-writers:" + key, or
// that with the whole key as a hash tag): its arrival (server time) and the
// bound that Options.Starvation returns. Once a waiting writer has waited
// its bound, the read-acquire script refuses new readers, until that writer
// is granted or gives up; readers that already hold may renew. When a
// writer is granted, every other waiting writer's arrival restarts, so
// readers get a turn before the next one holds them off. The policy is
// consulted before every attempt of a waiting writer with what the previous
// attempt saw (readers holding, writers waiting, the oldest writer's wait),
// so a policy may change its answer as contention changes.
//
//   - Bound 0 is strict writer preference: new readers are refused as soon
//     as a writer waits.
//   - policies.Unbounded is reader preference, the behaviour of a plain
//     Respire read-write lease: waiting writers never hold readers off.
//     It is the default when Options.Starvation is nil.
//   - Anything between: a writer waits at most about its bound plus the
//     longest lease of the readers admitted before it (they drain; none
//     is revoked) plus a wake-up.
//
// The pending-writer entry is lease-bounded: the writer refreshes it while
// it waits (every attempt, and at least every MarkerTTL/3), and removes it
// when it is granted or gives up (its context ends, the retry policy gives
// up, the Locker closes). A writer that crashes while waiting holds readers
// off for at most MarkerTTL after its last refresh. Writers of one process
// waiting for one key take turns (see Waiting): only the oldest has an
// entry, and the next one's wait, for the bound, starts when its turn comes.
//
// TryAcquireRead respects waiting writers; TryAcquireWrite registers
// nothing and never waits.
//
// # Waiting
//
// AcquireRead and AcquireWrite wait on a primitives.Waiter: woken by client
// tracking invalidations or the lock's channel (every release and every
// writer that gives up announces itself there), and by a timer at the
// earliest deadline that can change their answer: a writer's lease for a
// reader; a holding writer's lease, or the time the last live reader's
// lease ends, for a writer; the expiry of the pending-writer entries that
// hold a reader off. Between those, the retry policy (Options.Retry) bounds
// each sleep and decides when to give up. Per key and mode only the oldest
// local waiter re-attempts after a wake.
//
// # What the guarantees rest on
//
// The hazards of package lock apply ("What the guarantees rest on": a
// restart without persistence, eviction, a failover that loses writes,
// anyone rewriting keys under Options.Prefix), and so does its ACL list for
// the script commands, SUBSCRIBE or client tracking, CLIENT INFO and CLIENT
// KILL. An acquisition whose reply is lost is settled as a lock's is: an
// owner-checked release best effort (on the waiting connection, fenced by
// CLIENT KILL, when the attempt ran there), and once more 100ms later in the
// background; a grant delayed past both stays until its lease runs out.
package rwlock

import (
	"context"
	"fmt"
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

// DefaultCloseTimeout bounds Lease.Close and the cleanup after an uncertain
// acquire or a writer giving up.
const DefaultCloseTimeout = handle.CloseTimeout

// MaxTTL is the longest lease the acquisitions and Renew accept: 100
// years. A longer ttl fails with primitives.ErrInvalidTTL before anything
// is sent.
const MaxTTL = handle.MaxTTL

// DefaultMarkerTTL is Options.MarkerTTL when zero: how long a waiting
// writer's pending-writer entry outlives its last refresh.
const DefaultMarkerTTL = 2 * time.Second

// MinMarkerTTL is the shortest Options.MarkerTTL New accepts.
const MinMarkerTTL = 30 * time.Millisecond

// ReservedPrefix is the namespace, right after Options.Prefix, where the
// Locker keeps the pending-writer entries and its channels. Lock keys may
// not start with it.
const ReservedPrefix = keys.Reserved

// Scripts are immutable after init.
var (
	readScript    = script.New("rwlock_acquire_read", lua.RWLockAcquireRead)
	writeScript   = script.New("rwlock_acquire_write", lua.RWLockAcquireWrite)
	releaseScript = script.New("rwlock_release", lua.RWLockRelease).WithRefusedWait(script.ReleaseRefusedWait)
	renewScript   = script.New("rwlock_renew", lua.RWLockRenew)
	ownerScript   = script.New("rwlock_owner", lua.RWLockOwner)
	leaveScript   = script.New("rwlock_leave", lua.RWLockLeave).WithRefusedWait(script.ReleaseRefusedWait)
)

// Options configure a Locker. The zero value is valid: no prefix,
// exponential backoff waiting, reader preference.
type Options struct {
	// Prefix is prepended to every lock key (e.g. "app:rw:").
	Prefix string
	// Retry decides how AcquireRead and AcquireWrite wait after a failed
	// attempt. Nil means builtin.Exponential{} (10ms base, 1s cap, full
	// jitter, never gives up). Whatever it says, a waiter also wakes at
	// the deadlines that can change its answer and on server
	// notifications.
	Retry policies.RetryPolicy
	// Starvation bounds how long a waiting writer lets new readers in (see
	// the package documentation). It is consulted before every attempt of
	// AcquireWrite after the first; a negative bound counts as 0, and a
	// bound above MaxTTL (policies.Unbounded among them) as unbounded.
	// Nil means reader preference: waiting writers never hold readers off.
	Starvation policies.StarvationPolicy
	// MarkerTTL is how long a waiting writer's pending-writer entry lives
	// after its last refresh: the longest a crashed writer can hold readers
	// off. A waiting writer refreshes it at least every MarkerTTL/3. Zero
	// means DefaultMarkerTTL; otherwise at least MinMarkerTTL and at most
	// MaxTTL.
	MarkerTTL time.Duration
	// Waiter is the waiting machinery the Acquire calls sleep on: give
	// every primitive on a client the same one (primitives.NewWaiter). Nil
	// means a private Waiter that Close closes. New refuses
	// (primitives.ErrInvalidOptions) a Waiter made for another client, a
	// closed one, or a zero Waiter.
	Waiter *primitives.Waiter
	// Observer, if not nil, is told about every acquisition and about the
	// renewals, releases and losses of the leases granted (see Observer).
	Observer Observer
	// Replicas, when above 0, makes every grant, read or write, and every
	// renewal count only once that many replicas acknowledge it: the
	// script is followed on its connection, in the same round trip, by
	// WAIT Replicas ReplicaTimeout. A grant fewer replicas confirm in time
	// is released (owner-checked) and the acquire fails with an error
	// matching primitives.ErrNotReplicated; waiting acquires stop at it
	// too. An unconfirmed renewal returns such an error and loses the
	// handle (Done closes). Attempts that grant nothing wait too, for
	// whatever they wrote (a waiting writer's entry, pruned leases). At
	// most primitives.MaxReplicas; 0 (the default) is off, one script per
	// attempt as without this option. See docs/failover.md.
	Replicas int
	// ReplicaTimeout bounds WAIT when Replicas is above 0, rounded up to
	// whole milliseconds, at most primitives.MaxReplicaTimeout; 0 means
	// primitives.DefaultReplicaTimeout (1s). Keep it well below the TTLs
	// and below the ctx deadlines of acquires and renewals.
	ReplicaTimeout time.Duration
}

// Locker acquires read and write leases on one client. Safe for concurrent
// use; create one per configuration and share it.
type Locker struct {
	client     rueidis.Client
	space      keys.Space
	retry      policies.RetryPolicy
	starve     policies.StarvationPolicy // nil: reader preference
	markerTTL  time.Duration
	rep        replica.Wait // Options.Replicas; off when zero
	obs        Observer
	engine     *wait.Engine
	ownsEngine bool
	closed     atomic.Bool
	closing    chan struct{} // closed by Close: ends this Locker's waits
	closeOnce  sync.Once
	cleanups   cleanups
	clk        clock.Clock // local estimates; the system clock but in tests

	// Set only by tests (export_test.go).
	grantLog bool           // scripts append every granted member to a list
	reads    *script.Script // the read-acquire script; nil means readScript
}

// New returns a Locker on client. It sends nothing. Errors wrap
// primitives.ErrInvalidOptions.
func New(client rueidis.Client, opts Options) (*Locker, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: rwlock: nil rueidis client", primitives.ErrInvalidOptions)
	}
	retry, err := wait.Policy(opts.Retry)
	if err != nil {
		return nil, fmt.Errorf("rwlock: %w", err)
	}
	if v, ok := opts.Starvation.(interface{ Validate() error }); ok {
		if err := v.Validate(); err != nil {
			return nil, fmt.Errorf("%w: rwlock: starvation policy: %w", primitives.ErrInvalidOptions, err)
		}
	}
	marker := opts.MarkerTTL
	switch {
	case marker == 0:
		marker = DefaultMarkerTTL
	case marker < MinMarkerTTL || marker > MaxTTL:
		return nil, fmt.Errorf("%w: rwlock: MarkerTTL %v is outside [%v, %v]", primitives.ErrInvalidOptions, marker, MinMarkerTTL, MaxTTL)
	}
	rep, err := replica.New("rwlock", opts.Replicas, opts.ReplicaTimeout)
	if err != nil {
		return nil, err
	}
	l := &Locker{
		rep:       rep,
		client:    client,
		space:     keys.Space{Prefix: opts.Prefix},
		retry:     retry,
		starve:    opts.Starvation,
		markerTTL: marker,
		obs:       opts.Observer,
		closing:   make(chan struct{}),
		cleanups:  cleanups{closing: make(chan struct{})},
		clk:       clock.Real,
	}
	if l.engine, l.ownsEngine, err = wait.For(client, (*wait.Engine)(opts.Waiter)); err != nil {
		return nil, fmt.Errorf("rwlock: Options.Waiter: %w", err)
	}
	return l, nil
}

// Close ends the Locker: blocked AcquireRead and AcquireWrite calls return
// primitives.ErrClosed (a waiting writer removes its pending-writer entry
// first) and new calls are refused. Leases already granted keep working.
// It closes the Locker's private Waiter (not one given in Options.Waiter),
// never the client, and returns once the background cleanups of uncertain
// attempts are done (each bounded by DefaultCloseTimeout). Idempotent.
func (l *Locker) Close() error {
	if l == nil || l.closing == nil {
		return nil
	}
	l.closed.Store(true)
	l.closeOnce.Do(func() { close(l.closing) })
	l.cleanups.close()
	if l.ownsEngine {
		return l.engine.Close()
	}
	return nil
}

// isClosed reports whether this Locker was closed (a closed shared Waiter
// ends waiting, not the Try calls).
func (l *Locker) isClosed() bool {
	return l.closed.Load() || l.ownsEngine && l.engine.Closed()
}

// TryAcquireRead makes one attempt to take a read lease on key for ttl and
// never waits. It is refused, with an error matching
// primitives.ErrNotAcquired, while a writer holds the lock or a waiting
// writer holds new readers off. ttl is rounded up to whole milliseconds and
// must be at least 1ms and at most MaxTTL.
//
// Other errors: primitives.ErrInvalidKey, primitives.ErrInvalidTTL,
// primitives.ErrInvalidOptions (nil Locker or context), primitives.ErrClosed,
// ctx.Err() (all before anything is sent), primitives.ErrWrongType (nothing
// written), an error matching primitives.ErrUncertain when the reply was
// lost (the lease was released best effort), one matching
// primitives.ErrNotReplicated (Options.Replicas: granted, not confirmed by
// enough replicas in time, released), or a transport error.
func (l *Locker) TryAcquireRead(ctx context.Context, key string, ttl time.Duration) (*Lease, error) {
	return l.run(ctx, key, ttl, Read, false)
}

// TryAcquireWrite makes one attempt to take the write lease on key for ttl
// and never waits: it is refused (primitives.ErrNotAcquired) while any
// reader or writer holds the lock. It registers no pending-writer entry,
// so it never holds readers off. Errors as in TryAcquireRead.
func (l *Locker) TryAcquireWrite(ctx context.Context, key string, ttl time.Duration) (*Lease, error) {
	return l.run(ctx, key, ttl, Write, false)
}

// AcquireRead takes a read lease on key for ttl, waiting while a writer
// holds the lock or waiting writers hold readers off, until ctx ends (the
// error matches ctx.Err() and names the key), the retry policy gives up
// (primitives.ErrNotAcquired) or the Locker closes (primitives.ErrClosed).
// Bad input fails as in TryAcquireRead, before anything is sent.
func (l *Locker) AcquireRead(ctx context.Context, key string, ttl time.Duration) (*Lease, error) {
	return l.run(ctx, key, ttl, Read, true)
}

// AcquireWrite takes the write lease on key for ttl, waiting while readers
// or another writer hold the lock, until ctx ends, the retry policy gives
// up or the Locker closes (errors as in AcquireRead). While it waits it
// keeps a pending-writer entry that, once the starvation policy's bound has
// passed, holds new readers off (see the package documentation); the entry
// is removed when the call returns, whatever the outcome. With the default
// reader preference, a steady stream of overlapping readers can keep it
// waiting forever: set Options.Starvation (for example
// builtin.WriterPreference{Bound: 200 * time.Millisecond}) or bound the
// wait with ctx or the retry policy.
func (l *Locker) AcquireWrite(ctx context.Context, key string, ttl time.Duration) (*Lease, error) {
	return l.run(ctx, key, ttl, Write, true)
}

// run validates one acquisition, runs it and reports it to the observer.
func (l *Locker) run(ctx context.Context, key string, ttl time.Duration, mode Mode, waits bool) (*Lease, error) {
	r, err := l.prepare(ctx, key, ttl, mode)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	var ls *Lease
	if waits {
		ls, err = l.acquire(ctx, r)
	} else {
		ls, err = l.try(ctx, r)
	}
	if l.obs != nil {
		if ls != nil {
			ls.h.Observe(reporter{o: l.obs, l: ls}, l.clk.Now())
		}
		l.obs.ObserveAcquire(r.key, mode, handle.AcquireOutcomeOf(ctx, waits, err), time.Since(start), err)
	}
	return ls, err
}

// try is one attempt that never waits.
func (l *Locker) try(ctx context.Context, r *request) (*Lease, error) {
	ls, st, err := l.attempt(ctx, wait.Conn{CoreClient: l.client}, r, "")
	if err != nil {
		return nil, err
	}
	if ls == nil {
		return nil, st.notAcquired(r)
	}
	return ls, nil
}

// acquire waits for the lease. A writer's attempts after the first keep
// its pending-writer entry, whose bound the starvation policy sets from
// what the previous attempt saw; the entry leaves when acquire returns.
func (l *Locker) acquire(ctx context.Context, r *request) (*Lease, error) {
	start := time.Now()
	wreq := wait.Request{Key: r.key, Queue: r.key + "\x00" + r.mode.String(), Channel: r.channel, Policy: l.retry, Closing: l.closing}
	if r.mode == Read {
		// Pending-writer entries appearing, going or expiring change a
		// reader's answer too.
		wreq.Also = []string{r.writers}
	} else {
		wreq.MaxSleep = l.markerTTL / 3
		r.entryMs = msString(l.markerTTL)
	}
	var (
		seen       *state // what the latest attempt found (nil: nothing yet)
		registered bool   // an attempt may have written the writer's entry
		last       wait.Conn
	)
	got, werr := wait.Acquire(ctx, l.engine, wreq, false, func(ctx context.Context, c wait.Conn) (*Lease, time.Duration, error) {
		first := c.CoreClient == nil
		if first {
			c = wait.Conn{CoreClient: l.client}
		}
		last = c
		if r.mode == Read {
			ls, st, err := l.attempt(ctx, c, r, "")
			return ls, st.waitOr(-1), err
		}
		if seen == nil || first {
			// Learn the state before asking the policy: the first attempt
			// is a plain try (registering nothing); a waiter that joined
			// the local queue without one makes it now.
			ls, st, err := l.attempt(ctx, c, r, "")
			if err != nil || ls != nil || first {
				if st != nil {
					seen = st
				}
				return ls, st.waitOr(-1), err
			}
			seen = st
		}
		bound, err := l.bound(ctx, r, seen, start, registered)
		if err != nil {
			return nil, 0, err
		}
		registered = true
		ls, st, err := l.attempt(ctx, c, r, bound)
		if st != nil {
			seen = st
		}
		return ls, st.waitOr(-1), err
	}, func() { r.newToken() })
	if r.mode == Write && registered && got == nil {
		l.leave(ctx, last, r)
	}
	return got, wait.Final(ctx, fmt.Sprintf("rwlock %q", r.key), start, werr)
}

// Mode is the kind of a lease: Read (shared) or Write (exclusive).
type Mode uint8

// The lease modes.
const (
	Read Mode = iota + 1
	Write
)

// String returns "read" or "write", suitable as a metric label.
func (m Mode) String() string {
	switch m {
	case Read:
		return "read"
	case Write:
		return "write"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}
