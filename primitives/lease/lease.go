// Package lease implements named leases as fields of one Redis hash, each
// field with its own expiry (HPEXPIRE), over a caller-owned rueidis.Client.
//
// A lease is one field holding a random ownership token; renew, verify and
// release compare the token of that field only, so an expired owner's
// handle can never touch a replacement or a sibling field. Field expiry
// needs Redis 7.4 or newer (or Valkey 9.0): on other servers every call fails with
// ErrUnsupportedServer before anything is written.
//
// An acquire whose reply is lost is fenced, never replayed: it runs on a
// dedicated connection whose CLIENT ID is known, and on uncertainty another
// connection sends CLIENT KILL ID before an owner-checked release, so a
// delayed command cannot recreate a lease after its cleanup. That needs the
// CLIENT INFO and CLIENT KILL commands: without CLIENT INFO every
// acquisition fails with an error wrapping ErrNoClientPermission; without
// CLIENT KILL an acquisition whose outcome is unknown fails with an error
// matching both primitives.ErrUncertain and ErrNoClientPermission, and may
// leave the field held by no handle until its TTL.
//
// Waiters track the whole hash (any field's change may wake them; only the
// head of each field's local queue re-attempts) and always wake at the
// holder field's HPTTL. See package lock for which client options give
// which wake-up source; the rules are the same.
//
// # What the guarantees rest on
//
// A lease is exclusive while Redis keeps every write: the hazards and the
// server settings that avoid them are those of package lock ("What the
// guarantees rest on": appendonly yes, maxmemory-policy noeviction, and a
// failover may lose the latest grants). Two more are the hash's own: a
// key-level TTL on the hash (PEXPIRE by anyone) would end every field
// lease with it, so Acquire refuses such a hash and Renew and Verify fail
// closed when one appears (ErrHashHasTTL); and a DEL or HDEL from outside
// ends the lease at once, which Verify reports as false. Leases need the
// CLIENT INFO and CLIENT KILL commands (ErrNoClientPermission) and COMMAND
// INFO (the feature probe) besides the hash commands of the scripts.
package lease

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/coordhost/coordhost/lua"
	"github.com/coordhost/coordhost/policies"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/internal/base"
	"github.com/coordhost/coordhost/primitives/internal/clock"
	"github.com/coordhost/coordhost/primitives/internal/fence"
	"github.com/coordhost/coordhost/primitives/internal/handle"
	"github.com/coordhost/coordhost/primitives/internal/keys"
	"github.com/coordhost/coordhost/primitives/internal/probe"
	"github.com/coordhost/coordhost/primitives/internal/replica"
	"github.com/coordhost/coordhost/primitives/internal/script"
	"github.com/coordhost/coordhost/primitives/internal/wait"
	"github.com/redis/rueidis"
)

// DefaultCloseTimeout, 2s, bounds Lease.Close and the cleanup after an uncertain
// acquire.
const DefaultCloseTimeout = handle.CloseTimeout

// MaxTTL is the longest lease TryAcquire, Acquire and Renew accept: 100
// years. A longer ttl fails with primitives.ErrInvalidTTL before anything
// is sent; the scripts check it again before their first write, so HSET
// never runs without its HPEXPIRE.
const MaxTTL = handle.MaxTTL

// Errors of this package (see also the primitives sentinels).
var (
	// ErrUnsupportedServer: the server lacks per-field expiry. It is
	// primitives.ErrUnsupported.
	ErrUnsupportedServer = primitives.ErrUnsupported
	// ErrHashHasTTL: the hash key has a key-level TTL, which would end every
	// field lease at once. Acquire refuses such a hash (nothing written);
	// Renew and Verify, finding one added after the grant, fail closed.
	ErrHashHasTTL = errors.New("lease: the hash has a key-level TTL, which would end every field lease with it (PERSIST it or use another hash)")
	// ErrNoClientPermission: CLIENT INFO / CLIENT KILL are refused, so an
	// uncertain acquire could not be fenced. It matches
	// primitives.ErrNoPermission.
	ErrNoClientPermission = fence.ErrNoPermission
)

