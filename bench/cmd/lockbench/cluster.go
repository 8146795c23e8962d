package main

// Section 12's topologies: the standalone server the program started, and
// a Redis Cluster of three masters it starts beside it (no replicas), with
// what is read from every node before and after a measured window.
//
// internal/redistest's StartCluster needs a testing.TB; what it does for
// masters without replicas is repeated here: distinct config epochs,
// CLUSTER ADDSLOTSRANGE of contiguous ranges, CLUSTER MEET, then wait
// until every node reports cluster_state:ok, knows every node and shows
// the same slot map.

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

const numSlots = 16384

// clusterReadyTimeout bounds the wait for the nodes to agree.
const clusterReadyTimeout = 20 * time.Second

// topology is the standalone server, or a cluster's masters.
type topology struct {
	name  string    // "standalone" or "cluster"
	nodes []*server // the server, or the masters in slot order
	// first[i] is the first slot of nodes[i]; a cluster master owns
	// first[i] … first[i+1]-1 (the last one up to 16383).
	first []int
}

func (t *topology) cluster() bool { return len(t.first) > 0 }

func (t *topology) addrs() []string {
	out := make([]string, len(t.nodes))
	for i, s := range t.nodes {
		out[i] = s.addr
	}
	return out
}

// owner is the index in nodes of the master that owns slot.
func (t *topology) owner(slot int) int {
	for i := len(t.first) - 1; i >= 0; i-- {
		if slot >= t.first[i] {
			return i
		}
	}
	return 0
}

// newClient is a rueidis client with the library's defaults on the
// topology: with every master in InitAddress, rueidis makes a cluster
// client (it asks CLUSTER SLOTS and routes each command by its key's slot).
func (t *topology) newClient() (rueidis.Client, error) {
	return rueidis.NewClient(rueidis.ClientOption{InitAddress: t.addrs()})
}

