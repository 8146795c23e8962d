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

// TestSentinel starts a primary with two replicas and three sentinels,
// fails over, kills the primary and revives it, checking after each step
// that the harness's view matches the servers' and that a client through
// Sentinel follows. It logs the timings.
func TestSentinel(t *testing.T) {
	t.Parallel()
	begin := time.Now()
	st := StartSentinel(t, 2)
	t.Logf("StartSentinel(2): %v", time.Since(begin))
	if st.Primary() != st.Nodes[0] || !slices.Equal(st.Replicas(), st.Nodes[1:]) || len(st.Down()) != 0 {
		t.Fatalf("after start: primary %s, replicas %v, down %v", st.Primary().Addr, addrsOf(st.Replicas()), addrsOf(st.Down()))
	}
	if got := st.SentinelAddrs(); len(got) != 3 || got[0] != st.Sentinels[0].Addr {
		t.Fatalf("SentinelAddrs = %v", got)
	}
	if st.MasterSet() != MasterSet {
		t.Fatalf("MasterSet() = %q", st.MasterSet())
	}
	for _, s := range st.Sentinels {
		if got := infoField(s.MustCmd(t, "INFO", "server"), "redis_mode"); got != "sentinel" {
			t.Errorf("%s: redis_mode %q, want sentinel", s.Addr, got)
		}
	}
	checkRoles(t, st)

	ctx := ctxT(t)
	c := st.Client(t)
	if c.Mode() != rueidis.ClientModeSentinel {
		t.Fatalf("Client mode %v", c.Mode())
	}
	// The sentinel URL form names the same set.
	opt, err := rueidis.ParseURL(st.URL())
	if err != nil || opt.Sentinel.MasterSet != MasterSet || !slices.Equal(opt.InitAddress, st.SentinelAddrs()) {
		t.Fatalf("URL %q parses to %v %q (err %v)", st.URL(), opt.InitAddress, opt.Sentinel.MasterSet, err)
	}
	set := func(k string) {
		t.Helper()
		waitFor(t, func(ctx context.Context) error { return c.Do(ctx, c.B().Set().Key(k).Value("v").Build()).Error() })
	}
	set("before")
	// Every replica has it once WAIT says so.
	if n, err := c.Do(ctx, c.B().Wait().Numreplicas(2).Timeout(5000).Build()).AsInt64(); err != nil || n != 2 {
		t.Fatalf("WAIT 2: %d %v", n, err)
	}
	for _, r := range st.Replicas() {
		if got := r.MustCmd(t, "GET", "before"); got != "v" {
			t.Errorf("replica %s: GET before = %q", r.Addr, got)
		}
	}

	old := st.Primary()
	ft := st.Failover(t)
	t.Logf("Failover: promoted after %v, settled after %v", ft.Promoted, ft.Settled)
	if st.Primary() == old || !slices.Contains(st.Replicas(), old) || len(st.Replicas()) != 2 {
		t.Fatalf("after Failover: primary %s (was %s), replicas %v", st.Primary().Addr, old.Addr, addrsOf(st.Replicas()))
	}
	checkRoles(t, st)
	set("after-failover") // the client follows the new primary
	if got := st.Primary().MustCmd(t, "GET", "before"); got != "v" {
		t.Errorf("new primary: GET before = %q (a manual failover loses nothing)", got)
	}

	old = st.Primary()
	ft = st.KillPrimary(t)
	t.Logf("KillPrimary: promoted after %v, settled after %v", ft.Promoted, ft.Settled)
	if st.Primary() == old || old.PID() != 0 || !slices.Equal(st.Down(), []*Server{old}) || len(st.Replicas()) != 1 {
		t.Fatalf("after KillPrimary: primary %s (killed %s, pid %d), replicas %v, down %v",
			st.Primary().Addr, old.Addr, old.PID(), addrsOf(st.Replicas()), addrsOf(st.Down()))
	}
	checkRoles(t, st)
	set("after-kill")

	took := st.Revive(t)
	t.Logf("Revive: %v", took)
	if len(st.Down()) != 0 || !slices.Contains(st.Replicas(), old) || len(st.Replicas()) != 2 || old.PID() == 0 {
		t.Fatalf("after Revive: replicas %v, down %v", addrsOf(st.Replicas()), addrsOf(st.Down()))
	}
	checkRoles(t, st)
	// The revived node came back empty and synced from the primary.
	if got := old.MustCmd(t, "GET", "after-kill"); got != "v" {
		t.Errorf("revived %s: GET after-kill = %q", old.Addr, got)
	}
	set("after-revive")
	t.Logf("total: %v", time.Since(begin))
}

