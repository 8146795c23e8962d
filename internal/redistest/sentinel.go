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

const (
	// SentinelTimeout bounds how long StartSentinel, WaitReady, Failover,
	// KillPrimary and Revive wait for the sentinels and the data nodes to
	// agree.
	SentinelTimeout = 20 * time.Second
	// MasterSet is the name under which the sentinels of StartSentinel
	// monitor the primary (rueidis.SentinelOption.MasterSet, the
	// master_set of a sentinel URL).
	MasterSet = "redistest"
	// SentinelDownAfter is the sentinels' down-after-milliseconds: how
	// long the primary must be unreachable before a sentinel deems it
	// down.
	SentinelDownAfter = time.Second
	// SentinelFailoverTimeout is the sentinels' failover-timeout. A
	// sentinel that voted in a failover starts none of its own for twice
	// this long, unless the failover ended (switch-master resets it).
	SentinelFailoverTimeout = 3 * time.Second
)

// sentinelDebug tunes the sentinels' timers for tests (SENTINEL DEBUG,
// Redis 7.0+): INFO every second instead of every 10 s (replicas are found
// sooner), hello messages every 200 ms instead of 2 s (sentinels find each
// other, and learn of a new primary, sooner), a 100 ms instead of 1 s
// period asking the others whether the primary is down, and short TILT
// and replica-reconfiguration spans.
var sentinelDebug = []string{
	"info-period", "1000",
	"publish-period", "200",
	"ask-period", "100",
	"tilt-period", "2000",
	"slave-reconf-timeout", "2000",
}

// Sentinel is a primary with replicas watched by three Redis Sentinels, all
// on loopback, started by StartSentinel. Its methods must be called from the
// test's goroutine.
type Sentinel struct {
	// Kind is the kind of every process (the sentinels are the same binary
	// run with --sentinel).
	Kind Kind
	// Nodes are the data nodes in start order: Nodes[0] was the first
	// primary, the others its replicas. Which one is the primary now is
	// Primary().
	Nodes []*Server
	// Sentinels are the three sentinel processes.
	Sentinels []*Server

	primary *Server
	down    []*Server // killed by KillPrimary, not yet revived
}

// FailoverTiming is how long a failover took, measured from the moment the
// harness asked for it (SENTINEL FAILOVER, CLUSTER FAILOVER) or killed the
// primary.
type FailoverTiming struct {
	// Promoted: until the new primary is reported everywhere (every
	// sentinel names it; every cluster node's slot map shows it) and
	// reports the master role itself.
	Promoted time.Duration
	// Settled: until the set was whole again (WaitReady passed): every
	// live node replicates the new primary with its link up, and every
	// sentinel knows them all and the other sentinels.
	Settled time.Duration
}

// StartSentinel starts a primary with `replicas` replicas (0 to 5) of the
// kind the options select and three sentinels monitoring it as MasterSet
// with quorum 2, SentinelDownAfter and SentinelFailoverTimeout, and timers
// shortened with SENTINEL DEBUG so that a failover takes one or two
// seconds. Args apply to the data nodes, which also get
// --repl-diskless-sync-delay 0 (a replica syncs at once). It waits until
// the sentinels agree on the primary, know every replica and each other, and
// every replica is in sync (WaitReady). All processes are stopped at
// t.Cleanup.
func StartSentinel(t testing.TB, replicas int, opts ...Option) *Sentinel {
	t.Helper()
	cfg := newConfig(opts)
	noReplicas(t, "StartSentinel", cfg)
	if replicas < 0 || replicas > 5 {
		t.Fatalf("redistest: StartSentinel: %d replicas (want 0 to 5)", replicas)
	}
	data := cfg
	data.args = append([]string{"--repl-diskless-sync-delay", "0"}, cfg.args...)

	st := &Sentinel{Kind: cfg.kind}
	st.primary = start(t, data)
	st.Nodes = append(st.Nodes, st.primary)
	for range replicas {
		rc := data
		rc.args = append(slices.Clone(data.args), "--replicaof", "127.0.0.1", strconv.Itoa(st.primary.Port))
		st.Nodes = append(st.Nodes, start(t, rc))
	}

	sc := config{kind: cfg.kind, sentinelConf: fmt.Sprintf(
		"sentinel monitor %[1]s 127.0.0.1 %[2]d 2\n"+
			"sentinel down-after-milliseconds %[1]s %[3]d\n"+
			"sentinel failover-timeout %[1]s %[4]d\n"+
			"sentinel parallel-syncs %[1]s %[5]d\n",
		MasterSet, st.primary.Port, SentinelDownAfter.Milliseconds(),
		SentinelFailoverTimeout.Milliseconds(), max(replicas, 1))}
	for range 3 {
		s := start(t, sc)
		s.MustCmd(t, append([]string{"SENTINEL", "DEBUG"}, sentinelDebug...)...)
		st.Sentinels = append(st.Sentinels, s)
	}
	st.WaitReady(t)
	return st
}

