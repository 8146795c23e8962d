package fence

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/coordhost/coordhost/primitives/internal/script"
	"github.com/redis/rueidis"
)

// maxIdle bounds the connections a Pool keeps, identified, for reuse, per
// node; beyond it a connection goes back to rueidis' pool of dedicated
// connections, to be identified again (one CLIENT INFO) when it comes out.
// 64 covers 64 concurrent acquirers without either.
const maxIdle = 64

// slots is the number of hash slots of a Redis Cluster.
const slots = 16384

// resolveEvery bounds how often a Pool asks every node for its address
// when a connection reports one it does not know.
const resolveEvery = time.Second

// resolveTimeout bounds how long a Pool waits for a node's address.
const resolveTimeout = 250 * time.Millisecond

// Pool hands out fenced connections. Safe for concurrent use.
//
// It keeps identified connections for reuse, by node. In a cluster that
// takes connections of the node's own client (Nodes()): the cluster
// client's dedicated connections are bound to the slot of their first
// keyed command, theirs to the node. The Pool learns which node serves a
// slot from the first connection it makes for a key of it (through the
// cluster client, which routes it by its slot map: EXISTS key, then
// CLIENT INFO names the node as the server sees it), or from the node a
// MOVED names; it forgets a slot its node refused with MOVED or could not
// be reached for. A wrong guess costs a redirection, never a wrong
// answer: a node refuses a key whose slot it does not serve.
type Pool struct {
	client  rueidis.Client
	cluster bool

	mu         sync.Mutex
	idle       map[string][]*Conn // by node; "" on a standalone server
	slotNode   []string           // cluster: the node learned per slot, "" unknown
	laddrNode  map[string]string  // cluster: a node's address as it sees itself (laddr=) → its key in Nodes()
	resolvedAt time.Time          // when laddrNode was last refreshed
	closed     bool
}

// NewPool returns a pool over client. It dials nothing until Get.
func NewPool(client rueidis.Client) *Pool {
	p := &Pool{client: client, cluster: client.Mode() == rueidis.ClientModeCluster, idle: map[string][]*Conn{}}
	if p.cluster {
		p.slotNode = make([]string, slots)
		p.laddrNode = map[string]string{}
	}
	return p
}

// Get returns a connection able to serve key.
func (p *Pool) Get(ctx context.Context, key string) (*Conn, error) {
	return p.get(ctx, key, script.Refusal{})
}

// maxRedirects bounds the MOVED and ASK redirections one Get or one
// Attempt follows.
const maxRedirects = 5

// errUnknownNode: a node address that is not (or no longer) among the
// client's nodes.
var errUnknownNode = errors.New("a node the client does not know")

// get is Get after a refusal: for a MOVED or ASK (to), a connection to the
// node named, which with ASK sends ASKING before every command. A
// connection follows neither redirection by itself: it stays with the
// node it reached, which a migration or a failover can make the wrong one.
func (p *Pool) get(ctx context.Context, key string, to script.Refusal) (*Conn, error) {
	node := ""
	if !to.Redirect() {
		var c *Conn
		if c, node = p.takeIdle(key); c != nil {
			return c, nil
		}
	}
	b := script.Backoff{Bound: script.RefusedWait}
	for redirects := 0; ; {
		c, err := p.dial(ctx, key, node, to)
		r, refused := script.IsRefusal(err)
		switch {
		case err == nil:
			p.learn(ctx, key, c)
			return c, nil
		case node != "" && ctx.Err() == nil:
			// The node learned for key's slot is gone or unreachable (a
			// failover): ask the cluster client, whose slot map follows.
			p.forget(key, node)
			node = ""
			continue
		case !refused || ctx.Err() != nil:
			return c, err
		case r.Redirect():
			if redirects++; redirects > maxRedirects {
				return nil, err
			}
			to = r
			continue
		}
		// CLUSTERDOWN or LOADING: wait as script.Run does.
		ok, werr := b.Wait(ctx)
		if werr != nil {
			return nil, werr
		}
		if !ok {
			return nil, err
		}
	}
}

// dial makes one connection: to the node to names, or to node (a key of
// Nodes()), or through the client (in a cluster, to key's node as its slot
// map says, bound to key's slot).
func (p *Pool) dial(ctx context.Context, key, node string, to script.Refusal) (*Conn, error) {
	var dc rueidis.DedicatedClient
	var cancel func()
	asking := false
	if to.Redirect() {
		node, asking = to.Addr, to.Word == "ASK"
	}
	if node != "" {
		n, ok := p.client.Nodes()[node]
		if !ok {
			if to.Redirect() {
				return nil, fmt.Errorf("fence: redirected (%s) to %s, %w", to.Word, to.Addr, errUnknownNode)
			}
			return nil, fmt.Errorf("fence: %s, %w", node, errUnknownNode)
		}
		dc, cancel = n.Dedicate()
	} else {
		dc, cancel = p.client.Dedicate()
	}
	var info string
	var err error
	if p.cluster && node == "" {
		// EXISTS binds the connection to key's slot and node; CLIENT INFO
		// then names the connection on that node.
		res := dc.DoMulti(ctx, dc.B().Exists().Key(key).Build(), dc.B().ClientInfo().Build())
		if err = res[0].Error(); err == nil {
			info, err = res[1].ToString()
		}
	} else {
		info, err = dc.Do(ctx, dc.B().ClientInfo().Build()).ToString()
	}
	if err != nil {
		dc.Close()
		cancel()
		if isNoPerm(err) {
			return nil, fmt.Errorf("%w: %w", ErrNoPermission, err)
		}
		return nil, err
	}
	id, err := ParseClientInfo(info)
	if err != nil {
		dc.Close()
		cancel()
		return nil, err
	}
	return &Conn{DedicatedClient: dc, Identity: id, cancel: cancel, asking: asking, node: node, readOnly: readOnly(info)}, nil
}

