package config

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/hcl/v2"
)

func TestRedlockBlock(t *testing.T) {
	cfg := mustParse(t, `
policy "retry" "fast" {
  driver = "builtin"
  kind   = "constant"
  delay  = "10ms"
}
policy "partition" "tenant" {
  driver   = "builtin"
  template = "$${tenant}"
}
redlock "invoice" {
  addresses    = ["10.0.0.1:6379", "10.0.0.2:6379", "[::1]:6379", "/run/redis.sock", "node-e:7000"]
  ttl          = "10s"
  max_ttl      = "30s"
  node_timeout = "50ms"
  drift        = "5ms"
  drift_factor = 0.02
  username     = "app"
  password     = "secret"
  prefix       = "rl:"
  retry        = policy.retry.fast
  partition    = policy.partition.tenant
}
redlock "plain" {
  addresses = ["a:1", "b:1", "c:1"]
  ttl       = "1s"
}
`, LoadOptions{})
	want := []*Redlock{{
		Name:      "invoice",
		Addresses: []string{"10.0.0.1:6379", "10.0.0.2:6379", "[::1]:6379", "/run/redis.sock", "node-e:7000"},
		TTL:       10 * time.Second, MaxTTL: 30 * time.Second, NodeTimeout: 50 * time.Millisecond,
		Drift: 5 * time.Millisecond, DriftFactor: 0.02, Username: "app", Password: "secret", Prefix: "rl:",
		Retry:     &PolicyRef{Kind: "retry", Name: "fast"},
		Partition: &PolicyRef{Kind: "partition", Name: "tenant"},
	}, {
		Name: "plain", Addresses: []string{"a:1", "b:1", "c:1"}, TTL: time.Second,
		MaxTTL: DefaultRedlockMaxTTL, Prefix: DefaultRedlockPrefix,
	}}
	if diff := cmp.Diff(want, cfg.Redlocks, cmpOpts...); diff != "" {
		t.Fatalf("Redlocks (-want +got):\n%s", diff)
	}
	if cfg.Redlock("plain") != cfg.Redlocks[1] || cfg.Redlock("none") != nil {
		t.Fatal("Config.Redlock")
	}
}

// Each mistake in a redlock block is one error diagnostic on the line of
// the mistake (the list element, when the list is written literally).
func TestRedlockMistakes(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []wantDiag
	}{
		{"even count", `redlock "r" {
  addresses = ["a:1", "b:1", "c:1", "d:1"]
  ttl       = "1s"
}`, []wantDiag{want(2, "Even number of redlock nodes", "4 nodes", "3 or 5")}},
		{"too few", `redlock "r" {
  addresses = ["a:1"]
  ttl       = "1s"
}`, []wantDiag{want(2, "Too few redlock nodes", "at least 3")}},
		{"none", `redlock "r" {
  addresses = []
  ttl       = "1s"
}`, []wantDiag{want(2, "Too few redlock nodes")}},
		{"duplicate", `redlock "r" {
  addresses = [
    "a:1",
    "b:1",
    "A:1",
  ]
  ttl = "1s"
}`, []wantDiag{want(5, "Duplicate redlock node", `element 0, "a:1"`)}},
		{"bad address", `redlock "r" {
  addresses = [
    "a:1",
    "b",
    "c:1",
  ]
  ttl = "1s"
}`, []wantDiag{want(4, "Invalid redlock node address", "missing port")}},
		{"ttl above max_ttl", `redlock "r" {
  addresses = ["a:1", "b:1", "c:1"]
  ttl       = "2m"
}`, []wantDiag{want(3, "Invalid ttl", "max_ttl (1m0s)")}},
		{"ttl within the drift", `redlock "r" {
  addresses = ["a:1", "b:1", "c:1"]
  ttl       = "2ms"
}`, []wantDiag{want(3, "Invalid ttl", "drift allowance")}},
		{"ttl within node_timeout", `redlock "r" {
  addresses    = ["a:1", "b:1", "c:1"]
  node_timeout = "1s"
  ttl          = "500ms"
}`, []wantDiag{want(4, "Invalid ttl", "node_timeout")}},
		{"drift_factor", `redlock "r" {
  addresses    = ["a:1", "b:1", "c:1"]
  ttl          = "1s"
  drift_factor = 0.7
}`, []wantDiag{want(4, "Invalid drift_factor", "below 0.5")}},
		{"zero node_timeout", `redlock "r" {
  addresses    = ["a:1", "b:1", "c:1"]
  ttl          = "1s"
  node_timeout = "0s"
}`, []wantDiag{want(4, "Invalid duration", "above zero")}},
		{"missing addresses", `redlock "r" {
  ttl = "1s"
}`, []wantDiag{want(1, "Missing required argument", `"addresses"`)}},
		{"bad name", `redlock "a/b" {
  addresses = ["a:1", "b:1", "c:1"]
  ttl       = "1s"
}`, []wantDiag{want(1, "Invalid redlock name")}},
		{"duplicate name", `redlock "r" {
  addresses = ["a:1", "b:1", "c:1"]
  ttl       = "1s"
}
redlock "r" {
  addresses = ["a:1", "b:1", "c:1"]
  ttl       = "1s"
}`, []wantDiag{want(5, "Duplicate redlock", "already declared")}},
		{"wrong kind of policy", `policy "partition" "p" {
  driver   = "builtin"
  template = "x"
}
redlock "r" {
  addresses = ["a:1", "b:1", "c:1"]
  ttl       = "1s"
  retry     = policy.partition.p
}`, []wantDiag{want(8, "Wrong kind of policy", `of redlock "r" takes a retry policy`)}},
		{"undeclared policy", `redlock "r" {
  addresses = ["a:1", "b:1", "c:1"]
  ttl       = "1s"
  retry     = policy.retry.nope
}`, []wantDiag{want(4, "Reference to undeclared policy")}},
		{"unknown argument", `redlock "r" {
  addresses = ["a:1", "b:1", "c:1"]
  ttl       = "1s"
  nodes     = 3
}`, []wantDiag{want(4, "Unsupported argument")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, diags := Parse([]byte(tc.src), "redlock.hcl", LoadOptions{})
			if len(diags) != len(tc.want) {
				t.Fatalf("%d diagnostics, want %d:\n%s", len(diags), len(tc.want), render(t, cfg, diags))
			}
			for i, w := range tc.want {
				d := diags[i]
				if d.Subject == nil || d.Subject.Start.Line != w.line || !containsAll(text(d), w.frags...) || d.Severity != hcl.DiagError {
					t.Errorf("diagnostic %d: %s (line %v), want line %d with %q", i, text(d), lines(diags), w.line, w.frags)
				}
			}
			if out := render(t, cfg, diags); !strings.Contains(out, "on redlock.hcl line ") {
				t.Errorf("rendering lacks the position:\n%s", out)
			}
		})
	}
}
