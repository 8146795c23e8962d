package redistest

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

func TestKinds(t *testing.T) {
	want := []struct {
		k       Kind
		name    string
		product string
		version string
		env     string
	}{
		{Redis70, "redis-7.0", "Redis", "7.0", "COORDHOST_REDIS7_SERVER"},
		{Redis80, "redis-8.0", "Redis", "8.0", "COORDHOST_REDIS8_SERVER"},
		{Redis86, "redis-8.6", "Redis", "8.6", "COORDHOST_REDIS86_SERVER"},
		{Valkey81, "valkey-8.1", "Valkey", "8.1", "COORDHOST_VALKEY8_SERVER"},
	}
	kinds := Kinds()
	if len(kinds) != len(want) {
		t.Fatalf("Kinds() = %v, want %d kinds", kinds, len(want))
	}
	for i, w := range want {
		k := kinds[i]
		if k != w.k || k.String() != w.name || k.Product() != w.product || k.Version() != w.version || k.EnvVar() != w.env {
			t.Errorf("Kinds()[%d] = %v (%q %q %q), want %v (%q %q %q)",
				i, k, k.Product(), k.Version(), k.EnvVar(), w.name, w.product, w.version, w.env)
		}
	}
	for _, bad := range []Kind{0, Valkey81 + 1, -1} {
		if bad.String() != fmt.Sprintf("Kind(%d)", int(bad)) || bad.Product() != "" || bad.EnvVar() != "" || bad.Has(HashFieldExpiry) {
			t.Errorf("invalid %d: String %q, Product %q, EnvVar %q", int(bad), bad, bad.Product(), bad.EnvVar())
		}
	}
	if got := fmt.Sprint(Features()); got != "[HashFieldExpiry HashGetSetEx SetIfEq DelEx]" {
		t.Errorf("Features() = %s", got)
	}
	if got := Feature(0).String(); got != "Feature(0)" {
		t.Errorf("Feature(0) = %q", got)
	}

	// The documented matrix (the live probes in TestEveryKind check the
	// servers agree).
	matrix := map[Kind][]Feature{
		Redis70:  nil,
		Redis80:  {HashFieldExpiry, HashGetSetEx},
		Redis86:  {HashFieldExpiry, HashGetSetEx, SetIfEq, DelEx},
		Valkey81: {SetIfEq},
	}
	for k, fs := range matrix {
		for _, f := range Features() {
			if got, want := k.Has(f), slices.Contains(fs, f); got != want {
				t.Errorf("%v.Has(%v) = %v, want %v", k, f, got, want)
			}
		}
	}
}

// TestEveryKind starts each kind standalone and checks its versions, a
// client with client-side caching (CLIENT TRACKING under RESP3), and the
// Feature table against the live server.
func TestEveryKind(t *testing.T) {
	t.Parallel()
	for _, k := range Kinds() {
		t.Run(k.String(), func(t *testing.T) {
			t.Parallel()
			s := Start(t, WithKind(k))
			checkVersions(t, s, k)
			t.Logf("%s: Version %s, RedisVersion %s (%s)", k, s.Version, s.RedisVersion, s.bin)

			ctx := ctxT(t)
			c := s.Client(t)
			if err := c.Do(ctx, c.B().Set().Key("k").Value("v1").Build()).Error(); err != nil {
				t.Fatal(err)
			}
			// Client-side caching: the second read is served locally, and a
			// write from another connection invalidates it.
			get := func() (string, bool) {
				r := c.DoCache(ctx, c.B().Get().Key("k").Cache(), time.Minute)
				v, err := r.ToString()
				if err != nil {
					t.Fatalf("DoCache GET: %v", err)
				}
				return v, r.IsCacheHit()
			}
			get()
			if v, hit := get(); v != "v1" || !hit {
				t.Errorf("second cached GET = %q, hit %v; want v1 from the cache", v, hit)
			}
			s.MustCmd(t, "SET", "k", "v2")
			waitFor(t, func(context.Context) error {
				if v, _ := get(); v != "v2" {
					return fmt.Errorf("cached GET still %q after SET v2 (no invalidation)", v)
				}
				return nil
			})

			for _, f := range Features() {
				if got, want := probeFeature(t, s, f), k.Has(f); got != want {
					t.Errorf("%v: the server has %v: %v; Has says %v", k, f, got, want)
				}
				if s.Has(f) != k.Has(f) {
					t.Errorf("Server.Has(%v) != Kind.Has", f)
				}
			}
			// What a lease meets on a kind without hash-field expiry.
			if !k.Has(HashFieldExpiry) {
				_, err := s.Cmd(t, "HPEXPIRE", "h", "1000", "FIELDS", "1", "f")
				if err == nil || !strings.Contains(err.Error(), "unknown command") {
					t.Errorf("HPEXPIRE on %v: err = %v, want unknown command", k, err)
				}
			}
			if got := s.MustCmd(t, "DBSIZE"); got != "1" {
				t.Errorf("DBSIZE after the probes = %s, want 1 (they clean up)", got)
			}
		})
	}
}