var (
	acquireScript = script.New("lease_acquire", lua.LeaseAcquire)
	renewScript   = script.New("lease_renew", lua.LeaseRenew)
	releaseScript = script.New("lease_release", lua.LeaseRelease).WithRefusedWait(script.ReleaseRefusedWait)
)

// Options configure Leases. The zero value is valid: no prefix,
// exponential backoff waiting.
type Options struct {
	// Prefix is prepended to every hash key.
	Prefix string
	// Retry decides how Acquire waits after a failed attempt; nil means
	// builtin.Exponential{}. Waiters also wake at the holder's expiry and
	// on server notifications whatever it says.
	Retry policies.RetryPolicy
	// Waiter is the waiting machinery Acquire sleeps on: give every
	// primitive on a client the same one (primitives.NewWaiter) so that
	// they share one waiting connection. Nil means a private Waiter that
	// Close closes. New refuses (primitives.ErrInvalidOptions) a Waiter
	// made for another client, a closed one, or a zero Waiter.
	Waiter *primitives.Waiter
	// Replicas, when above 0, makes every grant and every renewal count
	// only once that many replicas acknowledge it: the acquire or renew
	// script is followed on its connection, in the same round trip, by
	// WAIT Replicas ReplicaTimeout. A lease fewer replicas confirm in time
	// is released (owner-checked) and the acquire fails with an error
	// matching primitives.ErrNotReplicated (waiting acquires stop at it
	// too); an unconfirmed renewal returns such an error and loses the
	// handle (Done closes). At most primitives.MaxReplicas; 0 (the
	// default) is off, one script per attempt as without this option. See
	// docs/failover.md.
	Replicas int
	// ReplicaTimeout bounds WAIT when Replicas is above 0, rounded up to
	// whole milliseconds, at most primitives.MaxReplicaTimeout; 0 means
	// primitives.DefaultReplicaTimeout (1s). Keep it well below the TTLs
	// and below the ctx deadlines of acquires and renewals.
	ReplicaTimeout time.Duration
}

// Leases acquires hash-field leases on one client. Safe for concurrent use;
// create one per client and share it.
type Leases struct {
	client rueidis.Client
	space  keys.Space
	retry  policies.RetryPolicy
	rep    replica.Wait // Options.Replicas; off when zero
	engine *wait.Engine
	owns   bool          // engine is private: Close closes it
	closed chan struct{} // closed by Close: ends this Leases' waits
	once   sync.Once
	fences *fence.Pool

	fieldExpiry probe.Feature
	clk         clock.Clock // local estimates; the system clock but in tests (export_test.go)
}

// New returns Leases on client. It sends nothing. Errors wrap
// primitives.ErrInvalidOptions.
func New(client rueidis.Client, opts Options) (*Leases, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: lease: nil rueidis client", primitives.ErrInvalidOptions)
	}
	retry, err := wait.Policy(opts.Retry)
	if err != nil {
		return nil, fmt.Errorf("lease: %w", err)
	}
	rep, err := replica.New("lease", opts.Replicas, opts.ReplicaTimeout)
	if err != nil {
		return nil, err
	}
	ls := &Leases{
		rep:         rep,
		client:      client,
		space:       keys.Space{Prefix: opts.Prefix},
		retry:       retry,
		closed:      make(chan struct{}),
		fences:      fence.NewPool(client),
		fieldExpiry: probe.Feature{Commands: []string{"hpexpire", "hpttl"}},
		clk:         clock.Real,
	}
	if ls.engine, ls.owns, err = wait.For(client, (*wait.Engine)(opts.Waiter)); err != nil {
		return nil, fmt.Errorf("lease: Options.Waiter: %w", err)
	}
	return ls, nil
}

// Close ends the Leases: blocked Acquire calls return primitives.ErrClosed
// and new calls are refused. It closes idle fenced connections and the
// private Waiter (not one given in Options.Waiter), never the client.
// Granted leases keep working. Idempotent.
func (ls *Leases) Close() error {
	ls.once.Do(func() { close(ls.closed) })
	ls.fences.Close()
	if ls.owns {
		return ls.engine.Close()
	}
	return nil
}

