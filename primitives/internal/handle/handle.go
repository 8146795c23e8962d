package handle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coordhost/coordhost/primitives/internal/base"
	"github.com/coordhost/coordhost/primitives/internal/clock"
	"github.com/coordhost/coordhost/primitives/internal/script"
	"github.com/redis/rueidis"
)

// CloseTimeout bounds Handle.Close's best-effort release.
const CloseTimeout = 2 * time.Second

// Ops are one primitive's owner-checked operations on one granted lease:
// what a Handle needs besides its local state. Implementations are small
// values (the keys and channel of the lease) held by the Handle.
type Ops interface {
	// Describe names the lease in errors, e.g. `lock "k"`.
	Describe() string
	// Renew sets the lease to ms milliseconds from now if token owns it,
	// in one script: 1 renewed, 0 not owned. Errors come back classified
	// (script.Classify) or as transport errors. A renewal the server made
	// but too few replicas confirmed (replica.Wait) returns an error
	// matching base.ErrNotReplicated: the handle is then lost, as after
	// any renewal error, and the error reaches the caller as it is.
	Renew(ctx context.Context, c rueidis.Client, token, ms string) (int64, error)
	// Release deletes the lease if token owns it and announces the
	// release: 1 released, 0 absent, -1 another owner's.
	Release(ctx context.Context, c rueidis.Client, token string) (int64, error)
	// Owner reads the token that owns the lease now. A Redis nil or
	// WRONGTYPE means none; so does "" (a lease the primitive finds it
	// cannot rely on).
	Owner(ctx context.Context, c rueidis.Client) (string, error)
	// Explain maps a classified script error to the primitive's public
	// error (see MapScriptErr for the common cases).
	Explain(err error) error
}

// Handle is the one implementation of the primitives.Lease contract:
// Renew, Verify, Release, Close, Done, Remaining, with the fail-closed
// rules for uncertain outcomes and renewals applied in send order. Public
// handle types hold one and forward to it. Initialise it with Init; use
// it through a pointer; safe for concurrent use.
type Handle[O Ops] struct {
	ops    O
	client rueidis.Client
	key    string
	token  string
	state  State
	watch  *Watch // nil without an observer
}

// Init sets up h for a grant of token at key, whose command was sent at
// sent (read from clk, nil meaning the system clock) for ttl.
func (h *Handle[O]) Init(c rueidis.Client, clk clock.Clock, key, token string, ops O, sent time.Time, ttl time.Duration) {
	h.client, h.key, h.token, h.ops = c, key, token, ops
	h.state.Init(clk, sent, ttl)
}

// Resume sets up h for a grant of token at key that an earlier acquire
// made, possibly in another process, without a round trip: there is no
// local estimate until a renewal is accepted (State.InitUnknown). Renew,
// Verify and Release are owner-checked by token on the server as for any
// handle.
func (h *Handle[O]) Resume(c rueidis.Client, clk clock.Clock, key, token string, ops O) {
	h.client, h.key, h.token, h.ops = c, key, token, ops
	h.state.InitUnknown(clk)
}

// Observe makes h report to r; call it right after Init, before h is
// shared.
func (h *Handle[O]) Observe(r Reporter, granted time.Time) {
	h.watch = &Watch{r: r, granted: granted}
}

// A nil *Handle, and one never given to Init (a zero public handle, or a
// nil pointer to one), is no grant: its Key and Token are empty, Remaining
// is 0, Done is closed, and its calls fail with base.ErrInvalidOptions.
func (h *Handle[O]) granted() bool { return h != nil && h.client != nil }

func (h *Handle[O]) notGranted(op string) error {
	return fmt.Errorf("%w: %s on a handle that no acquire returned (use TryAcquire or Acquire)", base.ErrInvalidOptions, op)
}

// closedDone is the Done channel of a handle that is no grant.
var closedDone = func() chan struct{} { ch := make(chan struct{}); close(ch); return ch }()

// Ops returns the handle's operations value (nil for no grant).
func (h *Handle[O]) Ops() *O {
	if !h.granted() {
		return nil
	}
	return &h.ops
}

// Key returns the lease's Redis key.
func (h *Handle[O]) Key() string {
	if !h.granted() {
		return ""
	}
	return h.key
}

// Token returns the ownership token.
func (h *Handle[O]) Token() string {
	if !h.granted() {
		return ""
	}
	return h.token
}

// Remaining returns the local estimate of the time left.
func (h *Handle[O]) Remaining() time.Duration {
	if !h.granted() {
		return 0
	}
	return h.state.Remaining()
}

// Done is closed when the estimate runs out, ownership is lost or
// uncertain, or the lease is released.
func (h *Handle[O]) Done() <-chan struct{} {
	if !h.granted() {
		return closedDone
	}
	return h.state.Done()
}

// Expired reports whether the local estimate has run out (or the handle
// was lost or released).
func (h *Handle[O]) Expired() bool { return h.Remaining() == 0 }

