package redlock

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/internal/base"
	"github.com/coordhost/coordhost/primitives/internal/handle"
)

// request is one validated acquisition.
type request struct {
	key      string // full key, prefix included
	channel  string // release channel
	ttl      time.Duration
	ms       string
	validity time.Duration // ttl minus the drift allowance
	token    string
}

func (r *request) name() string { return fmt.Sprintf("redlock %q", r.key) }

// TryAcquire makes one attempt to take key on a majority of the nodes for
// ttl and never waits. ttl is rounded up to whole milliseconds and must be
// at most MaxTTL and longer than its drift allowance (Group.Drift).
//
// It returns the lock once a majority granted, with Remaining the validity
// left (ttl minus the time the attempt took minus the drift allowance).
// Otherwise its token is removed from every node it reached and the error
// matches primitives.ErrNotAcquired when other owners hold the key on so
// many nodes that no majority was possible (or the validity ran out before
// a majority answered), or ErrNoQuorum when too few nodes could take part
// (unreachable, timed out, restarted within MaxTTL, answered with an error
// such as primitives.ErrWrongType, which the error then also matches).
//
// Errors before anything is sent: primitives.ErrInvalidKey (empty or
// reserved key), primitives.ErrInvalidTTL, primitives.ErrInvalidOptions
// (nil Group or context), primitives.ErrClosed, ErrDuplicateNode,
// ctx.Err().
func (g *Group) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*Lock, error) {
	r, err := g.prepare(ctx, key, ttl)
	if err != nil {
		return nil, err
	}
	return g.observe(ctx, r, false, func(ctx context.Context) (*Lock, error) {
		l, _, err := g.attempt(ctx, r)
		return l, err
	})
}

// prepare validates one acquisition and builds its request; nothing is
// sent.
func (g *Group) prepare(ctx context.Context, key string, ttl time.Duration) (*request, error) {
	if g == nil || len(g.nodes) == 0 {
		return nil, fmt.Errorf("%w: redlock: nil Group (use redlock.New)", primitives.ErrInvalidOptions)
	}
	if ctx == nil {
		return nil, fmt.Errorf("%w: redlock: nil context", primitives.ErrInvalidOptions)
	}
	r, err := g.derive(key)
	if err != nil {
		return nil, err
	}
	if r.ttl, r.ms, r.validity, err = g.checkTTL(ttl); err != nil {
		return nil, fmt.Errorf("redlock %q: %w", r.key, err)
	}
	if g.isClosed() {
		return nil, fmt.Errorf("redlock %q: %w", r.key, primitives.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("redlock %q: %w", r.key, err)
	}
	if err := g.brokenErr(); err != nil {
		return nil, err
	}
	r.token = rand.Text()
	return r, nil
}

// derive returns a request holding the key and release channel every call
// on key uses. Errors match primitives.ErrInvalidKey; nothing is sent.
// Acquisitions (prepare) and Resume both derive them here.
func (g *Group) derive(key string) (*request, error) {
	full, err := g.space.Key(key)
	if err != nil {
		return nil, fmt.Errorf("%w: redlock: %w", primitives.ErrInvalidKey, err)
	}
	return &request{key: full, channel: g.space.Channel("redlock-rel", key)}, nil
}

// checkTTL rounds ttl up to whole milliseconds and checks it against
// MaxTTL and the drift allowance; errors match primitives.ErrInvalidTTL.
func (g *Group) checkTTL(ttl time.Duration) (rounded time.Duration, ms string, validity time.Duration, err error) {
	if rounded, ms, err = handle.Millis(ttl); err != nil {
		return 0, "", 0, err
	}
	if rounded > g.maxTTL {
		return 0, "", 0, fmt.Errorf("%w: %v is above the Group's MaxTTL of %v (which also bounds how long a restarted node sits out)", primitives.ErrInvalidTTL, ttl, g.maxTTL)
	}
	drift := g.driftOf(rounded)
	if validity = rounded - drift; validity <= 0 {
		return 0, "", 0, fmt.Errorf("%w: %v leaves no validity after the clock-drift allowance of %v", primitives.ErrInvalidTTL, ttl, drift)
	}
	return rounded, ms, validity, nil
}

// round is what one attempt found on each node, for the waiter.
type round struct {
	res  []nodeResult  // by node index
	took time.Duration // from the first command sent to the decision
}

// attempt makes one acquisition with r's token: the acquire script on
// every usable node at once, each bounded by NodeTimeout; once every node
// answered or timed out, it is granted if a majority granted and validity
// is left. A failed attempt removes the token from every node that
// granted or did not answer, each node's release sent by the goroutine
// that sent its acquire, after it (so it can never overtake it); the call
// waits for the releases of the nodes that answered (or that the caller's
// context cut short), not for those that hit NodeTimeout (a paused node
// would only time out again).
func (g *Group) attempt(ctx context.Context, r *request) (*Lock, *round, error) {
	if err := g.identifyNodes(ctx); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", r.name(), err)
	}
	now := g.clk.Now()
	rd := &round{res: make([]nodeResult, len(g.nodes))}
	type job struct {
		n     *node
		runID string
	}
	var jobs []job
	for i, n := range g.nodes {
		runID, err := n.usable(now)
		if err != nil {
			rd.res[i] = nodeResult{n: n, state: stateExcluded, err: err}
			continue
		}
		jobs = append(jobs, job{n, runID})
	}
	need := g.need()
	if len(jobs) < need {
		return nil, rd, g.failure(r, rd, 0)
	}

	// The node goroutines may outlive this call (a node that timed out
	// still gets its cleanup), and a waiting Acquire changes r.token for
	// its next attempt: they keep their own copy.
	key, token, ms, channel := r.key, r.token, r.ms, r.channel
	sent := g.clk.Now()
	results := make(chan nodeResult, len(jobs))
	decided := make(chan struct{})
	var failed atomic.Bool
	finished := make([]chan struct{}, len(g.nodes))
	for _, j := range jobs {
		fin := make(chan struct{})
		finished[j.n.idx] = fin
		g.bg.goDo(func() {
			defer close(fin)
			res := g.acquireOn(ctx, j.n, key, token, ms, j.runID)
			results <- res
			<-decided
			if failed.Load() && (res.state == stateGranted || res.state == stateUnknown) {
				_, _ = g.releaseOn(ctx, j.n, key, token, channel)
			}
		})
	}
	granted := 0
	for range jobs {
		res := <-results
		rd.res[res.n.idx] = res
		if res.state == stateGranted {
			granted++
		}
	}
	// Measured after every node answered or timed out, as the validity's
	// deadline is: a majority that came too late leaves none.
	late := granted >= need && !g.clk.Now().Before(sent.Add(r.validity))
	ok := granted >= need && !late
	failed.Store(!ok)
	close(decided)
	rd.took = g.clk.Now().Sub(sent)
	if ok {
		return g.newLock(r, sent), rd, nil
	}
	for _, res := range rd.res {
		if res.state != 0 && res.state != stateExcluded && (res.state != stateUnknown || res.byCaller) {
			// The release of each node that answered, or was cut short
			// by the caller's context rather than its NodeTimeout.
			<-finished[res.n.idx]
		}
	}
	switch {
	case ctx.Err() != nil:
		return nil, rd, fmt.Errorf("%s: not acquired (its token was removed from the nodes that answered): %w", r.name(), ctx.Err())
	case late:
		return nil, rd, &base.LateGrant{Name: r.name()}
	}
	return nil, rd, g.failure(r, rd, granted)
}

