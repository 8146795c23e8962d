package config

import (
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/policies"
	"github.com/google/go-cmp/cmp"
)

func TestRateLimitBlocks(t *testing.T) {
	cfg := mustParse(t, `
policy "partition" "tenant" {
  driver   = "builtin"
  template = "$${tenant}"
}

rate_limit "checkout" {
  algorithm = "sliding_window"
  limit     = 100
  window    = "1m"
  segments  = 12
  partition = policy.partition.tenant
  queue {
    limit = 20
    order = "newest_first"
  }
  idle_timeout = "5m"
}
rate_limit "login" {
  algorithm = "fixed_window"
  limit     = 1000000000000000
  window    = "876000h"
}
rate_limit "api" {
  algorithm         = "token_bucket"
  limit             = 10
  tokens_per_period = 10
  period            = "1ms"
  queue { limit = 0 }
}
rate_limit "plain" {
  algorithm = "sliding_window"
  limit     = 1
  window    = "10ms"
}

semaphore "checkout" {  # rate limits have names of their own
  capacity = 1
  ttl      = "1s"
}
`, LoadOptions{})
	want := []*RateLimit{
		{Name: "checkout", Algorithm: SlidingWindow, Limit: 100, Window: time.Minute, Segments: 12,
			Partition:  &PolicyRef{Kind: policies.KindPartition, Name: "tenant"},
			QueueLimit: 20, QueueOrder: NewestFirst, IdleTimeout: 5 * time.Minute},
		{Name: "login", Algorithm: FixedWindow, Limit: MaxRateLimit, Window: MaxRateLimitWindow,
			QueueOrder: OldestFirst, IdleTimeout: DefaultRateLimitIdleTimeout},
		{Name: "api", Algorithm: TokenBucket, Limit: 10, TokensPerPeriod: 10, Period: time.Millisecond,
			QueueOrder: OldestFirst, IdleTimeout: DefaultRateLimitIdleTimeout},
		{Name: "plain", Algorithm: SlidingWindow, Limit: 1, Window: 10 * time.Millisecond, Segments: DefaultRateLimitSegments,
			QueueOrder: OldestFirst, IdleTimeout: DefaultRateLimitIdleTimeout},
	}
	if diff := cmp.Diff(want, cfg.RateLimits, cmpOpts...); diff != "" {
		t.Errorf("rate limits (-want +got):\n%s", diff)
	}
	if r := cfg.RateLimit("checkout"); r == nil || r.Range.Start.Line != 7 || cfg.RateLimit("nope") != nil {
		t.Errorf("RateLimit lookups: %v", r)
	}
	if r := cfg.RateLimit("checkout").Partition.Range; r.Start.Line != 12 {
		t.Errorf("partition reference at line %d, want 12", r.Start.Line)
	}
	if cfg.Semaphore("checkout") == nil {
		t.Error("the semaphore named like a rate limit is missing")
	}
}

