package redlock_test

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/internal/leasetest"
	"github.com/coordhost/coordhost/primitives/redlock"
	"github.com/redis/rueidis"
)

func TestMain(m *testing.M) {
	var stops []func()
	xtest.Main(m,
		xtest.Before(func() error {
			// Three independent servers for the runnable example: two
			// Redis 7.0, one Redis 8.0.
			for _, major := range []int{7, 8, 7} {
				addr, stop, err := redistest.StartForExamples(major)
				if err != nil {
					return err
				}
				stops = append(stops, stop)
				exampleAddrs = append(exampleAddrs, addr)
			}
			return nil
		}),
		xtest.After(func() {
			for _, stop := range stops {
				stop()
			}
		}))
}

// exampleAddrs are the servers the runnable example talks to.
var exampleAddrs []string

// fleet is n independent servers and a client for each.
type fleet struct {
	servers []*redistest.Server
	clients []rueidis.Client
}

// startFleet starts one server per kind given (Redis 7.0 when none is),
// n servers in all when kinds has one element.
func startFleet(t *testing.T, n int, kinds ...redistest.Kind) *fleet {
	t.Helper()
	f := &fleet{}
	for i := range n {
		k := redistest.Redis70
		if len(kinds) == 1 {
			k = kinds[0]
		} else if len(kinds) > 1 {
			k = kinds[i%len(kinds)]
		}
		s := redistest.Start(t, redistest.WithKind(k))
		f.servers = append(f.servers, s)
		f.clients = append(f.clients, s.Client(t))
	}
	return f
}

// backwards returns kinds in reverse order (Valkey first): fleets of
// mixed kinds, so each test also meets each kind.
func backwards(kinds []redistest.Kind) []redistest.Kind {
	out := slices.Clone(kinds)
	slices.Reverse(out)
	return out
}

// keyspace describes every key of every server of f.
func (f *fleet) keyspace(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for i, s := range f.servers {
		fmt.Fprintf(&b, "node %d: %s\n", i, leasetest.Keyspace(t, s))
	}
	return b.String()
}

// get returns key's value on every server ("" when absent).
func (f *fleet) get(t *testing.T, key string) []string {
	t.Helper()
	out := make([]string, len(f.servers))
	for i, s := range f.servers {
		v, err := s.Cmd(t, "GET", key)
		if err != nil && !rueidis.IsRedisNil(err) {
			t.Fatalf("node %d: GET %s: %v", i, key, err)
		}
		out[i] = v
	}
	return out
}

// pttl returns key's PTTL on server i.
func (f *fleet) pttl(t *testing.T, i int, key string) time.Duration {
	t.Helper()
	ms, _ := strconv.ParseInt(f.servers[i].MustCmd(t, "PTTL", key), 10, 64)
	return time.Duration(ms) * time.Millisecond
}

// newGroup makes a Group on clients with the restart guard off (the test
// servers have just started, and the guard has tests of its own), closed
// when the test ends.
func newGroup(t *testing.T, clients []rueidis.Client, o redlock.Options) *redlock.Group {
	t.Helper()
	g := newGuardedGroup(t, clients, o)
	redlock.DisableRestartGuard(g)
	return g
}

