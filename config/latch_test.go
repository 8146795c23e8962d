package config

import (
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/policies"
	"github.com/google/go-cmp/cmp"
)

func TestLatchBlocks(t *testing.T) {
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

latch "batch" {
  ttl       = "1h"
  recheck   = "500ms"
  prefix    = "b:"
  retry     = policy.retry.fast
  partition = policy.partition.tenant
}
latch "forever" {
  ttl = "none"
}
latch "plain" {}

lock "batch" {  # locks and latches have names of their own
  ttl = "1s"
}
`, LoadOptions{})
	want := []*Latch{
		{Name: "batch", TTL: time.Hour, Recheck: 500 * time.Millisecond, Prefix: "b:",
			Retry:     &PolicyRef{Kind: policies.KindRetry, Name: "fast"},
			Partition: &PolicyRef{Kind: policies.KindPartition, Name: "tenant"}},
		{Name: "forever", TTL: LatchNoExpiry, Prefix: DefaultLatchPrefix},
		{Name: "plain", Prefix: DefaultLatchPrefix},
	}
	if diff := cmp.Diff(want, cfg.Latches, cmpOpts...); diff != "" {
		t.Errorf("latches (-want +got):\n%s", diff)
	}
	if l := cfg.Latch("batch"); l == nil || l.Range.Start.Line != 12 || cfg.Latch("nope") != nil {
		t.Errorf("Latch lookups: %v", l)
	}
	if cfg.Lock("batch") == nil {
		t.Error("the lock named like a latch is missing")
	}
}

// Every mistake in a latch block is an error diagnostic on its line.
func TestLatchMistakes(t *testing.T) {
	for _, tc := range []struct {
		name string
		src  string
		line int
		frag []string
	}{
		{"unknown argument", "latch \"a\" {\n  count = 3\n}\n", 2, []string{"Unsupported argument", `"count"`}},
		{"empty name", "latch \"\" {}\n", 1, []string{"Invalid latch name"}},
		{"slash in name", "latch \"a/b\" {}\n", 1, []string{"Invalid latch name", `"/"`}},
		{"reserved name", "latch \"__coordhost:x\" {}\n", 1, []string{"Invalid latch name", "reserved"}},
		{"duplicate", "latch \"a\" {}\nlatch \"a\" {}\n", 2, []string{"Duplicate latch", "test.hcl:1"}},
		{"bad ttl", "latch \"a\" {\n  ttl = \"soon\"\n}\n", 2, []string{"Invalid duration", `"none"`}},
		{"zero ttl", "latch \"a\" {\n  ttl = \"0s\"\n}\n", 2, []string{"Invalid ttl", "none"}},
		{"sub-ms ttl", "latch \"a\" {\n  ttl = \"10us\"\n}\n", 2, []string{"Invalid ttl"}},
		{"ttl above 100 years", "latch \"a\" {\n  ttl = \"900000h\"\n}\n", 2, []string{"Invalid ttl", "100 years"}},
		{"negative ttl", "latch \"a\" {\n  ttl = \"-1s\"\n}\n", 2, []string{"must not be negative"}},
		{"number ttl", "latch \"a\" {\n  ttl = 5\n}\n", 2, []string{"ttl"}},
		{"short recheck", "latch \"a\" {\n  recheck = \"1ms\"\n}\n", 2, []string{"Invalid recheck", "10ms"}},
		{"string retry", "latch \"a\" {\n  retry = \"fast\"\n}\n", 2, []string{"Invalid policy reference"}},
		{"undeclared retry", "latch \"a\" {\n  retry = policy.retry.fast\n}\n", 2, []string{"undeclared policy", `"fast"`}},
		{"wrong kind", "policy \"partition\" \"p\" {\n  driver = \"builtin\"\n  template = \"x\"\n}\nlatch \"a\" {\n  retry = policy.partition.p\n}\n", 6,
			[]string{"Wrong kind of policy", `of latch "a"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, diags := Parse([]byte(tc.src), "test.hcl", LoadOptions{})
			if !diags.HasErrors() {
				t.Fatal("accepted")
			}
			d := diags[0]
			text := d.Summary + ": " + d.Detail
			if d.Subject == nil || d.Subject.Start.Line != tc.line || !containsAll(text, tc.frag...) {
				t.Fatalf("got %v at %v; want line %d with %q\n%s", text, d.Subject, tc.line, tc.frag, render(t, cfg, diags))
			}
			if len(diags) != 1 {
				t.Errorf("%d diagnostics, want 1:\n%s", len(diags), render(t, cfg, diags))
			}
			if strings.Contains(render(t, cfg, diags), "lock") && tc.name == "wrong kind" {
				t.Errorf("a latch's diagnostic calls it a lock")
			}
		})
	}
}
