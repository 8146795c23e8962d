package redlock

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/internal/handle"
	"github.com/redis/rueidis"
)

// Lock is a granted Redlock. All methods are safe for concurrent use;
// copies of a *Lock share one state (a Lock value must not be copied). A
// zero Lock, or a nil *Lock, is no grant: its calls fail with
// primitives.ErrInvalidOptions. A Lock keeps working after its Group is
// closed.
type Lock struct {
	h handle.Handle[lockOps]
}

var _ primitives.Lease = (*Lock)(nil)

// core is the handle core; nil for a nil *Lock.
func (l *Lock) core() *handle.Handle[lockOps] {
	if l == nil {
		return nil
	}
	return &l.h
}

// Key returns the lock's key on every node, prefix included.
func (l *Lock) Key() string { return l.core().Key() }

// Token returns the random ownership token stored on the nodes.
func (l *Lock) Token() string { return l.core().Token() }

// Remaining returns the validity left: measured from before the
// acquisition (or the last accepted renewal) was sent, less the drift
// allowance, so it never exceeds what a majority of the nodes keeps. Zero
// once lost or released.
func (l *Lock) Remaining() time.Duration { return l.core().Remaining() }

// Done is closed when the validity runs out, ownership is found lost or
// becomes uncertain, or the lock is released. Protected work should stop
// when it closes. Closing is final.
func (l *Lock) Done() <-chan struct{} { return l.core().Done() }

// Renew sets the lock's TTL to ttl from now on every node that still holds
// this token, and keeps the lock only when a majority confirms it with
// validity left (ttl minus the time it took minus the drift allowance);
// then the estimate becomes ttl minus the drift allowance from before the
// renewal was sent. It waits for every node's answer, at most NodeTimeout.
// It returns false without a round trip when the
// validity already ran out or the lock was lost or released.
//
// A renewal that a majority does not confirm ends the lease: the handle
// fails closed (Done closes, later renewals return false) and then the
// token is removed from every node (Renew waits for the nodes that
// answered, at most NodeTimeout), so no node stays extended. It returns
// false when the nodes' answers rule a majority out, or an error matching
// primitives.ErrUncertain when too few answered to know (timeouts,
// cancellation). ttl follows the rules of Group.TryAcquire; a bad ttl or
// a context already done sends nothing.
func (l *Lock) Renew(ctx context.Context, ttl time.Duration) (bool, error) {
	h := l.core()
	if o := h.Ops(); o != nil && ctx != nil {
		if _, _, _, err := o.g.checkTTL(ttl); err != nil {
			return false, fmt.Errorf("%s: renew: %w", o.Describe(), err)
		}
	}
	ok, err := h.Renew(ctx, ttl)
	if o := h.Ops(); o != nil {
		o.st.finishEnding()
	}
	return ok, err
}

// Verify asks the nodes whether this handle still holds the lock: true
// when a majority holds its token, false (without an error) when the
// answers rule that out; a false answer marks the handle lost. When too
// few nodes answer to tell, it returns an error and leaves the handle as
// it was.
func (l *Lock) Verify(ctx context.Context) (bool, error) { return l.core().Verify(ctx) }

// Release removes the token from every node that holds it, in parallel,
// waiting for each at most NodeTimeout even if ctx is cancelled meanwhile
// (a context already done sends nothing). Once a majority answered it
// reports NotOwned when a majority holds another owner's token (this
// token is still removed wherever it was left), else Released when any
// node deleted this token, else AlreadyReleased; a node that did not
// answer keeps the token until its expiry. When fewer than a majority
// answered, the error matches primitives.ErrUncertain, Done closes, and
// calling Release again retries the cleanup. Concurrent Releases of one
// Lock go one at a time.
func (l *Lock) Release(ctx context.Context) (primitives.ReleaseResult, error) {
	return l.core().Release(ctx)
}

// Close releases the lock best effort within DefaultCloseTimeout; it never
// deletes another owner's token, is idempotent, and returns an error only
// when too few nodes answered to settle it.
func (l *Lock) Close() error { return l.core().Close() }

// lockOps are a Redlock's quorum operations (handle.Ops, handle.Estimator).
type lockOps struct {
	g            *Group
	key, channel string
	token        string
	st           *lockState
}

// lockState is what the copies of one Lock's ops share.
type lockState struct {
	relMu sync.Mutex // releases go one at a time

	mu     sync.Mutex
	ending *ending   // a failed renewal's cleanup, waiting for the handle to fail closed
	ended  time.Time // when the last such cleanup was let go (tests)
}

// ending is the cleanup of a failed renewal: each node's release, held
// until the handle has failed closed.
type ending struct {
	end      chan struct{}   // closed to let the releases go
	answered []chan struct{} // closed when the cleanup of a node that answered is done
}

// finishEnding lets a failed renewal's cleanup go, once the handle has
// failed closed, and waits for the nodes that answered the renewal.
func (s *lockState) finishEnding() {
	s.mu.Lock()
	e := s.ending
	s.ending = nil
	if e != nil {
		s.ended = time.Now()
	}
	s.mu.Unlock()
	if e == nil {
		return
	}
	close(e.end)
	for _, ch := range e.answered {
		<-ch
	}
}

func (o lockOps) Describe() string { return fmt.Sprintf("redlock %q", o.key) }

// Estimate is the validity of a renewal for ttl: ttl less the drift
// allowance.
func (o lockOps) Estimate(ttl time.Duration) time.Duration { return ttl - o.g.driftOf(ttl) }