// checkVersions checks s.Kind, s.Version and s.RedisVersion against k and
// INFO server.
func checkVersions(t *testing.T, s *Server, k Kind) {
	t.Helper()
	if s.Kind != k {
		t.Errorf("%s: Kind = %v, want %v", s.Addr, s.Kind, k)
	}
	if !strings.HasPrefix(s.Version, k.Version()+".") {
		t.Errorf("%s: Version = %q, want %s.x", s.Addr, s.Version, k.Version())
	}
	info := s.MustCmd(t, "INFO", "server")
	if got := infoField(info, "redis_version"); got != s.RedisVersion || got == "" {
		t.Errorf("%s: redis_version %q, RedisVersion %q", s.Addr, got, s.RedisVersion)
	}
	valkey := infoField(info, "valkey_version")
	switch k.Product() {
	case "Valkey":
		if valkey != s.Version || infoField(info, "server_name") != "valkey" {
			t.Errorf("%s: valkey_version %q, server_name %q, Version %q", s.Addr, valkey, infoField(info, "server_name"), s.Version)
		}
		// Valkey claims Redis 7.2.4 compatibility in redis_version.
		if !strings.HasPrefix(s.RedisVersion, "7.2.") {
			t.Errorf("%s: Valkey's RedisVersion = %q, want 7.2.x", s.Addr, s.RedisVersion)
		}
	default:
		if valkey != "" || s.Version != s.RedisVersion {
			t.Errorf("%s: Redis with valkey_version %q, Version %q, RedisVersion %q", s.Addr, valkey, s.Version, s.RedisVersion)
		}
	}
}

// probeFeature asks the live server whether it has f, by using it. It
// leaves no keys behind.
func probeFeature(t *testing.T, s *Server, f Feature) bool {
	t.Helper()
	key := "redistest:probe:" + f.String()
	defer s.MustCmd(t, "DEL", key)
	switch f {
	case HashFieldExpiry:
		s.MustCmd(t, "HSET", key, "f", "v")
		out, err := s.Cmd(t, "HPEXPIRE", key, "60000", "FIELDS", "1", "f")
		if err != nil {
			return false
		}
		ttl := s.MustCmd(t, "HPTTL", key, "FIELDS", "1", "f")
		n, _ := strconv.Atoi(ttl)
		return out == "1" && n > 0 && n <= 60000
	case HashGetSetEx:
		if _, err := s.Cmd(t, "HSETEX", key, "PX", "60000", "FIELDS", "1", "f", "v"); err != nil {
			return false
		}
		out, err := s.Cmd(t, "HGETEX", key, "PERSIST", "FIELDS", "1", "f")
		return err == nil && out == "v"
	case SetIfEq:
		s.MustCmd(t, "SET", key, "a")
		if _, err := s.Cmd(t, "SET", key, "b", "IFEQ", "a"); err != nil {
			return false
		}
		_, err := s.Cmd(t, "SET", key, "c", "IFEQ", "a") // not equal: no write
		return s.MustCmd(t, "GET", key) == "b" && rueidis.IsRedisNil(err)
	case DelEx:
		s.MustCmd(t, "SET", key, "a")
		if _, err := s.Cmd(t, "DELEX", key, "IFEQ", "x"); err != nil {
			return false
		}
		out, err := s.Cmd(t, "DELEX", key, "IFEQ", "a")
		return err == nil && out == "1" && s.MustCmd(t, "EXISTS", key) == "0"
	}
	t.Fatalf("no probe for %v", f)
	return false
}

// TestEveryKindCluster starts each kind as a 3-master cluster: the cluster
// bus on Port+10000, keys spread over all nodes, and a restarted node
// rejoining.
func TestEveryKindCluster(t *testing.T) {
	t.Parallel()
	for _, k := range Kinds() {
		t.Run(k.String(), func(t *testing.T) {
			t.Parallel()
			c := StartCluster(t, 3, WithKind(k))
			if c.Kind != k || len(c.Servers) != 3 {
				t.Fatalf("Kind %v, %d servers", c.Kind, len(c.Servers))
			}
			for _, s := range c.Servers {
				checkVersions(t, s, k)
			}
			// Every node's bus port, as the others see it.
			nodes := c.Servers[0].MustCmd(t, "CLUSTER", "NODES")
			var seen []string
			for line := range strings.Lines(nodes) {
				f := strings.Fields(line)
				if len(f) < 2 {
					continue
				}
				hostport, _, _ := strings.Cut(f[1], ",") // ip:port@bus[,hostname]
				addr, bus, ok := strings.Cut(hostport, "@")
				_, portStr, _ := strings.Cut(addr, ":")
				port, _ := strconv.Atoi(portStr)
				if !ok || bus != strconv.Itoa(port+10000) {
					t.Errorf("%v: CLUSTER NODES line %q: bus port is not port+10000", k, strings.TrimSpace(line))
				}
				seen = append(seen, addr)
			}
			slices.Sort(seen)
			want := slices.Sorted(slices.Values(c.Addrs))
			if !slices.Equal(seen, want) {
				t.Errorf("CLUSTER NODES knows %v, want %v", seen, want)
			}

			checkClusterServes(t, c)
		})
	}
}

