package host_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/config"
	"github.com/coordhost/coordhost/host"
	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
)

// ServerHazards names each setting that breaks coordhost's guarantees, and
// none on a server configured as the docs ask.
func TestServerHazards(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cases := []struct {
		name string
		args []string
		want []string // substrings, one per expected hazard
	}{
		{"safe", []string{"--appendonly", "yes", "--maxmemory", "100mb", "--maxmemory-policy", "noeviction"}, nil},
		{"no limit, any policy", []string{"--appendonly", "yes", "--maxmemory-policy", "allkeys-lru"}, nil},
		{"evicting", []string{"--appendonly", "yes", "--maxmemory", "100mb", "--maxmemory-policy", "volatile-lru"}, []string{`maxmemory-policy is "volatile-lru"`}},
		{"evicting and no persistence", []string{"--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru"}, []string{`maxmemory-policy is "allkeys-lru"`, "no persistence"}},
		{"no persistence", nil, []string{"no persistence"}},
		{"rdb only", []string{"--save", "3600 1"}, []string{"snapshots only"}},
		{"appendfsync no", []string{"--appendonly", "yes", "--appendfsync", "no"}, []string{"appendfsync no"}},
		{"appendfsync everysec", []string{"--appendonly", "yes", "--appendfsync", "everysec"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := redistest.Start(t, redistest.Args(tc.args...))
			before := s.MustCmd(t, "DBSIZE")
			got, err := host.ServerHazards(ctx, s.Client(t))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("hazards %q, want %d matching %q", got, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("hazard %q does not say %q", got[i], w)
				}
			}
			if after := s.MustCmd(t, "DBSIZE"); after != before {
				t.Fatalf("the check wrote: DBSIZE %s -> %s", before, after)
			}
		})
	}
	t.Run("replica", func(t *testing.T) {
		srv := redistest.StartN(t, 2, redistest.Args("--appendonly", "yes"))
		srv[1].MustCmd(t, "REPLICAOF", "127.0.0.1", strings.TrimPrefix(srv[0].Addr, "127.0.0.1:"))
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(srv[0].MustCmd(t, "INFO", "replication"), "connected_slaves:1") {
			if time.Now().After(deadline) {
				t.Fatal("replica did not connect")
			}
			time.Sleep(50 * time.Millisecond)
		}
		got, err := host.ServerHazards(ctx, srv[0].Client(t))
		if err != nil || len(got) != 1 || !strings.Contains(got[0], "1 replica(s)") {
			t.Fatalf("hazards %q, %v", got, err)
		}
	})
	t.Run("bad input", func(t *testing.T) {
		s := redistest.Start(t)
		c := s.Client(t)
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		for name, call := range map[string]func() ([]string, error){
			"nil client":    func() ([]string, error) { return host.ServerHazards(ctx, nil) },
			"nil ctx":       func() ([]string, error) { return host.ServerHazards(nil, c) }, //nolint:staticcheck // the bad input under test
			"cancelled ctx": func() ([]string, error) { return host.ServerHazards(cancelled, c) },
		} {
			if got, err := call(); err == nil || got != nil {
				t.Errorf("%s: %q, %v; want an error", name, got, err)
			}
		}
	})
	t.Run("INFO refused", func(t *testing.T) {
		s := redistest.Start(t)
		s.MustCmd(t, "ACL", "SETUSER", "default", "-info")
		got, err := host.ServerHazards(ctx, s.Client(t))
		if err == nil || !strings.Contains(err.Error(), "INFO replication") {
			t.Fatalf("refused INFO: %v", err)
		}
		if len(got) != 1 || !strings.Contains(got[0], "no persistence") {
			t.Fatalf("the hazards CONFIG showed are lost: %q", got)
		}
	})
	t.Run("CONFIG refused", func(t *testing.T) {
		s := redistest.Start(t)
		s.MustCmd(t, "ACL", "SETUSER", "default", "-config")
		_, err := host.ServerHazards(ctx, s.Client(t))
		if err == nil || !strings.Contains(err.Error(), "CONFIG GET") {
			t.Fatalf("refused CONFIG: %v", err)
		}
	})
}

