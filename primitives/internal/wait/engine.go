// Package wait is the wait engine: it puts waiters to sleep until the
// server says the resource they want may have changed, and wakes them at the
// holder's expiry even when the server says nothing (DESIGN.md §4.6).
//
// Wake sources, by mode:
//   - ModeTrack (standalone or sentinel client speaking RESP3): the engine's
//     dedicated connection has CLIENT TRACKING on; the queue head re-attempts
//     on that connection, so the attempt's own read registers the key and
//     any later change sends an invalidation. This is the fast path.
//   - ModeChannel (cluster clients, RESP2, or tracking refused): the engine
//     SUBSCRIBEs its dedicated connection to each key's release channel
//     before the first attempt that could decide to sleep.
//   - ModePoll (pub/sub refused): no notifications; waiters re-attempt at
//     most every PollInterval.
//
// In every mode a waiter also wakes at the holder's remaining TTL reported
// by its last attempt, and at the bound its retry policy sets. Per key only
// the head of the local FIFO queue re-attempts, so a release costs O(1)
// commands per process whatever the number of local waiters. Connection
// loss wakes every head.
package wait

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/coordhost/coordhost/policies"
	"github.com/coordhost/coordhost/primitives/internal/base"
	"github.com/coordhost/coordhost/primitives/internal/clock"
	"github.com/coordhost/coordhost/primitives/internal/fence"
	"github.com/redis/rueidis"
)

// Mode says where wake-ups come from.
type Mode int

const (
	// ModeAuto picks ModeTrack when possible, else ModeChannel, else
	// ModePoll.
	ModeAuto Mode = iota
	// ModeTrack wakes on client-tracking invalidations.
	ModeTrack
	// ModeChannel wakes on release-channel messages.
	ModeChannel
	// ModePoll wakes on a bounded timer only.
	ModePoll
)

// String returns the mode's name.
func (m Mode) String() string {
	return [...]string{"auto", "track", "channel", "poll"}[m]
}

// DefaultPollInterval bounds a waiter's sleep in ModePoll.
const DefaultPollInterval = 100 * time.Millisecond

// expiryMargin is added to the holder's TTL before re-attempting, so the
// attempt lands after the server considers the key expired.
const expiryMargin = time.Millisecond

// minRetryAfter floors a RetryAfter decision, so no policy can make a
// waiter hammer Redis.
const minRetryAfter = 5 * time.Millisecond

// Errors returned by Wait.
var (
	ErrGaveUp = errors.New("retry policy gave up")
	// ErrClosed: the engine (the Waiter) was closed.
	ErrClosed = errors.New("its Waiter was closed")
	// ErrStopped: the wait's own primitive was closed (Request.Closing).
	ErrStopped = errors.New("closed")
)

// Retryable marks an attempt error that should be retried per policy
// (reason "error") rather than end the wait. Uncertain says the reply was
// lost, so the connection the attempt used is suspect.
type Retryable struct {
	Err       error
	Uncertain bool
}

func (r *Retryable) Error() string { return r.Err.Error() }
func (r *Retryable) Unwrap() error { return r.Err }

// Outcome is what one attempt found.
type Outcome struct {
	Acquired bool
	// HolderTTL is the holder's remaining TTL; negative when unknown or the
	// key does not expire.
	HolderTTL time.Duration
}

// Conn is the connection an attempt must use.
type Conn struct {
	rueidis.CoreClient
	// Identity names the connection on the server when it is the
	// engine's dedicated one (track mode), so a primitive that must fence
	// an uncertain outcome can CLIENT KILL it; zero (ID 0) for the shared
	// client.
	fence.Identity
}

// Attempt tries once to acquire, on the given connection.
type Attempt func(ctx context.Context, c Conn) (Outcome, error)

// Options configure an Engine. The zero value picks the mode automatically.
type Options struct {
	Mode         Mode
	PollInterval time.Duration // ModePoll bound; 0 means DefaultPollInterval
	Clock        clock.Clock   // the sleeps' timers; nil means the system clock
}

// Engine serves every waiter of one rueidis client. Safe for concurrent
// use. Close stops its dedicated connection.
type Engine struct {
	client rueidis.Client
	opts   Options
	clk    clock.Clock

	mu      sync.Mutex
	closed  bool
	closing chan struct{}  // closed by Close
	wg      sync.WaitGroup // watch and unsubscribe goroutines
	conn    *dconn
	dialing chan struct{}                  // closed when the dial under way ends
	queues  map[string]*queue              // by Request.Queue
	byKey   map[string]map[*queue]struct{} // invalidation key -> queues
	byChan  map[string]map[*queue]struct{} // release channel -> queues

	stats Stats
}