// Primary returns the data node the sentinels agreed on as primary when
// StartSentinel, WaitReady, Failover or KillPrimary last returned.
func (st *Sentinel) Primary() *Server { return st.primary }

// Replicas returns the running data nodes other than Primary(), in Nodes
// order. A node killed by KillPrimary is not among them until Revive.
func (st *Sentinel) Replicas() []*Server {
	var out []*Server
	for _, n := range st.Nodes {
		if n != st.primary && !slices.Contains(st.down, n) {
			out = append(out, n)
		}
	}
	return out
}

// Down returns the data nodes KillPrimary killed that Revive has not yet
// restarted.
func (st *Sentinel) Down() []*Server { return slices.Clone(st.down) }

// SentinelAddrs returns the sentinels' addresses ("127.0.0.1:port"), the
// InitAddress of a client that goes through Sentinel.
func (st *Sentinel) SentinelAddrs() []string { return addrsOf(st.Sentinels) }

// MasterSet returns the name the sentinels monitor the primary under
// (the package constant MasterSet).
func (st *Sentinel) MasterSet() string { return MasterSet }

// URL returns the rueidis URL of the set through its sentinels,
// "redis://S1?addr=S2&addr=S3&master_set=NAME".
func (st *Sentinel) URL() string {
	addrs := st.SentinelAddrs()
	q := ""
	for _, a := range addrs[1:] {
		q += "addr=" + a + "&"
	}
	return "redis://" + addrs[0] + "?" + q + "master_set=" + MasterSet
}

// Client returns a new rueidis client that finds the primary through the
// sentinels (InitAddress the sentinels, Sentinel.MasterSet set, and
// Sentinel.TopologyRefreshInterval 1 s so that it also follows a failover
// whose +switch-master it missed), closed at t.Cleanup. Each opt edits the
// ClientOption after those are set.
func (st *Sentinel) Client(t testing.TB, opts ...func(*rueidis.ClientOption)) rueidis.Client {
	t.Helper()
	return newClient(t, st.SentinelAddrs(), append([]func(*rueidis.ClientOption){func(o *rueidis.ClientOption) {
		o.Sentinel.MasterSet = MasterSet
		o.Sentinel.TopologyRefreshInterval = time.Second
	}}, opts...))
}

// Failover asks a sentinel for a failover (SENTINEL FAILOVER, retried while
// it answers NOGOODSLAVE or INPROG), waits until every sentinel names a new
// primary that reports the master role, then until the old primary has been
// demoted by the sentinels and is an in-sync replica of it and the set is
// whole again (WaitReady). It needs a running replica.
func (st *Sentinel) Failover(t testing.TB) FailoverTiming {
	t.Helper()
	if len(st.Replicas()) == 0 {
		t.Fatalf("redistest: Failover needs a running replica")
	}
	old := st.primary
	begin := time.Now()
	for deadline := begin.Add(SentinelTimeout); ; time.Sleep(50 * time.Millisecond) {
		_, err := st.Sentinels[0].Cmd(t, "SENTINEL", "FAILOVER", MasterSet)
		if err == nil {
			break
		}
		// NOGOODSLAVE: the sentinel has not yet seen a replica fit to
		// promote (e.g. just after a revive); INPROG: a failover runs.
		if msg := err.Error(); time.Now().After(deadline) || !strings.Contains(msg, "NOGOODSLAVE") && !strings.Contains(msg, "INPROG") {
			st.fatal(t, fmt.Sprintf("SENTINEL FAILOVER %s: %v", MasterSet, err))
		}
	}
	return st.settle(t, old, begin)
}