// TestEveryKindStartN starts two independent servers of each kind.
func TestEveryKindStartN(t *testing.T) {
	t.Parallel()
	for _, k := range Kinds() {
		t.Run(k.String(), func(t *testing.T) {
			t.Parallel()
			servers := StartN(t, 2, WithKind(k))
			if servers[0].Addr == servers[1].Addr {
				t.Fatalf("both on %s", servers[0].Addr)
			}
			for _, s := range servers {
				checkVersions(t, s, k)
			}
		})
	}
}

// fatalOf runs f with a fatalTB on its own goroutine and returns the Fatalf
// message ("" if f returned).
func fatalOf(t *testing.T, f func(tb testing.TB)) string {
	t.Helper()
	ft := &fatalTB{TB: t}
	var wg sync.WaitGroup
	wg.Go(func() { f(ft) })
	wg.Wait()
	return ft.msg
}

// TestMissingBinaryEveryKind: a missing binary of any kind fails (never
// skips) with a message naming the path, the variable and `make redis`,
// from Start, StartN and StartCluster alike.
func TestMissingBinaryEveryKind(t *testing.T) {
	for _, k := range Kinds() {
		path := "/nonexistent/" + k.String() + "/server"
		t.Setenv(k.EnvVar(), path)
		for name, f := range map[string]func(testing.TB){
			"Start":        func(tb testing.TB) { Start(tb, WithKind(k)) },
			"StartN":       func(tb testing.TB) { StartN(tb, 2, WithKind(k)) },
			"StartCluster": func(tb testing.TB) { StartCluster(tb, 3, WithKind(k)) },
		} {
			msg := fatalOf(t, f)
			for _, want := range []string{path, "$" + k.EnvVar(), "make redis", k.Product() + " " + k.Version()} {
				if !strings.Contains(msg, want) {
					t.Errorf("%v %s: Fatalf message %q lacks %q", k, name, msg, want)
				}
			}
		}
	}
}

// TestWrongKind: a variable that names another kind's binary fails the test
// with both kinds named, rather than testing the wrong server.
func TestWrongKind(t *testing.T) {
	valkey, err := findServer(Valkey81)
	if err != nil {
		t.Fatal(err)
	}
	redis8, err := findServer(Redis80)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		k    Kind
		bin  string
		want []string
	}{
		{Redis86, valkey, []string{"is Valkey 8.1.", "want Redis 8.6.x", "$COORDHOST_REDIS86_SERVER"}},
		{Valkey81, redis8, []string{"is Redis 8.0.", "want Valkey 8.1.x", "$COORDHOST_VALKEY8_SERVER"}},
		{Redis86, redis8, []string{"is Redis 8.0.", "want Redis 8.6.x"}},
	} {
		t.Setenv(tc.k.EnvVar(), tc.bin)
		msg := fatalOf(t, func(tb testing.TB) { Start(tb, WithKind(tc.k)) })
		for _, w := range tc.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%v as %v: Fatalf message %q lacks %q", tc.bin, tc.k, msg, w)
			}
		}
	}
}

func TestBadKindOption(t *testing.T) {
	for _, tc := range []struct {
		opt  Option
		want string
	}{
		{WithKind(0), "unknown server kind Kind(0)"},
		{WithKind(Kind(42)), "unknown server kind Kind(42)"},
		{Version(6), "unsupported Redis version 6"},
		{Version(9), "use WithKind for [redis-7.0 redis-8.0 redis-8.6 valkey-8.1]"},
	} {
		msg := fatalOf(t, func(tb testing.TB) { Start(tb, tc.opt) })
		if !strings.Contains(msg, tc.want) {
			t.Errorf("Fatalf message %q lacks %q", msg, tc.want)
		}
	}
	// A later valid option wins.
	s := Start(t, Version(9), WithKind(Redis80))
	if s.Kind != Redis80 {
		t.Errorf("Kind = %v", s.Kind)
	}
	if _, _, err := StartForExamples(9); err == nil || !strings.Contains(err.Error(), "unsupported Redis version 9") {
		t.Errorf("StartForExamples(9): %v", err)
	}
}