// Stats counts engine events (for tests and metrics).
type Stats struct {
	Attempts      int64 // head re-attempts
	Invalidations int64
	Messages      int64
	ConnLost      int64
}

// New returns an engine for client. It dials nothing until a waiter needs
// it.
func New(client rueidis.Client, opts Options) *Engine {
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	return &Engine{client: client, opts: opts, clk: clock.Or(opts.Clock), closing: make(chan struct{}), queues: map[string]*queue{},
		byKey: map[string]map[*queue]struct{}{}, byChan: map[string]map[*queue]struct{}{}}
}

// Stats returns a snapshot of the counters.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stats
}

// Mode returns the mode of the current connection, or ModeAuto if none.
func (e *Engine) Mode() Mode {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.conn == nil {
		return ModeAuto
	}
	return e.conn.mode
}

// Close wakes every waiter with ErrClosed and closes the dedicated
// connection. Idempotent.
func (e *Engine) Close() error {
	if e.closing == nil {
		return nil // a zero Engine (never made by New) holds nothing
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	close(e.closing)
	conn := e.conn
	e.conn = nil
	for _, q := range e.queues {
		for _, w := range q.waiters {
			w.signal()
		}
		q.wake()
	}
	e.mu.Unlock()
	if conn != nil {
		conn.close()
	}
	e.wg.Wait()
	return nil
}

// queue holds the local waiters of one key, oldest first.
type queue struct {
	id, channel string
	keys        []string // keys whose invalidation wakes this queue
	waiters     []*waiter
}

// wake pokes the head, and every waiter that does not coalesce.
func (q *queue) wake() {
	for i, w := range q.waiters {
		if i == 0 || w.every {
			poke(w.wakec)
		}
	}
}

type waiter struct {
	turn  chan struct{} // buffered 1: became head, or engine closed
	wakec chan struct{} // buffered 1: a wake-up while head (or every)
	every bool          // re-attempts on every wake, head or not
}

func (w *waiter) signal() { poke(w.turn) }

func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Request describes one wait.
type Request struct {
	Key string // full Redis key, used to match invalidations
	// Queue identifies the local FIFO queue; waiters with the same Queue
	// take turns. Empty means Key. Several queues may share a Key (fields
	// of one hash): an invalidation of Key wakes every one of them.
	Queue   string
	Channel string // release channel
	Policy  policies.RetryPolicy
	// Start is when the caller's first attempt was sent; Elapsed for the
	// policy is measured from it.
	Start time.Time
	// Attempts made before Wait (the caller's fast path); the first failed
	// attempt counts as 1.
	Attempts int
	// HolderTTL from the caller's last attempt.
	HolderTTL time.Duration
	// Also lists more keys whose invalidation should wake this waiter
	// (e.g. a FIFO queue the attempt reads).
	Also []string
	// Every opts out of local coalescing: the waiter re-attempts on every
	// wake even when it is not the head of the local queue. FIFO waiters
	// need it, since the server, not the local queue, decides their turn.
	Every bool
	// MaxSleep bounds every sleep (a waiter that must refresh a queue
	// entry); 0 means no bound of its own.
	MaxSleep time.Duration
	// Closing, when it closes, ends this wait with ErrStopped (the
	// primitive that asked was closed; the engine may serve others).
	Closing <-chan struct{}
}

// Wait blocks until attempt acquires (nil), the policy gives up (ErrGaveUp),
// ctx ends (ctx.Err()), the engine closes (ErrClosed), the request's
// Closing closes (ErrStopped) or attempt returns an error that is not
// *Retryable. The caller's own attempt failed just before Wait; Wait
// re-attempts once right after registering interest, so a release in
// between is never missed.
//
// It has three steps: takeTurn (wait to be the head of the local queue),
// then alternately attemptOnce and decide (ask the policy, then sleep).
func (e *Engine) Wait(ctx context.Context, req Request, attempt Attempt) error {
	q, w, err := e.join(ctx, req)
	if err != nil {
		return err
	}
	defer e.leave(q, w)
	if err := e.takeTurn(ctx, req, q, w); err != nil {
		return err
	}
	st := progress{attempts: req.Attempts, holderTTL: req.HolderTTL, reason: policies.ReasonContended}
	for first := true; ; first = false {
		if !first {
			if err := e.decide(ctx, req, w, &st); err != nil {
				return err
			}
		}
		if done, err := e.attemptOnce(ctx, req, q, w, &st, first, attempt); done || err != nil {
			return err
		}
	}
}

// progress is what one Wait has learnt so far.
type progress struct {
	attempts  int
	holderTTL time.Duration
	reason    policies.RetryReason
	lastErr   error
}

// takeTurn waits until w is the head of its local queue (waiters that
// re-attempt on every wake do not wait).
func (e *Engine) takeTurn(ctx context.Context, req Request, q *queue, w *waiter) error {
	for !w.every && !e.isHead(q, w) {
		select {
		case <-w.turn:
			if closed(req.Closing) {
				return ErrStopped
			}
			if e.Closed() {
				return ErrClosed
			}
		case <-req.Closing:
			return ErrStopped
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// decide asks the retry policy what to do after a failed attempt and
// sleeps as it says.
func (e *Engine) decide(ctx context.Context, req Request, w *waiter, st *progress) error {
	if st.attempts == 0 {
		st.attempts = 1
	}
	dec := policyDecide(ctx, req.Policy, policies.RetryRequest{
		Attempt:   st.attempts,
		Reason:    st.reason,
		Elapsed:   e.clk.Now().Sub(req.Start),
		HolderTTL: st.holderTTL,
		Rand:      rand.Uint64(),
	})
	if err := ctx.Err(); err != nil {
		// Cancelled while the policy ran: its answer may be a fallback
		// nobody asked for.
		return err
	}
	if dec.Action == policies.GiveUp {
		if st.lastErr != nil {
			return fmt.Errorf("%w after %d attempts: %w", ErrGaveUp, st.attempts, st.lastErr)
		}
		return fmt.Errorf("%w after %d attempts", ErrGaveUp, st.attempts)
	}
	maxSleep := req.MaxSleep
	if st.reason == policies.ReasonError && (maxSleep <= 0 || maxSleep > e.opts.PollInterval) {
		// After an error nothing may announce the next change (the
		// release may have happened while the attempt failed): never
		// sleep longer than a poll.
		maxSleep = e.opts.PollInterval
	}
	return e.sleep(ctx, req, w, dec, st.holderTTL, maxSleep)
}

// attemptOnce makes one attempt on the right connection: the dedicated one
// in track mode (its read registers the key), else the client. It reports
// done when the attempt acquired or ended the wait with an error.
func (e *Engine) attemptOnce(ctx context.Context, req Request, q *queue, w *waiter, st *progress, first bool, attempt Attempt) (done bool, err error) {
	if closed(req.Closing) {
		// Closed while this waiter woke: a select picks at random among
		// ready cases, so a wake may win over Closing.
		return true, ErrStopped
	}
	// Drain before registering and sending: a wake after this point (a
	// release, or the connection dropping) stays buffered.
	select {
	case <-w.wakec:
	default:
	}
	conn, mode, err := e.connFor(ctx, q)
	if err != nil {
		if ctx.Err() != nil {
			return true, ctx.Err()
		}
		if errors.Is(err, ErrClosed) {
			return true, ErrClosed
		}
		// No dedicated connection: attempt on the client and rely on
		// timers until the next try dials again.
		conn = nil
	}
	c := Conn{CoreClient: e.client}
	if conn != nil && mode == ModeTrack {
		c = Conn{CoreClient: conn.c, Identity: conn.who}
	}
	e.mu.Lock()
	e.stats.Attempts++
	e.mu.Unlock()
	out, err := attempt(ctx, c)
	if !(first && req.Attempts > 0) {
		// The re-check right after joining (it registers interest) is
		// part of the caller's failed attempt, not a new one for the
		// policy to count.
		st.attempts++
	}
	switch {
	case err == nil && out.Acquired:
		return true, nil
	case err == nil:
		st.reason, st.lastErr, st.holderTTL = policies.ReasonContended, nil, out.HolderTTL
		return false, nil
	case ctx.Err() != nil:
		return true, ctx.Err()
	}
	var r *Retryable
	if !errors.As(err, &r) {
		return true, err
	}
	if r.Uncertain && conn != nil && c.ID != 0 {
		// The tracking connection may be broken (or was fenced).
		e.dropConn(conn)
	}
	st.reason, st.lastErr, st.holderTTL = policies.ReasonError, err, -1
	return false, nil
}

// closed reports whether ch (a Request.Closing, maybe nil) is closed.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func policyDecide(ctx context.Context, p policies.RetryPolicy, r policies.RetryRequest) policies.RetryDecision {
	if p == nil {
		return policies.RetryDecision{Action: policies.WaitForWake}
	}
	return p.DecideRetry(ctx, r)
}

// sleep waits as the decision says, never past the holder's expiry.
func (e *Engine) sleep(ctx context.Context, req Request, w *waiter, dec policies.RetryDecision, holderTTL, maxSleep time.Duration) error {
	d := dec.Delay
	if maxSleep > 0 && (d <= 0 || d > maxSleep) {
		d = maxSleep
	}
	if dec.Action == policies.RetryAfter {
		// A policy may not spin a waiter against Redis: at least
		// minRetryAfter between attempts. Wake-ups are ignored, Close is
		// not.
		t := e.clk.NewTimer(max(d, minRetryAfter))
		defer t.Stop()
		select {
		case <-t.C():
		case <-e.closing:
		case <-req.Closing:
			return ErrStopped
		case <-ctx.Done():
			return ctx.Err()
		}
		if e.Closed() {
			return ErrClosed
		}
		return nil
	}
	if holderTTL >= 0 {
		if h := holderTTL + expiryMargin; d <= 0 || h < d {
			d = h
		}
	}
	if m := e.Mode(); m == ModePoll || m == ModeAuto {
		if d <= 0 || d > e.opts.PollInterval {
			d = e.opts.PollInterval
		}
	}
	var timeout <-chan time.Time
	if d > 0 {
		t := e.clk.NewTimer(d)
		defer t.Stop()
		timeout = t.C()
	}
	select {
	case <-w.wakec:
	case <-timeout:
	case <-req.Closing:
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
	if e.Closed() {
		return ErrClosed
	}
	return nil
}

// Queued reports whether local waiters are queued under queue (a
// Request.Queue, or Key when Queue is empty). A newcomer may then join the
// queue without an attempt of its own: the head is registered and will
// hand over.
func (e *Engine) Queued(queue string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	q := e.queues[queue]
	return q != nil && len(q.waiters) > 0
}

// For returns the engine a primitive on client waits on: shared when it is
// not nil (it must be Usable with client), else a new private one, which
// the primitive owns and closes. Call it last in a constructor, so that no
// later error leaks a private engine.
func For(client rueidis.Client, shared *Engine) (e *Engine, owned bool, err error) {
	if shared == nil {
		return New(client, Options{}), true, nil
	}
	if err := shared.Usable(client); err != nil {
		return nil, false, err
	}
	return shared, false, nil
}

// Usable checks that the engine can serve a primitive on client: made by
// New for that very client (its re-attempts run on the client or on its
// own connection to the same server) and not closed.
func (e *Engine) Usable(client rueidis.Client) error {
	switch {
	case e == nil || e.closing == nil:
		return fmt.Errorf("%w: the Waiter was not made by primitives.NewWaiter", base.ErrInvalidOptions)
	case e.client != client:
		return fmt.Errorf("%w: the Waiter belongs to another rueidis client; give each client its own", base.ErrInvalidOptions)
	case e.Closed():
		return fmt.Errorf("%w: the Waiter is closed", base.ErrInvalidOptions)
	}
	return nil
}

// Closed reports whether Close has been called.
func (e *Engine) Closed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.closed
}

func (e *Engine) isHead(q *queue, w *waiter) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.closed || (len(q.waiters) > 0 && q.waiters[0] == w)
}

func (e *Engine) join(ctx context.Context, req Request) (*queue, *waiter, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	w := &waiter{turn: make(chan struct{}, 1), wakec: make(chan struct{}, 1), every: req.Every}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, nil, ErrClosed
	}
	id := req.Queue
	if id == "" {
		id = req.Key
	}
	q := e.queues[id]
	if q == nil {
		q = &queue{id: id, channel: req.Channel, keys: append([]string{req.Key}, req.Also...)}
		e.queues[id] = q
		for _, k := range q.keys {
			index(e.byKey, k, q)
		}
		if req.Channel != "" {
			index(e.byChan, req.Channel, q)
		}
	}
	q.waiters = append(q.waiters, w)
	return q, w, nil
}

func (e *Engine) leave(q *queue, w *waiter) {
	e.mu.Lock()
	wasHead := len(q.waiters) > 0 && q.waiters[0] == w
	for i, x := range q.waiters {
		if x == w {
			q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
			break
		}
	}
	if len(q.waiters) == 0 {
		delete(e.queues, q.id)
		for _, k := range q.keys {
			unindex(e.byKey, k, q)
		}
		if q.channel != "" && unindex(e.byChan, q.channel, q) && !e.closed {
			if e.conn != nil && e.conn.mode == ModeChannel {
				if _, ok := e.conn.subs[q.channel]; ok {
					e.unsubscribe(e.conn, q.channel)
				}
			}
		}
	} else if wasHead {
		q.waiters[0].signal()
	}
	e.mu.Unlock()
}

func index(m map[string]map[*queue]struct{}, k string, q *queue) {
	set := m[k]
	if set == nil {
		set = map[*queue]struct{}{}
		m[k] = set
	}
	set[q] = struct{}{}
}

// unindex removes q under k and reports whether k has no queue left.
func unindex(m map[string]map[*queue]struct{}, k string, q *queue) bool {
	set := m[k]
	delete(set, q)
	if len(set) == 0 {
		delete(m, k)
		return true
	}
	return false
}