// KillPrimary kills the primary (SIGKILL: its data is gone), waits until
// the sentinels have promoted a replica (every sentinel names it and it
// reports the master role) and the remaining nodes replicate it
// (WaitReady). The killed node stays down, listed by Down, until Revive.
// It needs a running replica.
func (st *Sentinel) KillPrimary(t testing.TB) FailoverTiming {
	t.Helper()
	if len(st.Replicas()) == 0 {
		t.Fatalf("redistest: KillPrimary needs a running replica")
	}
	old := st.primary
	old.Stop()
	begin := time.Now()
	st.down = append(st.down, old)
	return st.settle(t, old, begin)
}

// settle waits for a new primary in place of old, then for WaitReady.
func (st *Sentinel) settle(t testing.TB, old *Server, begin time.Time) FailoverTiming {
	t.Helper()
	var problem string
	for deadline := begin.Add(SentinelTimeout); ; time.Sleep(20 * time.Millisecond) {
		var p *Server
		if p, problem = st.reported(); p != nil && p != old {
			st.primary = p
			break
		}
		if problem == "" {
			problem = "the sentinels still name the old primary " + old.Addr
		}
		if time.Now().After(deadline) {
			st.fatal(t, fmt.Sprintf("no new primary within %v: %s", SentinelTimeout, problem))
		}
	}
	ft := FailoverTiming{Promoted: time.Since(begin)}
	st.WaitReady(t)
	ft.Settled = time.Since(begin)
	return ft
}

// Revive restarts every node KillPrimary killed, as a replica of the
// current primary (with --replicaof: a killed node has lost its data, and
// sentinels would take seconds to reconfigure a node that came back as a
// primary), and waits until the set is whole (WaitReady). It returns how
// long that took.
func (st *Sentinel) Revive(t testing.TB) time.Duration {
	t.Helper()
	begin := time.Now()
	for _, n := range st.down {
		n.replicateOnRestart(st.primary)
		n.Restart(t)
	}
	st.down = nil
	st.WaitReady(t)
	return time.Since(begin)
}

