package redistest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	var opts []goleak.Option
	for _, f := range LingeringGoroutines() {
		opts = append(opts, goleak.IgnoreAnyFunction(f))
	}
	goleak.VerifyTestMain(m, opts...)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestStart7(t *testing.T) {
	t.Parallel()
	s := Start(t)
	if !strings.HasPrefix(s.Version, "7.") {
		t.Fatalf("Version = %q, want 7.x", s.Version)
	}
	if got := s.MustCmd(t, "CONFIG", "GET", "save"); got != "save\n" {
		t.Errorf("CONFIG GET save = %q, want empty save", got)
	}
	if got := s.MustCmd(t, "CONFIG", "GET", "appendonly"); got != "appendonly\nno" {
		t.Errorf("CONFIG GET appendonly = %q", got)
	}
	ctx := ctxT(t)
	c := s.Client(t)
	if err := c.Do(ctx, c.B().Set().Key("k").Value("v").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if got := s.MustCmd(t, "DBSIZE"); got != "1" {
		t.Errorf("DBSIZE = %q, want 1", got)
	}
	if _, err := s.Cmd(t, "GET", "missing"); !rueidis.IsRedisNil(err) {
		t.Errorf("GET missing: err = %v, want nil reply", err)
	}
	// ClientField: a named connection's fields, and none for a name
	// nobody set.
	named := s.Client(t, func(o *rueidis.ClientOption) { o.ClientName = "redistest-named" })
	if err := named.Do(ctx, named.B().Ping().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if id, ok := s.ClientField(t, "redistest-named", "id"); !ok || id == "" {
		t.Errorf("ClientField(redistest-named, id) = %q, %v", id, ok)
	}
	if sub, ok := s.ClientField(t, "redistest-named", "sub"); !ok || sub != "0" {
		t.Errorf("ClientField(redistest-named, sub) = %q, %v; want 0", sub, ok)
	}
	if v, ok := s.ClientField(t, "redistest-named", "nosuchfield"); !ok || v != "" {
		t.Errorf("ClientField(redistest-named, nosuchfield) = %q, %v; want \"\", true", v, ok)
	}
	if v, ok := s.ClientField(t, "redistest-nobody", "id"); ok || v != "" {
		t.Errorf("ClientField of a name nobody set = %q, %v", v, ok)
	}
	if _, err := s.Cmd(t, "NOSUCHCOMMAND"); err == nil {
		t.Error("unknown command: no error")
	}
	if got := s.MustCmd(t, "INFO", "server"); infoField(got, "redis_version") != s.Version {
		t.Errorf("INFO server has no redis_version %s:\n%s", s.Version, got)
	}

	// Pause: every thread is stopped when it returns, and nothing is
	// answered until Resume.
	if ProcessStopped(s.PID()) {
		t.Error("ProcessStopped before Pause")
	}
	s.Pause()
	if !ProcessStopped(s.PID()) {
		t.Error("a thread of the server still runs after Pause returned")
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err := s.Do(short, "PING").Error()
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("PING while paused: err = %v, want deadline exceeded", err)
	}
	s.Resume()
	if got := s.MustCmd(t, "PING"); got != "PONG" {
		t.Errorf("PING after resume = %q", got)
	}
	if ProcessStopped(s.PID()) {
		t.Error("ProcessStopped after Resume and a PONG")
	}
	if ProcessStopped(1 << 30) {
		t.Error("ProcessStopped of a process that does not exist")
	}

	// Restart: same address, empty data set, clients reconnect.
	pid := s.PID()
	s.Restart(t)
	if s.PID() == pid || s.PID() == 0 {
		t.Errorf("PID after restart = %d (was %d)", s.PID(), pid)
	}
	waitFor(t, func(ctx context.Context) error {
		n, err := c.Do(ctx, c.B().Dbsize().Build()).AsInt64()
		if err == nil && n != 0 {
			return fmt.Errorf("DBSIZE %d after restart", n)
		}
		return err
	})
	if got := s.MustCmd(t, "DBSIZE"); got != "0" {
		t.Errorf("DBSIZE after restart = %q", got)
	}

	s.Stop()
	if s.PID() != 0 {
		t.Errorf("PID after Stop = %d", s.PID())
	}
	if !strings.Contains(s.Log(), "Ready to accept connections") {
		t.Errorf("log lacks the ready line:\n%s", s.Log())
	}
	s.Stop() // idempotent
}

func TestStart8(t *testing.T) {
	t.Parallel()
	s := Start(t, Version(8), Args("--maxmemory", "10mb"))
	if !strings.HasPrefix(s.Version, "8.") {
		t.Fatalf("Version = %q, want 8.x", s.Version)
	}
	if got := s.MustCmd(t, "CONFIG", "GET", "maxmemory"); got != "maxmemory\n10485760" {
		t.Errorf("Args not applied: CONFIG GET maxmemory = %q", got)
	}
	ctx := ctxT(t)
	c := s.Client(t)
	if err := c.Do(ctx, c.B().Hset().Key("h").FieldValue().FieldValue("f", "v").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	// Hash-field expiry exists on 8.0 (not on 7.0).
	if got := s.MustCmd(t, "HPEXPIRE", "h", "60000", "FIELDS", "1", "f"); got != "1" {
		t.Errorf("HPEXPIRE = %q, want 1", got)
	}
	s.Restart(t)
	if got := s.MustCmd(t, "DBSIZE"); got != "0" {
		t.Errorf("DBSIZE after restart = %q", got)
	}
}

func TestStartN(t *testing.T) {
	t.Parallel()
	servers := StartN(t, 3)
	seen := map[string]bool{}
	for _, s := range servers {
		if seen[s.Addr] {
			t.Fatalf("address %s twice", s.Addr)
		}
		seen[s.Addr] = true
	}
	servers[0].MustCmd(t, "SET", "k", "v")
	for i, s := range servers {
		want := "0"
		if i == 0 {
			want = "1"
		}
		if got := s.MustCmd(t, "DBSIZE"); got != want {
			t.Errorf("server %d DBSIZE = %q, want %s", i, got, want)
		}
	}
}

func TestStartCluster(t *testing.T) {
	t.Parallel()
	c := StartCluster(t, 3)
	if len(c.Addrs) != 3 || len(c.Servers) != 3 {
		t.Fatalf("%d addrs, %d servers", len(c.Addrs), len(c.Servers))
	}
	checkClusterServes(t, c)
}

// checkClusterServes writes keys through a cluster client and checks that
// they spread over all three masters, that NodeForKey names the holder, and
// that a restarted node rejoins (with its nodes.conf, without its data).
func checkClusterServes(t *testing.T, c *Cluster) {
	t.Helper()
	ctx := ctxT(t)
	client := c.Client(t)
	const keys = 30
	for i := range keys {
		k := "key:" + strconv.Itoa(i)
		if err := client.Do(ctx, client.B().Set().Key(k).Value("v").Build()).Error(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
	}
	total, nodesWithKeys := 0, 0
	c.EachNode(t, func(s *Server) {
		n, err := strconv.Atoi(s.MustCmd(t, "DBSIZE"))
		if err != nil {
			t.Fatal(err)
		}
		total += n
		if n > 0 {
			nodesWithKeys++
		}
	})
	if total != keys || nodesWithKeys != 3 {
		t.Errorf("keys spread: total %d on %d nodes, want %d on 3", total, nodesWithKeys, keys)
	}
	owner := c.NodeForKey(t, "key:7")
	if got := owner.MustCmd(t, "EXISTS", "key:7"); got != "1" {
		t.Errorf("NodeForKey(key:7) = %s, which does not hold it", owner.Addr)
	}

	owner.Restart(t)
	c.WaitReady(t)
	waitFor(t, func(ctx context.Context) error {
		return client.Do(ctx, client.B().Set().Key("key:7").Value("w").Build()).Error()
	})
}

func TestMissingBinary(t *testing.T) {
	t.Setenv("COORDHOST_REDIS8_SERVER", "/nonexistent/redis-server")
	ft := &fatalTB{TB: t}
	var wg sync.WaitGroup
	wg.Go(func() { Start(ft, Version(8)) })
	wg.Wait()
	if !strings.Contains(ft.msg, "/nonexistent/redis-server") || !strings.Contains(ft.msg, "make redis") {
		t.Errorf("Fatalf message = %q", ft.msg)
	}
	// The replicated topologies fail the same way (never skip).
	for name, f := range map[string]func(testing.TB){
		"StartSentinel": func(t testing.TB) { StartSentinel(t, 1, Version(8)) },
		"StartCluster":  func(t testing.TB) { StartCluster(t, 2, Version(8), WithReplicas(1)) },
	} {
		if msg := fatalOf(t, f); !strings.Contains(msg, "/nonexistent/redis-server") {
			t.Errorf("%s: Fatalf message = %q", name, msg)
		}
	}
}

// fatalTB records Fatalf and ends the goroutine like testing.T does.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		in   any
		want string
	}{
		{nil, ""},
		{"OK", "OK"},
		{int64(-3), "-3"},
		{1.5, "1.5"},
		{true, "1"},
		{[]any{"a", int64(1), []any{"b", "c"}}, "a\n1\n[b c]"},
		{map[string]any{"b": int64(2), "a": "x"}, "a x\nb 2"},
	} {
		if got := format(tc.in, "\n"); got != tc.want {
			t.Errorf("format(%#v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func waitFor(t *testing.T, f func(ctx context.Context) error) {
	t.Helper()
	// A context of its own: a test's context may have run out in the
	// failover before (a loaded machine).
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var err error
	for ctx.Err() == nil {
		if err = f(ctx); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("still failing after 10s: %v", err)
}

func TestStartCluster8(t *testing.T) {
	t.Parallel()
	c := StartCluster(t, 2, Version(8))
	for _, s := range c.Servers {
		if !strings.HasPrefix(s.Version, "8.") {
			t.Errorf("%s runs %s", s.Addr, s.Version)
		}
	}
	client := c.Client(t)
	ctx := ctxT(t)
	for _, k := range []string{"{a}", "{b}", "{c}", "{d}"} {
		if err := client.Do(ctx, client.B().Set().Key(k).Value("v").Build()).Error(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
		if got := c.NodeForKey(t, k).MustCmd(t, "GET", k); got != "v" {
			t.Errorf("GET %s on its node = %q", k, got)
		}
	}
}

// Env reaches the server process, and a Restart keeps it: jemalloc reads
// MALLOC_CONF, and MEMORY MALLOC-STATS shows what it read. (The
// environment itself cannot be read back: Redis overwrites it with its
// process title.)
func TestEnv(t *testing.T) {
	s := Start(t, Env("MALLOC_CONF=narenas:3"))
	for range 2 {
		if stats := s.MustCmd(t, "MEMORY", "MALLOC-STATS"); !strings.Contains(stats, "opt.narenas: 3") {
			t.Fatalf("MALLOC_CONF did not reach the server:\n%.2000s", stats)
		}
		s.Restart(t)
	}
}
