package config

import (
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/policies"
	"github.com/google/go-cmp/cmp"
)

func TestRWLockBlock(t *testing.T) {
	cfg := mustParse(t, `
policy "starvation" "writers_first" {
  driver = "builtin"
  bound  = "200ms"
}
policy "retry" "quick" {
  driver = "builtin"
  kind   = "constant"
  delay  = "20ms"
}
policy "partition" "per_tenant" {
  driver   = "builtin"
  template = "$${tenant}"
}

rwlock "accounts" {
  ttl        = "30s"
  prefix     = "app:rw:"
  marker_ttl = "1s"
  starvation = policy.starvation.writers_first
  retry      = policy.retry.quick
  partition  = policy.partition.per_tenant
}

rwlock "plain" {
  ttl = "5s"
}
`, LoadOptions{})
	want := []*RWLock{{
		Name: "accounts", TTL: 30 * time.Second, Prefix: "app:rw:", MarkerTTL: time.Second,
		Starvation: &PolicyRef{Kind: policies.KindStarvation, Name: "writers_first"},
		Retry:      &PolicyRef{Kind: policies.KindRetry, Name: "quick"},
		Partition:  &PolicyRef{Kind: policies.KindPartition, Name: "per_tenant"},
	}, {Name: "plain", TTL: 5 * time.Second, Prefix: DefaultRWLockPrefix}}
	if diff := cmp.Diff(want, cfg.RWLocks, cmpOpts...); diff != "" {
		t.Fatalf("RWLocks (-want +got):\n%s", diff)
	}
	if cfg.RWLock("plain") != cfg.RWLocks[1] || cfg.RWLock("nope") != nil || cfg.Lock("plain") != nil {
		t.Fatal("RWLock lookup")
	}
	if r := cfg.RWLocks[0].Starvation.Range; r.Start.Line != 20 {
		t.Fatalf("starvation reference at line %d, want 20", r.Start.Line)
	}
}

// Each mistake in an rwlock block is one diagnostic on its line.
func TestRWLockMistakes(t *testing.T) {
	const policiesSrc = `policy "retry" "fast" {
  driver = "builtin"
  kind   = "none"
}
policy "starvation" "strict" {
  driver = "builtin"
  bound  = "0s"
}
`
	for _, tc := range []struct {
		name string
		src  string
		want wantDiag
	}{
		{"missing ttl", `rwlock "a" {}`, want(9, "Missing required argument", `"ttl"`)},
		{"ttl below 1ms", "rwlock \"a\" {\n  ttl = \"10us\"\n}", want(10, "Invalid ttl", "rwlock's ttl must be at least 1ms")},
		{"bad duration", "rwlock \"a\" {\n  ttl = \"soon\"\n}", want(10, "Invalid duration", `"soon"`)},
		{"marker_ttl too short", "rwlock \"a\" {\n  ttl = \"1s\"\n  marker_ttl = \"5ms\"\n}", want(11, "Invalid marker_ttl", "at least 30ms")},
		{"unknown argument", "rwlock \"a\" {\n  ttl = \"1s\"\n  starvaton = policy.starvation.strict\n}", want(11, "Unsupported argument", `Did you mean "starvation"?`)},
		{"starvation of the wrong kind", "rwlock \"a\" {\n  ttl = \"1s\"\n  starvation = policy.retry.fast\n}",
			want(11, "Wrong kind of policy", `Argument "starvation" of rwlock "a" takes a starvation policy`, "policy.retry.fast is a retry policy")},
		{"retry of the wrong kind", "rwlock \"a\" {\n  ttl = \"1s\"\n  retry = policy.starvation.strict\n}",
			want(11, "Wrong kind of policy", `Argument "retry" of rwlock "a" takes a retry policy`)},
		{"undeclared starvation policy", "rwlock \"a\" {\n  ttl = \"1s\"\n  starvation = policy.starvation.strikt\n}",
			want(11, "Reference to undeclared policy", `Did you mean "policy.starvation.strict"?`)},
		{"starvation as a string", "rwlock \"a\" {\n  ttl = \"1s\"\n  starvation = \"policy.starvation.strict\"\n}",
			want(11, "Invalid policy reference", "policy.starvation.NAME without quotes")},
		{"name with a slash", "rwlock \"a/b\" {\n  ttl = \"1s\"\n}", want(9, "Invalid rwlock name", `may not contain "/"`)},
		{"reserved name", "rwlock \"__coordhost:x\" {\n  ttl = \"1s\"\n}", want(9, "Invalid rwlock name", "reserved")},
		{"empty name", "rwlock \"\" {\n  ttl = \"1s\"\n}", want(9, "Invalid rwlock name", "non-empty")},
		{"duplicate", "rwlock \"a\" {\n  ttl = \"1s\"\n}\nrwlock \"a\" {\n  ttl = \"2s\"\n}", want(12, "Duplicate rwlock", `Rwlock "a" was already declared at`, "test.hcl:9")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, diags := Parse([]byte(policiesSrc+tc.src), "test.hcl", LoadOptions{})
			out := render(t, cfg, diags)
			if len(diags) != 1 {
				t.Fatalf("got %d diagnostics, want 1:\n%s", len(diags), out)
			}
			d := diags[0]
			if d.Subject == nil || d.Subject.Start.Line != tc.want.line || d.Subject.Filename != "test.hcl" {
				t.Fatalf("diagnostic at %v, want test.hcl line %d:\n%s", d.Subject, tc.want.line, out)
			}
			if !containsAll(text(d), tc.want.frags...) {
				t.Fatalf("diagnostic %q, want fragments %q", text(d), tc.want.frags)
			}
			if !strings.Contains(out, "rwlock") {
				t.Fatalf("the rendering shows no snippet:\n%s", out)
			}
		})
	}
}

// A lock and an rwlock may share a name: they are different blocks with
// different key prefixes.
func TestRWLockAndLockNamespaces(t *testing.T) {
	cfg := mustParse(t, "lock \"x\" {\n  ttl = \"1s\"\n}\nrwlock \"x\" {\n  ttl = \"1s\"\n}\n", LoadOptions{})
	if cfg.Lock("x") == nil || cfg.RWLock("x") == nil || cfg.Lock("x").Prefix == cfg.RWLock("x").Prefix {
		t.Fatal("lock and rwlock x")
	}
}
