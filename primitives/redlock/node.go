package redlock

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/internal/handle"
	"github.com/coordhost/coordhost/primitives/internal/script"
	"github.com/coordhost/coordhost/primitives/internal/wait"
	"github.com/redis/rueidis"
)

// node is one server of a Group: its client, its Waiter, and what the
// Group knows about the server process behind it.
type node struct {
	idx    int
	client rueidis.Client
	name   string // "node 1 (127.0.0.1:6380)", for errors
	engine *wait.Engine
	owns   bool // engine is private: Close closes it

	mu     sync.Mutex
	runID  string // "" until identified
	replID string // master_replid at identification ("" after a restart)
	// trustFrom is when the node may count toward a quorum again after a
	// restart (restart guard); zero when it always could.
	trustFrom time.Time
	// identifying is closed when the identification under way ends; nil
	// when none is.
	identifying chan struct{}
	lastErr     error // why the last identification failed
}

// usable returns the run_id the acquire script must find on n and
// whether n may take part in an acquisition at now; when it may not, why.
func (n *node) usable(now time.Time) (string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case n.runID == "" && n.lastErr != nil:
		return "", fmt.Errorf("%s: not identified yet: %w", n.name, n.lastErr)
	case n.runID == "":
		return "", fmt.Errorf("%s: not identified yet", n.name)
	case now.Before(n.trustFrom):
		return "", &guarded{node: n.name, until: n.trustFrom, left: n.trustFrom.Sub(now)}
	}
	return n.runID, nil
}

// guarded is a node the restart guard keeps out of quorums.
type guarded struct {
	node  string
	until time.Time
	left  time.Duration
}

func (e *guarded) Error() string {
	return fmt.Sprintf("%s may have restarted within the maximum lease, forgetting grants (restart guard): it counts toward a quorum again in %v",
		e.node, e.left.Round(time.Millisecond))
}

// identity is what INFO says about a server.
type identity struct {
	runID, replID, mode string
	uptime              time.Duration
}

// parseInfo reads the fields of INFO replies (RESP3 verbatim strings may
// carry a "txt:" prefix on their first line, which names no field).
func parseInfo(replies ...string) map[string]string {
	f := map[string]string{}
	for _, r := range replies {
		for line := range strings.Lines(r) {
			if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
				f[k] = v
			}
		}
	}
	return f
}

// identify asks n who it is, bounded by NodeTimeout, and records it (or
// why it failed). It runs in the background: the answer serves every later
// call.
func (g *Group) identify(n *node) {
	ctx, cancel := context.WithTimeout(context.Background(), g.nodeTimeout)
	defer cancel()
	c := n.client
	rs := c.DoMulti(ctx, c.B().Info().Section("server").Build(), c.B().Info().Section("replication").Build())
	at := g.clk.Now()
	var id identity
	var err error
	var server, repl string
	if server, err = rs[0].ToString(); err == nil {
		repl, err = rs[1].ToString()
	}
	if err == nil {
		f := parseInfo(server, repl)
		id = identity{runID: f["run_id"], replID: f["master_replid"], mode: f["redis_mode"]}
		secs, perr := strconv.ParseInt(f["uptime_in_seconds"], 10, 64)
		switch {
		case len(id.runID) != 40:
			err = fmt.Errorf("INFO server has no run_id")
		case perr != nil || secs < 0:
			err = fmt.Errorf("INFO server has no uptime_in_seconds")
		}
		id.uptime = time.Duration(secs) * time.Second
	}
	if err != nil {
		n.mu.Lock()
		n.lastErr = fmt.Errorf("INFO: %w", err)
		n.mu.Unlock()
		return
	}
	g.learn(n, id, at)
}