// isClosed reports whether Close was called or the Waiter closed.
func (ls *Leases) isClosed() bool {
	select {
	case <-ls.closed:
		return true
	default:
		return ls.owns && ls.engine.Closed() // a closed shared Waiter ends waiting, not TryAcquire
	}
}

// TryAcquire makes one attempt to take field of hashKey for ttl and never
// waits; contention returns an error matching primitives.ErrNotAcquired.
// ttl is rounded up to whole milliseconds and must be at least 1ms and at
// most MaxTTL.
//
// Errors, all before anything is written: primitives.ErrInvalidKey (empty
// or reserved key, empty field), primitives.ErrInvalidTTL,
// ErrUnsupportedServer (Redis < 7.4), ErrHashHasTTL, primitives.ErrWrongType,
// ErrNoClientPermission, ctx.Err(). A lost reply is fenced and settled; the
// error then says the outcome was unknown and the lease is not held. With
// Options.Replicas, a lease too few replicas confirmed in time is released
// and the error matches primitives.ErrNotReplicated.
func (ls *Leases) TryAcquire(ctx context.Context, hashKey, field string, ttl time.Duration) (*Lease, error) {
	req, err := ls.prepare(ctx, hashKey, field, ttl)
	if err != nil {
		return nil, err
	}
	l, holderTTL, err := ls.attempt(ctx, wait.Conn{}, req)
	if err != nil {
		return nil, err
	}
	if l == nil {
		return nil, fmt.Errorf("%w: lease %q field %q is held (expires in %v)", primitives.ErrNotAcquired, req.key, req.field, holderTTL)
	}
	return l, nil
}

// Acquire takes field of hashKey for ttl, waiting while another owner holds
// it, until ctx ends (the error matches ctx.Err()), the retry policy gives
// up (primitives.ErrNotAcquired) or Leases closes (primitives.ErrClosed).
// Bad input fails as in TryAcquire.
func (ls *Leases) Acquire(ctx context.Context, hashKey, field string, ttl time.Duration) (*Lease, error) {
	req, err := ls.prepare(ctx, hashKey, field, ttl)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	got, err := wait.Acquire(ctx, ls.engine, wait.Request{
		Key: req.key, Queue: req.key + "\x00" + req.field, Channel: req.channel, Policy: ls.retry, Closing: ls.closed,
	}, false, func(ctx context.Context, c wait.Conn) (*Lease, time.Duration, error) {
		return ls.attempt(ctx, c, req)
	}, func() { req.token = rand.Text() })
	return got, wait.Final(ctx, fmt.Sprintf("lease %q field %q", req.key, req.field), start, err)
}

type request struct {
	key, field, channel string
	ttl                 time.Duration
	ms                  string
	token               string
}