// checkRoles checks the harness's view against each data node's ROLE.
func checkRoles(t *testing.T, st *Sentinel) {
	t.Helper()
	if got := st.Primary().MustCmd(t, "ROLE"); !strings.HasPrefix(got, "master\n") {
		t.Errorf("primary %s: ROLE %q", st.Primary().Addr, got)
	}
	want := "slave\n127.0.0.1\n" + strconv.Itoa(st.Primary().Port) + "\nconnected\n"
	for _, r := range st.Replicas() {
		if got := r.MustCmd(t, "ROLE"); !strings.HasPrefix(got, want) {
			t.Errorf("replica %s: ROLE %q, want prefix %q", r.Addr, got, want)
		}
	}
}

// TestSentinelKinds starts a sentinel set of every kind (the sentinels run
// the kind's own binary) and writes through it.
func TestSentinelKinds(t *testing.T) {
	t.Parallel()
	for _, k := range Kinds() {
		t.Run(k.String(), func(t *testing.T) {
			t.Parallel()
			begin := time.Now()
			st := StartSentinel(t, 1, WithKind(k))
			t.Logf("%v: StartSentinel(1): %v", k, time.Since(begin))
			for _, s := range append(slices.Clone(st.Sentinels), st.Nodes...) {
				if s.Kind != k {
					t.Errorf("%s: kind %v", s.Addr, s.Kind)
				}
			}
			ctx := ctxT(t)
			c := st.Client(t)
			if err := c.Do(ctx, c.B().Set().Key("k").Value(k.String()).Build()).Error(); err != nil {
				t.Fatal(err)
			}
			if got := st.Primary().MustCmd(t, "GET", "k"); got != k.String() {
				t.Errorf("GET k on the primary = %q", got)
			}
		})
	}
}

// TestTopologyMisuse: the operations that need a replica, and WithReplicas
// where it does not apply, fail the test with a message saying so.
func TestTopologyMisuse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		f    func(testing.TB)
		want string
	}{
		{"Start WithReplicas", func(t testing.TB) { Start(t, WithReplicas(1)) }, "Start does not take WithReplicas"},
		{"StartN WithReplicas", func(t testing.TB) { StartN(t, 2, WithReplicas(1)) }, "StartN does not take WithReplicas"},
		{"StartSentinel WithReplicas", func(t testing.TB) { StartSentinel(t, 1, WithReplicas(1)) }, "StartSentinel does not take WithReplicas"},
		{"StartSentinel -1", func(t testing.TB) { StartSentinel(t, -1) }, "-1 replicas"},
		{"StartCluster WithReplicas(9)", func(t testing.TB) { StartCluster(t, 3, WithReplicas(9)) }, "WithReplicas(9)"},
		{"Cluster.Failover without replicas", func(t testing.TB) {
			(&Cluster{Servers: []*Server{{Addr: "x"}}, Replicas: make([][]*Server, 1)}).Failover(t, 0)
		}, "has no running replica"},
		{"Cluster.KillMaster out of range", func(t testing.TB) { (&Cluster{Servers: []*Server{{Addr: "x"}}}).KillMaster(t, 3) }, "has 1 masters"},
		{"Sentinel.Failover without replicas", func(t testing.TB) { lone().Failover(t) }, "needs a running replica"},
		{"Sentinel.KillPrimary without replicas", func(t testing.TB) { lone().KillPrimary(t) }, "needs a running replica"},
	} {
		if msg := fatalOf(t, tc.f); !strings.Contains(msg, tc.want) {
			t.Errorf("%s: Fatalf message %q, want it to contain %q", tc.name, msg, tc.want)
		}
	}
}

