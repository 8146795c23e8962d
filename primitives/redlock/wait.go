package redlock

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"time"

	"github.com/coordhost/coordhost/policies"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/internal/wait"
	"github.com/redis/rueidis"
)

// minRetryAfter floors a RetryAfter decision, as the wait engine does.
const minRetryAfter = 5 * time.Millisecond

// errorPoll bounds a sleep after an attempt that failed for want of nodes:
// nothing announces their return.
const errorPoll = wait.DefaultPollInterval

// Acquire takes key on a majority of the nodes for ttl, waiting while
// other owners hold it (see "Waiting" in the package documentation) or too
// few nodes can take part, until ctx ends (the error matches ctx.Err()),
// the retry policy gives up (primitives.ErrNotAcquired, naming the last
// attempt's failure) or the Group closes (primitives.ErrClosed). Every
// attempt uses a fresh token and removes it from every node it reached
// when it fails. Bad input fails as in TryAcquire; so does a key holding
// another type on a node (primitives.ErrWrongType) or a duplicate node.
func (g *Group) Acquire(ctx context.Context, key string, ttl time.Duration) (*Lock, error) {
	r, err := g.prepare(ctx, key, ttl)
	if err != nil {
		return nil, err
	}
	return g.observe(ctx, r, true, func(ctx context.Context) (*Lock, error) {
		start := time.Now()
		l, err := g.acquireLoop(ctx, r)
		return l, wait.Final(ctx, r.name(), start, err)
	})
}

// acquireLoop makes attempts until one succeeds or the wait ends.
func (g *Group) acquireLoop(ctx context.Context, r *request) (*Lock, error) {
	start := g.clk.Now()
	for attempts := 1; ; attempts++ {
		l, rd, err := g.attempt(ctx, r)
		if l != nil {
			return l, nil
		}
		var reason policies.RetryReason
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case g.isClosed():
			return nil, wait.ErrStopped
		case errors.Is(err, primitives.ErrNotAcquired):
			reason = policies.ReasonContended
		case errors.Is(err, ErrNoQuorum) && !errors.Is(err, primitives.ErrWrongType):
			reason = policies.ReasonError
		default:
			return nil, err // a duplicate node, a key of another type: final
		}
		// The failed attempt's token may still land on a slow node after
		// its cleanup; the next attempt must not take it for its own.
		r.token = rand.Text()
		if err := g.sleep(ctx, r, rd, attempts, reason, start, err); err != nil {
			return nil, err
		}
	}
}