// failure explains a failed attempt: contention when the nodes other
// owners hold leave no majority, else the nodes that failed.
func (g *Group) failure(r *request, rd *round, granted int) error {
	held := 0
	var earliest time.Duration = -1
	var causes []error
	var why []string
	for _, res := range rd.res {
		switch res.state {
		case stateHeld:
			held++
			if res.pttl >= 0 && (earliest < 0 || res.pttl < earliest) {
				earliest = res.pttl
			}
		default:
			if res.err != nil {
				causes = append(causes, res.err)
				why = append(why, res.err.Error())
			}
		}
	}
	n, need := len(g.nodes), g.need()
	if n-held < need {
		ttl := ""
		if earliest >= 0 {
			ttl = fmt.Sprintf("; the earliest expires in %v", earliest)
		}
		if len(why) > 0 {
			ttl += "; " + strings.Join(why, "; ")
		}
		return fmt.Errorf("%w: %s is held by other owners on %d of %d nodes%s", primitives.ErrNotAcquired, r.name(), held, n, ttl)
	}
	return &noQuorum{msg: fmt.Sprintf("%s: granted on %d of %d nodes, %d needed (held by others on %d): %s",
		r.name(), granted, n, need, held, strings.Join(why, "; ")), causes: causes}
}

// noQuorum is an attempt that too few nodes could take part in. It
// matches ErrNoQuorum and each node's cause (e.g.
// primitives.ErrWrongType).
type noQuorum struct {
	msg    string
	causes []error
}

func (e *noQuorum) Error() string { return "redlock: no quorum: " + e.msg }

func (e *noQuorum) Unwrap() []error { return append([]error{ErrNoQuorum}, e.causes...) }

// newLock makes the handle of a grant whose first command was sent at
// sent: valid until sent + ttl - drift.
func (g *Group) newLock(r *request, sent time.Time) *Lock {
	l := &Lock{}
	l.h.Init(g.nodes[0].client, g.clk, r.key, r.token, r.ops(g), sent, r.validity)
	return l
}

// ops are the quorum operations of the lock r grants (or resumes) on g.
func (r *request) ops(g *Group) lockOps {
	return lockOps{g: g, key: r.key, channel: r.channel, token: r.token, st: &lockState{}}
}
