package redistest

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// MigrateTimeout is the timeout, in milliseconds on the server, of each
// MIGRATE that MoveKeys sends.
const MigrateTimeout = 5000

// allKeysBatch is the batch MoveKeys uses when asked to move everything.
const allKeysBatch = 100

// Migration is the slot migration a Cluster has under way, from
// StartMigration to Finish: Slot is MIGRATING on Servers[From] and
// IMPORTING on Servers[To].
type Migration struct {
	Slot     int
	From, To int // indexes in Cluster.Servers
	// Moved counts the keys MoveKeys has moved so far.
	Moved int
}

// SlotOf returns the cluster slot of key: CRC16 (XMODEM) of the key, or of
// its hash tag (the part between the first "{" and the next "}", when not
// empty), modulo 16384.
func SlotOf(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % numSlots
}

// Owner returns the index in Servers of the master that owns slot. During a
// migration of the slot that is the source (From) until Finish.
func (c *Cluster) Owner(slot int) int {
	return c.slotOwner[slot]
}

// KeyOn returns the first key prefix+N (N = 0, 1, ...) whose slot master i
// owns and is none of avoid, or fails t.
func (c *Cluster) KeyOn(t testing.TB, prefix string, i int, avoid ...int) string {
	t.Helper()
	for n := 0; n < 100000; n++ {
		k := prefix + strconv.Itoa(n)
		if s := SlotOf(k); c.Owner(s) == i && !slices.Contains(avoid, s) {
			return k
		}
	}
	t.Fatalf("redistest: no key %s<N> on master %d", prefix, i)
	return ""
}

// Migrating returns the migration under way, or nil. The result is a copy.
func (c *Cluster) Migrating() *Migration {
	if c.mig == nil {
		return nil
	}
	m := *c.mig
	return &m
}

// StartMigration begins moving slot from Servers[from] (which must own it)
// to Servers[to], as redis-cli --cluster reshard does: CLUSTER SETSLOT
// slot IMPORTING on the target, then MIGRATING on the source. Until
// Finish, the source answers commands on keys it no longer has with an
// ASK redirection to the target (or TRYAGAIN for a multi-key command
// whose keys are split between the two), and the target serves them only
// after ASKING. One migration at a time; Failover and KillMaster refuse
// the two masters while it lasts (Redis does not pass the MIGRATING and
// IMPORTING states on to a replica, so a promoted replica would serve the
// slot without the keys already moved).
func (c *Cluster) StartMigration(t testing.TB, slot, from, to int) *Migration {
	t.Helper()
	switch {
	case c.mig != nil:
		t.Fatalf("redistest: StartMigration(%d): slot %d is still migrating (Finish it first)", slot, c.mig.Slot)
	case slot < 0 || slot >= numSlots:
		t.Fatalf("redistest: StartMigration: slot %d", slot)
	case from < 0 || from >= len(c.Servers) || to < 0 || to >= len(c.Servers) || from == to:
		t.Fatalf("redistest: StartMigration(%d, %d, %d): the cluster has %d masters", slot, from, to, len(c.Servers))
	case c.slotOwner[slot] != from:
		t.Fatalf("redistest: StartMigration: slot %d belongs to master %d (%s), not %d", slot, c.slotOwner[slot], c.Servers[c.slotOwner[slot]].Addr, from)
	}
	src, dst := c.Servers[from], c.Servers[to]
	srcID, dstID := src.MustCmd(t, "CLUSTER", "MYID"), dst.MustCmd(t, "CLUSTER", "MYID")
	s := strconv.Itoa(slot)
	dst.MustCmd(t, "CLUSTER", "SETSLOT", s, "IMPORTING", srcID)
	src.MustCmd(t, "CLUSTER", "SETSLOT", s, "MIGRATING", dstID)
	c.mig = &Migration{Slot: slot, From: from, To: to}
	return c.Migrating()
}

