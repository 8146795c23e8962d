// Package replica confirms a primitive's writes on replicas: the script
// that grants, renews or draws a fencing token is followed, on the same
// connection and in the same round trip, by WAIT numreplicas timeout,
// which answers how many replicas have acknowledged every write that
// connection made so far (DESIGN.md §3 and docs/failover.md).
//
// Why one DoMulti: WAIT covers the writes of its own connection only (the
// server compares each replica's acknowledged offset with the offset of
// the connection's last write). rueidis sends a DoMulti that holds a
// blocking command such as WAIT on one connection taken from its pool of
// blocking connections, in order; a dedicated connection (the wait
// engine's, a fence.Conn) is one connection anyway.
// TestWaitFollowsScriptOnOneConnection checks it with MONITOR.
//
// A Cluster client is the exception: it sends the keyless WAIT to the
// node of the script's slot, but when the script is redirected (MOVED,
// ASK) it re-sends the script alone to the new node, and WAIT's answer,
// from the old node, would confirm nothing. There the pair goes on a
// dedicated connection (rueidis.Client.Dedicated), which follows no
// redirection: a moved slot fails the attempt with the MOVED error reply,
// nothing written, and the client's slot map is refreshed for the next.
package replica

import (
	"context"
	"fmt"
	"time"

	"github.com/coordhost/coordhost/primitives/internal/base"
	"github.com/coordhost/coordhost/primitives/internal/script"
	"github.com/coordhost/coordhost/primitives/internal/wait"
	"github.com/redis/rueidis"
)

// Wait is a validated requirement: n replicas within timeout. The zero
// value is off (Run sends the script alone, as without replicas). Safe to
// copy and to use concurrently.
type Wait struct {
	n       int64
	timeout time.Duration // rounded up to whole ms
	ms      int64
}

// New validates a primitive's Replicas and ReplicaTimeout options; what
// names the primitive in errors (e.g. "lock"). n = 0 is off, whatever the
// timeout (a negative or oversized timeout is still refused); timeout 0
// means base.DefaultReplicaTimeout. Errors match base.ErrInvalidOptions.
func New(what string, n int, timeout time.Duration) (Wait, error) {
	switch {
	case n < 0:
		return Wait{}, fmt.Errorf("%w: %s: Replicas %d is negative (0 is off)", base.ErrInvalidOptions, what, n)
	case n > base.MaxReplicas:
		return Wait{}, fmt.Errorf("%w: %s: Replicas %d is above the maximum of %d", base.ErrInvalidOptions, what, n, base.MaxReplicas)
	case timeout < 0:
		return Wait{}, fmt.Errorf("%w: %s: ReplicaTimeout %v is negative (0 means the default, %v)", base.ErrInvalidOptions, what, timeout, base.DefaultReplicaTimeout)
	case timeout > base.MaxReplicaTimeout:
		return Wait{}, fmt.Errorf("%w: %s: ReplicaTimeout %v is above the maximum of %v", base.ErrInvalidOptions, what, timeout, base.MaxReplicaTimeout)
	}
	if n == 0 {
		return Wait{}, nil
	}
	if timeout == 0 {
		timeout = base.DefaultReplicaTimeout
	}
	// Whole ms, rounded up: at least 1, since WAIT n 0 blocks for ever.
	ms := int64((timeout + time.Millisecond - 1) / time.Millisecond)
	return Wait{n: int64(n), timeout: time.Duration(ms) * time.Millisecond, ms: ms}, nil
}

// On reports whether writes wait for replicas.
func (w Wait) On() bool { return w.n > 0 }

// Replicas is the number of replicas asked for; 0 when off.
func (w Wait) Replicas() int64 { return w.n }

// Timeout is WAIT's timeout, whole milliseconds; 0 when off.
func (w Wait) Timeout() time.Duration { return w.timeout }

