package host_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/config"
	"github.com/coordhost/coordhost/host"
	"github.com/coordhost/coordhost/internal/redistest"
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
