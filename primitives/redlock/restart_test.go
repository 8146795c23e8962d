package redlock_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/redlock"
	"github.com/redis/rueidis"
)

// guardMaxTTL is the MaxTTL of the restart-guard tests: every lease is at
// most this long, and a restarted node sits out this long (plus drift).
const guardMaxTTL = time.Second

// holdMaxTTL is the MaxTTL of the restart-guard tests whose first holder,
// leasing for MaxTTL, must still hold after a node restarted (or failed
// over), its client reconnected and more Groups tried: in TestRestartGuard
// that took about half a second on a moderately loaded machine, several
// times that on a loaded one (-race, 2 cores, packages in parallel), so a
// lease of guardMaxTTL could end before the checks. It costs those tests
// 4 s more for the nodes to age, and TestRestartGuard 4 s more for the
// restarted node to count again.
const holdMaxTTL = 5 * time.Second

// aged waits until every server of f has been up long enough that a Group
// with MaxTTL guardMaxTTL meeting it now trusts it at once.
func aged(t *testing.T, servers ...*redistest.Server) {
	t.Helper()
	agedFor(t, guardMaxTTL, servers...)
}

// agedFor waits until every server has been up long enough that a Group
// with MaxTTL maxTTL (and the default drift) meeting it now trusts it at
// once: INFO's uptime_in_seconds (rounded down) at least MaxTTL + drift +
// the second the guard adds for uptime rounding.
func agedFor(t *testing.T, maxTTL time.Duration, servers ...*redistest.Server) {
	t.Helper()
	drift := redlock.DefaultDrift + time.Duration(float64(maxTTL)*redlock.DefaultDriftFactor)
	want := int64((maxTTL + drift + time.Second + time.Second - 1) / time.Second)
	for _, s := range servers {
		xtest.Eventually(t, maxTTL+10*time.Second, "the server up for MaxTTL", func() bool {
			info := s.MustCmd(t, "INFO", "server")
			i := strings.Index(info, "uptime_in_seconds:")
			var up int64
			fmt.Sscan(info[i+len("uptime_in_seconds:"):], &up)
			return up >= want
		})
	}
}

// reconnect makes c notice that its server restarted: rueidis finds a
// dead connection at its next command there, and it spreads commands over
// a few connections by the key's slot, so the commands name the key the
// test uses.
func reconnect(t *testing.T, c rueidis.Client, key string) {
	t.Helper()
	ok := 0
	xtest.Eventually(t, 5*time.Second, "the client reconnected", func() bool {
		if err := c.Do(context.Background(), c.B().Eval().Script("return 1").Numkeys(1).Key(key).Build()).Error(); err == nil {
			ok++
		} else {
			ok = 0
		}
		return ok >= 20
	})
}

// newClients returns a new client for each server of f.
func (f *fleet) newClients(t *testing.T) []rueidis.Client {
	out := make([]rueidis.Client, len(f.servers))
	for i, s := range f.servers {
		out[i] = s.Client(t)
	}
	return out
}

