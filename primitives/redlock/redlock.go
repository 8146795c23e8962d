// Package redlock implements Redlock: a lock held on a majority of an odd
// number (at least three) of independent Redis servers, so that it
// survives the loss of a minority of them, over caller-owned
// rueidis.Clients.
//
// An acquisition sends one random token to every node at once (one script
// per node: SET NX PX), each call bounded by NodeTimeout, and succeeds only
// when a majority granted it and time is left: the validity is ttl minus
// the time since the first command was sent minus the clock-drift
// allowance (Drift + DriftFactor·ttl; by default 2ms + 1% of ttl),
// counted once every node answered or its NodeTimeout passed. So a node
// that hangs costs each attempt NodeTimeout, and when TryAcquire returns
// every node that answers has settled. A failed attempt removes its token
// from every node it was sent to (each node's cleanup follows that node's
// acquire on the same goroutine, so it can never overtake it). A renewal
// must be confirmed by a majority within the validity it promises; one
// that is not ends the lease: the handle fails closed (Done closes) and
// only then is the token removed from every node, so no node is left
// extended for a lease nobody holds and nobody else can acquire while this
// handle's Done is still open. Release is sent to every node at once and
// waits for each at most NodeTimeout.
//
// # Nodes: independent, identified, and guarded after a restart
//
// New checks what it can without I/O: an odd count of at least three,
// no nil client, no client given twice, no cluster client. It sends
// nothing (a node that is down when the Group is made must not stop it:
// tolerating that is the point of Redlock). The first call that needs the
// nodes identifies each one with INFO server and INFO replication: a
// node whose run_id (the server process) or master_replid (its
// replication history, shared by a master and its replicas) equals
// another node's is the same server, or a copy of it, reached twice, and
// every call of the Group then fails with ErrDuplicateNode (matching
// primitives.ErrInvalidOptions) before anything is written to it. run_id
// identifies a server process whatever address reaches it (127.0.0.1 and
// localhost, a DNS alias, a proxy), which an address cannot. A node that
// does not answer is identified at a later call and counts toward no
// quorum until then.
//
// Restart guard: a node that restarted without persistence has forgotten
// every grant, and granting again there can give a second holder a
// majority while the first still works (redsync issue #186). A node
// therefore counts toward no quorum, and is sent no acquisition, while
// it may have restarted within the last MaxTTL + drift: when it is first
// identified with uptime_in_seconds below that plus one second (it is
// trusted once its uptime reaches it; the extra second covers the
// server's whole-second rounding, which can overstate uptime by almost a
// second), and for MaxTTL + drift after any acquisition finds
// its run_id changed since the Group last saw it (a restart, or a
// failover to another server behind the same address, found whenever it
// happened; the acquire script compares run_id before it writes; a
// Group that first meets a node after a failover to a long-running
// replica cannot tell, which is why a node should have no replicas that
// could be promoted behind its address). Every
// acquisition and renewal is at most MaxTTL (longer ones fail with
// primitives.ErrInvalidTTL), so once that time has passed every grant the
// node forgot has expired everywhere. Use the same MaxTTL (or a smaller
// one) in every process that locks the same keys: the guard protects
// against grants no longer than this Group's MaxTTL. A freshly started
// deployment therefore waits MaxTTL + drift before its first quorum; an
// error matching ErrNoQuorum says which nodes sit out and until when.
//
// # Waiting
//
// Acquire consults the retry policy after every failed attempt and sleeps
// until a majority may be free, never by blind polling. No single node's
// notifications can say that (a release seen on one node says nothing of
// the others), so it counts nodes: each
// node where another owner holds the key is watched through that node's
// primitives.Waiter (client tracking, or the release channel the release
// script publishes to), which also wakes at that holder's PTTL; a node
// excluded by the restart guard wakes the waiter when its guard ends. The
// waiter re-attempts once enough nodes changed to make a majority
// possible, or when the policy's bound (by default an exponential,
// fully jittered one) runs out. After a wake it first sleeps a random
// jitter of up to twice its last attempt's duration (at least 1ms, at most
// NodeTimeout), so contenders woken by one release do not split the
// nodes' votes between them again and again; that randomised retry is the
// one Redlock itself prescribes.
//
// # What the guarantees rest on
//
// Redlock is not consensus and gives no fencing token: mutual exclusion
// rests on bounded clock drift between the nodes and the clients (Drift),
// on processes not pausing longer than the validity they were told
// (Done closes when it runs out), on nodes keeping their writes or being
// guarded after losing them (above; also keep maxmemory-policy noeviction),
// and on no failover promoting a replica that lacks the latest grants
// (the run_id check catches a promotion behind the same address, the
// guard then applies). A node that does not answer a cleanup keeps the
// token until its expiry; a node that exceeded NodeTimeout may still apply
// a command after the cleanup ran and then hold the token until its
// expiry. A protected resource that must reject stale owners needs a
// consensus-backed lock with fencing.
//
// The ACL a Group's user needs on every node: EVALSHA and EVAL, and inside
// the scripts INFO, GET, SET, PEXPIRE, PTTL, DEL and PUBLISH, on the keys
// and channels under Options.Prefix; INFO for the identification; GET and
// PTTL, and SUBSCRIBE or client tracking, for waiting.
package redlock

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/coordhost/coordhost/lua"
	"github.com/coordhost/coordhost/policies"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/internal/clock"
	"github.com/coordhost/coordhost/primitives/internal/handle"
	"github.com/coordhost/coordhost/primitives/internal/keys"
	"github.com/coordhost/coordhost/primitives/internal/script"
	"github.com/coordhost/coordhost/primitives/internal/wait"
	"github.com/redis/rueidis"
)