// lone is a sentinel set of a primary alone (not started).
func lone() *Sentinel {
	n := &Server{Addr: "x"}
	return &Sentinel{Nodes: []*Server{n}, primary: n}
}

// TestClusterReplicas starts three masters with a replica each, fails one
// over, kills another and revives it, checking the harness's view, the
// cluster's, and that a cluster client keeps working.
func TestClusterReplicas(t *testing.T) {
	t.Parallel()
	begin := time.Now()
	c := StartCluster(t, 3, WithReplicas(1))
	t.Logf("StartCluster(3, WithReplicas(1)): %v", time.Since(begin))
	if len(c.Servers) != 3 || len(c.Replicas) != 3 || len(c.Nodes()) != 6 {
		t.Fatalf("%d masters, %d replica sets, %d nodes", len(c.Servers), len(c.Replicas), len(c.Nodes()))
	}
	checkClusterRoles(t, c)
	client := c.Client(t)
	const keys = 30
	write := func(prefix string) {
		t.Helper()
		for i := range keys {
			k := prefix + strconv.Itoa(i)
			waitFor(t, func(ctx context.Context) error {
				return client.Do(ctx, client.B().Set().Key(k).Value("v").Build()).Error()
			})
		}
	}
	count := func() int {
		total := 0
		c.EachNode(t, func(s *Server) {
			n, _ := strconv.Atoi(s.MustCmd(t, "DBSIZE"))
			total += n
		})
		return total
	}
	write("a:")
	if n := count(); n != keys {
		t.Fatalf("masters hold %d keys, want %d", n, keys)
	}

	old, replica := c.Servers[1], c.Replicas[1][0]
	ft := c.Failover(t, 1)
	t.Logf("Failover(1): promoted after %v, settled after %v", ft.Promoted, ft.Settled)
	if c.Servers[1] != replica || c.Addrs[1] != replica.Addr || !slices.Equal(c.Replicas[1], []*Server{old}) {
		t.Fatalf("after Failover(1): master %s, replicas %v", c.Servers[1].Addr, addrsOf(c.Replicas[1]))
	}
	checkClusterRoles(t, c)
	if n := count(); n != keys {
		t.Errorf("after a manual failover the masters hold %d keys, want %d", n, keys)
	}
	write("b:")

	old, replica = c.Servers[2], c.Replicas[2][0]
	ft = c.KillMaster(t, 2)
	t.Logf("KillMaster(2): promoted after %v, settled after %v", ft.Promoted, ft.Settled)
	if c.Servers[2] != replica || len(c.Replicas[2]) != 0 || !slices.Equal(c.Down(), []*Server{old}) || old.PID() != 0 || len(c.Nodes()) != 5 {
		t.Fatalf("after KillMaster(2): master %s, replicas %v, down %v", c.Servers[2].Addr, addrsOf(c.Replicas[2]), addrsOf(c.Down()))
	}
	checkClusterRoles(t, c)
	write("c:")

	took := c.Revive(t)
	t.Logf("Revive: %v", took)
	if !slices.Equal(c.Replicas[2], []*Server{old}) || len(c.Down()) != 0 || len(c.Nodes()) != 6 {
		t.Fatalf("after Revive: replicas %v, down %v", addrsOf(c.Replicas[2]), addrsOf(c.Down()))
	}
	checkClusterRoles(t, c)
	write("d:")
	t.Logf("total: %v", time.Since(begin))
}

// checkClusterRoles checks the harness's view against each node's ROLE.
func checkClusterRoles(t *testing.T, c *Cluster) {
	t.Helper()
	for i, m := range c.Servers {
		if got := m.MustCmd(t, "ROLE"); !strings.HasPrefix(got, "master\n") {
			t.Errorf("master %d %s: ROLE %q", i, m.Addr, got)
		}
		want := fmt.Sprintf("slave\n127.0.0.1\n%d\n", m.Port)
		for _, r := range c.Replicas[i] {
			if got := r.MustCmd(t, "ROLE"); !strings.HasPrefix(got, want) {
				t.Errorf("replica %s of %s: ROLE %q", r.Addr, m.Addr, got)
			}
		}
	}
}
