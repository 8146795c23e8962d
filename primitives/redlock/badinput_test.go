package redlock_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/policies/builtin"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/redlock"
	"github.com/redis/rueidis"
)

// New refuses what it can see without I/O, and sends nothing either way.
func TestNewRefuses(t *testing.T) {
	t.Parallel() // it starts a cluster: overlap that with the other parallel tests
	f := startFleet(t, 5)
	c := f.clients
	other := redistest.Start(t).Client(t)
	closedWaiter, err := primitives.NewWaiter(c[0], primitives.WaiterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	closedWaiter.Close()
	otherWaiter, err := primitives.NewWaiter(other, primitives.WaiterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer otherWaiter.Close()
	cl := redistest.StartCluster(t, 3)
	before := f.keyspace(t)
	three := c[:3]
	cases := []struct {
		name    string
		clients []rueidis.Client
		opts    redlock.Options
		detail  string
	}{
		{"no clients", nil, redlock.Options{}, "0 clients"},
		{"one", c[:1], redlock.Options{}, "at least 3"},
		{"two", c[:2], redlock.Options{}, "at least 3"},
		{"four", c[:4], redlock.Options{}, "odd number"},
		{"nil client", []rueidis.Client{c[0], nil, c[2]}, redlock.Options{}, "client 1 is nil"},
		{"same client twice", []rueidis.Client{c[0], c[1], c[0]}, redlock.Options{}, "clients 0 and 2 are the same client"},
		{"cluster client", []rueidis.Client{c[0], c[1], cl.Client(t)}, redlock.Options{}, "cluster client"},
		{"negative NodeTimeout", three, redlock.Options{NodeTimeout: -1}, "NodeTimeout"},
		{"negative Drift", three, redlock.Options{Drift: -time.Millisecond}, "Drift"},
		{"negative DriftFactor", three, redlock.Options{DriftFactor: -0.1}, "DriftFactor"},
		{"DriftFactor too large", three, redlock.Options{DriftFactor: 0.5}, "DriftFactor"},
		{"DriftFactor NaN", three, redlock.Options{DriftFactor: math.NaN()}, "DriftFactor"},
		{"negative MaxTTL", three, redlock.Options{MaxTTL: -time.Second}, "MaxTTL"},
		{"MaxTTL beyond 100 years", three, redlock.Options{MaxTTL: math.MaxInt64}, "MaxTTL"},
		{"MaxTTL under the drift", three, redlock.Options{MaxTTL: 2 * time.Millisecond}, "MaxTTL"},
		{"bad retry policy", three, redlock.Options{Retry: builtin.Exponential{Base: -1}}, "retry policy"},
		{"Waiters of another length", three, redlock.Options{Waiters: make([]*primitives.Waiter, 2)}, "2 Waiters for 3 clients"},
		{"Waiter of another client", three, redlock.Options{Waiters: []*primitives.Waiter{nil, otherWaiter, nil}}, "Waiters[1]"},
		{"closed Waiter", three, redlock.Options{Waiters: []*primitives.Waiter{closedWaiter, nil, nil}}, "Waiters[0]"},
	}
	for _, tc := range cases {
		g, err := redlock.New(tc.clients, tc.opts)
		if g != nil || !errors.Is(err, primitives.ErrInvalidOptions) || !strings.Contains(err.Error(), tc.detail) {
			t.Errorf("%s: %v, %v; want ErrInvalidOptions naming %q", tc.name, g, err, tc.detail)
		}
	}
	if after := f.keyspace(t); after != before {
		t.Fatalf("New wrote:\nbefore %s\nafter  %s", before, after)
	}
	// A single-server client of a cluster node passes New's check; the
	// identification finds the node in cluster mode and the Group refuses
	// every call before writing.
	clusterNode := cl.Servers[0].Client(t, func(o *rueidis.ClientOption) { o.ForceSingleClient = true })
	cg := newGuardedGroup(t, []rueidis.Client{c[3], c[4], clusterNode}, redlock.Options{})
	if _, err := cg.TryAcquire(xtest.Ctx(t, 10*time.Second), "k", time.Second); !errors.Is(err, primitives.ErrInvalidOptions) || !strings.Contains(err.Error(), "cluster mode") {
		t.Errorf("a cluster node: %v; want ErrInvalidOptions naming cluster mode", err)
	}
	if after := f.keyspace(t); after != before {
		t.Fatalf("the Group with a cluster node wrote:\nbefore %s\nafter  %s", before, after)
	}
	// A valid Group sends nothing either until it is used.
	for _, s := range f.servers[:3] {
		s.MustCmd(t, "CONFIG", "RESETSTAT")
	}
	g := newGuardedGroup(t, three, redlock.Options{})
	for i, s := range f.servers[:3] {
		if stats := s.MustCmd(t, "INFO", "commandstats"); strings.Contains(stats, "cmdstat_info:") || strings.Contains(stats, "cmdstat_eval") {
			t.Fatalf("node %d: New sent commands:\n%s", i, stats)
		}
	}
	g.Close()
}

// Every public entry point refuses bad input with an error naming the
// problem, and writes nothing on any node.
func TestBadInputsWriteNothing(t *testing.T) {
	f := startFleet(t, 3)
	g := newGroup(t, f.clients, redlock.Options{Prefix: "p:", MaxTTL: time.Hour})
	closed := newGroup(t, f.clients, redlock.Options{Prefix: "p:"})
	closed.Close()
	ok := xtest.Ctx(t, 20*time.Second)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	var nilCtx context.Context
	var nilGroup *redlock.Group
	// A key of another type on every node: refused by the script before
	// it writes (WRONGTYPE).
	for _, s := range f.servers {
		s.MustCmd(t, "HSET", "p:hash", "f", "v")
	}
	held, err := g.TryAcquire(ok, "held", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	before := f.keyspace(t)

	type call func(g *redlock.Group, ctx context.Context, key string, ttl time.Duration) (*redlock.Lock, error)
	calls := map[string]call{"TryAcquire": (*redlock.Group).TryAcquire, "Acquire": (*redlock.Group).Acquire}
	cases := []struct {
		name string
		g    *redlock.Group
		ctx  context.Context
		key  string
		ttl  time.Duration
		want error
	}{
		{"empty key", g, ok, "", time.Second, primitives.ErrInvalidKey},
		{"reserved key", g, ok, "__coordhost:x", time.Second, primitives.ErrInvalidKey},
		{"zero ttl", g, ok, "k", 0, primitives.ErrInvalidTTL},
		{"negative ttl", g, ok, "k", -time.Second, primitives.ErrInvalidTTL},
		{"ttl below 1ms", g, ok, "k", time.Millisecond - 1, primitives.ErrInvalidTTL},
		{"ttl within the drift", g, ok, "k", 3 * time.Millisecond, primitives.ErrInvalidTTL},
		{"ttl above MaxTTL", g, ok, "k", time.Hour + time.Millisecond, primitives.ErrInvalidTTL},
		{"MinInt64 ttl", g, ok, "k", math.MinInt64, primitives.ErrInvalidTTL},
		{"MaxInt64 ttl", g, ok, "k", math.MaxInt64, primitives.ErrInvalidTTL},
		{"nil context", g, nilCtx, "k", time.Second, primitives.ErrInvalidOptions},
		{"cancelled context", g, cancelled, "k", time.Second, context.Canceled},
		{"nil Group", nilGroup, ok, "k", time.Second, primitives.ErrInvalidOptions},
		{"closed Group", closed, ok, "k", time.Second, primitives.ErrClosed},
		{"key of another type", g, ok, "hash", time.Second, primitives.ErrWrongType},
	}
	for name, c := range calls {
		for _, tc := range cases {
			l, err := c(tc.g, tc.ctx, tc.key, tc.ttl)
			if l != nil || !errors.Is(err, tc.want) {
				t.Errorf("%s %s: %v, %v; want an error matching %v", name, tc.name, l, err, tc.want)
			} else if err.Error() == tc.want.Error() {
				t.Errorf("%s %s: error %q names no detail", name, tc.name, err)
			}
		}
	}
	// A zero Lock and a nil *Lock are no grant.
	var nilLock *redlock.Lock
	for _, l := range []*redlock.Lock{nilLock, {}} {
		if _, err := l.Renew(ok, time.Second); !errors.Is(err, primitives.ErrInvalidOptions) {
			t.Errorf("Renew of no grant: %v", err)
		}
		if _, err := l.Verify(ok); !errors.Is(err, primitives.ErrInvalidOptions) {
			t.Errorf("Verify of no grant: %v", err)
		}
		if _, err := l.Release(ok); !errors.Is(err, primitives.ErrInvalidOptions) {
			t.Errorf("Release of no grant: %v", err)
		}
		if l.Close() != nil || l.Key() != "" || l.Token() != "" || l.Remaining() != 0 {
			t.Errorf("no grant: Close, Key, Token or Remaining")
		}
	}
	// Renewals of a held lock above the Group's MaxTTL, or within the
	// drift, send nothing.
	for _, ttl := range []time.Duration{time.Hour + time.Millisecond, 3 * time.Millisecond} {
		if ok, err := held.Renew(ok, ttl); ok || !errors.Is(err, primitives.ErrInvalidTTL) || !strings.Contains(err.Error(), "redlock") {
			t.Errorf("Renew(%v): %v, %v", ttl, ok, err)
		}
	}
	if after := f.keyspace(t); after != before {
		t.Fatalf("refused calls wrote:\nbefore %s\nafter  %s", before, after)
	}
	if held.Remaining() <= 0 {
		t.Fatal("refused calls ended the held lock")
	}
}

// Two clients of one server (127.0.0.1 and localhost), or a server and its
// replica, are found at the first call, before anything is written; every
// later call fails the same way.
func TestDuplicateNodes(t *testing.T) {
	t.Run("same server", func(t *testing.T) {
		f := startFleet(t, 2)
		alias := f.servers[0].Client(t, func(o *rueidis.ClientOption) {
			o.InitAddress = []string{strings.Replace(f.servers[0].Addr, "127.0.0.1", "localhost", 1)}
		})
		g := newGuardedGroup(t, []rueidis.Client{f.clients[0], f.clients[1], alias}, redlock.Options{})
		ctx := xtest.Ctx(t, 10*time.Second)
		for range 2 {
			_, err := g.TryAcquire(ctx, "k", time.Second)
			if !errors.Is(err, redlock.ErrDuplicateNode) || !errors.Is(err, primitives.ErrInvalidOptions) || !strings.Contains(err.Error(), "run_id") {
				t.Fatalf("TryAcquire: %v; want ErrDuplicateNode naming the run_id", err)
			}
		}
		if _, err := g.Acquire(ctx, "k", time.Second); !errors.Is(err, redlock.ErrDuplicateNode) {
			t.Fatalf("Acquire: %v", err)
		}
		if ks := f.keyspace(t); strings.Contains(ks, "k:") {
			t.Fatalf("written:\n%s", ks)
		}
	})
	t.Run("replica", func(t *testing.T) {
		f := startFleet(t, 3)
		f.servers[0].MustCmd(t, "CONFIG", "SET", "repl-diskless-sync-delay", "0")
		f.servers[2].MustCmd(t, "REPLICAOF", "127.0.0.1", f.servers[0].Addr[len("127.0.0.1:"):])
		xtest.Eventually(t, 10*time.Second, "the replica in sync", func() bool {
			return strings.Contains(f.servers[2].MustCmd(t, "INFO", "replication"), "master_link_status:up")
		})
		g := newGuardedGroup(t, f.clients, redlock.Options{})
		_, err := g.TryAcquire(xtest.Ctx(t, 10*time.Second), "k", time.Second)
		if !errors.Is(err, redlock.ErrDuplicateNode) || !strings.Contains(err.Error(), "master_replid") {
			t.Fatalf("TryAcquire: %v; want ErrDuplicateNode naming the replication history", err)
		}
		if ks := f.keyspace(t); strings.Contains(ks, "k:") {
			t.Fatalf("written:\n%s", ks)
		}
	})
}
