package redistest

import (
	"strconv"
	"testing"
)

func TestSlotOf(t *testing.T) {
	s := Start(t, Args("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"))
	for _, k := range []string{"", "a", "foo", "key:7", "{user1000}.following", "{}x", "{x}", "a{b}c{d}", "}{x}", "{", "\xff\x00binary", "lock:{reshard}:1"} {
		want := s.MustCmd(t, "CLUSTER", "KEYSLOT", k)
		if got := strconv.Itoa(SlotOf(k)); got != want {
			t.Errorf("SlotOf(%q) = %s, CLUSTER KEYSLOT says %s", k, got, want)
		}
	}
}

// TestMigrateSlot moves a slot in steps (half its keys, then the rest),
// checking that a cluster client reads and writes every key of it midway
// (ASK redirections), that Owner, NodeForKey and the nodes agree after
// Finish, and that the cluster still fails over (the moved slot's new
// owner, whose slot map is now two ranges) and migrates back.
func TestMigrateSlot(t *testing.T) {
	t.Parallel()
	c := StartCluster(t, 3, WithReplicas(1))
	ctx := ctxT(t)
	client := c.Client(t)
	const tag = "{mig}"
	slot := SlotOf(tag)
	from := c.Owner(slot)
	to := (from + 1) % 3
	const n = 10
	for i := range n {
		k := tag + strconv.Itoa(i)
		if err := client.Do(ctx, client.B().Set().Key(k).Value("v").Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	m := c.StartMigration(t, slot, from, to)
	if m.Slot != slot || m.From != from || m.To != to || c.Migrating() == nil {
		t.Fatalf("StartMigration = %+v, Migrating = %+v", m, c.Migrating())
	}
	moved, left := c.MoveKeys(t, n/2)
	if moved != n/2 || left != n-n/2 {
		t.Fatalf("MoveKeys(%d) = %d moved, %d left", n/2, moved, left)
	}
	if got := c.Servers[to].MustCmd(t, "CLUSTER", "COUNTKEYSINSLOT", strconv.Itoa(slot)); got != strconv.Itoa(n/2) {
		t.Fatalf("target holds %s keys, want %d", got, n/2)
	}
	// Midway: every key is readable and writable through the client, and
	// new keys land on the target.
	for i := range n + 2 {
		k := tag + strconv.Itoa(i)
		if err := client.Do(ctx, client.B().Set().Key(k).Value("w").Build()).Error(); err != nil {
			t.Fatalf("SET %s midway: %v", k, err)
		}
		if v, err := client.Do(ctx, client.B().Get().Key(k).Build()).ToString(); err != nil || v != "w" {
			t.Fatalf("GET %s midway = %q, %v", k, v, err)
		}
	}
	if c.Owner(slot) != from || c.NodeForKey(t, tag) != c.Servers[from] {
		t.Fatalf("midway, Owner = %d, want the source %d", c.Owner(slot), from)
	}
	c.Finish(t)
	if c.Owner(slot) != to || c.NodeForKey(t, tag) != c.Servers[to] || c.Migrating() != nil {
		t.Fatalf("after Finish, Owner = %d, want %d", c.Owner(slot), to)
	}
	for i, srv := range c.Servers {
		want := "0"
		if i == to {
			want = strconv.Itoa(n + 2)
		}
		if got := srv.MustCmd(t, "CLUSTER", "COUNTKEYSINSLOT", strconv.Itoa(slot)); got != want {
			t.Errorf("master %d holds %s keys of slot %d, want %s", i, got, slot, want)
		}
	}
	ft := c.Failover(t, to)
	t.Logf("Failover(%d) of the slot's new owner: %+v", to, ft)
	ctx = ctxT(t) // the failover may have used up the first one
	if got, err := client.Do(ctx, client.B().Get().Key(tag+"3").Build()).ToString(); err != nil || got != "w" {
		t.Fatalf("GET after failover = %q, %v", got, err)
	}
	took := c.MigrateSlot(t, slot, from)
	t.Logf("MigrateSlot back: %v", took)
	if c.Owner(slot) != from {
		t.Fatalf("Owner after MigrateSlot back = %d, want %d", c.Owner(slot), from)
	}
	if got, err := client.Do(ctx, client.B().Get().Key(tag+"3").Build()).ToString(); err != nil || got != "w" {
		t.Fatalf("GET after the migration back = %q, %v", got, err)
	}
}
