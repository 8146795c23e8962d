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
	"time"

	"github.com/coordhost/coordhost/primitives/internal/base"
	"github.com/coordhost/coordhost/primitives/internal/script"
	"github.com/redis/rueidis"
)

// ErrNoPermission means the server refused CLIENT INFO or CLIENT KILL (an
// ACL without them): uncertain outcomes could not be fenced.
// It wraps base.ErrNoPermission.
var ErrNoPermission = fmt.Errorf("%w: fencing uncertain outcomes needs the CLIENT INFO and CLIENT KILL commands (ACL: +client|info +client|kill)", base.ErrNoPermission)

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
	// node is, in a cluster, the client's address of the node the
	// connection reaches (a key of Nodes()); "" for one the cluster client
	// made, which rueidis binds to the slot of its first keyed command.
	node string
	// readOnly: the connection is in READONLY mode (cluster); never kept,
	// nor learned from.
	readOnly bool
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
				if fc.node != "" && ctx.Err() == nil {
					// A kept connection failed (a node that died in a
					// failover, say): the others kept for its node would
					// each fail an acquire the same way.
					p.dropNode(key, fc.node)
				}
			}
			if serr := p.Settle(ctx, w, settle); serr != nil {
				return zero, &base.Uncertain{Name: name, Op: "acquire", Err: err, Unsettled: serr}
			}
			return zero, &base.Uncertain{Name: name, Op: "acquire", Settled: "fenced and released", Err: err}
		}
		ref, refused := script.IsRefusal(err)
		if fc != nil {
			if refused && ref.Word == "MOVED" {
				p.forget(key, fc.node)
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
