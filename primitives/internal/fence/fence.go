// Package fence runs commands whose outcome must be settled even when the
// reply is lost: on a dedicated connection whose CLIENT ID is known, so that
// on uncertainty another connection can CLIENT KILL it. After the kill, a
// command still in flight either ran already or never will, and an
// owner-checked cleanup decides the rest (DESIGN.md §4.1).
package fence

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coordhost/coordhost/primitives/internal/base"
	"github.com/coordhost/coordhost/primitives/internal/script"
	"github.com/redis/rueidis"
)

// ErrNoPermission means the server refused CLIENT INFO or CLIENT KILL (an
// ACL without them): uncertain outcomes could not be fenced.
// It wraps base.ErrNoPermission.
var ErrNoPermission = fmt.Errorf("%w: fencing uncertain outcomes needs the CLIENT INFO and CLIENT KILL commands (ACL: +client|info +client|kill)", base.ErrNoPermission)

// maxIdle bounds the connections a Pool keeps, identified, for reuse, per
// node; beyond it a connection goes back to rueidis' pool of dedicated
// connections, to be identified again (one CLIENT INFO) when it comes out.
// 64 covers 64 concurrent acquirers without either.
const maxIdle = 64

// slots is the number of hash slots of a Redis Cluster.
const slots = 16384

// Identity names one connection on the server, as CLIENT INFO reports
// it: enough to CLIENT KILL exactly that connection and no other.
type Identity struct {
	ID    int64  // CLIENT ID (id=); 0 when unknown
	Addr  string // this end's address as the server sees it (addr=)
	LAddr string // the server's address as the server sees it (laddr=); picks the node in a cluster
}

// ParseClientInfo reads the identity from a CLIENT INFO reply (RESP2 bulk
// or RESP3 verbatim string, "txt:" prefix and all). An identity without an
// id is an error.
func ParseClientInfo(info string) (Identity, error) {
	var id Identity
	for _, f := range strings.Fields(strings.TrimPrefix(info, "txt:")) {
		if v, ok := strings.CutPrefix(f, "id="); ok {
			id.ID, _ = strconv.ParseInt(v, 10, 64)
		} else if v, ok := strings.CutPrefix(f, "laddr="); ok {
			id.LAddr = v
		} else if v, ok := strings.CutPrefix(f, "addr="); ok {
			id.Addr = v
		}
	}
	if id.ID <= 0 {
		return Identity{}, fmt.Errorf("fence: CLIENT INFO without an id: %q", info)
	}
	return id, nil
}

// Conn is a dedicated connection with a known server-side identity.
type Conn struct {
	rueidis.DedicatedClient
	Identity
	cancel func()
	asking bool // ASK redirection: ASKING before every command
}

// Pool hands out fenced connections. Safe for concurrent use.
//
// It keeps identified connections for reuse, by node: on a standalone
// server all under one name, in a cluster under the node's own address
// (CLIENT INFO laddr=). A cluster connection is bound to one node, so the
// Pool learns which node serves each slot from the connections it makes
// (the node a key's EXISTS reached, or the node a MOVED named) and forgets
// a slot when a pooled connection is refused with MOVED. A wrong guess
// costs a redirection, never a wrong answer: the server refuses a key it
// does not serve.
type Pool struct {
	client  rueidis.Client
	cluster bool

	mu       sync.Mutex
	idle     map[string][]*Conn // by node; "" on a standalone server
	slotNode []string           // cluster: the node learned per slot, "" unknown
	closed   bool
}

// NewPool returns a pool over client. It dials nothing until Get.
func NewPool(client rueidis.Client) *Pool {
	p := &Pool{client: client, cluster: client.Mode() == rueidis.ClientModeCluster, idle: map[string][]*Conn{}}
	if p.cluster {
		p.slotNode = make([]string, slots)
	}
	return p
}

// slotOf is key's hash slot (hash tags honoured), in a cluster.
func (p *Pool) slotOf(key string) uint16 {
	cmd := p.client.B().Exists().Key(key).Build()
	return cmd.Slot() % slots
}

