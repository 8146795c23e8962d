package fence

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/redis/rueidis"
)

// clusterPool returns a Pool over a new client of cl, closed at cleanup.
func clusterPool(t *testing.T, cl *redistest.Cluster, opts ...func(*rueidis.ClientOption)) *Pool {
	t.Helper()
	p := NewPool(cl.Client(t, opts...))
	t.Cleanup(p.Close)
	return p
}

// set runs SET key on c: a connection that cannot serve key fails (MOVED)
// or, bound to another slot by rueidis, panics.
func set(t *testing.T, c *Conn, key string) {
	t.Helper()
	if err := c.Do(context.Background(), c.B().Set().Key(key).Value("v").Build()).Error(); err != nil {
		t.Fatalf("SET %s on a pooled connection to %s: %v", key, c.LAddr, err)
	}
}

// nodeConn returns a connection for key that the Pool will keep: the first
// Get of an unlearned slot goes through the cluster client (bound to the
// slot, not pooled); the next one reaches the learned node.
func nodeConn(t *testing.T, p *Pool, key string) *Conn {
	t.Helper()
	ctx := context.Background()
	c, err := p.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	set(t, c, key)
	p.Put(c)
	if c, err = p.Get(ctx, key); err != nil {
		t.Fatal(err)
	}
	if c.node == "" {
		t.Fatalf("second Get(%q): still a slot-bound connection (slot not learned)", key)
	}
	return c
}