// Defaults of Options.
const (
	// DefaultNodeTimeout bounds each node's part of an acquisition,
	// renewal, verification or release.
	DefaultNodeTimeout = 100 * time.Millisecond
	// DefaultDrift is the fixed part of the clock-drift allowance.
	DefaultDrift = 2 * time.Millisecond
	// DefaultDriftFactor is the part of the clock-drift allowance
	// proportional to the ttl: 1%.
	DefaultDriftFactor = 0.01
	// DefaultMaxTTL is the longest lease a Group grants, and how long a
	// restarted node sits out of quorums (plus drift).
	DefaultMaxTTL = time.Minute
	// MinNodes is the fewest nodes a Group takes.
	MinNodes = 3
)

// MaxDriftFactor bounds Options.DriftFactor.
const MaxDriftFactor = 0.5

// DefaultCloseTimeout bounds Lock.Close.
const DefaultCloseTimeout = handle.CloseTimeout

// ReservedPrefix is the namespace, right after Options.Prefix, where the
// Group keeps its release channels. Lock keys may not start with it.
const ReservedPrefix = keys.Reserved

// Errors of this package (see also the primitives sentinels).
var (
	// ErrNoQuorum: fewer than a majority of the nodes could take part in
	// an attempt (unreachable, timed out, sitting out after a restart, or
	// not yet identified), so it could not succeed whatever the others
	// answered. Contention alone is primitives.ErrNotAcquired. The error
	// names each node that failed and why.
	ErrNoQuorum = errors.New("redlock: no quorum")
	// ErrDuplicateNode: two clients reach the same server, or a server and
	// its replica (equal run_id or master_replid). It matches
	// primitives.ErrInvalidOptions; found at the first call that reaches
	// both, after which every call of the Group fails with it.
	ErrDuplicateNode = fmt.Errorf("%w: redlock: two nodes are the same server", primitives.ErrInvalidOptions)
)

var (
	acquireScript = script.New("redlock_acquire", lua.RedlockAcquire)
	renewScript   = script.New("redlock_renew", lua.LockRenew)
	releaseScript = script.New("redlock_release", lua.LockRelease)
)

// Options configure a Group. The zero value is valid: no prefix, the
// defaults above, exponential backoff waiting, a private Waiter per node.
type Options struct {
	// Prefix is prepended to every lock key on every node.
	Prefix string
	// NodeTimeout bounds each node's part of every call: a node that has
	// not answered by then counts as failed for that call. 0 means
	// DefaultNodeTimeout. Keep it well below the ttls you use: the time an
	// acquisition takes comes off its validity.
	NodeTimeout time.Duration
	// Drift is the fixed part of the clock-drift allowance subtracted from
	// every validity; 0 means DefaultDrift.
	Drift time.Duration
	// DriftFactor is the part of the allowance proportional to the ttl, in
	// [0, MaxDriftFactor); 0 means DefaultDriftFactor. The allowance for
	// a ttl is Drift + DriftFactor·ttl, rounded up to whole milliseconds.
	DriftFactor float64
	// MaxTTL is the longest ttl TryAcquire, Acquire and Renew accept, and
	// the restart guard's span (see the package documentation): at least
	// 1ms, at most handle's 100 years; 0 means DefaultMaxTTL.
	MaxTTL time.Duration
	// Retry decides how Acquire waits after a failed attempt; nil means
	// builtin.Exponential{} (10ms base, 1s cap, full jitter, never gives
	// up). Whatever it says, a waiter also wakes when enough nodes changed
	// or their holders expired.
	Retry policies.RetryPolicy
	// Waiters, if not nil, has one primitives.Waiter per client (same
	// order; a nil entry means a private one that Close closes), to share
	// each node's waiting connection with other primitives on that
	// client. New refuses a Waiter made for another client or closed.
	Waiters []*primitives.Waiter
	// Observer, if not nil, is told about every acquisition and the life
	// of the locks granted (see Observer).
	Observer Observer
}