// MoveKeys moves up to batch keys of the migrating slot from the source to
// the target with one MIGRATE (keys are moved whole and atomically: each
// is on one side at any time), and returns how many it moved and how many
// the source still holds. batch <= 0 moves them all, in batches of 100.
// Stopping before the source is empty leaves the slot split between the
// two masters, which is the state a migration tool crashing midway
// leaves.
func (c *Cluster) MoveKeys(t testing.TB, batch int) (moved, left int) {
	t.Helper()
	if c.mig == nil {
		t.Fatalf("redistest: MoveKeys: no migration under way (StartMigration)")
	}
	all := batch <= 0
	if all {
		batch = allKeysBatch
	}
	src, dst := c.Servers[c.mig.From], c.Servers[c.mig.To]
	s := strconv.Itoa(c.mig.Slot)
	for {
		out := src.MustCmd(t, "CLUSTER", "GETKEYSINSLOT", s, strconv.Itoa(batch))
		if out == "" {
			break
		}
		keys := strings.Split(out, "\n")
		args := append([]string{"MIGRATE", "127.0.0.1", strconv.Itoa(dst.Port), "", "0", strconv.Itoa(MigrateTimeout), "KEYS"}, keys...)
		reply, err := src.Cmd(t, args...)
		if err != nil && !strings.HasPrefix(err.Error(), "NOKEY") {
			t.Fatalf("redistest: %s MIGRATE of %d keys of slot %s to %s: %v", src.Addr, len(keys), s, dst.Addr, err)
		}
		if err == nil && reply != "OK" && reply != "NOKEY" {
			t.Fatalf("redistest: %s MIGRATE: %q", src.Addr, reply)
		}
		moved += len(keys)
		if !all {
			break
		}
	}
	c.mig.Moved += moved
	n, err := strconv.Atoi(src.MustCmd(t, "CLUSTER", "COUNTKEYSINSLOT", s))
	if err != nil {
		t.Fatalf("redistest: COUNTKEYSINSLOT: %v", err)
	}
	return moved, n
}

// Finish completes the migration: it moves the keys left (MoveKeys(t, 0)),
// assigns the slot to the target with CLUSTER SETSLOT slot NODE on the
// target, the source and then every other master (the order redis-cli
// uses), and waits until every node agrees (WaitReady). Owner then names
// the target.
func (c *Cluster) Finish(t testing.TB) {
	t.Helper()
	if c.mig == nil {
		t.Fatalf("redistest: Finish: no migration under way (StartMigration)")
	}
	m := *c.mig
	s := strconv.Itoa(m.Slot)
	dstID := c.Servers[m.To].MustCmd(t, "CLUSTER", "MYID")
	c.MoveKeys(t, 0)
	c.Servers[m.To].MustCmd(t, "CLUSTER", "SETSLOT", s, "NODE", dstID)
	// The source may refuse while a key arrived after the last MIGRATE
	// (none should: it redirects commands on keys it lacks): move and
	// retry.
	var err error
	for deadline := time.Now().Add(ClusterTimeout); ; time.Sleep(10 * time.Millisecond) {
		if _, err = c.Servers[m.From].Cmd(t, "CLUSTER", "SETSLOT", s, "NODE", dstID); err == nil || time.Now().After(deadline) {
			break
		}
		c.MoveKeys(t, 0)
	}
	if err != nil {
		t.Fatalf("redistest: %s CLUSTER SETSLOT %s NODE %s: %v", c.Servers[m.From].Addr, s, dstID, err)
	}
	for i, srv := range c.Servers {
		if i == m.From || i == m.To || c.isDown(srv) {
			continue
		}
		srv.MustCmd(t, "CLUSTER", "SETSLOT", s, "NODE", dstID)
	}
	c.slotOwner[m.Slot] = m.To
	c.mig = nil
	c.WaitReady(t)
}

// MigrateSlot moves slot from its owner to Servers[to] in one go
// (StartMigration, Finish) and returns how long it took.
func (c *Cluster) MigrateSlot(t testing.TB, slot, to int) time.Duration {
	t.Helper()
	begin := time.Now()
	c.StartMigration(t, slot, c.Owner(slot), to)
	c.Finish(t)
	return time.Since(begin)
}

// migrationBlocks fails t when master i takes part in the migration under
// way (fn cannot fail it over without losing the migration's state).
func (c *Cluster) migrationBlocks(t testing.TB, fn string, i int) {
	t.Helper()
	if c.mig != nil && (c.mig.From == i || c.mig.To == i) {
		t.Fatalf("redistest: %s(%d): master %d takes part in the migration of slot %d (Redis keeps MIGRATING/IMPORTING on the master only; Finish first)", fn, i, i, c.mig.Slot)
	}
}