// sleep asks the retry policy what to do after a failed attempt that found
// rd, and sleeps as it says: RetryAfter for its delay; WaitForWake until a
// majority may be free (watched nodes changed, guards ended) or its bound
// runs out, then a random jitter.
func (g *Group) sleep(ctx context.Context, r *request, rd *round, attempts int, reason policies.RetryReason, start time.Time, last error) error {
	dec := policies.RetryDecision{Action: policies.WaitForWake}
	if g.retry != nil {
		dec = g.retry.DecideRetry(ctx, policies.RetryRequest{
			Attempt:   attempts,
			Reason:    reason,
			Elapsed:   g.clk.Now().Sub(start),
			HolderTTL: g.quorumFreeIn(rd),
			Rand:      mrand.Uint64(),
		})
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	switch dec.Action {
	case policies.GiveUp:
		return fmt.Errorf("%w after %d attempts: %w", wait.ErrGaveUp, attempts, last)
	case policies.RetryAfter:
		return g.pause(ctx, max(dec.Delay, minRetryAfter))
	}
	bound := dec.Delay
	if reason == policies.ReasonError && (bound <= 0 || bound > errorPoll) {
		bound = errorPoll
	}
	woken, err := g.waitForMajority(ctx, r, rd, bound)
	if err != nil || !woken {
		return err
	}
	// Contenders woken by one release would split the nodes' votes if they
	// all re-attempted at once.
	j := min(max(2*rd.took, time.Millisecond), g.nodeTimeout)
	return g.pause(ctx, time.Duration(mrand.Int64N(int64(j))+1))
}

// pause sleeps d unless ctx ends or the Group closes.
func (g *Group) pause(ctx context.Context, d time.Duration) error {
	t := g.clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-g.closed:
		return wait.ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
}

// quorumFreeIn estimates from rd when a majority could grant: when the
// holders of enough nodes expire or enough guards end; 0 when enough nodes
// were free, -1 when it cannot tell (nodes failed).
func (g *Group) quorumFreeIn(rd *round) time.Duration {
	if rd == nil {
		return -1
	}
	avail := 0
	var later []time.Duration
	for _, res := range rd.res {
		var ge *guarded
		switch {
		case res.state == stateGranted:
			avail++ // released again: free unless taken meanwhile
		case res.state == stateHeld && res.pttl >= 0:
			later = append(later, res.pttl)
		case res.state == stateExcluded && errors.As(res.err, &ge):
			later = append(later, ge.left)
		}
	}
	missing := g.need() - avail
	if missing <= 0 {
		return 0
	}
	if len(later) < missing {
		return -1
	}
	slices.Sort(later)
	return later[missing-1]
}

// waitForMajority sleeps until enough nodes may have become free for a
// majority (woken true), or bound passes (bound > 0; woken false). Each
// node another owner held in rd is watched through its node's Waiter: it
// counts once its key no longer holds that owner's token (a release, a
// takeover, an expiry: the Waiter also wakes at the holder's PTTL). A node
// the restart guard excluded counts once its guard ends. Nodes rd found
// free (granted to the failed attempt) count at once.
func (g *Group) waitForMajority(ctx context.Context, r *request, rd *round, bound time.Duration) (bool, error) {
	wctx, stop := context.WithCancel(ctx)
	fired := make(chan int, len(g.nodes))
	waiterClosed := make(chan error, len(g.nodes))
	done := make(chan struct{})
	watchers := 0
	avail := 0
	var guardEnds []time.Duration
	for i, res := range rd.res {
		var ge *guarded
		switch {
		case res.state == stateGranted:
			avail++
		case res.state == stateHeld:
			watchers++
			n, holder, pttl := g.nodes[i], res.holder, res.pttl
			go func() {
				defer func() { done <- struct{}{} }()
				switch err := g.watch(wctx, n, r, holder, pttl); {
				case err == nil:
					fired <- i
				case errors.Is(err, wait.ErrClosed):
					waiterClosed <- fmt.Errorf("%s: %w", n.name, err)
				}
			}()
		case res.state == stateExcluded && errors.As(res.err, &ge):
			guardEnds = append(guardEnds, ge.left)
		}
	}
	defer func() {
		stop()
		for range watchers {
			<-done
		}
	}()
	need := g.need()
	if avail >= need {
		return true, nil
	}
	var timeout <-chan time.Time
	if bound > 0 {
		t := g.clk.NewTimer(bound)
		defer t.Stop()
		timeout = t.C()
	}
	var guardC <-chan time.Time
	slices.Sort(guardEnds)
	armGuard := func() {
		if len(guardEnds) > 0 {
			t := g.clk.NewTimer(guardEnds[0])
			guardEnds = guardEnds[1:]
			guardC = t.C()
		} else {
			guardC = nil
		}
	}
	armGuard()
	if timeout == nil && guardC == nil && watchers == 0 {
		// Nothing could wake this waiter: poll as the engine would.
		t := g.clk.NewTimer(errorPoll)
		defer t.Stop()
		timeout = t.C()
	}
	for avail < need {
		select {
		case <-fired:
			avail++
		case <-guardC:
			avail++
			armGuard()
		case <-timeout:
			return false, nil
		case err := <-waiterClosed:
			return false, err // a Waiter given in Options.Waiters was closed
		case <-g.closed:
			return false, wait.ErrStopped
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	return true, nil
}

// watch returns nil once key on n no longer holds holder's token, waiting
// on n's Waiter (tracking or the release channel, and a timer at the
// holder's PTTL); an error when ctx ends or the Waiter closes first.
func (g *Group) watch(ctx context.Context, n *node, r *request, holder string, pttl time.Duration) error {
	return n.engine.Wait(ctx, wait.Request{
		Key:       r.key,
		Queue:     "redlock\x00" + r.key,
		Channel:   r.channel,
		Start:     g.clk.Now(),
		Attempts:  1,
		HolderTTL: pttl,
		Closing:   g.closed,
	}, func(ctx context.Context, c wait.Conn) (wait.Outcome, error) {
		nctx, cancel := g.nodeCtx(ctx)
		defer cancel()
		// The read registers the key for tracking on the Waiter's
		// connection.
		rs := c.DoMulti(nctx, c.B().Get().Key(r.key).Build(), c.B().Pttl().Key(r.key).Build())
		v, err := rs[0].ToString()
		if err != nil && !isNilOrForeign(err) {
			return wait.Outcome{}, &wait.Retryable{Err: err}
		}
		if v != holder {
			return wait.Outcome{Acquired: true}, nil
		}
		ms, err := rs[1].AsInt64()
		if err != nil {
			return wait.Outcome{}, &wait.Retryable{Err: err}
		}
		d := time.Duration(ms) * time.Millisecond
		if ms < 0 {
			d = -1
		}
		return wait.Outcome{HolderTTL: d}, nil
	})
}

// isNilOrForeign reports a GET that found no string value: a Redis nil
// (absent) or an error reply (another type).
func isNilOrForeign(err error) bool {
	return rueidis.IsRedisNil(err) || !isUncertain(err)
}