// Every mistake in a rate_limit block is one error diagnostic on its line,
// naming the block as a rate_limit where it names a block at all.
func TestRateLimitMistakes(t *testing.T) {
	const (
		open    = "rate_limit \"a\" {\n"
		sliding = open + "  algorithm = \"sliding_window\"\n  limit = 10\n  window = \"1s\"\n" // next line 5
		fixed   = open + "  algorithm = \"fixed_window\"\n  limit = 10\n  window = \"1s\"\n"
		bucket  = open + "  algorithm = \"token_bucket\"\n  limit = 10\n  tokens_per_period = 2\n  period = \"1s\"\n" // next line 6
		part    = "policy \"partition\" \"p\" {\n  driver = \"builtin\"\n  template = \"x\"\n}\n"
		retry   = "policy \"retry\" \"r\" {\n  driver = \"builtin\"\n  kind = \"none\"\n}\n"
	)
	for _, tc := range []struct {
		name string
		src  string
		line int
		frag []string
	}{
		// Required arguments.
		{"missing algorithm", open + "  limit = 1\n  window = \"1s\"\n}\n", 1, []string{"Missing required argument", `"algorithm"`}},
		{"missing limit", open + "  algorithm = \"fixed_window\"\n  window = \"1s\"\n}\n", 1, []string{"Missing required argument", `"limit"`}},
		{"fixed without window", open + "  algorithm = \"fixed_window\"\n  limit = 1\n}\n", 1, []string{"Missing required argument", `"window"`, `"fixed_window"`}},
		{"sliding without window", open + "  algorithm = \"sliding_window\"\n  limit = 1\n}\n", 1, []string{"Missing required argument", `"window"`, `"sliding_window"`}},
		{"bucket without period", open + "  algorithm = \"token_bucket\"\n  limit = 1\n  tokens_per_period = 1\n}\n", 1, []string{"Missing required argument", `"period"`, `"token_bucket"`}},
		{"bucket without tokens_per_period", open + "  algorithm = \"token_bucket\"\n  limit = 1\n  period = \"1s\"\n}\n", 1, []string{"Missing required argument", `"tokens_per_period"`}},

		// algorithm and the arguments of other algorithms.
		{"unknown algorithm", open + "  algorithm = \"leaky_bucket\"\n  limit = 1\n}\n", 2, []string{"Invalid value", `"fixed_window", "sliding_window", "token_bucket"`, `"leaky_bucket"`}},
		{"algorithm typo", open + "  algorithm = \"fixed_windw\"\n  limit = 1\n  window = \"1s\"\n}\n", 2, []string{"Invalid value", `Did you mean "fixed_window"?`}},
		{"algorithm as a number", open + "  algorithm = 3\n  limit = 1\n  window = \"1s\"\n}\n", 2, []string{"Invalid value", `got "3"`}},
		{"window on a bucket", bucket + "  window = \"1s\"\n}\n", 6, []string{"Unsupported argument", `"window" does not apply to algorithm "token_bucket"`, `"tokens_per_period" and "period"`}},
		{"segments on a fixed window", fixed + "  segments = 2\n}\n", 5, []string{"Unsupported argument", `"segments" does not apply to algorithm "fixed_window"`}},
		{"period on a sliding window", sliding + "  period = \"1s\"\n}\n", 5, []string{"Unsupported argument", `"period"`, `takes "window" and "segments"`}},
		{"tokens_per_period on a fixed window", fixed + "  tokens_per_period = 1\n}\n", 5, []string{"Unsupported argument", `"tokens_per_period"`}},

		// limit.
		{"zero limit", open + "  algorithm = \"fixed_window\"\n  limit = 0\n  window = \"1s\"\n}\n", 3, []string{"Invalid limit", "from 1 to 1000000000000000", "got 0"}},
		{"negative limit", open + "  algorithm = \"fixed_window\"\n  limit = -1\n  window = \"1s\"\n}\n", 3, []string{"Invalid limit", "got -1"}},
		{"limit above the maximum", open + "  algorithm = \"fixed_window\"\n  limit = 1000000000000001\n  window = \"1s\"\n}\n", 3, []string{"Invalid limit", "got 1000000000000001"}},
		{"huge limit", open + "  algorithm = \"fixed_window\"\n  limit = 1e30\n  window = \"1s\"\n}\n", 3, []string{"Invalid limit"}},
		{"fractional limit", open + "  algorithm = \"fixed_window\"\n  limit = 1.5\n  window = \"1s\"\n}\n", 3, []string{"Invalid limit", "got 1.5"}},
		{"limit as a word", open + "  algorithm = \"fixed_window\"\n  limit = \"ten\"\n  window = \"1s\"\n}\n", 3, []string{"Incorrect attribute value type", `"limit"`}},
		{"null limit", open + "  algorithm = \"fixed_window\"\n  limit = null\n  window = \"1s\"\n}\n", 3, []string{"Null value", `"limit"`}},

		// window and period.
		{"bad window", open + "  algorithm = \"fixed_window\"\n  limit = 1\n  window = \"soon\"\n}\n", 4, []string{"Invalid duration", `"soon"`}},
		{"window as a number", open + "  algorithm = \"fixed_window\"\n  limit = 1\n  window = 60\n}\n", 4, []string{"Invalid duration", `"60"`}},
		{"zero window", open + "  algorithm = \"fixed_window\"\n  limit = 1\n  window = \"0s\"\n}\n", 4, []string{"Invalid window", "from 1ms to 100 years", "got 0s"}},
		{"negative window", open + "  algorithm = \"fixed_window\"\n  limit = 1\n  window = \"-1s\"\n}\n", 4, []string{"Invalid duration", "must not be negative"}},
		{"sub-ms window", open + "  algorithm = \"fixed_window\"\n  limit = 1\n  window = \"500us\"\n}\n", 4, []string{"Invalid window", "from 1ms"}},
		{"fractional-ms window", open + "  algorithm = \"fixed_window\"\n  limit = 1\n  window = \"1500us\"\n}\n", 4, []string{"Invalid window", "whole number of milliseconds", "1.5ms"}},
		{"window above 100 years", open + "  algorithm = \"fixed_window\"\n  limit = 1\n  window = \"876001h\"\n}\n", 4, []string{"Invalid window", "100 years"}},
		{"sub-ms period", open + "  algorithm = \"token_bucket\"\n  limit = 1\n  tokens_per_period = 1\n  period = \"10us\"\n}\n", 5, []string{"Invalid period", "from 1ms"}},
		{"fractional-ms period", open + "  algorithm = \"token_bucket\"\n  limit = 1\n  tokens_per_period = 1\n  period = \"1.5ms\"\n}\n", 5, []string{"Invalid period", "whole number of milliseconds"}},
		{"bucket filling in more than 100 years", open + "  algorithm = \"token_bucket\"\n  limit = 1000000000000000\n  tokens_per_period = 1\n  period = \"1s\"\n}\n", 5,
			[]string{"Invalid period", "takes 1000000000000000 periods to fill", "100 years"}},

		// segments and tokens_per_period.
		{"zero segments", sliding + "  segments = 0\n}\n", 5, []string{"Invalid segments", "got 0"}},
		{"too many segments", sliding + "  segments = 1001\n}\n", 5, []string{"Invalid segments", "from 1 to 1000", "got 1001"}},
		{"fractional segments", sliding + "  segments = 2.5\n}\n", 5, []string{"Invalid segments", "got 2.5"}},
		{"segments shorter than 1ms", open + "  algorithm = \"sliding_window\"\n  limit = 1\n  window = \"5ms\"\n  segments = 6\n}\n", 5,
			[]string{"Invalid segments", "at most 5 segments", "got 6"}},
		{"default segments shorter than 1ms", open + "  algorithm = \"sliding_window\"\n  limit = 1\n  window = \"9ms\"\n}\n", 4,
			[]string{"Invalid window", "default 10 segments", "at least 10ms", "Set segments"}},
		{"tokens_per_period above the limit", open + "  algorithm = \"token_bucket\"\n  limit = 10\n  tokens_per_period = 11\n  period = \"1s\"\n}\n", 4,
			[]string{"Invalid tokens_per_period", "may not exceed its limit, 10", "got 11"}},
		{"zero tokens_per_period", open + "  algorithm = \"token_bucket\"\n  limit = 10\n  tokens_per_period = 0\n  period = \"1s\"\n}\n", 4,
			[]string{"Invalid tokens_per_period", "got 0"}},

		// queue.
		{"queue without limit", sliding + "  queue {\n    order = \"newest_first\"\n  }\n}\n", 5, []string{"Missing required argument", `"limit"`}},
		{"negative queue limit", sliding + "  queue {\n    limit = -1\n  }\n}\n", 6, []string{"Invalid limit", "from 0 to", "got -1"}},
		{"queue limit above the maximum", sliding + "  queue {\n    limit = 1000000000000001\n  }\n}\n", 6, []string{"Invalid limit", "got 1000000000000001"}},
		{"bad queue order", sliding + "  queue {\n    limit = 1\n    order = \"fifo\"\n  }\n}\n", 7, []string{"Invalid value", `"oldest_first", "newest_first"`, `"fifo"`}},
		{"unknown queue argument", sliding + "  queue {\n    limit = 1\n    size = 2\n  }\n}\n", 7, []string{"Unsupported argument", `"size"`}},
		{"two queue blocks", sliding + "  queue {\n    limit = 1\n  }\n  queue {\n    limit = 2\n  }\n}\n", 8, []string{"Duplicate queue block", "test.hcl:5"}},
		{"queue as an argument", sliding + "  queue = 20\n}\n", 5, []string{"Unsupported argument", `"queue"`}},

		// idle_timeout.
		{"zero idle_timeout", sliding + "  idle_timeout = \"0s\"\n}\n", 5, []string{"Invalid duration", "above zero"}},
		{"negative idle_timeout", sliding + "  idle_timeout = \"-1m\"\n}\n", 5, []string{"Invalid duration", "must not be negative"}},
		{"bad idle_timeout", sliding + "  idle_timeout = \"forever\"\n}\n", 5, []string{"Invalid duration", `"forever"`}},

		// Names, other arguments, references.
		{"unknown argument", sliding + "  prefix = \"x:\"\n}\n", 5, []string{"Unsupported argument", `"prefix"`}},
		{"empty name", "rate_limit \"\" {\n  algorithm = \"fixed_window\"\n  limit = 1\n  window = \"1s\"\n}\n", 1, []string{"Invalid rate_limit name", "non-empty"}},
		{"slash in name", "rate_limit \"a/b\" {\n  algorithm = \"fixed_window\"\n  limit = 1\n  window = \"1s\"\n}\n", 1, []string{"Invalid rate_limit name", `"/"`}},
		{"reserved name", "rate_limit \"__coordhost:x\" {\n  algorithm = \"fixed_window\"\n  limit = 1\n  window = \"1s\"\n}\n", 1, []string{"Invalid rate_limit name", "reserved"}},
		{"duplicate", sliding + "}\n" + sliding + "}\n", 6, []string{"Duplicate rate_limit", `Rate limit "a" was already declared at`, "test.hcl:1"}},
		{"string partition", sliding + "  partition = \"p\"\n}\n", 5, []string{"Invalid policy reference", "policy.partition.NAME without quotes"}},
		{"undeclared partition", sliding + "  partition = policy.partition.tenant\n}\n", 5, []string{"undeclared policy", `"tenant"`}},
		{"partition of the wrong kind", retry + sliding + "  partition = policy.retry.r\n}\n", 9,
			[]string{"Wrong kind of policy", `Argument "partition" of rate_limit "a" takes a partition policy`, "policy.retry.r is a retry policy"}},
		{"retry not taken", part + sliding + "  retry = policy.retry.r\n}\n", 9, []string{"Unsupported argument", `"retry"`}},
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
			if !strings.Contains(out, "  on test.hcl line ") {
				t.Errorf("the rendering shows no position:\n%s", out)
			}
			if strings.Contains(text(d), `lock "`) || strings.Contains(text(d), `semaphore "`) {
				t.Errorf("a rate limit's diagnostic calls it something else: %s", text(d))
			}
		})
	}
}