// Group acquires Redlocks on a fixed set of nodes. Safe for concurrent
// use; create one per set of nodes and share it.
type Group struct {
	nodes       []*node
	quorum      int
	space       keys.Space
	nodeTimeout time.Duration
	drift       time.Duration
	driftFactor float64
	maxTTL      time.Duration
	retry       policies.RetryPolicy
	obs         Observer
	clk         clock.Clock

	closed chan struct{}
	once   sync.Once
	bg     tracker // node calls that outlive the call that started them

	mu     sync.Mutex
	broken error // ErrDuplicateNode once found: every call fails with it

	// Test hooks (export_test.go); never set in production.
	noGuard   bool // the restart guard is off
	quorumFor int  // a quorum other than a majority (a broken control)
}

// New returns a Group over clients, one per independent standalone server
// (or sentinel-managed master): an odd number, at least MinNodes. It
// sends nothing: nodes are identified at the first call (see the package
// documentation). It never closes the clients. Errors wrap
// primitives.ErrInvalidOptions: an even or too small count, a nil client,
// the same client twice, a cluster client, bad Options.
func New(clients []rueidis.Client, opts Options) (*Group, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: redlock: "+format, append([]any{primitives.ErrInvalidOptions}, args...)...)
	}
	n := len(clients)
	switch {
	case n < MinNodes:
		return nil, bad("%d clients; Redlock needs an odd number of at least %d independent servers", n, MinNodes)
	case n%2 == 0:
		return nil, bad("%d clients; Redlock needs an odd number of independent servers (an even count adds a node without tolerating one more failure)", n)
	}
	for i, c := range clients {
		if c == nil {
			return nil, bad("client %d is nil", i)
		}
		for j := range i {
			if clients[j] == c {
				return nil, bad("clients %d and %d are the same client; each node needs its own server", j, i)
			}
		}
		if c.Mode() == rueidis.ClientModeCluster {
			return nil, bad("client %d is a cluster client; Redlock nodes are independent standalone servers", i)
		}
	}
	retry, err := wait.Policy(opts.Retry)
	if err != nil {
		return nil, fmt.Errorf("redlock: %w", err)
	}
	g := &Group{
		quorum:      n/2 + 1,
		space:       keys.Space{Prefix: opts.Prefix},
		nodeTimeout: opts.NodeTimeout,
		drift:       opts.Drift,
		driftFactor: opts.DriftFactor,
		maxTTL:      opts.MaxTTL,
		retry:       retry,
		obs:         opts.Observer,
		clk:         clock.Real,
		closed:      make(chan struct{}),
	}
	switch {
	case g.nodeTimeout < 0:
		return nil, bad("NodeTimeout %v is negative", g.nodeTimeout)
	case g.nodeTimeout == 0:
		g.nodeTimeout = DefaultNodeTimeout
	}
	switch {
	case g.drift < 0:
		return nil, bad("Drift %v is negative", g.drift)
	case g.drift == 0:
		g.drift = DefaultDrift
	}
	switch {
	case g.driftFactor < 0 || g.driftFactor >= MaxDriftFactor || g.driftFactor != g.driftFactor:
		return nil, bad("DriftFactor %v is outside [0, %v)", g.driftFactor, MaxDriftFactor)
	case g.driftFactor == 0:
		g.driftFactor = DefaultDriftFactor
	}
	switch {
	case g.maxTTL < 0 || g.maxTTL > handle.MaxTTL:
		return nil, bad("MaxTTL %v is outside [1ms, %v]", g.maxTTL, handle.MaxTTL)
	case g.maxTTL == 0:
		g.maxTTL = DefaultMaxTTL
	}
	if g.maxTTL, _, err = handle.Millis(g.maxTTL); err != nil {
		return nil, bad("MaxTTL: %v", err)
	}
	if g.drift > g.maxTTL {
		// A larger allowance leaves no lease valid, and a huge one
		// overflows the validity arithmetic.
		return nil, bad("Drift %v is above MaxTTL %v", g.drift, g.maxTTL)
	}
	if g.maxTTL <= g.driftOf(g.maxTTL) {
		return nil, bad("MaxTTL %v leaves no validity after the drift allowance %v", g.maxTTL, g.driftOf(g.maxTTL))
	}
	if opts.Waiters != nil && len(opts.Waiters) != n {
		return nil, bad("%d Waiters for %d clients; give one per client (nil for a private one)", len(opts.Waiters), n)
	}
	for i, c := range clients {
		nd := &node{idx: i, client: c, name: nodeName(i, c)}
		var w *primitives.Waiter
		if opts.Waiters != nil {
			w = opts.Waiters[i]
		}
		var err error
		if nd.engine, nd.owns, err = wait.For(c, (*wait.Engine)(w)); err != nil {
			g.closeEngines()
			return nil, fmt.Errorf("redlock: Options.Waiters[%d]: %w", i, err)
		}
		g.nodes = append(g.nodes, nd)
	}
	return g, nil
}