// newGuardedGroup makes a Group with the restart guard on.
func newGuardedGroup(t *testing.T, clients []rueidis.Client, o redlock.Options) *redlock.Group {
	t.Helper()
	g, err := redlock.New(clients, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

func count(vals []string, v string) int {
	n := 0
	for _, x := range vals {
		if x == v {
			n++
		}
	}
	return n
}

// The whole life of a lock on 3 nodes of every server kind, and on 5
// nodes of mixed kinds: the token on every node with the ttl, contention,
// renewal, verification, release.
func TestLifecycle(t *testing.T) {
	type setup struct {
		name  string
		n     int
		kinds []redistest.Kind
	}
	var setups []setup
	for _, k := range redistest.Kinds() {
		setups = append(setups, setup{"3x" + k.String(), 3, []redistest.Kind{k}})
	}
	setups = append(setups, setup{"5-mixed", 5, redistest.Kinds()})
	for _, su := range setups {
		t.Run(su.name, func(t *testing.T) {
			f := startFleet(t, su.n, su.kinds...)
			ctx := xtest.Ctx(t, 30*time.Second)
			g := newGroup(t, f.clients, redlock.Options{Prefix: "app:"})
			if g.Nodes() != su.n || g.Quorum() != su.n/2+1 {
				t.Fatalf("Nodes %d Quorum %d", g.Nodes(), g.Quorum())
			}
			l, err := g.TryAcquire(ctx, "invoice:42", 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if l.Key() != "app:invoice:42" {
				t.Fatalf("Key %q", l.Key())
			}
			// Every node holds the token (a majority answered first; the
			// rest follow within NodeTimeout).
			xtest.Eventually(t, time.Second, "the token on every node", func() bool {
				return count(f.get(t, "app:invoice:42"), l.Token()) == su.n
			})
			for i := range su.n {
				if p := f.pttl(t, i, "app:invoice:42"); p <= 9*time.Second || p > 10*time.Second {
					t.Fatalf("node %d PTTL %v", i, p)
				}
			}
			// Validity: ttl less the time taken less 2ms + 1% of 10s.
			if r, max := l.Remaining(), 10*time.Second-g.Drift(10*time.Second); r <= 0 || r > max || g.Drift(10*time.Second) != 102*time.Millisecond {
				t.Fatalf("Remaining %v, want in (0, %v]", r, max)
			}
			if _, err := g.TryAcquire(ctx, "invoice:42", time.Second); !errors.Is(err, primitives.ErrNotAcquired) {
				t.Fatalf("contended: %v", err)
			}
			if ok, err := l.Renew(ctx, time.Minute); !ok || err != nil {
				t.Fatal(ok, err)
			}
			if r := l.Remaining(); r <= 59*time.Second-g.Drift(time.Minute) || r > time.Minute-g.Drift(time.Minute) {
				t.Fatalf("Remaining %v after Renew(1m)", r)
			}
			xtest.Eventually(t, time.Second, "the renewal on every node", func() bool {
				for i := range su.n {
					if f.pttl(t, i, "app:invoice:42") <= 50*time.Second {
						return false
					}
				}
				return true
			})
			if ok, err := l.Verify(ctx); !ok || err != nil {
				t.Fatal(ok, err)
			}
			if r, err := l.Release(ctx); r != primitives.Released || err != nil {
				t.Fatal(r, err)
			}
			if got := f.get(t, "app:invoice:42"); count(got, "") != su.n {
				t.Fatalf("after Release: %q", got)
			}
			if r, err := l.Release(ctx); r != primitives.AlreadyReleased || err != nil {
				t.Fatal(r, err)
			}
			l2, err := g.Acquire(ctx, "invoice:42", time.Second)
			if err != nil {
				t.Fatal(err)
			}
			l2.Close()
		})
	}
}

// Binary-safe keys: a key with NUL and non-UTF-8 bytes is the same key on
// every node.
func TestBinaryKey(t *testing.T) {
	f := startFleet(t, 3)
	ctx := xtest.Ctx(t, 10*time.Second)
	g := newGroup(t, f.clients, redlock.Options{})
	key := "bin\x00ary\xff"
	buf := []byte(key)
	l, err := g.TryAcquire(ctx, string(buf), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	copy(buf, "XXXXXXXXX") // the caller reuses its buffer
	if l.Key() != key {
		t.Fatalf("Key %q", l.Key())
	}
	xtest.Eventually(t, time.Second, "the token under the binary key", func() bool { return count(f.get(t, key), l.Token()) == 3 })
	if r, err := l.Release(ctx); r != primitives.Released || err != nil {
		t.Fatal(r, err)
	}
}