// Renew renews on every node at once and waits for each (at most
// NodeTimeout); see Lock.Renew. 1 when a majority confirmed in time; 0
// when the answers rule a majority out (or it came too late); an error
// when too few answered to know.
func (o lockOps) Renew(ctx context.Context, _ rueidis.Client, token, ms string) (int64, error) {
	g := o.g
	n, _ := strconv.ParseInt(ms, 10, 64)
	ttl := time.Duration(n) * time.Millisecond
	need := g.need()
	start := g.clk.Now()
	type answer struct {
		idx int
		v   int64
		err error
	}
	results := make(chan answer, len(g.nodes))
	decided := make(chan struct{})
	e := &ending{end: make(chan struct{})}
	var failed atomic.Bool
	finished := make([]chan struct{}, len(g.nodes))
	for i, nd := range g.nodes {
		fin := make(chan struct{})
		finished[i] = fin
		g.bg.goDo(func() {
			defer close(fin)
			nctx, cancel := g.nodeCtx(ctx)
			v, err := renewScript.Run(nctx, nd.client, []string{o.key}, []string{token, ms}).AsInt64()
			cancel()
			results <- answer{i, v, renewScript.Classify(err)}
			<-decided
			if failed.Load() {
				<-e.end // the handle has failed closed
				_, _ = g.releaseOn(ctx, nd, o.key, token, o.channel)
			}
		})
	}
	ok, unknown := 0, 0
	var causes []string
	for range g.nodes {
		a := <-results
		switch {
		case a.err == nil && a.v == 1:
			ok++
		case a.err != nil && isUncertain(a.err):
			unknown++
			causes = append(causes, g.nodes[a.idx].name+": "+a.err.Error())
			if ctx.Err() == nil {
				continue // a node that timed out may not answer the cleanup either
			}
		case a.err != nil:
			causes = append(causes, mapNodeErr(g.nodes[a.idx], a.err).Error())
		}
		e.answered = append(e.answered, finished[a.idx])
	}
	late := ok >= need && !g.clk.Now().Before(start.Add(ttl-g.driftOf(ttl)))
	if ok >= need && !late {
		close(decided)
		return 1, nil
	}
	failed.Store(true)
	o.st.mu.Lock()
	o.st.ending = e
	o.st.mu.Unlock()
	close(decided)
	if !late && ok+unknown >= need {
		// A majority may have applied it: the outcome is unknown.
		return 0, &quorumUnknown{op: "renewal", ok: ok, n: len(g.nodes), need: need, causes: causes}
	}
	return 0, nil
}

// Release releases on every node at once, waiting for each; see
// Lock.Release. 1 released, 0 absent, -1 another owner's; an error when
// fewer than a majority answered.
func (o lockOps) Release(ctx context.Context, _ rueidis.Client, token string) (int64, error) {
	o.st.relMu.Lock()
	defer o.st.relMu.Unlock()
	g := o.g
	vals := make([]int64, len(g.nodes))
	errs := make([]error, len(g.nodes))
	var wg sync.WaitGroup
	for i, nd := range g.nodes {
		wg.Add(1)
		g.bg.goDo(func() {
			defer wg.Done()
			vals[i], errs[i] = g.releaseOn(ctx, nd, o.key, token, o.channel)
		})
	}
	wg.Wait()
	released, other, answered := 0, 0, 0
	var causes []string
	for i := range g.nodes {
		switch {
		case errs[i] != nil && isUncertain(errs[i]):
			causes = append(causes, errs[i].Error())
			continue
		case errs[i] != nil || vals[i] < 0:
			other++ // a foreign value (or type) holds the key there
		case vals[i] == 1:
			released++
		}
		answered++
	}
	need := g.need()
	switch {
	case answered < need:
		return 0, &quorumUnknown{op: "release", ok: answered, n: len(g.nodes), need: need, causes: causes}
	case other >= need:
		return -1, nil // lost to another owner (a stale token of ours on a minority is gone too)
	case released > 0:
		return 1, nil
	}
	return 0, nil
}

// Owner answers the token when a majority holds it, "" when the answers
// rule that out, and an error when too few nodes answered to tell.
func (o lockOps) Owner(ctx context.Context, _ rueidis.Client) (string, error) {
	g := o.g
	need := g.need()
	type answer struct {
		mine bool
		err  error
	}
	results := make(chan answer, len(g.nodes))
	for _, nd := range g.nodes {
		g.bg.goDo(func() {
			nctx, cancel := g.nodeCtx(ctx)
			defer cancel()
			v, err := nd.client.Do(nctx, nd.client.B().Get().Key(o.key).Build()).ToString()
			switch {
			case rueidis.IsRedisNil(err):
				err = nil
			case err != nil && !isUncertain(err):
				err = nil // WRONGTYPE and the like: not ours
			case err != nil:
				err = fmt.Errorf("%s: %w", nd.name, err)
			}
			results <- answer{mine: err == nil && v == o.token, err: err}
		})
	}
	mine, unknown, open := 0, 0, len(g.nodes)
	var causes []string
	for mine < need && mine+open >= need {
		a := <-results
		open--
		switch {
		case a.mine:
			mine++
		case a.err != nil:
			unknown++
			causes = append(causes, a.err.Error())
		}
	}
	switch {
	case mine >= need:
		return o.token, nil
	case mine+unknown+open < need:
		return "", nil
	}
	return "", &quorumUnknown{op: "verification", ok: mine, n: len(g.nodes), need: need, causes: causes}
}

func (o lockOps) Explain(err error) error { return handle.MapScriptErr(o.Describe(), err) }

// quorumUnknown is a call too few nodes answered to settle.
type quorumUnknown struct {
	op          string
	ok, n, need int
	causes      []string
}

func (e *quorumUnknown) Error() string {
	return fmt.Sprintf("%s confirmed by %d of %d nodes, %d needed, and too few answered to rule a majority out: %v", e.op, e.ok, e.n, e.need, e.causes)
}