// The eviction hazard says what each maxmemory-policy can evict of
// coordhost's keys, as TestHazardEviction (internal/hazards) measured: a
// volatile-* policy the keys with a TTL (held locks among them) but no
// fencing counter or lease hash; an allkeys-* policy any key, fencing
// counters too. Every policy each server kind accepts is covered (Redis
// 8.6 adds the *-lrm pair).
func TestServerHazardsPerEvictionPolicy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	volatile := []string{"keys that have a TTL", "held locks (another client is then granted a lock its holder still uses)",
		"fencing counters and hash-field lease hashes have no TTL and stay", "set maxmemory-policy noeviction"}
	allkeys := []string{"any key", "held locks", "fencing counters, after which fencing tokens restart at 1", "set maxmemory-policy noeviction"}
	order := map[string]string{
		"lru": "least recently used first", "lfu": "least frequently used first",
		"lrm": "least recently modified first", "random": "at random", "ttl": "nearest their expiry first",
	}
	for _, k := range redistest.Kinds() {
		s := redistest.Start(t, redistest.WithKind(k), redistest.Args("--appendonly", "yes", "--maxmemory", "100mb"))
		c := s.Client(t)
		// The server lists the policies it accepts when it refuses one.
		_, err := s.Cmd(t, "CONFIG", "SET", "maxmemory-policy", "no-such-policy")
		if err == nil {
			t.Fatalf("%s accepted maxmemory-policy no-such-policy", k)
		}
		_, list, ok := strings.Cut(err.Error(), "one of the following:")
		if !ok {
			t.Fatalf("%s: cannot read the policies from %v", k, err)
		}
		policies := strings.Split(strings.TrimSpace(list), ", ")
		if len(policies) < 8 {
			t.Fatalf("%s: policies %q", k, policies)
		}
		for _, p := range policies {
			t.Run(k.String()+"/"+p, func(t *testing.T) {
				s.MustCmd(t, "CONFIG", "SET", "maxmemory-policy", p)
				got, err := host.ServerHazards(ctx, c)
				if err != nil {
					t.Fatal(err)
				}
				if p == "noeviction" {
					if len(got) != 0 {
						t.Fatalf("noeviction: hazards %q", got)
					}
					return
				}
				if len(got) != 1 {
					t.Fatalf("hazards %q, want one", got)
				}
				kind, by, _ := strings.Cut(p, "-")
				want := append([]string{fmt.Sprintf("maxmemory-policy is %q with maxmemory \"104857600\"", p), order[by]}, allkeys...)
				if kind == "volatile" {
					want = append(want[:2], volatile...)
				}
				for _, w := range want {
					if !strings.Contains(got[0], w) {
						t.Errorf("%q does not say %q", got[0], w)
					}
				}
				if kind == "volatile" && strings.Contains(got[0], "restart at 1") {
					t.Errorf("%q: a volatile policy does not evict fencing counters", got[0])
				}
				t.Logf("%s", got[0])
			})
		}
	}
}

