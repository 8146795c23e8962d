package redistest

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// ClusterTimeout bounds how long StartCluster waits for the nodes to agree.
const ClusterTimeout = 20 * time.Second

const numSlots = 16384

// Cluster is a Redis (or Valkey) Cluster of masters without replicas, all on
// loopback.
type Cluster struct {
	// Kind is the kind of every node.
	Kind Kind
	// Addrs are the nodes' addresses, in the order of Servers.
	Addrs []string
	// Servers are the nodes; Servers[i] owns the i-th contiguous slot range.
	Servers []*Server

	ranges [][2]int // slot range [first, last] owned by Servers[i]
}

// StartCluster starts `masters` cluster-enabled servers of the kind the
// options select (cluster-node-timeout 5000 ms unless Args overrides it; each
// node's cluster bus is on its Port+10000), splits the 16384 slots into
// contiguous ranges among them, joins them with CLUSTER MEET and waits until
// every node reports cluster_state:ok and all nodes agree on the slot map.
// Nodes are stopped at t.Cleanup.
func StartCluster(t testing.TB, masters int, opts ...Option) *Cluster {
	t.Helper()
	if masters < 1 || masters > numSlots {
		t.Fatalf("redistest: StartCluster: %d masters", masters)
	}
	cfg := newConfig(opts)
	cfg.args = append([]string{
		"--cluster-enabled", "yes",
		"--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", "5000",
	}, cfg.args...)

	c := &Cluster{Kind: cfg.kind}
	for i := range masters {
		s := start(t, cfg)
		c.Servers = append(c.Servers, s)
		c.Addrs = append(c.Addrs, s.Addr)
		first, last := i*numSlots/masters, (i+1)*numSlots/masters-1
		c.ranges = append(c.ranges, [2]int{first, last})
		// Distinct config epochs up front, as redis-cli --cluster create
		// does, so no epoch-collision handling is needed after the join.
		s.MustCmd(t, "CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1))
		s.MustCmd(t, "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(first), strconv.Itoa(last))
	}
	for _, s := range c.Servers[1:] {
		c.Servers[0].MustCmd(t, "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(s.Port))
	}
	c.WaitReady(t)
	return c
}

// WaitReady waits until every node reports cluster_state:ok, knows all nodes
// and sees the slot map StartCluster assigned (e.g. after restarting a node).
func (c *Cluster) WaitReady(t testing.TB) {
	t.Helper()
	want := c.wantSlots()
	deadline := time.Now().Add(ClusterTimeout)
	var problem string
	for {
		problem = c.check(want)
		if problem == "" {
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	var b strings.Builder
	for _, s := range c.Servers {
		nodes, err := s.Cmd(t, "CLUSTER", "NODES")
		fmt.Fprintf(&b, "--- %s CLUSTER NODES (err %v):\n%s\n--- %s log:\n%s\n", s.Addr, err, nodes, s.Addr, s.Log())
	}
	t.Fatalf("redistest: cluster not ready within %v: %s\n%s", ClusterTimeout, problem, b.String())
}

func (c *Cluster) wantSlots() string {
	parts := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		parts[i] = fmt.Sprintf("%d-%d@%d", c.ranges[i][0], c.ranges[i][1], s.Port)
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

// check returns "" when every node is ready and agrees, else what is wrong.
func (c *Cluster) check(want string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	n := strconv.Itoa(len(c.Servers))
	for _, s := range c.Servers {
		info, err := s.Do(ctx, "CLUSTER", "INFO").ToString()
		if err != nil {
			return fmt.Sprintf("%s: CLUSTER INFO: %v", s.Addr, err)
		}
		for field, v := range map[string]string{
			"cluster_state":       "ok",
			"cluster_known_nodes": n,
			"cluster_slots_ok":    strconv.Itoa(numSlots),
		} {
			if got := infoField(info, field); got != v {
				return fmt.Sprintf("%s: %s is %q, want %q", s.Addr, field, got, v)
			}
		}
		got, err := slotMap(s.Do(ctx, "CLUSTER", "SLOTS"))
		if err != nil {
			return fmt.Sprintf("%s: CLUSTER SLOTS: %v", s.Addr, err)
		}
		if got != want {
			return fmt.Sprintf("%s sees slots %q, want %q", s.Addr, got, want)
		}
	}
	return ""
}

// slotMap renders a CLUSTER SLOTS reply as sorted "first-last@port" items.
func slotMap(r rueidis.RedisResult) (string, error) {
	entries, err := r.ToArray()
	if err != nil {
		return "", err
	}
	parts := make([]string, 0, len(entries))
	for _, e := range entries {
		f, err := e.ToArray()
		if err != nil || len(f) < 3 {
			return "", fmt.Errorf("bad entry: %v", err)
		}
		first, err1 := f[0].AsInt64()
		last, err2 := f[1].AsInt64()
		node, err3 := f[2].ToArray()
		if err1 != nil || err2 != nil || err3 != nil || len(node) < 2 {
			return "", fmt.Errorf("bad entry")
		}
		port, err := node[1].AsInt64()
		if err != nil {
			return "", err
		}
		parts = append(parts, fmt.Sprintf("%d-%d@%d", first, last, port))
	}
	slices.Sort(parts)
	return strings.Join(parts, " "), nil
}

// Client returns a new rueidis cluster client with InitAddress set to all
// nodes, closed at t.Cleanup. Each opt edits the ClientOption first.
func (c *Cluster) Client(t testing.TB, opts ...func(*rueidis.ClientOption)) rueidis.Client {
	t.Helper()
	return newClient(t, c.Addrs, opts)
}

// EachNode calls fn for every node in order, e.g. to sum DBSIZE or send
// CONFIG SET everywhere.
func (c *Cluster) EachNode(t testing.TB, fn func(*Server)) {
	t.Helper()
	for _, s := range c.Servers {
		fn(s)
	}
}

// NodeForKey returns the node that owns key's slot (as assigned by
// StartCluster), asking the server for the slot with CLUSTER KEYSLOT.
func (c *Cluster) NodeForKey(t testing.TB, key string) *Server {
	t.Helper()
	out := c.Servers[0].MustCmd(t, "CLUSTER", "KEYSLOT", key)
	slot, err := strconv.Atoi(out)
	if err != nil {
		t.Fatalf("redistest: CLUSTER KEYSLOT %q: %q", key, out)
	}
	for i, r := range c.ranges {
		if slot >= r[0] && slot <= r[1] {
			return c.Servers[i]
		}
	}
	t.Fatalf("redistest: slot %d of %q has no node", slot, key)
	return nil
}
