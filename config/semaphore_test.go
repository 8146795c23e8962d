package config

import (
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/policies"
	"github.com/google/go-cmp/cmp"
)

func TestSemaphoreBlocks(t *testing.T) {
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

semaphore "workers" {
  capacity  = 8
  ttl       = "30s"
  prefix    = "w:"
  retry     = policy.retry.fast
  partition = policy.partition.tenant
}
semaphore "forever" {
  capacity = 1000000000
  ttl      = "none"
}
semaphore "plain" {
  capacity = 1
  ttl      = "1ms"
}

lock "workers" {  # locks and semaphores have names of their own
  ttl = "1s"
}
`, LoadOptions{})
	want := []*Semaphore{
		{Name: "workers", Capacity: 8, TTL: 30 * time.Second, Prefix: "w:",
			Retry:     &PolicyRef{Kind: policies.KindRetry, Name: "fast"},
			Partition: &PolicyRef{Kind: policies.KindPartition, Name: "tenant"}},
		{Name: "forever", Capacity: MaxSemaphoreCapacity, TTL: SemaphoreNoExpiry, Prefix: DefaultSemaphorePrefix},
		{Name: "plain", Capacity: 1, TTL: time.Millisecond, Prefix: DefaultSemaphorePrefix},
	}
	if diff := cmp.Diff(want, cfg.Semaphores, cmpOpts...); diff != "" {
		t.Errorf("semaphores (-want +got):\n%s", diff)
	}
	if s := cfg.Semaphore("workers"); s == nil || s.Range.Start.Line != 12 || cfg.Semaphore("nope") != nil {
		t.Errorf("Semaphore lookups: %v", s)
	}
	if r := cfg.Semaphore("workers").Partition.Range; r.Start.Line != 17 {
		t.Errorf("partition reference at line %d, want 17", r.Start.Line)
	}
	if cfg.Lock("workers") == nil || cfg.Lock("workers").Prefix == cfg.Semaphore("workers").Prefix {
		t.Error("the lock named like a semaphore is missing or shares its prefix")
	}
}

// Every mistake in a semaphore block is one error diagnostic on its line,
// naming the block as a semaphore.
func TestSemaphoreMistakes(t *testing.T) {
	const head = "semaphore \"a\" {\n  capacity = 2\n  ttl = \"1s\"\n"
	for _, tc := range []struct {
		name string
		src  string
		line int
		frag []string
	}{
		{"missing capacity", "semaphore \"a\" {\n  ttl = \"1s\"\n}\n", 1, []string{"Missing required argument", `"capacity"`}},
		{"missing ttl", "semaphore \"a\" {\n  capacity = 2\n}\n", 1, []string{"Missing required argument", `"ttl"`}},
		{"zero capacity", "semaphore \"a\" {\n  capacity = 0\n  ttl = \"1s\"\n}\n", 2, []string{"Invalid capacity", "from 1 to 1000000000", "got 0"}},
		{"negative capacity", "semaphore \"a\" {\n  capacity = -3\n  ttl = \"1s\"\n}\n", 2, []string{"Invalid capacity", "got -3"}},
		{"capacity above the maximum", "semaphore \"a\" {\n  capacity = 1000000001\n  ttl = \"1s\"\n}\n", 2, []string{"Invalid capacity", "got 1000000001"}},
		{"fractional capacity", "semaphore \"a\" {\n  capacity = 2.5\n  ttl = \"1s\"\n}\n", 2, []string{"Invalid capacity", "got 2.5"}},
		{"capacity as a word", "semaphore \"a\" {\n  capacity = \"ten\"\n  ttl = \"1s\"\n}\n", 2, []string{"Incorrect attribute value type", `"capacity"`}},
		{"null capacity", "semaphore \"a\" {\n  capacity = null\n  ttl = \"1s\"\n}\n", 2, []string{"Null value", `"capacity"`}},
		{"bad ttl", "semaphore \"a\" {\n  capacity = 2\n  ttl = \"soon\"\n}\n", 3, []string{"Invalid duration", `"none"`}},
		{"zero ttl", "semaphore \"a\" {\n  capacity = 2\n  ttl = \"0s\"\n}\n", 3, []string{"Invalid ttl", "none"}},
		{"sub-ms ttl", "semaphore \"a\" {\n  capacity = 2\n  ttl = \"10us\"\n}\n", 3, []string{"Invalid ttl", "1ms"}},
		{"ttl above 100 years", "semaphore \"a\" {\n  capacity = 2\n  ttl = \"900000h\"\n}\n", 3, []string{"Invalid ttl", "100 years"}},
		{"negative ttl", "semaphore \"a\" {\n  capacity = 2\n  ttl = \"-1s\"\n}\n", 3, []string{"must not be negative"}},
		{"unknown argument", head + "  count = 3\n}\n", 4, []string{"Unsupported argument", `"count"`}},
		{"empty name", "semaphore \"\" {\n  capacity = 2\n  ttl = \"1s\"\n}\n", 1, []string{"Invalid semaphore name", "non-empty"}},
		{"slash in name", "semaphore \"a/b\" {\n  capacity = 2\n  ttl = \"1s\"\n}\n", 1, []string{"Invalid semaphore name", `"/"`}},
		{"reserved name", "semaphore \"__coordhost:x\" {\n  capacity = 2\n  ttl = \"1s\"\n}\n", 1, []string{"Invalid semaphore name", "reserved"}},
		{"duplicate", head + "}\n" + head + "}\n", 5, []string{"Duplicate semaphore", `Semaphore "a" was already declared at`, "test.hcl:1"}},
		{"string retry", head + "  retry = \"fast\"\n}\n", 4, []string{"Invalid policy reference", "policy.retry.NAME without quotes"}},
		{"undeclared retry", head + "  retry = policy.retry.fast\n}\n", 4, []string{"undeclared policy", `"fast"`}},
		{"starvation not taken", head + "  starvation = policy.starvation.s\n}\n", 4, []string{"Unsupported argument", `"starvation"`}},
		{"retry of the wrong kind", "policy \"partition\" \"p\" {\n  driver = \"builtin\"\n  template = \"x\"\n}\n" + head + "  retry = policy.partition.p\n}\n", 8,
			[]string{"Wrong kind of policy", `Argument "retry" of semaphore "a" takes a retry policy`, "policy.partition.p is a partition policy"}},
		{"partition of the wrong kind", "policy \"retry\" \"r\" {\n  driver = \"builtin\"\n  kind = \"none\"\n}\n" + head + "  partition = policy.retry.r\n}\n", 8,
			[]string{"Wrong kind of policy", `Argument "partition" of semaphore "a" takes a partition policy`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, diags := Parse([]byte(tc.src), "test.hcl", LoadOptions{})
			if !diags.HasErrors() {
				t.Fatal("accepted")
			}
			out := render(t, cfg, diags)
			d := diags[0]
			if d.Subject == nil || d.Subject.Start.Line != tc.line || d.Subject.Filename != "test.hcl" || !containsAll(text(d), tc.frag...) {
				t.Fatalf("got %q at %v; want line %d with %q\n%s", text(d), d.Subject, tc.line, tc.frag, out)
			}
			if len(diags) != 1 {
				t.Errorf("%d diagnostics, want 1:\n%s", len(diags), out)
			}
			if !strings.Contains(out, "semaphore") {
				t.Errorf("the rendering shows no snippet:\n%s", out)
			}
			if strings.Contains(text(d), "lock") {
				t.Errorf("a semaphore's diagnostic calls it a lock: %s", text(d))
			}
		})
	}
}