// Renew sets the lease to ttl from now if this handle still owns it; see
// lock.Lock.Renew for the contract every handle documents.
func (h *Handle[O]) Renew(ctx context.Context, ttl time.Duration) (bool, error) {
	if !h.granted() {
		return false, h.notGranted("Renew")
	}
	if ctx == nil {
		return false, fmt.Errorf("%w: %s: renew: nil context", base.ErrInvalidOptions, h.ops.Describe())
	}
	ttl, ms, err := Millis(ttl)
	if err != nil {
		return false, fmt.Errorf("%s: renew: %w", h.ops.Describe(), err)
	}
	if err := ctx.Err(); err != nil {
		return false, err // nothing sent
	}
	live := h.watch.renewing(&h.state)
	ok, err := h.state.Renew(ctx, estimate(&h.ops, ttl), func(ctx context.Context) (int64, error) {
		return h.ops.Renew(ctx, h.client, h.token, ms)
	})
	h.watch.renewed(&h.state, live, ok, err)
	return ok, h.explain("renew", err)
}

// Verify asks the server whether this handle still owns the lease. A false
// answer marks the handle lost. Errors leave the handle as it was.
func (h *Handle[O]) Verify(ctx context.Context) (bool, error) {
	if !h.granted() {
		return false, h.notGranted("Verify")
	}
	if ctx == nil {
		return false, fmt.Errorf("%w: %s: verify: nil context", base.ErrInvalidOptions, h.ops.Describe())
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	ok, err := h.state.Verify(ctx, h.token, func(ctx context.Context) (string, error) {
		return h.ops.Owner(ctx, h.client)
	})
	h.watch.verified(&h.state, ok, err)
	if err != nil {
		return false, fmt.Errorf("%s: verify: %w", h.ops.Describe(), err)
	}
	return ok, nil
}

// Release deletes the lease if this handle still owns it: Released,
// AlreadyReleased or NotOwned. An unknown outcome returns an error
// matching base.ErrUncertain and closes Done; calling Release again
// settles it.
func (h *Handle[O]) Release(ctx context.Context) (base.ReleaseResult, error) {
	if !h.granted() {
		return 0, h.notGranted("Release")
	}
	if ctx == nil {
		return 0, fmt.Errorf("%w: %s: release: nil context", base.ErrInvalidOptions, h.ops.Describe())
	}
	if h.state.IsReleased() {
		return base.AlreadyReleased, nil
	}
	if err := ctx.Err(); err != nil {
		return 0, err // nothing sent
	}
	gone := h.watch.releasing(&h.state)
	n, err := h.state.Release(ctx, func(ctx context.Context) (int64, error) {
		return h.ops.Release(ctx, h.client, h.token)
	})
	h.watch.released(&h.state, gone, n, err)
	if err != nil {
		return 0, h.explain("release", err)
	}
	return base.ReleaseResultOf(n), nil
}

// Close releases the lease best effort within CloseTimeout; it never
// deletes another owner's lease, is idempotent, and returns an error only
// when the outcome stayed unknown.
func (h *Handle[O]) Close() error {
	if !h.granted() {
		return nil // nothing to release
	}
	ctx, cancel := context.WithTimeout(context.Background(), CloseTimeout)
	defer cancel()
	_, err := h.Release(ctx)
	if errors.Is(err, base.ErrWrongType) {
		return nil
	}
	return err
}

// explain annotates an error of op: an unknown outcome says the handle
// closed; a server answer is mapped by the primitive.
func (h *Handle[O]) explain(op string, err error) error {
	if err == nil {
		return nil
	}
	var ns notSent
	if errors.As(err, &ns) {
		return ns.err // nothing was sent: not an unknown outcome
	}
	if errors.Is(err, base.ErrNotReplicated) {
		// The server answered, but too few replicas confirmed: the Ops
		// made a *base.NotReplicated that names the lease and says the
		// handle is lost.
		return err
	}
	if script.IsUncertain(err) {
		return &base.Uncertain{Name: h.ops.Describe(), Op: op, Settled: "handle closed", Err: err}
	}
	return h.ops.Explain(err)
}

// MapScriptErr maps the script errors every primitive shares: WRONGTYPE
// to base.ErrWrongType and COORDHOST_BADCOUNTER to base.ErrCorruptCounter,
// naming the lease; anything else is wrapped as it is.
func MapScriptErr(name string, err error) error {
	var se *script.Error
	if errors.As(err, &se) {
		switch se.Code {
		case script.CodeWrongType:
			return fmt.Errorf("%s: %w", name, base.ErrWrongType)
		case script.CodeBadCounter:
			return fmt.Errorf("%s: %w: %s", name, base.ErrCorruptCounter, se.Msg)
		}
	}
	return fmt.Errorf("%s: %w", name, err)
}

// AcquireOutcomeOf classifies an acquisition's result for an observer;
// waits says whether the call could wait (Acquire, not TryAcquire).
func AcquireOutcomeOf(ctx context.Context, waits bool, err error) base.AcquireOutcome {
	cerr := ctx.Err()
	switch {
	case err == nil:
		return base.AcquireAcquired
	case errors.Is(err, base.ErrClosed):
		return base.AcquireClosed
	case cerr != nil && errors.Is(err, cerr):
		if errors.Is(cerr, context.DeadlineExceeded) {
			return base.AcquireDeadlineExceeded
		}
		return base.AcquireCancelled
	case errors.Is(err, base.ErrNotAcquired):
		if waits {
			return base.AcquireGaveUp
		}
		return base.AcquireNotAcquired
	}
	return base.AcquireError
}