// readOnly reports whether a CLIENT INFO reply shows a connection in
// READONLY mode (flags=...r...: a client with SendToReplicas or
// ReplicaOnly sends READONLY on every connection). A replica serves such a
// connection the keys of its master's slots instead of refusing them with
// MOVED, so a master demoted by a failover would run a script for a slot it
// no longer serves.
func readOnly(info string) bool {
	for _, f := range strings.Fields(strings.TrimPrefix(info, "txt:")) {
		if v, ok := strings.CutPrefix(f, "flags="); ok {
			return strings.Contains(v, "r")
		}
	}
	return false
}

// slotOf is key's hash slot (hash tags honoured), in a cluster.
func (p *Pool) slotOf(key string) uint16 {
	cmd := p.client.B().Exists().Key(key).Build()
	return cmd.Slot() % slots
}

// takeIdle pops an idle connection able to serve key, or returns nil and
// the node learned for key's slot ("" when none).
func (p *Pool) takeIdle(key string) (*Conn, string) {
	var slot uint16
	if p.cluster {
		slot = p.slotOf(key)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	node := ""
	if p.cluster {
		if node = p.slotNode[slot]; node == "" {
			return nil, ""
		}
	}
	l := p.idle[node]
	n := len(l)
	if n == 0 {
		return nil, node
	}
	c := l[n-1]
	l[n-1] = nil
	p.idle[node] = l[:n-1]
	return c, node
}

// learn records that c's node serves key's slot. c came through the
// cluster client (its node named by the address the server reports), or
// went to a node of Nodes(): for a learned slot, or as a MOVED said.
func (p *Pool) learn(ctx context.Context, key string, c *Conn) {
	if !p.cluster || c.asking || c.readOnly {
		return
	}
	node := c.node
	if node == "" {
		if node = p.nodeOf(ctx, c.LAddr); node == "" {
			return
		}
	}
	slot := p.slotOf(key)
	p.mu.Lock()
	p.slotNode[slot] = node
	p.mu.Unlock()
}

// forget drops what the Pool learned about key's slot when it named node.
func (p *Pool) forget(key, node string) {
	if !p.cluster || node == "" {
		return
	}
	slot := p.slotOf(key)
	p.mu.Lock()
	if p.slotNode[slot] == node {
		p.slotNode[slot] = ""
	}
	p.mu.Unlock()
}

// dropNode discards the connections kept for node and forgets key's slot
// if it was learned as node's.
func (p *Pool) dropNode(key, node string) {
	p.forget(key, node)
	p.mu.Lock()
	l := p.idle[node]
	delete(p.idle, node)
	p.mu.Unlock()
	for _, c := range l {
		c.Discard()
	}
}

// nodeOf returns the key in Nodes() of the node that calls itself laddr,
// or "". An address it does not know makes it ask every node for its own
// (CLIENT INFO on the node's client, all at once, each for at most
// resolveTimeout: a node that does not answer must not hold up an acquire
// on another), at most once per resolveEvery. A node that does not answer
// keeps the address it gave before.
func (p *Pool) nodeOf(ctx context.Context, laddr string) string {
	if laddr == "" {
		return ""
	}
	p.mu.Lock()
	node, ok := p.laddrNode[laddr]
	stale := !ok && time.Since(p.resolvedAt) >= resolveEvery
	if stale {
		p.resolvedAt = time.Now()
	}
	p.mu.Unlock()
	if !stale {
		return node
	}
	nodes := p.client.Nodes()
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	var wg sync.WaitGroup
	var amu sync.Mutex
	answered := map[string]string{} // node → its laddr
	for addr, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			info, err := n.Do(ctx, n.B().ClientInfo().Build()).ToString()
			if err != nil {
				return
			}
			if id, err := ParseClientInfo(info); err == nil && id.LAddr != "" {
				amu.Lock()
				answered[addr] = id.LAddr
				amu.Unlock()
			}
		}()
	}
	wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	found := map[string]string{}
	for l, addr := range p.laddrNode {
		if _, ok := nodes[addr]; ok && answered[addr] == "" {
			found[l] = addr
		}
	}
	for addr, l := range answered {
		found[l] = addr
	}
	p.laddrNode = found
	return found[laddr]
}

// Put returns a healthy connection for reuse, kept under its node. A
// cluster connection bound to a slot, or made for an ASK redirection
// (it sends ASKING before every command, right only while its slot
// migrates), or in READONLY mode (a replica would not refuse it), gives
// its wire back to the client's pool instead.
func (p *Pool) Put(c *Conn) {
	poolable := !c.asking && (!p.cluster || c.node != "" && !c.readOnly)
	p.mu.Lock()
	if poolable && !p.closed && len(p.idle[c.node]) < maxIdle {
		p.idle[c.node] = append(p.idle[c.node], c)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	// Healthy: hand the wire back rather than close it, so that a burst
	// above maxIdle does not dial a new connection per acquire.
	c.cancel()
}

// Close discards idle connections. Idempotent.
func (p *Pool) Close() {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.closed = map[string][]*Conn{}, true
	p.mu.Unlock()
	for _, l := range idle {
		for _, c := range l {
			c.Discard()
		}
	}
}
