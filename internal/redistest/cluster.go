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

// Cluster is a Redis (or Valkey) Cluster on loopback: masters, each with
// the replicas WithReplicas asked for (none by default). Its methods must be
// called from the test's goroutine; Failover, KillMaster and Revive update
// its fields.
type Cluster struct {
	// Kind is the kind of every node.
	Kind Kind
	// Addrs are the masters' addresses, in the order of Servers.
	Addrs []string
	// Servers are the masters; Servers[i] owns the i-th contiguous slot
	// range, less the slots migrated away from it and plus those migrated
	// to it (MigrateSlot; Owner tells). After Failover(t, i) or
	// KillMaster(t, i), Servers[i] is the promoted replica.
	Servers []*Server
	// Replicas[i] are the running replicas of Servers[i] (empty without
	// WithReplicas). After Failover(t, i) the demoted master is among
	// them; a node KillMaster killed rejoins them at Revive.
	Replicas [][]*Server

	slotOwner []int // slotOwner[slot] is the index in Servers of the slot's master
	total     int   // nodes ever started, as cluster_known_nodes counts them
	down      []downNode
	mig       *Migration // the migration StartMigration began, until Finish
}

// downNode is a master KillMaster killed, and the slot range it served.
type downNode struct {
	shard int
	s     *Server
}