// A reload checks the settings again: a policy set with CONFIG SET
// since the last check is warned about once, and its going away is
// logged too.
func TestReloadRechecksServerHazards(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := redistest.Start(t, redistest.Args("--appendonly", "yes"))
	path := filepath.Join(t.TempDir(), "c.hcl")
	if err := os.WriteFile(path, []byte(fmt.Sprintf("redis {\n  addresses = [%q]\n}\n", s.Addr)), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, diags := config.Load(path, config.LoadOptions{})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	var logs xtest.SyncBuffer
	h, err := host.New(ctx, cfg, host.Options{
		Logger:       slog.New(slog.NewTextHandler(&logs, nil)),
		WasmCacheDir: t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	const warn, gone = "redis setting weakens", "no longer weakens"
	count := func(what string) int { return strings.Count(logs.String(), what) }
	if n := count(warn); n != 0 {
		t.Fatalf("%d warnings at start on a safe server:\n%s", n, logs.String())
	}
	s.MustCmd(t, "CONFIG", "SET", "maxmemory", "100mb")
	s.MustCmd(t, "CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
	for range 2 {
		if err := h.Reload(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := count(warn); n != 1 || !strings.Contains(logs.String(), `maxmemory-policy is \"allkeys-lru\"`) {
		t.Fatalf("after two reloads on an allkeys-lru server: %d warnings, want 1:\n%s", n, logs.String())
	}
	s.MustCmd(t, "CONFIG", "SET", "maxmemory-policy", "noeviction")
	if err := h.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if count(gone) != 1 || count(warn) != 1 {
		t.Fatalf("after noeviction and a reload: want one \"no longer\" line:\n%s", logs.String())
	}
}

// The Host checks its Redlock nodes too, for what matters to a Redlock:
// a policy that can evict its keys and replicas behind a node's address,
// but not persistence (the restart guard covers a node that forgot).
func TestServerHazardsOfRedlockNodes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	main := redistest.Start(t, redistest.Args("--appendonly", "yes"))
	nodes := []*redistest.Server{
		redistest.Start(t),
		redistest.Start(t, redistest.Args("--maxmemory", "100mb", "--maxmemory-policy", "volatile-ttl")),
		redistest.Start(t),
	}
	replica := redistest.Start(t)
	replica.MustCmd(t, "REPLICAOF", "127.0.0.1", strconv.Itoa(nodes[2].Port))
	xtest.Eventually(t, 10*time.Second, "the replica connected", func() bool {
		return strings.Contains(nodes[2].MustCmd(t, "INFO", "replication"), "connected_slaves:1")
	})
	src := fmt.Sprintf("redis {\n  addresses = [%q]\n}\nredlock \"r\" {\n  addresses = [%q, %q, %q]\n  ttl = \"1s\"\n}\n",
		main.Addr, nodes[0].Addr, nodes[1].Addr, nodes[2].Addr)
	cfg, diags := config.Parse([]byte(src), "c.hcl", config.LoadOptions{})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	var logs xtest.SyncBuffer
	h, err := host.New(ctx, cfg, host.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil)), WasmCacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	h.Close()
	out := logs.String()
	for _, want := range []string{
		fmt.Sprintf(`Redlock node %s: maxmemory-policy is \"volatile-ttl\"`, nodes[1].Addr),
		fmt.Sprintf(`Redlock node %s has 1 replica(s)`, nodes[2].Addr),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no warning %q in:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "redis setting weakens"); n != 2 {
		t.Errorf("%d warnings, want the two about Redlock nodes (no persistence warning for them):\n%s", n, out)
	}
}

// host.New logs each hazard as a warning, unless SkipServerCheck.
func TestNewWarnsAboutServerHazards(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := redistest.Start(t) // no persistence
	cfg, diags := config.Parse([]byte(fmt.Sprintf("redis {\n  addresses = [%q]\n}\n", s.Addr)), "c.hcl", config.LoadOptions{})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	for _, skip := range []bool{false, true} {
		var logs strings.Builder
		h, err := host.New(ctx, cfg, host.Options{
			Logger:          slog.New(slog.NewTextHandler(&logs, nil)),
			WasmCacheDir:    t.TempDir(),
			SkipServerCheck: skip,
		})
		if err != nil {
			t.Fatal(err)
		}
		h.Close()
		if got := strings.Contains(logs.String(), "no persistence"); got == skip {
			t.Errorf("SkipServerCheck=%v: warned=%v; logs:\n%s", skip, got, logs.String())
		}
	}
}