// A Group on freshly started servers waits out the guard: TryAcquire
// fails at once naming it, Acquire succeeds once the nodes are MaxTTL +
// drift old.
func TestFreshDeploymentWaitsOutTheGuard(t *testing.T) {
	t.Parallel()
	f := startFleet(t, 3)
	ctx := xtest.Ctx(t, 30*time.Second)
	g := newGuardedGroup(t, f.clients, redlock.Options{MaxTTL: guardMaxTTL})
	_, err := g.TryAcquire(ctx, "k", time.Second)
	if !errors.Is(err, redlock.ErrNoQuorum) || !strings.Contains(err.Error(), "restart guard") {
		t.Fatalf("TryAcquire on fresh servers: %v; want ErrNoQuorum naming the restart guard", err)
	}
	if ks := f.keyspace(t); strings.Contains(ks, "k:") {
		t.Fatalf("a guarded node was written:\n%s", ks)
	}
	start := time.Now()
	l, err := g.Acquire(ctx, "k", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Acquire waited %v for the guard (MaxTTL %v)", time.Since(start), guardMaxTTL)
	l.Release(ctx)
}

// An empty restart of one node inside a holder's TTL: the holder A has
// the key on a bare majority (the other nodes briefly held by a blocker),
// one of A's nodes restarts empty, the blockers go. Without the guard
// a second holder gets a majority from the restarted node and the free
// ones while A still holds (the control, redsync #186); with it, neither a
// Group that meets the node for the first time (its uptime is below
// MaxTTL) nor A's own Group (the node's run_id changed) counts it, so
// there is no second holder. Once the guard's span has passed the node
// counts again. On 3 and 5 nodes.
func TestRestartGuard(t *testing.T) {
	for _, n := range []int{3, 5} {
		t.Run(fmt.Sprintf("%d nodes", n), func(t *testing.T) {
			t.Parallel()
			f := startFleet(t, n, backwards(redistest.Kinds())...)
			agedFor(t, holdMaxTTL, f.servers...)
			ctx := xtest.Ctx(t, 30*time.Second)
			opts := redlock.Options{NodeTimeout: faultTimeout, MaxTTL: holdMaxTTL}
			a := newGuardedGroup(t, f.clients, opts)
			q := a.Quorum()
			// Nodes q..n-1 are held by a blocker until A has restarted
			// node 0 (no expiry: it must still be there when A's
			// TryAcquire reaches them, however slow the machine): A gets
			// 0..q-1.
			for i := q; i < n; i++ {
				f.servers[i].MustCmd(t, "SET", "k", "blocker")
			}
			holder, err := a.TryAcquire(ctx, "k", holdMaxTTL)
			if err != nil {
				t.Fatal(err)
			}
			f.servers[0].Restart(t) // empty: no persistence
			reconnect(t, f.clients[0], "k")
			for i := q; i < n; i++ {
				f.servers[i].MustCmd(t, "DEL", "k")
			}
			if got := f.get(t, "k"); got[0] != "" || count(got, holder.Token()) != q-1 || count(got, "") != n-q+1 {
				t.Fatalf("set-up: %q", got)
			}

			doubles := 0
			second := func(name string, g *redlock.Group, guardOn bool) {
				t.Helper()
				l, err := g.TryAcquire(ctx, "k", time.Second)
				switch {
				case err == nil && holder.Remaining() > 0:
					if guardOn {
						doubles++
						t.Errorf("%s: a second holder while the first holds %v more", name, holder.Remaining())
					} else {
						t.Logf("%s (control, guard off): a second holder while the first holds %v more", name, holder.Remaining())
					}
					l.Release(ctx)
				case err == nil:
					t.Fatalf("%s: the first holder ran out before the check (%v): too slow to tell", name, holder.Remaining())
				case guardOn && (errors.Is(err, redlock.ErrNoQuorum) || errors.Is(err, primitives.ErrNotAcquired)):
					t.Logf("%s: refused: %v", name, err)
				default:
					t.Fatalf("%s: %v", name, err)
				}
				if !guardOn && err != nil {
					t.Fatalf("%s (control, guard off): no second holder: %v", name, err)
				}
			}
			// A Group meeting the nodes now: the restarted one is young.
			// (Its own clients, as another process would have: the old
			// ones may still find a dead connection to node 0.)
			fresh := newGuardedGroup(t, f.newClients(t), opts)
			second("a new Group (uptime rule)", fresh, true)
			attempts := 1
			for range 3 { // more Groups meeting the nodes now, a few attempts each
				g := newGuardedGroup(t, f.newClients(t), opts)
				for range 3 {
					second("another new Group (uptime rule)", g, true)
					attempts++
				}
			}
			// A's own Group: the restarted node's run_id changed.
			for range 3 {
				second("the first holder's Group (run_id rule)", a, true)
				attempts++
			}
			t.Logf("%d attempts with the guard while the first holder held: %d double holders", attempts, doubles)
			if doubles != 0 {
				t.Fatalf("%d double holders with the guard", doubles)
			}
			if holder.Remaining() <= 0 {
				t.Fatal("the first holder ran out before the control")
			}
			// The control: the same with the guard off.
			second("a new Group without the guard", newGroup(t, f.newClients(t), opts), false)

			// The guard ends MaxTTL + drift after the restart: with n-q
			// other nodes held, a majority needs node 0 again, and Acquire
			// wakes when its guard ends.
			holder.Release(ctx)
			for i := 1; i <= n-q; i++ {
				f.servers[i].MustCmd(t, "SET", "k", "blocker")
			}
			start := time.Now()
			l, err := fresh.Acquire(ctx, "k", time.Second)
			if err != nil {
				t.Fatalf("Acquire after the guard: %v", err)
			}
			t.Logf("node 0 counted again after %v more", time.Since(start))
			if got := f.get(t, "k"); got[0] != l.Token() {
				t.Fatalf("node 0 not in the grant: %q", got)
			}
			l.Release(ctx)
		})
	}
}

// A failover behind one address (another server, up for long, answers
// there) loses grants as a restart does, though its uptime is large: the
// run_id check catches it and the node sits out MaxTTL + drift from then.
func TestRestartGuardFailover(t *testing.T) {
	t.Parallel()
	f := startFleet(t, 3, backwards(redistest.Kinds())...)
	standby := redistest.Start(t)
	agedFor(t, holdMaxTTL, append(f.servers, standby)...)
	var target atomic.Value
	target.Store(f.servers[0].Addr)
	dial := func(ctx context.Context, _ string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", target.Load().(string))
	}
	node0 := f.servers[0].Client(t, func(o *rueidis.ClientOption) { o.DialCtxFn = dial })
	clients := []rueidis.Client{node0, f.clients[1], f.clients[2]}
	ctx := xtest.Ctx(t, 30*time.Second)
	opts := redlock.Options{NodeTimeout: faultTimeout, MaxTTL: holdMaxTTL}
	g := newGuardedGroup(t, clients, opts)
	control := newGroup(t, clients, opts)
	warm(t, g)
	// A blocker on node 2 until the failover (no expiry: it must still be
	// there when the holder's TryAcquire reaches it): the holder gets
	// nodes 0 and 1.
	f.servers[2].MustCmd(t, "SET", "k", "blocker")
	holder, err := g.TryAcquire(ctx, "k", holdMaxTTL)
	if err != nil {
		t.Fatal(err)
	}
	// Node 0's address now reaches the standby, up for as long as the
	// others: only its run_id tells.
	target.Store(standby.Addr)
	f.servers[0].Stop()
	reconnect(t, node0, "k")
	f.servers[2].MustCmd(t, "DEL", "k")
	_, err = g.TryAcquire(ctx, "k", time.Second)
	if err == nil || !strings.Contains(err.Error(), "run_id changed") {
		t.Fatalf("with the failover: %v; want a refusal naming the changed run_id", err)
	}
	l, err := control.TryAcquire(ctx, "k", time.Second)
	if err != nil {
		t.Fatalf("the control (guard off): %v; want a second holder", err)
	}
	if holder.Remaining() <= 0 {
		t.Fatal("the first holder ran out before the control")
	}
	t.Logf("control: second holder while the first holds %v more", holder.Remaining())
	l.Release(ctx)
}