// WaitReady waits until every sentinel names the same running data node as
// primary and reports no failover in progress, knows the two other
// sentinels and every running replica as a healthy replica of that
// primary; the primary reports the master role and every running replica
// its link to the primary up. It sets Primary to that node.
func (st *Sentinel) WaitReady(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(SentinelTimeout)
	for {
		p, problem := st.reported()
		if p != nil {
			st.primary = p
			if problem = st.check(); problem == "" {
				return
			}
		}
		if time.Now().After(deadline) {
			st.fatal(t, fmt.Sprintf("not ready within %v: %s", SentinelTimeout, problem))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// reported returns the running data node every sentinel names as primary
// and that reports the master role itself, or what is wrong.
func (st *Sentinel) reported() (*Server, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var port string
	for _, s := range st.Sentinels {
		addr, err := s.Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", MasterSet).AsStrSlice()
		if err != nil || len(addr) != 2 {
			return nil, fmt.Sprintf("sentinel %s: GET-MASTER-ADDR-BY-NAME: %v %v", s.Addr, addr, err)
		}
		if port != "" && addr[1] != port {
			return nil, fmt.Sprintf("the sentinels disagree: port %s and %s", port, addr[1])
		}
		port = addr[1]
	}
	p := st.node(port)
	if p == nil {
		return nil, fmt.Sprintf("the sentinels name %s, no running data node", port)
	}
	role, err := p.Do(ctx, "ROLE").ToArray()
	if err != nil || len(role) == 0 {
		return nil, fmt.Sprintf("%s: ROLE: %v", p.Addr, err)
	}
	if r, _ := role[0].ToString(); r != "master" {
		return nil, fmt.Sprintf("%s is named primary but its role is %s", p.Addr, r)
	}
	return p, ""
}

// node returns the running data node on port, or nil.
func (st *Sentinel) node(port string) *Server {
	for _, n := range st.Nodes {
		if strconv.Itoa(n.Port) == port && !slices.Contains(st.down, n) {
			return n
		}
	}
	return nil
}

// check returns "" when the set around st.primary is whole, else what is
// wrong.
func (st *Sentinel) check() string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	primaryPort := strconv.Itoa(st.primary.Port)
	replicas := st.Replicas()
	for _, r := range replicas {
		if problem := replicaProblem(ctx, r, st.primary); problem != "" {
			return problem
		}
	}
	for _, s := range st.Sentinels {
		m, err := s.Do(ctx, "SENTINEL", "MASTER", MasterSet).AsStrMap()
		if err != nil {
			return fmt.Sprintf("sentinel %s: SENTINEL MASTER: %v", s.Addr, err)
		}
		if m["port"] != primaryPort || m["flags"] != "master" || m["num-other-sentinels"] != "2" {
			return fmt.Sprintf("sentinel %s: master port %s, flags %s, num-other-sentinels %s; want port %s, flags master, 2 others",
				s.Addr, m["port"], m["flags"], m["num-other-sentinels"], primaryPort)
		}
		known, err := s.Do(ctx, "SENTINEL", "REPLICAS", MasterSet).ToArray()
		if err != nil {
			return fmt.Sprintf("sentinel %s: SENTINEL REPLICAS: %v", s.Addr, err)
		}
		healthy := map[string]bool{}
		for _, k := range known {
			e, err := k.AsStrMap()
			if err != nil {
				return fmt.Sprintf("sentinel %s: SENTINEL REPLICAS: %v", s.Addr, err)
			}
			healthy[e["port"]] = e["flags"] == "slave" && e["master-link-status"] == "ok" && e["master-port"] == primaryPort
		}
		for _, r := range replicas {
			if !healthy[strconv.Itoa(r.Port)] {
				return fmt.Sprintf("sentinel %s does not (yet) know %s as a healthy replica of %s", s.Addr, r.Addr, st.primary.Addr)
			}
		}
	}
	return ""
}

// fatal fails t with what is wrong and every process's view and log.
func (st *Sentinel) fatal(t testing.TB, problem string) {
	t.Helper()
	var b strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, s := range st.Sentinels {
		m, err := s.Do(ctx, "SENTINEL", "MASTER", MasterSet).AsStrMap()
		fmt.Fprintf(&b, "--- sentinel %s: master %v (err %v)\n", s.Addr, m, err)
		reps, _ := s.Do(ctx, "SENTINEL", "REPLICAS", MasterSet).ToArray()
		for _, r := range reps {
			e, _ := r.AsStrMap()
			fmt.Fprintf(&b, "    replica %s flags %s link %s master-port %s\n", e["name"], e["flags"], e["master-link-status"], e["master-port"])
		}
		fmt.Fprintf(&b, "--- sentinel %s log:\n%s", s.Addr, s.Log())
	}
	for _, n := range st.Nodes {
		if n.PID() == 0 {
			fmt.Fprintf(&b, "--- %s: down\n", n.Addr)
			continue
		}
		info, err := n.Do(ctx, "INFO", "replication").ToString()
		fmt.Fprintf(&b, "--- %s INFO replication (err %v):\n%s--- %s log:\n%s", n.Addr, err, info, n.Addr, n.Log())
	}
	t.Fatalf("redistest: sentinel set: %s\n%s", problem, b.String())
}