// A rate_limit with every mistake at once reports each, in one pass.
func TestRateLimitMistakesAtOnce(t *testing.T) {
	cfg, diags := Parse([]byte(`
rate_limit "a" {
  algorithm = "token_bucket"
  limit     = 0
  window    = "1m"
  period    = "1us"
  queue {
    limit = -2
  }
}
rate_limit "b/c" {
  algorithm = "fixed_window"
  limit     = 1
  window    = "1s"
}
`), "test.hcl", LoadOptions{})
	got := lines(diags)
	want := []int{2, 4, 5, 6, 8, 11} // tokens_per_period missing, limit, window, period, queue limit, name
	if !cmp.Equal(got, want) {
		t.Fatalf("diagnostics on lines %v, want %v:\n%s", got, want, render(t, cfg, diags))
	}
}

// A dynamic block generates rate_limit blocks (queue blocks included),
// and their mistakes point into the dynamic content.
func TestRateLimitDynamic(t *testing.T) {
	src := `
variable "tiers" {
  default = { free = 10, paid = 1000 }
}
policy "partition" "tenant" {
  driver   = "builtin"
  template = "$${tenant}"
}
dynamic "rate_limit" {
  for_each = var.tiers
  labels   = ["api_${rate_limit.key}"]
  content {
    algorithm = "fixed_window"
    limit     = rate_limit.value
    window    = "1m"
    partition = policy.partition.tenant
    dynamic "queue" {
      for_each = rate_limit.value > 100 ? [1] : []
      content {
        limit = rate_limit.value / 10
      }
    }
  }
}
`
	cfg := mustParse(t, src, LoadOptions{})
	if len(cfg.RateLimits) != 2 {
		t.Fatalf("%d rate limits", len(cfg.RateLimits))
	}
	free, paid := cfg.RateLimit("api_free"), cfg.RateLimit("api_paid")
	if free == nil || paid == nil || free.Limit != 10 || free.QueueLimit != 0 || paid.Limit != 1000 || paid.QueueLimit != 100 ||
		paid.Partition == nil || paid.Partition.Name != "tenant" {
		t.Fatalf("free %+v paid %+v", free, paid)
	}
	bad := strings.Replace(src, "free = 10", "free = 0", 1)
	cfg, diags := Parse([]byte(bad), "test.hcl", LoadOptions{})
	if len(diags) != 1 || diags[0].Summary != "Invalid limit" || diags[0].Subject.Start.Line != 14 {
		t.Fatalf("a zero limit from a variable:\n%s", render(t, cfg, diags))
	}
}