// nodeName names node i for errors: its index and the address its client
// dials.
func nodeName(i int, c rueidis.Client) string {
	for addr := range c.Nodes() {
		return "node " + strconv.Itoa(i) + " (" + addr + ")"
	}
	return "node " + strconv.Itoa(i)
}

// Nodes returns the number of nodes.
func (g *Group) Nodes() int { return len(g.nodes) }

// Quorum returns the number of nodes that must grant or renew: a majority.
func (g *Group) Quorum() int { return g.need() }

// MaxTTL returns the longest ttl the Group accepts.
func (g *Group) MaxTTL() time.Duration { return g.maxTTL }

// Drift returns the clock-drift allowance for ttl: Drift + DriftFactor·ttl,
// rounded up to whole milliseconds. A grant or renewal for ttl is valid
// for ttl minus the time it took minus Drift(ttl).
func (g *Group) Drift(ttl time.Duration) time.Duration { return g.driftOf(ttl) }

func (g *Group) driftOf(ttl time.Duration) time.Duration {
	d := g.drift + time.Duration(float64(ttl)*g.driftFactor)
	return (d + time.Millisecond - 1) / time.Millisecond * time.Millisecond
}

// guardSpan is how long a restarted node sits out: MaxTTL plus its drift.
func (g *Group) guardSpan() time.Duration { return g.maxTTL + g.driftOf(g.maxTTL) }

// need is the number of grants a quorum takes.
func (g *Group) need() int {
	if g.quorumFor > 0 {
		return g.quorumFor
	}
	return g.quorum
}

// Close ends the Group: blocked Acquire calls return primitives.ErrClosed
// and new calls are refused. It waits for node calls still in flight
// (each bounded by NodeTimeout) and closes the private Waiters, never the
// clients. Granted locks keep working. Idempotent.
func (g *Group) Close() error {
	if g == nil {
		return nil
	}
	g.once.Do(func() { close(g.closed) })
	g.bg.wait()
	g.closeEngines()
	return nil
}

func (g *Group) closeEngines() {
	for _, n := range g.nodes {
		if n.owns {
			n.engine.Close()
		}
	}
}

func (g *Group) isClosed() bool {
	select {
	case <-g.closed:
		return true
	default:
		return false
	}
}

// fail records err as the Group's permanent state (a duplicate node).
func (g *Group) fail(err error) {
	g.mu.Lock()
	if g.broken == nil {
		g.broken = err
	}
	g.mu.Unlock()
}

func (g *Group) brokenErr() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.broken
}

// tracker counts goroutines that may outlive the call that started them.
// Unlike a sync.WaitGroup it may be added to while someone waits: a lock
// granted before Close keeps working after it.
type tracker struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to 0; nil when nobody waits
}

// goDo runs f in a goroutine counted until it returns.
func (t *tracker) goDo(f func()) {
	t.mu.Lock()
	t.n++
	t.mu.Unlock()
	go func() {
		defer t.done()
		f()
	}()
}

func (t *tracker) done() {
	t.mu.Lock()
	t.n--
	if t.n == 0 && t.idle != nil {
		close(t.idle)
		t.idle = nil
	}
	t.mu.Unlock()
}

// wait returns once no counted goroutine runs.
func (t *tracker) wait() {
	t.mu.Lock()
	if t.n == 0 {
		t.mu.Unlock()
		return
	}
	if t.idle == nil {
		t.idle = make(chan struct{})
	}
	idle := t.idle
	t.mu.Unlock()
	<-idle
}