// Run sends sc with keys and args on c and, when w is on, WAIT after it on
// the same connection in the same DoMulti. The script's result comes back
// as Run would return it; check it first: the Ack means something only
// when the script answered (a transport error fails both). Off, it is
// sc.Run exactly: one command, and an Ack that is always OK.
func (w Wait) Run(ctx context.Context, c rueidis.CoreClient, sc *script.Script, keys, args []string) (rueidis.RedisResult, Ack) {
	if !w.On() {
		return sc.Run(ctx, c, keys, args), Ack{}
	}
	if wc, ok := c.(wait.Conn); ok && wc.ID == 0 {
		c = wc.CoreClient // the shared client, not the waiter's own connection
	}
	var res, wr rueidis.RedisResult
	if cl, ok := c.(rueidis.Client); ok && cl.Mode() == rueidis.ClientModeCluster {
		res, wr = w.runCluster(ctx, cl, sc, keys, args)
	} else {
		res, wr = sc.RunThen(ctx, c, false, keys, args, w.command(c))
	}
	a := Ack{w: w}
	a.acked, a.err = wr.AsInt64()
	return res, a
}

// Renew runs the renew script sc (1 renewed, 0 not owned) as Run does and
// answers as handle.Ops.Renew: a renewal the server made but too few
// replicas confirmed is an error from Ack.Err (op "renew", settled "handle
// lost") naming what describe returns (called only then); other errors
// come back classified by sc.
func (w Wait) Renew(ctx context.Context, c rueidis.CoreClient, sc *script.Script, describe func() string, keys, args []string) (int64, error) {
	res, ack := w.Run(ctx, c, sc, keys, args)
	n, err := res.AsInt64()
	if err == nil && n == 1 && !ack.OK() {
		return 0, ack.Err(describe(), "renew", "handle lost")
	}
	return n, sc.Classify(err)
}

// maxRedirects bounds the MOVED and ASK redirections one Run follows.
const maxRedirects = 5

// runCluster runs the script and WAIT on one dedicated connection to the
// node of keys' slot, and again on one to the node a MOVED or ASK names
// (after ASKING for an ASK): a cluster client would follow a redirection
// for the script alone and leave WAIT on the node that ran nothing, and
// a dedicated connection follows none by itself. A redirection means the
// script did not run, so sending it elsewhere is safe.
func (w Wait) runCluster(ctx context.Context, cl rueidis.Client, sc *script.Script, keys, args []string) (res, wr rueidis.RedisResult) {
	var to script.Refusal
	for redirects := 0; ; redirects++ {
		node := cl
		if to.Redirect() {
			n, ok := cl.Nodes()[to.Addr]
			if !ok {
				return res, wr // a node the client does not know: the redirection comes back
			}
			node = n
		}
		_ = node.Dedicated(func(dc rueidis.DedicatedClient) error {
			res, wr = sc.RunThen(ctx, dc, to.Word == "ASK", keys, args, w.command(dc))
			return nil
		})
		r, refused := script.IsRefusal(res.Error())
		if !refused || !r.Redirect() || redirects >= maxRedirects || ctx.Err() != nil {
			return res, wr
		}
		to = r
	}
}

// command builds WAIT on c's command builder.
func (w Wait) command(c rueidis.CoreClient) func() rueidis.Completed {
	return func() rueidis.Completed { return c.B().Wait().Numreplicas(w.n).Timeout(w.ms).Build() }
}

// Ack is WAIT's answer to one Run.
type Ack struct {
	w     Wait
	acked int64
	err   error // WAIT's error (an error reply, or a transport error)
}

// OK reports whether the script's writes are confirmed: w was off, or
// WAIT counted at least n replicas.
func (a Ack) OK() bool { return !a.w.On() || a.err == nil && a.acked >= a.w.n }

// Acked is the count WAIT answered (0 when off or when WAIT failed).
func (a Ack) Acked() int64 { return a.acked }

// Err describes an unconfirmed write of op ("acquire", "renew") on name
// (e.g. `lock "k"`) and what was done about it (settled, may be empty):
// a *base.NotReplicated, matching base.ErrNotReplicated. Nil when OK.
func (a Ack) Err(name, op, settled string) error {
	if a.OK() {
		return nil
	}
	return &base.NotReplicated{Name: name, Op: op, Want: a.w.n, Acked: a.acked, Timeout: a.w.timeout, Settled: settled, Err: a.err}
}
