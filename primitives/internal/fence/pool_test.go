package fence

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/redis/rueidis"
)

// keyOn returns a key whose slot master i of cl owns.
func keyOn(t *testing.T, cl *redistest.Cluster, i int, avoid ...int) string {
	t.Helper()
next:
	for n := 0; n < 100000; n++ {
		k := fmt.Sprintf("fence:%d", n)
		s := redistest.SlotOf(k)
		if cl.Owner(s) != i {
			continue
		}
		for _, a := range avoid {
			if s == a {
				continue next
			}
		}
		return k
	}
	t.Fatalf("no key on master %d", i)
	return ""
}

// TestPoolReusesClusterConnections: a cluster connection, bound to one
// node, is reused for any key of a slot that node serves, and never for a
// key of another node's slot.
func TestPoolReusesClusterConnections(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	client := cl.Client(t)
	p := NewPool(client)
	defer p.Close()
	ctx := context.Background()

	a0 := keyOn(t, cl, 0)
	a1 := keyOn(t, cl, 0, redistest.SlotOf(a0)) // same node, another slot
	b := keyOn(t, cl, 1)

	c, err := p.Get(ctx, a0)
	if err != nil {
		t.Fatal(err)
	}
	p.Put(c)
	if got, _ := p.Get(ctx, a0); got != c {
		t.Fatalf("Get(%q) after Put: a new connection, want the pooled one", a0)
	}
	p.Put(c)
	// a1's slot is not learned yet: a new connection, which learns it.
	c1, err := p.Get(ctx, a1)
	if err != nil {
		t.Fatal(err)
	}
	if c1 == c {
		t.Fatalf("Get(%q): the pooled connection before its slot was learned", a1)
	}
	if c1.LAddr != c.LAddr {
		t.Fatalf("keys of one master on connections to %s and %s", c.LAddr, c1.LAddr)
	}
	p.Put(c1)
	if got, _ := p.Get(ctx, a1); got != c1 {
		t.Fatalf("Get(%q) after Put: a new connection, want the pooled one", a1)
	}
	p.Put(c1)
	cb, err := p.Get(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if cb == c || cb == c1 || cb.LAddr == c.LAddr {
		t.Fatalf("Get(%q) on master 1: a connection to %s, master 0's", b, cb.LAddr)
	}
	// The connection really serves b: a keyed command is not redirected.
	if err := cb.Do(ctx, cb.B().Set().Key(b).Value("v").Build()).Error(); err != nil {
		t.Fatalf("SET %s on its pooled connection: %v", b, err)
	}
	p.Put(cb)
}

// TestPoolForgetsMovedSlot: after a slot moves, an Attempt on the pooled
// connection to its old node is refused with MOVED, goes to the new node,
// and the Pool then serves the key from there without a redirection.
func TestPoolForgetsMovedSlot(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	client := cl.Client(t)
	p := NewPool(client)
	defer p.Close()
	ctx := context.Background()

	k := keyOn(t, cl, 0)
	old, err := p.Get(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
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
	for _, c := range p.idle[old.LAddr] {
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
	client := cl.Client(t)
	p := NewPool(client)
	defer p.Close()
	ctx := context.Background()

	k := keyOn(t, cl, 0)
	c, err := p.Get(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	p.Put(c)
	slot := p.slotOf(k)
	if p.slotNode[slot] != c.LAddr {
		t.Fatalf("slot %d learned as %q, want %q", slot, p.slotNode[slot], c.LAddr)
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