// TestPoolReusesClusterConnections: a pooled cluster connection reaches one
// node and serves any key of any slot that node serves, never a key of
// another node's slot.
func TestPoolReusesClusterConnections(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	p := clusterPool(t, cl)
	ctx := context.Background()

	a0 := cl.KeyOn(t, "fence:", 0)
	a1 := cl.KeyOn(t, "fence:", 0, redistest.SlotOf(a0)) // same node, another slot
	b := cl.KeyOn(t, "fence:", 1)

	c := nodeConn(t, p, a0)
	set(t, c, a0)
	p.Put(c)
	if got, _ := p.Get(ctx, a0); got != c {
		t.Fatalf("Get(%q) after Put: a new connection, want the pooled one", a0)
	}
	p.Put(c)
	// a1's slot is not learned yet: through the cluster client, which
	// learns it.
	c1, err := p.Get(ctx, a1)
	if err != nil {
		t.Fatal(err)
	}
	if c1 == c || c1.LAddr != c.LAddr {
		t.Fatalf("Get(%q), slot unlearned: %p to %s; pooled %p to %s", a1, c1, c1.LAddr, c, c.LAddr)
	}
	p.Put(c1)
	got, err := p.Get(ctx, a1)
	if err != nil {
		t.Fatal(err)
	}
	if got != c {
		t.Fatalf("Get(%q), slot learned: not the pooled connection to its node", a1)
	}
	set(t, got, a1) // another slot on the same connection
	set(t, got, a0)
	p.Put(got)
	cb, err := p.Get(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if cb == c || cb.LAddr == c.LAddr {
		t.Fatalf("Get(%q) on master 1: a connection to %s, master 0's", b, cb.LAddr)
	}
	set(t, cb, b)
	p.Put(cb)
}

// TestPoolForgetsMovedSlot: after a slot moves, an Attempt on the pooled
// connection to its old node is refused with MOVED, goes to the new node,
// and the Pool then serves the key from there without a redirection.
func TestPoolForgetsMovedSlot(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	p := clusterPool(t, cl)
	ctx := context.Background()

	k := cl.KeyOn(t, "fence:", 0)
	old := nodeConn(t, p, k)
	p.Put(old)
	cl.MigrateSlot(t, redistest.SlotOf(k), 2)

	sends := 0
	var moved int
	set := func(ctx context.Context, on rueidis.CoreClient) (string, error) {
		sends++
		err := on.Do(ctx, on.B().Set().Key(k).Value("v").Build()).Error()
		if e, ok := rueidis.IsRedisErr(err); ok {
			if _, m := e.IsMoved(); m {
				moved++
			}
		}
		return "", err
	}
	settle := func(context.Context) error { return errors.New("settle must not run") }
	if _, err := Attempt(ctx, p, nil, Identity{}, "test", k, set, settle); err != nil {
		t.Fatalf("Attempt after the slot moved: %v", err)
	}
	if sends != 2 || moved != 1 {
		t.Fatalf("Attempt after the slot moved: %d sends, %d MOVED; want 2 and 1", sends, moved)
	}
	sends, moved = 0, 0
	if _, err := Attempt(ctx, p, nil, Identity{}, "test", k, set, settle); err != nil {
		t.Fatal(err)
	}
	if sends != 1 || moved != 0 {
		t.Fatalf("second Attempt: %d sends, %d MOVED; want 1 and 0 (the new node learned)", sends, moved)
	}
	// The MOVED forgot the slot, not the old node's connection: it stays
	// pooled for the slots that node still serves.
	p.mu.Lock()
	pooled := false
	for _, c := range p.idle[old.node] {
		pooled = pooled || c == old
	}
	p.mu.Unlock()
	if !pooled {
		t.Fatal("the old node's connection left the pool after its MOVED")
	}
}

// TestPoolForgetsSlotOnMovedToUnknownNode: a MOVED to a node the client
// does not know yet (one added to the cluster) fails the Attempt, and the
// Pool forgets the slot, so that the next Get asks the client's slot map
// (refreshed by then) instead of the stale node.
func TestPoolForgetsSlotOnMovedToUnknownNode(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	p := clusterPool(t, cl)
	ctx := context.Background()

	k := cl.KeyOn(t, "fence:", 0)
	c := nodeConn(t, p, k)
	p.Put(c)
	slot := p.slotOf(k)
	if p.slotNode[slot] != c.node {
		t.Fatalf("slot %d learned as %q, want %q", slot, p.slotNode[slot], c.node)
	}
	movedAway := func(ctx context.Context, on rueidis.CoreClient) (string, error) {
		return "", on.Do(ctx, on.B().Eval().Script("return redis.error_reply('MOVED "+fmt.Sprint(slot)+" 127.0.0.1:1')").Numkeys(1).Key(k).Build()).Error()
	}
	settle := func(context.Context) error { return errors.New("settle must not run") }
	if _, err := Attempt(ctx, p, nil, Identity{}, "test", k, movedAway, settle); err == nil {
		t.Fatal("Attempt redirected to an unknown node: no error")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.slotNode[slot] != "" {
		t.Fatalf("slot %d still learned as %q after its node answered MOVED", slot, p.slotNode[slot])
	}
}

// TestPoolAfterMasterDies: the node learned for a slot dies and its
// replica takes over; Get for a key of the slot forgets the dead node and
// goes through the cluster client, whose slot map follows the failover.
func TestPoolAfterMasterDies(t *testing.T) {
	cl := redistest.StartCluster(t, 3, redistest.WithReplicas(1))
	p := clusterPool(t, cl)
	k := cl.KeyOn(t, "fence:", 0)
	dead := nodeConn(t, p, k)
	dead.Discard() // the pool would hand it out, and its command fail
	cl.KillMaster(t, 0)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		c, err := p.Get(ctx, k)
		if err == nil {
			if c.node == dead.node && c.node != "" {
				t.Fatalf("Get(%q) after the failover: a connection to the dead master %s", k, c.node)
			}
			set(t, c, k)
			p.Put(c)
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("Get(%q) after the failover: %v", k, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// evalSet is an Attempt send: a script that writes key (no shebang: the
// scripts of the primitives are of that kind).
func evalSet(key string) func(context.Context, rueidis.CoreClient) (int64, error) {
	return func(ctx context.Context, on rueidis.CoreClient) (int64, error) {
		return on.Do(ctx, on.B().Eval().Script("redis.call('SET', KEYS[1], 'v') return 1").Numkeys(1).Key(key).Build()).AsInt64()
	}
}

func settled(context.Context) error { return nil }

// TestPoolAfterMasterDiesWithIdleConnections: the pool keeps several
// connections to a master that then dies. The first Attempt on one of them
// fails (its outcome is unknown: a connection error); the others must not
// each fail an acquire too.
func TestPoolAfterMasterDiesWithIdleConnections(t *testing.T) {
	cl := redistest.StartCluster(t, 3, redistest.WithReplicas(1))
	p := clusterPool(t, cl)
	ctx := context.Background()
	k := cl.KeyOn(t, "fence:", 0)
	cs := []*Conn{nodeConn(t, p, k)}
	for range 4 {
		c, err := p.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	for _, c := range cs {
		p.Put(c)
	}
	cl.KillMaster(t, 0)
	failed := 0
	for i := range 6 {
		if _, err := Attempt(ctx, p, nil, Identity{}, "test", k, evalSet(k), settled); err != nil {
			t.Logf("Attempt %d after the failover: %v", i, err)
			failed++
		}
	}
	if failed > 1 {
		t.Fatalf("%d of 6 Attempts failed after the failover, one per connection kept to the dead master; want at most 1", failed)
	}
}

// TestPoolGetWithAStoppedNode: a node that does not answer (here stopped
// with SIGSTOP) must not hold up an acquire on another node while the Pool
// learns which node a connection reached.
func TestPoolGetWithAStoppedNode(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	client := cl.Client(t)
	for _, n := range client.Nodes() { // connected to every node first
		if err := n.Do(context.Background(), n.B().Ping().Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	p := NewPool(client)
	defer p.Close()
	k := cl.KeyOn(t, "fence:", 0)
	cl.Servers[2].Pause()
	defer cl.Servers[2].Resume()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	begin := time.Now()
	_, err := Attempt(ctx, p, nil, Identity{}, "test", k, evalSet(k), settled)
	if d := time.Since(begin); err != nil || d > time.Second {
		t.Fatalf("Attempt on master 0 while master 2 is stopped: %v after %v", err, d.Round(time.Millisecond))
	}
}

// TestPoolResolveOnCancelledContext: asking the nodes for their addresses
// on a context cancelled meanwhile must not forget the addresses learned
// before, or slots of those nodes go unlearned until the next resolve.
func TestPoolResolveOnCancelledContext(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	p := clusterPool(t, cl)
	ctx := context.Background()
	c, err := p.Get(ctx, cl.KeyOn(t, "fence:", 0))
	if err != nil {
		t.Fatal(err)
	}
	p.Put(c)
	p.mu.Lock()
	known := len(p.laddrNode)
	p.resolvedAt = time.Time{} // as if a second had passed
	p.mu.Unlock()
	if known != 3 {
		t.Fatalf("%d node addresses known after the first Get, want 3", known)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	p.nodeOf(cancelled, "127.0.0.1:1") // an address no node has
	k := cl.KeyOn(t, "fence:", 1)
	if c, err = p.Get(ctx, k); err != nil {
		t.Fatal(err)
	}
	p.Put(c)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.slotNode[p.slotOf(k)] == "" {
		t.Fatalf("slot of %q not learned: node addresses known: %v", k, p.laddrNode)
	}
}

// TestPoolReadOnlyClientAfterFailover: a client that sends READONLY on its
// connections (SendToReplicas) reaches a replica without a MOVED: a
// connection the Pool kept to a master demoted by a failover runs the
// script there (it fails at the write, READONLY, or on a writable replica
// succeeds on the wrong node). Once the client's slot map follows the
// failover, Attempts must succeed again.
func TestPoolReadOnlyClientAfterFailover(t *testing.T) {
	cl := redistest.StartCluster(t, 3, redistest.WithReplicas(1))
	client := cl.Client(t, func(o *rueidis.ClientOption) {
		o.SendToReplicas = func(cmd rueidis.Completed) bool { return cmd.IsReadOnly() }
	})
	p := NewPool(client)
	defer p.Close()
	ctx := context.Background()
	k := cl.KeyOn(t, "fence:", 0)
	for range 3 {
		if _, err := Attempt(ctx, p, nil, Identity{}, "test", k, evalSet(k), settled); err != nil {
			t.Fatal(err)
		}
	}
	cl.Failover(t, 0)
	// A write through the client is redirected (MOVED) and refreshes its
	// slot map.
	if err := client.Do(ctx, client.B().Set().Key(k).Value("x").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	var err error
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if _, err = Attempt(ctx, p, nil, Identity{}, "test", k, evalSet(k), settled); err == nil {
			return
		}
	}
	t.Fatalf("Attempts after the failover still fail after 5s: %v", err)
}