// startCluster starts masters cluster-enabled servers from bin, splits the
// slots into contiguous ranges, joins them and waits until they agree.
// Each server is handed to track as soon as it runs, so a fatal error or a
// signal stops it.
func startCluster(bin string, masters int, track func(*server)) (*topology, error) {
	t := &topology{name: "cluster"}
	for i := range masters {
		s, err := startServerArgs(bin, true)
		if err != nil {
			return nil, err
		}
		track(s)
		t.nodes = append(t.nodes, s)
		first, last := i*numSlots/masters, (i+1)*numSlots/masters-1
		t.first = append(t.first, first)
		// Distinct config epochs up front, as redis-cli --cluster create
		// does, so that no epoch collision has to be resolved after MEET.
		if _, err := s.do("CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1)); err != nil {
			return nil, fmt.Errorf("%s: CLUSTER SET-CONFIG-EPOCH: %w", s.addr, err)
		}
		if _, err := s.do("CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(first), strconv.Itoa(last)); err != nil {
			return nil, fmt.Errorf("%s: CLUSTER ADDSLOTSRANGE: %w", s.addr, err)
		}
	}
	for _, s := range t.nodes[1:] {
		if _, err := t.nodes[0].do("CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(s.port)); err != nil {
			return nil, fmt.Errorf("%s: CLUSTER MEET %s: %w", t.nodes[0].addr, s.addr, err)
		}
	}
	want := t.wantSlots()
	deadline := time.Now().Add(clusterReadyTimeout)
	for {
		problem := t.check(want)
		if problem == "" {
			return t, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("cluster not ready within %v: %s", clusterReadyTimeout, problem)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// wantSlots is the slot map as slotMap renders it.
func (t *topology) wantSlots() string {
	parts := make([]string, len(t.nodes))
	for i, s := range t.nodes {
		last := numSlots - 1
		if i+1 < len(t.first) {
			last = t.first[i+1] - 1
		}
		parts[i] = fmt.Sprintf("%d-%d@%d", t.first[i], last, s.port)
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

// check returns "" when every node reports the cluster ok, knows every
// node and sees the slot map want; else what is wrong.
func (t *topology) check(want string) string {
	n := strconv.Itoa(len(t.nodes))
	for _, s := range t.nodes {
		info, err := s.clusterInfo()
		if err != nil {
			return fmt.Sprintf("%s: CLUSTER INFO: %v", s.addr, err)
		}
		for field, v := range map[string]string{
			"cluster_state":       "ok",
			"cluster_known_nodes": n,
			"cluster_slots_ok":    strconv.Itoa(numSlots),
		} {
			if got := infoField(info, field); got != v {
				return fmt.Sprintf("%s: %s is %q, want %q", s.addr, field, got, v)
			}
		}
		got, err := slotMap(s)
		if err != nil {
			return fmt.Sprintf("%s: CLUSTER SLOTS: %v", s.addr, err)
		}
		if got != want {
			return fmt.Sprintf("%s sees slots %q, want %q", s.addr, got, want)
		}
	}
	return ""
}

// clusterInfo is s's CLUSTER INFO. Over RESP3 it is a verbatim string,
// which rueidis hands over with its "txt:" format prefix, in front of the
// first field.
func (s *server) clusterInfo() (string, error) {
	v, err := s.do("CLUSTER", "INFO")
	return strings.TrimPrefix(v, "txt:"), err
}

// slotMap renders s's CLUSTER SLOTS as sorted "first-last@port" items.
func slotMap(s *server) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	entries, err := s.admin.Do(ctx, s.admin.B().ClusterSlots().Build()).ToArray()
	if err != nil {
		return "", err
	}
	var parts []string
	for _, e := range entries {
		f, err := e.ToArray()
		if err != nil || len(f) < 3 {
			return "", fmt.Errorf("bad entry")
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

// keyOwners asks the cluster for the slot of every key (CLUSTER KEYSLOT,
// pipelined on the first node's admin connection, outside any measured
// window) and returns the index of each key's master.
func (t *topology) keyOwners(keys []string) ([]int, error) {
	out := make([]int, len(keys))
	if !t.cluster() {
		return out, nil
	}
	admin := t.nodes[0].admin
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const batch = 1000
	for i := 0; i < len(keys); i += batch {
		cmds := make(rueidis.Commands, 0, batch)
		for _, k := range keys[i:min(len(keys), i+batch)] {
			cmds = append(cmds, admin.B().ClusterKeyslot().Key(k).Build())
		}
		for j, r := range admin.DoMulti(ctx, cmds...) {
			slot, err := r.AsInt64()
			if err != nil {
				return nil, fmt.Errorf("CLUSTER KEYSLOT %q: %w", keys[i+j], err)
			}
			out[i+j] = t.owner(int(slot))
		}
	}
	return out, nil
}

// nodeStats is what one node reports at one instant.
type nodeStats struct {
	calls  map[string]int64 // INFO commandstats: calls per command
	errors map[string]int64 // INFO errorstats: error replies per prefix (MOVED, ASK, NOSCRIPT …)
	cpu    float64          // INFO cpu: used_cpu_user + used_cpu_sys, seconds
	// bus: CLUSTER INFO's cluster_stats_messages_* counters, by the
	// field's name without that prefix (cluster only).
	bus map[string]int64
}

// topoStats is every node's nodeStats at one instant, with the bytes that
// crossed the cluster bus so far and this process' CPU.
type topoStats struct {
	nodes    []nodeStats
	busBytes int64 // -1 when unknown (no ss, or standalone)
	self     time.Duration
}

// snapshot reads every node: INFO commandstats errorstats cpu, and for a
// cluster CLUSTER INFO and the bus sockets' byte counts.
func (t *topology) snapshot() (topoStats, error) {
	out := topoStats{busBytes: -1}
	for _, s := range t.nodes {
		info, err := s.do("INFO", "commandstats", "errorstats", "cpu")
		if err != nil {
			return out, fmt.Errorf("%s: INFO: %w", s.addr, err)
		}
		ns := nodeStats{calls: map[string]int64{}, errors: map[string]int64{}}
		for line := range strings.Lines(info) {
			line = strings.TrimSpace(line)
			if rest, ok := strings.CutPrefix(line, "cmdstat_"); ok {
				name, fields, _ := strings.Cut(rest, ":")
				ns.calls[name] = infoSubfield(fields, "calls")
			} else if rest, ok := strings.CutPrefix(line, "errorstat_"); ok {
				name, fields, _ := strings.Cut(rest, ":")
				ns.errors[name] = infoSubfield(fields, "count")
			}
		}
		ns.cpu = usedCPU(info)
		if t.cluster() {
			ci, err := s.clusterInfo()
			if err != nil {
				return out, fmt.Errorf("%s: CLUSTER INFO: %w", s.addr, err)
			}
			ns.bus = map[string]int64{}
			for line := range strings.Lines(ci) {
				if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cluster_stats_messages_"); ok {
					name, v, _ := strings.Cut(rest, ":")
					n, _ := strconv.ParseInt(v, 10, 64)
					ns.bus[name] = n
				}
			}
		}
		out.nodes = append(out.nodes, ns)
	}
	if t.cluster() {
		out.busBytes = t.busBytes()
	}
	_, out.self = cpuNow(nil)
	return out, nil
}

// infoSubfield reads name=<int> from a comma-separated INFO value.
func infoSubfield(fields, name string) int64 {
	for f := range strings.SplitSeq(fields, ",") {
		if v, ok := strings.CutPrefix(f, name+"="); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// busBytes is the bytes carried so far by the cluster bus connections
// that are open now, both directions: the kernel's bytes_sent +
// bytes_received (ss -ti) of every established socket whose local port is
// a node's bus port, i.e. the accepting end of each node-to-node link, so
// that each link is counted once. -1 when ss fails.
func (t *topology) busBytes() int64 {
	args := []string{"-tinH", "state", "established", "("}
	for i, s := range t.nodes {
		if i > 0 {
			args = append(args, "or")
		}
		args = append(args, "sport", "=", ":"+strconv.Itoa(s.port+10000))
	}
	args = append(args, ")")
	out, err := exec.Command("ss", args...).Output()
	if err != nil {
		return -1
	}
	var n int64
	found := false
	for f := range strings.FieldsSeq(string(out)) {
		for _, p := range []string{"bytes_sent:", "bytes_received:"} {
			if v, ok := strings.CutPrefix(f, p); ok {
				x, err := strconv.ParseInt(v, 10, 64)
				if err == nil {
					n += x
					found = true
				}
			}
		}
	}
	if !found {
		return -1
	}
	return n
}

// statsDelta is what happened between two snapshots of one topology.
type statsDelta struct {
	calls    []map[string]int64 // per node
	errors   []map[string]int64 // per node
	cpu      []float64          // per node, seconds
	bus      []map[string]int64 // per node (cluster)
	busBytes int64              // -1 unknown
	self     time.Duration
}

// adminNames are the commands this program sends to read the nodes; they
// are left out of every count.
var adminNames = map[string]bool{"info": true, "cluster|info": true, "cluster|keyslot": true, "dbsize": true, "flushall": true, "config|resetstat": true}

func diffStats(a, b topoStats) statsDelta {
	d := statsDelta{busBytes: -1, self: b.self - a.self}
	for i := range b.nodes {
		calls := map[string]int64{}
		for k, v := range b.nodes[i].calls {
			if adminNames[k] {
				continue
			}
			if x := v - a.nodes[i].calls[k]; x != 0 {
				calls[k] = x
			}
		}
		errs := map[string]int64{}
		for k, v := range b.nodes[i].errors {
			if x := v - a.nodes[i].errors[k]; x != 0 {
				errs[k] = x
			}
		}
		bus := map[string]int64{}
		for k, v := range b.nodes[i].bus {
			if x := v - a.nodes[i].bus[k]; x != 0 {
				bus[k] = x
			}
		}
		d.calls = append(d.calls, calls)
		d.errors = append(d.errors, errs)
		d.cpu = append(d.cpu, b.nodes[i].cpu-a.nodes[i].cpu)
		d.bus = append(d.bus, bus)
	}
	if a.busBytes >= 0 && b.busBytes >= 0 {
		d.busBytes = b.busBytes - a.busBytes
	}
	return d
}

// totalCalls is the sum of calls over every node and command.
func (d statsDelta) totalCalls() int64 {
	var n int64
	for _, m := range d.calls {
		for _, v := range m {
			n += v
		}
	}
	return n
}

// nodeCalls is node i's calls, every command.
func (d statsDelta) nodeCalls(i int) int64 {
	var n int64
	for _, v := range d.calls[i] {
		n += v
	}
	return n
}

// redirects is the MOVED and ASK error replies over every node.
func (d statsDelta) redirects() (moved, ask int64) {
	for _, m := range d.errors {
		moved += m["MOVED"]
		ask += m["ASK"]
	}
	return moved, ask
}

// busSum is a CLUSTER INFO counter summed over the nodes.
func (d statsDelta) busSum(name string) int64 {
	var n int64
	for _, m := range d.bus {
		n += m[name]
	}
	return n
}