// StartCluster starts `masters` cluster-enabled servers of the kind the
// options select (each node's cluster bus is on its Port+10000), splits the
// 16384 slots into contiguous ranges among them, and, with WithReplicas(n),
// n more nodes per master that replicate it (CLUSTER REPLICATE). It joins
// them all with CLUSTER MEET and waits until every node reports
// cluster_state:ok, all nodes agree on the slot map (masters and replicas)
// and every replica's link to its master is up (WaitReady). Nodes are
// stopped at t.Cleanup.
//
// The cluster-node-timeout is 5000 ms without replicas and 2000 ms with them
// (so that KillMaster's failover takes about three seconds); replica
// clusters also get --repl-diskless-sync-delay 0 (a replica syncs at once),
// --repl-ping-replica-period 1 (CLUSTER SLOTS lists a replica only once its
// replication offset is above zero, which on an idle master takes a ping:
// 10 s by default) and --cluster-allow-replica-migration no (replicas stay
// with the master they were given). Args come after these and override
// them.
func StartCluster(t testing.TB, masters int, opts ...Option) *Cluster {
	t.Helper()
	if masters < 1 || masters > numSlots {
		t.Fatalf("redistest: StartCluster: %d masters", masters)
	}
	cfg := newConfig(opts)
	if cfg.replicas < 0 || cfg.replicas > 5 {
		t.Fatalf("redistest: StartCluster: WithReplicas(%d) (want 0 to 5)", cfg.replicas)
	}
	nodeTimeout, replication := "5000", []string(nil)
	if cfg.replicas > 0 {
		nodeTimeout, replication = "2000", []string{
			"--repl-diskless-sync-delay", "0",
			"--repl-ping-replica-period", "1",
			"--cluster-allow-replica-migration", "no",
		}
	}
	own := append([]string{
		"--cluster-enabled", "yes",
		"--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", nodeTimeout,
	}, replication...)
	cfg.args = append(own, cfg.args...)

	c := &Cluster{Kind: cfg.kind, Replicas: make([][]*Server, masters), slotOwner: make([]int, numSlots)}
	for i := range masters {
		s := start(t, cfg)
		c.Servers = append(c.Servers, s)
		c.Addrs = append(c.Addrs, s.Addr)
		first, last := i*numSlots/masters, (i+1)*numSlots/masters-1
		for slot := first; slot <= last; slot++ {
			c.slotOwner[slot] = i
		}
		// Distinct config epochs up front, as redis-cli --cluster create
		// does, so no epoch-collision handling is needed after the join.
		s.MustCmd(t, "CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1))
		s.MustCmd(t, "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(first), strconv.Itoa(last))
	}
	for i := range masters {
		for range cfg.replicas {
			c.Replicas[i] = append(c.Replicas[i], start(t, cfg))
		}
	}
	c.total = masters * (1 + cfg.replicas)
	for _, s := range c.Nodes()[1:] {
		c.Servers[0].MustCmd(t, "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(s.Port))
	}
	for i, reps := range c.Replicas {
		id := c.Servers[i].MustCmd(t, "CLUSTER", "MYID")
		for _, r := range reps {
			// The replica must have heard of its master through gossip
			// first: until then CLUSTER REPLICATE answers "Unknown node".
			var err error
			for deadline := time.Now().Add(ClusterTimeout); ; time.Sleep(20 * time.Millisecond) {
				if _, err = r.Cmd(t, "CLUSTER", "REPLICATE", id); err == nil || time.Now().After(deadline) {
					break
				}
			}
			if err != nil {
				t.Fatalf("redistest: %s CLUSTER REPLICATE %s (%s): %v", r.Addr, id, c.Servers[i].Addr, err)
			}
		}
	}
	c.WaitReady(t)
	return c
}

// Nodes returns every running node: the masters in Servers order, then the
// replicas of Servers[0], Servers[1], ...
func (c *Cluster) Nodes() []*Server {
	var out []*Server
	for _, s := range c.Servers {
		if !c.isDown(s) {
			out = append(out, s)
		}
	}
	for _, reps := range c.Replicas {
		out = append(out, reps...)
	}
	return out
}

// Down returns the nodes KillMaster killed that Revive has not yet
// restarted.
func (c *Cluster) Down() []*Server {
	out := make([]*Server, len(c.down))
	for i, d := range c.down {
		out[i] = d.s
	}
	return out
}

// isDown tells whether s is a master KillMaster killed that Revive has not
// yet restarted.
func (c *Cluster) isDown(s *Server) bool {
	return slices.ContainsFunc(c.down, func(d downNode) bool { return d.s == s })
}

// WaitReady waits until every running node reports cluster_state:ok, knows
// all nodes (killed ones included) and sees the slot map the Cluster
// describes (Servers[i] owning the slots Owner gives it, with Replicas[i]),
// and every replica reports its link to its master up: after StartCluster,
// a restart, a Failover, a Revive or a Finish.
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
	c.fatal(t, fmt.Sprintf("cluster not ready within %v: %s", ClusterTimeout, problem))
}

// fatal fails t with problem and every node's view and log.
func (c *Cluster) fatal(t testing.TB, problem string) {
	t.Helper()
	var b strings.Builder
	for _, s := range append(c.Nodes(), c.Down()...) {
		if s.PID() == 0 {
			fmt.Fprintf(&b, "--- %s: down\n", s.Addr)
			continue
		}
		nodes, err := s.Cmd(t, "CLUSTER", "NODES")
		fmt.Fprintf(&b, "--- %s CLUSTER NODES (err %v):\n%s\n--- %s log:\n%s\n", s.Addr, err, nodes, s.Addr, s.Log())
	}
	t.Fatalf("redistest: %s\n%s", problem, b.String())
}

func (c *Cluster) wantSlots() string {
	var parts []string
	for _, r := range c.runs() {
		i := r.shard
		part := fmt.Sprintf("%d-%d@%d", r.first, r.last, c.Servers[i].Port)
		if len(c.Replicas[i]) > 0 {
			ports := make([]string, len(c.Replicas[i]))
			for j, r := range c.Replicas[i] {
				ports[j] = strconv.Itoa(r.Port)
			}
			slices.Sort(ports)
			part += "+" + strings.Join(ports, ",")
		}
		parts = append(parts, part)
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

// run is a contiguous range of slots [first, last] of one master, as
// CLUSTER SLOTS lists them.
type run struct{ first, last, shard int }

// runs returns the slot map as contiguous runs, in slot order.
func (c *Cluster) runs() []run {
	var out []run
	for slot, i := range c.slotOwner {
		if n := len(out); n > 0 && out[n-1].shard == i && out[n-1].last == slot-1 {
			out[n-1].last = slot
			continue
		}
		out = append(out, run{first: slot, last: slot, shard: i})
	}
	return out
}

// check returns "" when every node is ready and agrees, else what is wrong.
func (c *Cluster) check(want string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	n := strconv.Itoa(c.total)
	for _, s := range c.Nodes() {
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
	for i, reps := range c.Replicas {
		for _, r := range reps {
			if problem := replicaProblem(ctx, r, c.Servers[i]); problem != "" {
				return problem
			}
		}
	}
	return ""
}

// Failover makes the first replica of Servers[i] take over with CLUSTER
// FAILOVER (a manual failover: the master stops writes until the replica
// has caught up, so nothing acknowledged is lost), waits until every
// node's slot map shows the replica owning range i and it reports the
// master role, then until the demoted master replicates it and the
// cluster agrees (WaitReady). Servers[i] is then the promoted node and
// the old master is in Replicas[i].
func (c *Cluster) Failover(t testing.TB, i int) FailoverTiming {
	t.Helper()
	c.shard(t, "Failover", i)
	c.migrationBlocks(t, "Failover", i)
	old, r := c.Servers[i], c.Replicas[i][0]
	begin := time.Now()
	r.MustCmd(t, "CLUSTER", "FAILOVER")
	c.waitOwner(t, i, begin, func(s *Server) bool { return s == r })
	ft := FailoverTiming{Promoted: time.Since(begin)}
	c.Servers[i], c.Addrs[i] = r, r.Addr
	c.Replicas[i] = append(slices.Delete(slices.Clone(c.Replicas[i]), 0, 1), old)
	c.WaitReady(t)
	ft.Settled = time.Since(begin)
	return ft
}

// KillMaster kills Servers[i] (SIGKILL: its data is gone) and waits until
// the cluster has failed it over: every running node's slot map shows one of
// its replicas owning range i and that replica reports the master role;
// then until the cluster agrees (WaitReady). Servers[i] is then the promoted
// replica; the killed node stays down, listed by Down, until Revive.
func (c *Cluster) KillMaster(t testing.TB, i int) FailoverTiming {
	t.Helper()
	c.shard(t, "KillMaster", i)
	c.migrationBlocks(t, "KillMaster", i)
	old := c.Servers[i]
	old.Stop()
	begin := time.Now()
	c.down = append(c.down, downNode{shard: i, s: old})
	p := c.waitOwner(t, i, begin, func(s *Server) bool { return slices.Contains(c.Replicas[i], s) })
	ft := FailoverTiming{Promoted: time.Since(begin)}
	c.Servers[i], c.Addrs[i] = p, p.Addr
	c.Replicas[i] = slices.DeleteFunc(slices.Clone(c.Replicas[i]), func(s *Server) bool { return s == p })
	c.WaitReady(t)
	ft.Settled = time.Since(begin)
	return ft
}

// Revive restarts every node KillMaster killed (with its nodes.conf, without
// its data): each learns that its slots moved and rejoins as a replica of
// the master that took them over. It waits until the cluster agrees
// (WaitReady) and returns how long that took.
func (c *Cluster) Revive(t testing.TB) time.Duration {
	t.Helper()
	begin := time.Now()
	for _, d := range c.down {
		d.s.Restart(t)
		c.Replicas[d.shard] = append(c.Replicas[d.shard], d.s)
	}
	c.down = nil
	c.WaitReady(t)
	return time.Since(begin)
}

// shard fails t unless i names a master with a running replica.
func (c *Cluster) shard(t testing.TB, fn string, i int) {
	t.Helper()
	if i < 0 || i >= len(c.Servers) {
		t.Fatalf("redistest: %s(%d): the cluster has %d masters", fn, i, len(c.Servers))
	}
	if len(c.Replicas[i]) == 0 {
		t.Fatalf("redistest: %s(%d): master %s has no running replica (StartCluster with WithReplicas)", fn, i, c.Servers[i].Addr)
	}
}

// waitOwner waits until every running node's slot map names the same node
// as owner of the first slot range of master i, one that ok accepts and
// that reports the master role, and returns it.
func (c *Cluster) waitOwner(t testing.TB, i int, begin time.Time, ok func(*Server) bool) *Server {
	t.Helper()
	prefix := ""
	for _, r := range c.runs() {
		if r.shard == i {
			prefix = fmt.Sprintf("%d-%d@", r.first, r.last)
			break
		}
	}
	if prefix == "" {
		t.Fatalf("redistest: master %d (%s) owns no slot", i, c.Servers[i].Addr)
	}
	var problem string
	for deadline := begin.Add(ClusterTimeout); ; time.Sleep(20 * time.Millisecond) {
		var owner *Server
		if owner, problem = c.owner(prefix, ok); owner != nil {
			return owner
		}
		if time.Now().After(deadline) {
			c.fatal(t, fmt.Sprintf("range %d (%s) not taken over within %v: %s", i, strings.TrimSuffix(prefix, "@"), ClusterTimeout, problem))
		}
	}
}

func (c *Cluster) owner(prefix string, ok func(*Server) bool) (*Server, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	port := ""
	for _, s := range c.Nodes() {
		m, err := slotMap(s.Do(ctx, "CLUSTER", "SLOTS"))
		if err != nil {
			return nil, fmt.Sprintf("%s: CLUSTER SLOTS: %v", s.Addr, err)
		}
		p := ""
		for _, e := range strings.Fields(m) {
			if rest, found := strings.CutPrefix(e, prefix); found {
				p, _, _ = strings.Cut(rest, "+")
			}
		}
		if p == "" || port != "" && p != port {
			return nil, fmt.Sprintf("%s sees slots %q", s.Addr, m)
		}
		port = p
	}
	var owner *Server
	for _, s := range c.Nodes() {
		if strconv.Itoa(s.Port) == port {
			owner = s
		}
	}
	if owner == nil || !ok(owner) {
		return nil, fmt.Sprintf("the slot maps name port %s", port)
	}
	role, err := owner.Do(ctx, "ROLE").ToArray()
	if err != nil || len(role) == 0 {
		return nil, fmt.Sprintf("%s: ROLE: %v", owner.Addr, err)
	}
	if r, _ := role[0].ToString(); r != "master" {
		return nil, fmt.Sprintf("%s owns the range but its role is %s", owner.Addr, r)
	}
	return owner, ""
}

// slotMap renders a CLUSTER SLOTS reply as sorted "first-last@port" items,
// with "+port,port" (sorted) appended for the replicas it lists.
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
		if err1 != nil || err2 != nil {
			return "", fmt.Errorf("bad entry")
		}
		ports := make([]string, 0, len(f)-2)
		for _, n := range f[2:] {
			node, err := n.ToArray()
			if err != nil || len(node) < 2 {
				return "", fmt.Errorf("bad entry")
			}
			port, err := node[1].AsInt64()
			if err != nil {
				return "", err
			}
			ports = append(ports, strconv.FormatInt(port, 10))
		}
		part := fmt.Sprintf("%d-%d@%s", first, last, ports[0])
		if len(ports) > 1 {
			slices.Sort(ports[1:])
			part += "+" + strings.Join(ports[1:], ",")
		}
		parts = append(parts, part)
	}
	slices.Sort(parts)
	return strings.Join(parts, " "), nil
}

// Client returns a new rueidis cluster client with InitAddress set to all
// running nodes (Nodes), closed at t.Cleanup. Each opt edits the
// ClientOption first.
func (c *Cluster) Client(t testing.TB, opts ...func(*rueidis.ClientOption)) rueidis.Client {
	t.Helper()
	return newClient(t, addrsOf(c.Nodes()), opts)
}

// EachNode calls fn for every master (Servers) in order, e.g. to sum DBSIZE
// (each key counted once) or send CONFIG SET to every master. Range over
// Nodes to reach the replicas too.
func (c *Cluster) EachNode(t testing.TB, fn func(*Server)) {
	t.Helper()
	for _, s := range c.Servers {
		fn(s)
	}
}

// NodeForKey returns the master that owns key's slot (Owner), asking the
// server for the slot with CLUSTER KEYSLOT. During a migration of that
// slot it is the source, which may no longer hold the key.
func (c *Cluster) NodeForKey(t testing.TB, key string) *Server {
	t.Helper()
	out := c.Servers[0].MustCmd(t, "CLUSTER", "KEYSLOT", key)
	slot, err := strconv.Atoi(out)
	if err != nil {
		t.Fatalf("redistest: CLUSTER KEYSLOT %q: %q", key, out)
	}
	return c.Servers[c.slotOwner[slot]]
}