func (ls *Leases) prepare(ctx context.Context, hashKey, field string, ttl time.Duration) (*request, error) {
	if ls == nil || ls.client == nil {
		return nil, fmt.Errorf("%w: lease: nil Leases (use lease.New)", primitives.ErrInvalidOptions)
	}
	if ctx == nil {
		return nil, fmt.Errorf("%w: lease: nil context", primitives.ErrInvalidOptions)
	}
	full, field, channel, err := ls.target(hashKey, field)
	if err != nil {
		return nil, err
	}
	ttl, ms, err := handle.Millis(ttl)
	if err != nil {
		return nil, fmt.Errorf("lease %q field %q: %w", full, field, err)
	}
	if ls.isClosed() {
		return nil, fmt.Errorf("lease %q: %w", full, primitives.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("lease %q: %w", full, err)
	}
	if err := ls.checkServer(ctx); err != nil {
		return nil, err
	}
	return &request{key: full, field: field, ttl: ttl, ms: ms, token: rand.Text(), channel: channel}, nil
}

// target returns what every call on field of hashKey uses: the full hash
// key, a copy of the field (own memory for asynchronous work) and the
// field's release channel. Errors match primitives.ErrInvalidKey; nothing
// is sent. Acquisitions (prepare) and Resume both derive them here.
func (ls *Leases) target(hashKey, field string) (full, fieldCopy, channel string, err error) {
	if full, err = ls.space.Key(hashKey); err != nil {
		return "", "", "", fmt.Errorf("lease: hash key: %w: %w", primitives.ErrInvalidKey, err)
	}
	if field == "" {
		return "", "", "", fmt.Errorf("lease %q: %w: field is empty", full, primitives.ErrInvalidKey)
	}
	fieldCopy = string([]byte(field))
	channel = ls.space.Channel("lease-rel", strconv.Itoa(len(hashKey))+":"+hashKey+":"+fieldCopy)
	return full, fieldCopy, channel, nil
}

// checkServer asks the server for HPEXPIRE/HPTTL, at most once per
// probe.DefaultInterval (a server may be upgraded or failed over);
// transport errors are not cached.
func (ls *Leases) checkServer(ctx context.Context) error {
	has, version, err := ls.fieldExpiry.Check(ctx, ls.client)
	if err != nil {
		return fmt.Errorf("lease: probing the server for hash-field expiry: %w", err)
	}
	if !has {
		return fmt.Errorf("%w: hash-field leases need HPEXPIRE and HPTTL (Redis 7.4 or newer, Valkey 9.0 or newer); the server is %s", ErrUnsupportedServer, version)
	}
	return nil
}

// attempt runs the acquire script once: on the engine's tracking
// connection when c is one (c.ID != 0), else on a fenced connection of its
// own. A lost reply is fenced with CLIENT KILL, then released with an
// owner check (fence.Attempt).
func (ls *Leases) attempt(ctx context.Context, c wait.Conn, r *request) (*Lease, time.Duration, error) {
	name := fmt.Sprintf("lease %q field %q", r.key, r.field)
	sent := ls.clk.Now()
	var ack replica.Ack
	vals, err := fence.Attempt(ctx, ls.fences, c.CoreClient, c.Identity, name, r.key,
		func(ctx context.Context, conn rueidis.CoreClient) ([]rueidis.RedisMessage, error) {
			var res rueidis.RedisResult
			res, ack = ls.rep.Run(ctx, conn, acquireScript, []string{r.key}, []string{r.field, r.token, r.ms})
			vals, err := res.ToArray()
			return vals, acquireScript.Classify(err)
		},
		func(ctx context.Context) error { return ls.release(ctx, r) })
	if err == nil && len(vals) != 2 {
		err = fmt.Errorf("lease: acquire script returned %d values, want 2", len(vals))
	}
	if err != nil {
		if errors.Is(err, base.ErrUncertain) {
			return nil, 0, err
		}
		var se *script.Error
		if errors.As(err, &se) && se.Code == script.CodeUnsupported {
			ls.fieldExpiry.Forget()
			return nil, 0, fmt.Errorf("%s: %w: hash-field leases need HPEXPIRE and HPTTL (Redis 7.4 or newer, Valkey 9.0 or newer): %s", name, ErrUnsupportedServer, se.Msg)
		}
		return nil, 0, mapScriptErr(name, err)
	}
	flag, err := vals[0].AsInt64()
	if err != nil {
		return nil, 0, fmt.Errorf("%s: acquire script: %w", name, err)
	}
	if flag == 0 {
		pttl, err := vals[1].AsInt64()
		if err != nil {
			return nil, 0, fmt.Errorf("%s: acquire script: %w", name, err)
		}
		return nil, time.Duration(pttl) * time.Millisecond, nil
	}
	if !ack.OK() {
		// Granted on the primary only, as far as anyone knows.
		settled := "released"
		if err := ls.release(ctx, r); err != nil {
			settled = fmt.Sprintf("release failed (%v): the field stays until its TTL", err)
		}
		return nil, 0, ack.Err(name, "acquire", settled)
	}
	l := &Lease{}
	l.h.Init(ls.client, ls.clk, r.key, r.token, leaseOps{key: r.key, field: r.field, channel: r.channel, rep: ls.rep}, sent, r.ttl)
	if l.h.Expired() {
		ls.release(ctx, r)
		return nil, 0, &base.LateGrant{Name: name}
	}
	return l, 0, nil
}

func (ls *Leases) release(ctx context.Context, r *request) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultCloseTimeout)
	defer cancel()
	return releaseScript.Run(ctx, ls.client, []string{r.key}, []string{r.field, r.token, r.channel}).Error()
}