// takeIdle pops an idle connection able to serve key, or nil.
func (p *Pool) takeIdle(key string) *Conn {
	var slot uint16
	if p.cluster {
		slot = p.slotOf(key)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	node := ""
	if p.cluster {
		if node = p.slotNode[slot]; node == "" {
			return nil
		}
	}
	l := p.idle[node]
	n := len(l)
	if n == 0 {
		return nil
	}
	c := l[n-1]
	l[n-1] = nil
	p.idle[node] = l[:n-1]
	return c
}

// learn records that c's node serves key's slot.
func (p *Pool) learn(key string, c *Conn) {
	if !p.cluster || c.asking || c.LAddr == "" {
		return
	}
	slot := p.slotOf(key)
	p.mu.Lock()
	p.slotNode[slot] = c.LAddr
	p.mu.Unlock()
}

// forget drops what the Pool learned about key's slot when it named c's
// node: that node refused key with MOVED.
func (p *Pool) forget(key string, c *Conn) {
	if !p.cluster {
		return
	}
	slot := p.slotOf(key)
	p.mu.Lock()
	if p.slotNode[slot] == c.LAddr {
		p.slotNode[slot] = ""
	}
	p.mu.Unlock()
}

// Get returns a connection able to serve key (cluster clients bind a
// dedicated connection to the node of its first keyed command).
func (p *Pool) Get(ctx context.Context, key string) (*Conn, error) {
	return p.get(ctx, key, script.Refusal{})
}

// maxRedirects bounds the MOVED and ASK redirections one Get or one
// Attempt follows.
const maxRedirects = 5

// get is Get after a refusal: for a MOVED or ASK (to), a connection to the
// node named, which with ASK sends ASKING before every command. A cluster
// client's dedicated connection follows neither redirection by itself: it
// stays bound to the node its client's slot map named when it was made,
// which a migration or a failover makes stale.
func (p *Pool) get(ctx context.Context, key string, to script.Refusal) (*Conn, error) {
	if !to.Redirect() {
		if c := p.takeIdle(key); c != nil {
			return c, nil
		}
	}
	var start time.Time
	pause := 5 * time.Millisecond
	for redirects := 0; ; {
		c, err := p.dial(ctx, key, to)
		r, refused := script.IsRefusal(err)
		switch {
		case err == nil:
			p.learn(key, c)
			return c, nil
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
		if start.IsZero() {
			start = time.Now()
		}
		if time.Since(start)+pause > script.RefusedWait {
			return nil, err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		pause = min(2*pause, 100*time.Millisecond)
	}
}

// dial makes one connection: in a cluster, to key's node as the client's
// slot map says, or to the node to names.
func (p *Pool) dial(ctx context.Context, key string, to script.Refusal) (*Conn, error) {
	var dc rueidis.DedicatedClient
	var cancel func()
	asking := false
	if to.Redirect() {
		n, ok := p.client.Nodes()[to.Addr]
		if !ok {
			return nil, fmt.Errorf("fence: redirected (%s) to %s, a node the client does not know", to.Word, to.Addr)
		}
		dc, cancel = n.Dedicate()
		asking = to.Word == "ASK"
	} else {
		dc, cancel = p.client.Dedicate()
	}
	var info string
	var err error
	if p.cluster && !to.Redirect() {
		// EXISTS binds the connection to key's node; CLIENT INFO then
		// names the connection on that node.
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
	return &Conn{DedicatedClient: dc, Identity: id, cancel: cancel, asking: asking}, nil
}

// Do sends cmd, after ASKING on a connection an ASK redirection made.
func (c *Conn) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	if !c.asking {
		return c.DedicatedClient.Do(ctx, cmd)
	}
	return c.DedicatedClient.DoMulti(ctx, c.B().Asking().Build(), cmd)[1]
}

// DoMulti sends cmds, each after ASKING on a connection an ASK
// redirection made.
func (c *Conn) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	if !c.asking {
		return c.DedicatedClient.DoMulti(ctx, cmds...)
	}
	all := make([]rueidis.Completed, 0, 2*len(cmds))
	for _, cmd := range cmds {
		all = append(all, c.B().Asking().Build(), cmd)
	}
	res := c.DedicatedClient.DoMulti(ctx, all...)
	out := make([]rueidis.RedisResult, len(cmds))
	for i := range cmds {
		out[i] = res[2*i+1]
	}
	return out
}

// Put returns a healthy connection for reuse, kept under its node. One
// made for an ASK redirection (it sends ASKING before every command, right
// only while its slot migrates) gives its wire back to the client's pool
// instead.
func (p *Pool) Put(c *Conn) {
	node := ""
	if p.cluster {
		node = c.LAddr
	}
	p.mu.Lock()
	if !p.closed && !c.asking && (!p.cluster || node != "") && len(p.idle[node]) < maxIdle {
		p.idle[node] = append(p.idle[node], c)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	// Healthy: hand the wire back rather than close it, so that a burst
	// above maxIdle does not dial a new connection per acquire.
	c.cancel()
}

// Discard closes the connection instead of reusing it.
func (c *Conn) Discard() {
	c.DedicatedClient.Close()
	c.cancel()
}

// Kill cuts off the connection with CLIENT KILL ID from another
// connection: once it returns nil, a command sent on that connection has
// either run or never will. addr (the connection's own address, CLIENT INFO
// addr=) is matched too when known, so an id reused after a server restart
// never kills a stranger; laddr (the server's address) picks the node in a
// cluster, where ids are per node. "No such client" counts as success: the
// connection is already gone.
func (p *Pool) Kill(ctx context.Context, who Identity) error {
	return Kill(ctx, p.client, who)
}

// Kill is Pool.Kill for any client.
func Kill(ctx context.Context, client rueidis.Client, who Identity) error {
	id, addr, laddr := who.ID, who.Addr, who.LAddr
	cmd := func(c rueidis.Client) rueidis.Completed {
		b := c.B().ClientKill().Id(id)
		switch {
		case addr != "" && laddr != "":
			return b.Addr(addr).Laddr(laddr).Build()
		case addr != "":
			return b.Addr(addr).Build()
		case laddr != "":
			return b.Laddr(laddr).Build()
		}
		return b.Build()
	}
	nodes := map[string]rueidis.Client{"": client}
	if client.Mode() == rueidis.ClientModeCluster {
		if laddr == "" {
			return errors.New("fence: cluster kill needs the connection's laddr")
		}
		all := client.Nodes()
		if n, ok := all[laddr]; ok {
			nodes = map[string]rueidis.Client{laddr: n}
		} else {
			nodes = all // the filters keep other nodes' clients safe
		}
	}
	var errs []error
	killed := false
	for _, n := range nodes {
		err := n.Do(ctx, cmd(n)).Error()
		if err == nil || isNoSuchClient(err) {
			killed = true
			continue
		}
		if isNoPerm(err) {
			return fmt.Errorf("%w: %w", ErrNoPermission, err)
		}
		errs = append(errs, err)
	}
	if !killed && len(errs) > 0 {
		return fmt.Errorf("fence: CLIENT KILL ID %d: %w", id, errors.Join(errs...))
	}
	return nil
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

func isNoPerm(err error) bool {
	rerr, ok := rueidis.IsRedisErr(err)
	return ok && strings.HasPrefix(rerr.Error(), "NOPERM")
}

func isNoSuchClient(err error) bool {
	rerr, ok := rueidis.IsRedisErr(err)
	return ok && strings.Contains(rerr.Error(), "No such client")
}

// Attempt sends one command whose outcome must be settled even when its
// reply is lost: on (with identity who) when who is known, else on a pooled
// connection of p, which it then returns or discards. On an uncertain
// outcome it fences the connection and settles with settle (an
// owner-checked release), and returns a *base.Uncertain: the caller is
// then not holding anything. name (e.g. `lease "h"`) is for errors; key
// places the pooled connection in a cluster. Without the CLIENT
// permission it fails with an error wrapping ErrNoPermission before
// sending anything; without a connection, with a *base.Uncertain that says
// nothing was sent (worth a retry).
func Attempt[R any](ctx context.Context, p *Pool, on rueidis.CoreClient, who Identity, name, key string,
	send func(context.Context, rueidis.CoreClient) (R, error), settle func(context.Context) error) (R, error) {
	var zero R
	var to script.Refusal
	for redirects := 0; ; redirects++ {
		var fc *Conn
		if who.ID == 0 {
			var err error
			if fc, err = p.get(ctx, key, to); err != nil {
				switch {
				case errors.Is(err, ErrNoPermission):
					return zero, fmt.Errorf("%s: %w", name, err)
				case ctx.Err() != nil:
					return zero, fmt.Errorf("%s: %w", name, ctx.Err())
				}
				if _, refused := script.IsRefusal(err); refused {
					// Certain: nothing was sent.
					return zero, fmt.Errorf("%s: %w: %w", name, base.ErrUnavailable, err)
				}
				return zero, &base.Uncertain{Name: name, Op: "acquire", Settled: "no connection, nothing sent", Err: err}
			}
			on = fc
		}
		r, err := send(ctx, on)
		if err != nil && script.IsUncertain(err) {
			w := who
			if fc != nil {
				w = fc.Identity
				fc.Discard()
			}
			if serr := p.Settle(ctx, w, settle); serr != nil {
				return zero, &base.Uncertain{Name: name, Op: "acquire", Err: err, Unsettled: serr}
			}
			return zero, &base.Uncertain{Name: name, Op: "acquire", Settled: "fenced and released", Err: err}
		}
		ref, refused := script.IsRefusal(err)
		if fc != nil {
			if refused && ref.Word == "MOVED" {
				p.forget(key, fc)
			}
			p.Put(fc)
		}
		if refused && ref.Redirect() && fc != nil && redirects < maxRedirects {
			// The pooled connection's node no longer serves key (a
			// migration or a failover): nothing ran; go where the server
			// says.
			to = ref
			continue
		}
		return r, err
	}
}

// SettleTimeout bounds Settle.
const SettleTimeout = 2 * time.Second

// Settle fences the connection who (CLIENT KILL), so that a command still
// in flight on it has run or never will, then runs settle (an owner-checked
// release), on a context that survives the caller's cancellation but is
// bounded by SettleTimeout. settle runs even when the kill failed: it
// settles a grant that already landed; the error then says a delayed one
// could still land.
func (p *Pool) Settle(ctx context.Context, who Identity, settle func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), SettleTimeout)
	defer cancel()
	kerr := p.Kill(ctx, who)
	rerr := settle(ctx)
	if kerr != nil {
		return fmt.Errorf("connection not fenced (%w); released: %v", kerr, rerr == nil)
	}
	return rerr
}
