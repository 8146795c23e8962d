package latch

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/coordhost/coordhost/policies"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/internal/script"
	"github.com/coordhost/coordhost/primitives/internal/wait"
)

// Wait blocks until this generation's count reaches zero (true), or the
// generation is replaced, the key deleted or expired (false), or ctx ends
// (the error matches ctx.Err()), or the Latches (or its Waiter) closes
// (primitives.ErrClosed). A generation already complete returns true at
// once, one already gone false.
//
// It registers with the Waiter before its first read and reads again after
// every notification, at the key's expiry, and at least every
// Options.RecheckInterval without one, so a lost notification delays the
// answer by at most that interval (see the package documentation). A
// transport error is retried as Options.Retry says (by default at most
// every primitives.DefaultPollInterval until ctx ends); a policy that gives
// up returns the last error. Cancelling a Wait changes nothing in Redis.
// Other errors: primitives.ErrWrongType (the key now holds something that
// is not a latch), primitives.ErrInvalidOptions (nil ctx, no handle).
//
// Local waiters of one generation share their reads: only the oldest
// reads, and the others take the answer it found.
func (l *Latch) Wait(ctx context.Context) (bool, error) {
	if err := l.check(ctx, "wait"); err != nil {
		return false, err
	}
	ls := l.ls
	if ls.isClosed() {
		return false, fmt.Errorf("%s: wait: %w", l.describe(), primitives.ErrClosed)
	}
	id := l.waitID()
	o := ls.share(id)
	defer ls.unshare(id, o)
	if v, ok := ls.known(o); ok {
		return v, nil
	}
	var result bool
	err := ls.engine.Wait(ctx, wait.Request{
		Key:       l.key,
		Queue:     id,
		Channel:   l.channel,
		Policy:    &waitRetry{p: ls.retry},
		Start:     time.Now(),
		HolderTTL: -1,
		MaxSleep:  ls.recheck,
		Closing:   ls.closing,
	}, func(ctx context.Context, c wait.Conn) (wait.Outcome, error) {
		if v, ok := ls.known(o); ok {
			result = v
			return wait.Outcome{Acquired: true}, nil
		}
		// c is the engine's tracking connection in tracking mode, so this
		// read registers the key; in channel mode the channel is already
		// subscribed.
		st, err := read(ctx, c.CoreClient, l.key)
		if err != nil {
			if ctx.Err() == nil && script.IsUncertain(err) {
				return wait.Outcome{}, &wait.Retryable{Err: err, Uncertain: true}
			}
			return wait.Outcome{}, err
		}
		if finished, completed := st.outcome(l.gen); finished {
			ls.learn(o, completed)
			result = completed
			return wait.Outcome{Acquired: true}, nil
		}
		// Wake at the key's expiry too: Redis may announce it late.
		ttl := time.Duration(-1)
		if st.pttl >= 0 {
			ttl = time.Duration(st.pttl) * time.Millisecond
		}
		return wait.Outcome{HolderTTL: ttl}, nil
	})
	switch {
	case err == nil:
		return result, nil
	case errors.Is(err, wait.ErrStopped): // this Latches was closed
		return false, fmt.Errorf("%s: wait: %w", l.describe(), primitives.ErrClosed)
	case errors.Is(err, wait.ErrClosed): // its Waiter was closed
		return false, fmt.Errorf("%s: wait: %w: %w", l.describe(), primitives.ErrClosed, err)
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return false, fmt.Errorf("%s: wait: %w", l.describe(), err)
	case errors.Is(err, wait.ErrGaveUp):
		return false, fmt.Errorf("%s: wait: %w", l.describe(), err)
	}
	return false, l.explain("wait", err)
}

// waitRetry is the retry policy of one Wait: it never gives up on a count
// that has not reached zero yet (wait for the next wake-up, bounded by the
// engine's MaxSleep), and asks Options.Retry about transient errors only,
// counting the current run of them.
type waitRetry struct {
	p     policies.RetryPolicy
	errs  int
	since time.Time
}

func (w *waitRetry) DecideRetry(ctx context.Context, r policies.RetryRequest) policies.RetryDecision {
	if r.Reason != policies.ReasonError {
		w.errs = 0
		return policies.RetryDecision{Action: policies.WaitForWake}
	}
	if w.errs == 0 {
		w.since = time.Now()
	}
	w.errs++
	if w.p == nil {
		// The engine sleeps at most its PollInterval after an error.
		return policies.RetryDecision{Action: policies.WaitForWake}
	}
	r.Attempt, r.Elapsed, r.HolderTTL = w.errs, time.Since(w.since), -1
	return w.p.DecideRetry(ctx, r)
}

// outcome is what the local waiters of one generation learnt: once a
// waiter's read finds the generation finished, the others (queued behind
// it in the engine) take that answer without a read of their own. Both
// answers are final: a generation's count never goes back up and a
// replaced generation never returns (tokens are random), and the hash
// only forgets a completion by being deleted, which a later read would
// report as false, no more true than what was learnt.
type outcome struct {
	refs         int
	known, value bool
}

func (ls *Latches) share(id string) *outcome {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	o := ls.outcomes[id]
	if o == nil {
		o = &outcome{}
		ls.outcomes[id] = o
	}
	o.refs++
	return o
}

func (ls *Latches) unshare(id string, o *outcome) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if o.refs--; o.refs == 0 {
		delete(ls.outcomes, id)
	}
}

func (ls *Latches) known(o *outcome) (value, ok bool) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return o.value, o.known
}

func (ls *Latches) learn(o *outcome, v bool) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	o.known, o.value = true, v
}

// waitID names the local waiters of l's generation: unambiguous (the key's
// length first, since keys and generations may hold any byte) and this
// Latches' own (its queueTag).
func (l *Latch) waitID() string {
	return l.ls.queueTag + strconv.Itoa(len(l.key)) + ":" + l.key + l.gen
}
