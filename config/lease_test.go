package config

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/policies"
	"github.com/google/go-cmp/cmp"
)

func TestLeaseBlocks(t *testing.T) {
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

lease "jobs" {
  ttl       = "30s"
  max_ttl   = "5m"
  prefix    = "j:"
  retry     = policy.retry.fast
  partition = policy.partition.tenant
}
lease "plain" {
  ttl = "1ms"
}
lease "long" {
  ttl     = "876000h"
  max_ttl = "876000h"
}

lock "jobs" {  # locks and leases have names of their own
  ttl = "1s"
}
`, LoadOptions{})
	want := []*Lease{
		{Name: "jobs", TTL: 30 * time.Second, MaxTTL: 5 * time.Minute, Prefix: "j:",
			Retry:     &PolicyRef{Kind: policies.KindRetry, Name: "fast"},
			Partition: &PolicyRef{Kind: policies.KindPartition, Name: "tenant"}},
		{Name: "plain", TTL: time.Millisecond, MaxTTL: time.Millisecond, Prefix: DefaultLeasePrefix},
		{Name: "long", TTL: 876000 * time.Hour, MaxTTL: 876000 * time.Hour, Prefix: DefaultLeasePrefix},
	}
	if diff := cmp.Diff(want, cfg.Leases, cmpOpts...); diff != "" {
		t.Errorf("leases (-want +got):\n%s", diff)
	}
	if l := cfg.Lease("jobs"); l == nil || l.Range.Start.Line != 12 || cfg.Lease("nope") != nil {
		t.Errorf("Lease lookups: %v", l)
	}
	if r := cfg.Lease("jobs").Partition.Range; r.Start.Line != 17 {
		t.Errorf("partition reference at line %d, want 17", r.Start.Line)
	}
	if cfg.Lock("jobs") == nil || cfg.Lock("jobs").Prefix == cfg.Lease("jobs").Prefix || cfg.Lease("plain").Prefix == DefaultLockPrefix {
		t.Error("the lock named like a lease is missing or shares its prefix")
	}
}

// lockWord finds the word "lock" (not "block").
var lockWord = regexp.MustCompile(`(?i)\block\b`)

// Every mistake in a lease block is one error diagnostic on its line,
// naming the block as a lease.
func TestLeaseMistakes(t *testing.T) {
	const head = "lease \"a\" {\n  ttl = \"1s\"\n"
	for _, tc := range []struct {
		name string
		src  string
		want wantDiag
	}{
		{"missing ttl", "lease \"a\" {\n  max_ttl = \"1s\"\n}\n", want(1, "Missing required argument", `"ttl"`)},
		{"bad ttl", "lease \"a\" {\n  ttl = \"soon\"\n}\n", want(2, "Invalid duration", `"ttl"`, `"soon"`)},
		{"ttl as a number", "lease \"a\" {\n  ttl = 30\n}\n", want(2, "Invalid duration", `"30"`)},
		{"null ttl", "lease \"a\" {\n  ttl = null\n}\n", want(2, "Null value", `"ttl"`)},
		{"negative ttl", "lease \"a\" {\n  ttl = \"-1s\"\n}\n", want(2, "must not be negative")},
		{"zero ttl", "lease \"a\" {\n  ttl = \"0s\"\n}\n", want(2, "Invalid ttl", "from 1ms to 100 years", "got 0s")},
		{"sub-ms ttl", "lease \"a\" {\n  ttl = \"500us\"\n}\n", want(2, "Invalid ttl", "from 1ms")},
		{"fractional ms ttl", "lease \"a\" {\n  ttl = \"1500us\"\n}\n", want(2, "Invalid ttl", "whole number of milliseconds", "1.5ms")},
		{"ttl above 100 years", "lease \"a\" {\n  ttl = \"900000h\"\n}\n", want(2, "Invalid ttl", "100 years")},
		{"bad max_ttl", head + "  max_ttl = \"1 minute\"\n}\n", want(3, "Invalid duration", `"max_ttl"`, `"1 minute"`)},
		{"max_ttl below ttl", head + "  max_ttl = \"999ms\"\n}\n", want(3, "Invalid max_ttl", "at least its ttl (1s)", "got 999ms")},
		{"fractional ms max_ttl", head + "  max_ttl = \"1000500us\"\n}\n", want(3, "Invalid max_ttl", "whole number of milliseconds")},
		{"max_ttl above 100 years", head + "  max_ttl = \"900000h\"\n}\n", want(3, "Invalid max_ttl", "100 years")},
		{"zero max_ttl", head + "  max_ttl = \"0s\"\n}\n", want(3, "Invalid max_ttl", "from 1ms")},
		{"prefix not a string", head + "  prefix = [\"a\"]\n}\n", want(3, "Incorrect attribute value type", `"prefix"`)},
		{"unknown argument", head + "  max_tll = \"1m\"\n}\n", want(3, "Unsupported argument", `"max_tll"`, `Did you mean "max_ttl"?`)},
		{"fencing not taken", head + "  fencing = true\n}\n", want(3, "Unsupported argument", `"fencing"`)},
		{"starvation not taken", head + "  starvation = policy.starvation.s\n}\n", want(3, "Unsupported argument", `"starvation"`)},
		{"nested block", head + "  queue {}\n}\n", want(3, "Unsupported block type", `"queue"`)},
		{"empty name", "lease \"\" {\n  ttl = \"1s\"\n}\n", want(1, "Invalid lease name", "non-empty")},
		{"slash in name", "lease \"a/b\" {\n  ttl = \"1s\"\n}\n", want(1, "Invalid lease name", `"/"`)},
		{"reserved name", "lease \"__coordhost:x\" {\n  ttl = \"1s\"\n}\n", want(1, "Invalid lease name", "reserved")},
		{"two labels", "lease \"a\" \"b\" {\n  ttl = \"1s\"\n}\n", want(1, "Extraneous label for lease")},
		{"no label", "lease {\n  ttl = \"1s\"\n}\n", want(1, "Missing name for lease")},
		{"duplicate", head + "}\n" + head + "}\n", want(4, "Duplicate lease", `Lease "a" was already declared at`, "test.hcl:1")},
		{"string retry", head + "  retry = \"fast\"\n}\n", want(3, "Invalid policy reference", "policy.retry.NAME without quotes")},
		{"undeclared retry", head + "  retry = policy.retry.fast\n}\n", want(3, "undeclared policy", `"fast"`)},
		{"retry of the wrong kind", "policy \"partition\" \"p\" {\n  driver = \"builtin\"\n  template = \"x\"\n}\n" + head + "  retry = policy.partition.p\n}\n",
			want(7, "Wrong kind of policy", `Argument "retry" of lease "a" takes a retry policy`, "policy.partition.p is a partition policy")},
		{"partition of the wrong kind", "policy \"retry\" \"r\" {\n  driver = \"builtin\"\n  kind = \"none\"\n}\n" + head + "  partition = policy.retry.r\n}\n",
			want(7, "Wrong kind of policy", `Argument "partition" of lease "a" takes a partition policy`)},
		{"undeclared variable", "lease \"a\" {\n  ttl = var.ttl\n}\n", want(2, "Reference to undeclared variable", `"ttl"`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, diags := Parse([]byte(tc.src), "test.hcl", LoadOptions{})
			out := render(t, cfg, diags)
			if len(diags) != 1 {
				t.Fatalf("%d diagnostics, want 1:\n%s", len(diags), out)
			}
			d := diags[0]
			if d.Subject == nil || d.Subject.Start.Line != tc.want.line || d.Subject.Filename != "test.hcl" || !containsAll(text(d), tc.want.frags...) {
				t.Fatalf("got %q at %v; want line %d with %q\n%s", text(d), d.Subject, tc.want.line, tc.want.frags, out)
			}
			if !strings.Contains(out, "lease") {
				t.Errorf("the rendering shows no snippet:\n%s", out)
			}
			if lockWord.MatchString(text(d)) {
				t.Errorf("a lease's diagnostic calls it a lock: %s", text(d))
			}
		})
	}
}

// All the mistakes of several lease blocks come back at once, in order.
func TestLeaseMistakesAtOnce(t *testing.T) {
	src := `lease "a" {
  ttl     = "1m"
  max_ttl = "30s"
}
lease "b/c" {
  ttl = "1s"
}
lease "d" {
  ttl    = "10us"
  prefix = 3
}
`
	cfg, diags := Parse([]byte(src), "test.hcl", LoadOptions{})
	if got := lines(diags); !cmp.Equal(got, []int{3, 5, 9}) {
		t.Fatalf("diagnostics on lines %v, want 3, 5, 9:\n%s", got, render(t, cfg, diags))
	}
	// A number converts to a string: prefix = 3 is "3".
	if l := cfg.Lease("d"); l == nil || l.Prefix != "3" {
		t.Fatalf("lease d: %+v", l)
	}
}

// A dynamic block generates lease blocks, and their mistakes point into
// the dynamic content.
func TestLeaseDynamic(t *testing.T) {
	src := `
variable "queues" {
  default = { email = "30s", video = "10m" }
}
policy "partition" "tenant" {
  driver   = "builtin"
  template = "$${tenant}"
}
dynamic "lease" {
  for_each = var.queues
  labels   = ["jobs_${lease.key}"]
  content {
    ttl       = lease.value
    max_ttl   = "1h"
    partition = policy.partition.tenant
  }
}
`
	cfg := mustParse(t, src, LoadOptions{})
	email, video := cfg.Lease("jobs_email"), cfg.Lease("jobs_video")
	if len(cfg.Leases) != 2 || email == nil || video == nil || email.TTL != 30*time.Second || video.TTL != 10*time.Minute ||
		video.MaxTTL != time.Hour || video.Partition == nil || video.Partition.Name != "tenant" {
		t.Fatalf("leases %+v %+v", email, video)
	}
	bad := strings.Replace(src, `video = "10m"`, `video = "2h"`, 1)
	cfg, diags := Parse([]byte(bad), "test.hcl", LoadOptions{})
	if len(diags) != 1 || diags[0].Summary != "Invalid max_ttl" || diags[0].Subject.Start.Line != 14 {
		t.Fatalf("max_ttl below a ttl from a variable:\n%s", render(t, cfg, diags))
	}
}