// learn records n's identity, found at at: it refuses a cluster node and a
// server another node already is (the Group then fails every call), and
// starts the restart guard when the server is younger than the guard's
// span (it may have restarted and forgotten grants within MaxTTL).
func (g *Group) learn(n *node, id identity, at time.Time) {
	if id.mode == "cluster" {
		g.fail(fmt.Errorf("%w: redlock: %s runs in cluster mode; Redlock nodes are independent standalone servers", primitives.ErrInvalidOptions, n.name))
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.duplicateLocked(n, id.runID, id.replID); err != nil {
		if g.broken == nil {
			g.broken = err
		}
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.runID != "" {
		return // identified meanwhile (a restart seen by an acquisition)
	}
	n.runID, n.replID, n.lastErr = id.runID, id.replID, nil
	if sit := g.guardSpan() + time.Second - id.uptime; !g.noGuard && sit > 0 {
		// INFO's uptime_in_seconds is the server's wall-clock seconds now
		// minus its whole seconds at start, so it can overstate the real
		// uptime by almost a second (a start at .900 reads 1 a tenth of a
		// second later). The server started at most uptime-1s ago, so
		// every grant it may have forgotten ends by at-uptime+1s+span.
		n.trustFrom = at.Add(sit)
		g.reportRestart(n, n.trustFrom.Sub(at))
	}
}

// restarted records that an acquisition found runID, not the one the Group
// knew, on n: the server restarted, or another one answers at its address,
// at some time since the Group last saw it. n sits out for the guard's
// whole span from now.
func (g *Group) restarted(n *node, runID string, at time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.duplicateLocked(n, runID, ""); err != nil {
		if g.broken == nil {
			g.broken = err
		}
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.runID == runID || runID == "" {
		return // seen already by a concurrent attempt
	}
	n.runID, n.replID = runID, ""
	if !g.noGuard {
		if until := at.Add(g.guardSpan()); until.After(n.trustFrom) {
			n.trustFrom = until
		}
		g.reportRestart(n, n.trustFrom.Sub(at))
	}
}

// duplicateLocked reports a server that another node already is (equal
// run_id), or that shares its replication history (equal master_replid:
// one replicates the other). Called with g.mu held.
func (g *Group) duplicateLocked(n *node, runID, replID string) error {
	for _, o := range g.nodes {
		if o == n {
			continue
		}
		o.mu.Lock()
		oRun, oRepl := o.runID, o.replID
		o.mu.Unlock()
		switch {
		case runID != "" && oRun == runID:
			return fmt.Errorf("%w: %s and %s are one server (run_id %s)", ErrDuplicateNode, o.name, n.name, runID)
		case replID != "" && oRepl == replID:
			return fmt.Errorf("%w: %s and %s share a replication history (master_replid %s): one replicates the other", ErrDuplicateNode, o.name, n.name, replID)
		}
	}
	return nil
}

// identifyNodes starts identifying every node not yet identified (and not
// being identified). It waits for those identifications only when fewer
// than a quorum of nodes could take part without them: a node that is
// down must not slow every call down by NodeTimeout.
func (g *Group) identifyNodes(ctx context.Context) error {
	now := g.clk.Now()
	usable := 0
	var pending []chan struct{}
	for _, n := range g.nodes {
		if _, err := n.usable(now); err == nil {
			usable++
			continue
		}
		n.mu.Lock()
		if n.runID == "" {
			if n.identifying == nil {
				ch := make(chan struct{})
				n.identifying = ch
				g.bg.goDo(func() {
					g.identify(n)
					n.mu.Lock()
					n.identifying = nil
					n.mu.Unlock()
					close(ch)
				})
			}
			pending = append(pending, n.identifying)
		}
		n.mu.Unlock()
	}
	if usable < g.need() {
		for _, ch := range pending {
			select {
			case <-ch:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return g.brokenErr()
}

// nodeCtx bounds one node's part of a call.
func (g *Group) nodeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, g.nodeTimeout)
}

// Outcomes of one node's part of an acquisition.
type nodeState uint8

const (
	stateGranted   nodeState = iota + 1 // granted (our token is there)
	stateHeld                           // another owner holds the key
	stateUnknown                        // no answer: may have granted
	stateFailed                         // answered with an error: granted nothing
	stateRestarted                      // run_id changed: granted nothing
	stateExcluded                       // not sent (restart guard, not identified)
)

// nodeResult is one node's answer to an acquisition.
type nodeResult struct {
	n      *node
	state  nodeState
	holder string        // stateHeld: the holder's token
	pttl   time.Duration // stateHeld: the holder's remaining TTL (<0: none)
	err    error
	// byCaller: stateUnknown because the caller's context ended, not the
	// node's NodeTimeout (the node may answer its cleanup at once).
	byCaller bool
}

// acquireOn runs the acquire script on n.
func (g *Group) acquireOn(ctx context.Context, n *node, key, token, ms, runID string) nodeResult {
	nctx, cancel := g.nodeCtx(ctx)
	defer cancel()
	vals, err := acquireScript.Run(nctx, n.client, []string{key}, []string{token, ms, runID}).ToArray()
	at := g.clk.Now()
	if err != nil {
		err = acquireScript.Classify(err)
		if isUncertain(err) {
			return nodeResult{n: n, state: stateUnknown, byCaller: ctx.Err() != nil, err: fmt.Errorf("%s: no answer within NodeTimeout (%v; it may still grant, and keep the token until it expires): %w", n.name, g.nodeTimeout, err)}
		}
		return nodeResult{n: n, state: stateFailed, err: mapNodeErr(n, err)}
	}
	bad := func(what string) nodeResult {
		return nodeResult{n: n, state: stateFailed, err: fmt.Errorf("%s: acquire script: %s", n.name, what)}
	}
	if len(vals) < 3 {
		return bad(fmt.Sprintf("%d values", len(vals)))
	}
	flag, err1 := vals[0].AsInt64()
	gotRun, err2 := vals[1].ToString()
	if err1 != nil || err2 != nil {
		return bad("malformed reply")
	}
	switch flag {
	case 1:
		return nodeResult{n: n, state: stateGranted}
	case 0:
		if len(vals) != 5 {
			return bad(fmt.Sprintf("%d values", len(vals)))
		}
		holder, _ := vals[3].ToString()
		pttl, err := vals[4].AsInt64()
		if err != nil {
			return bad("malformed PTTL")
		}
		d := time.Duration(pttl) * time.Millisecond
		if pttl < 0 {
			d = -1
		}
		return nodeResult{n: n, state: stateHeld, holder: holder, pttl: d}
	case -1:
		g.restarted(n, gotRun, at)
		return nodeResult{n: n, state: stateRestarted, err: fmt.Errorf("%s: the server's run_id changed from %s to %s (a restart or another server at its address): it sits out as the restart guard says", n.name, runID, gotRun)}
	}
	return bad(fmt.Sprintf("status %d", flag))
}

// releaseOn runs the owner-checked release on n, bounded by NodeTimeout
// but not by the caller's cancellation: 1 released, 0 absent, -1 another
// owner's.
func (g *Group) releaseOn(ctx context.Context, n *node, key, token, channel string) (int64, error) {
	nctx, cancel := g.nodeCtx(context.WithoutCancel(ctx))
	defer cancel()
	v, err := releaseScript.Run(nctx, n.client, []string{key}, []string{token, channel}).AsInt64()
	if err != nil {
		err = releaseScript.Classify(err)
		if isUncertain(err) {
			return 0, fmt.Errorf("%s: %w", n.name, err)
		}
		return 0, mapNodeErr(n, err)
	}
	return v, nil
}

// isUncertain reports an error that leaves a node's outcome unknown: no
// answer (transport error, timeout, cancellation). An error reply is an
// answer.
func isUncertain(err error) bool { return script.IsUncertain(err) }

// mapNodeErr names the node in a server's error reply, mapping WRONGTYPE
// to primitives.ErrWrongType.
func mapNodeErr(n *node, err error) error { return handle.MapScriptErr(n.name, err) }
