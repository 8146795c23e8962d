package main

import (
	"context"
	"strings"
	"testing"
)

// validate knows rate_limit blocks: a good one passes; each mistake in one
// is reported with its line and snippet, all at once, including the bounds
// package ratelimit enforces.
func TestValidateRateLimit(t *testing.T) {
	t.Parallel()
	good := writeConfig(t, limitConfig+`
rate_limit "search" {
  algorithm = "sliding_window"
  limit     = 100
  window    = "1m"
  segments  = 12
  queue {
    limit = 20
    order = "newest_first"
  }
  idle_timeout = "5m"
}
`)
	te := newTestEnv(t, nil)
	if code := run(context.Background(), []string{"validate", good}, te.env); code != exitOK {
		t.Fatalf("exit status %d; stderr:\n%s", code, te.errOut)
	}
	if want := good + ": OK\n"; te.out.String() != want {
		t.Errorf("stdout = %q, want %q", te.out, want)
	}

	bad := writeConfig(t, `
policy "retry" "fast" {
  driver = "builtin"
  kind   = "none"
}

rate_limit "checkout" {
  algorithm = "token_bucket"
  limit     = 10
  window    = "1m"
  tokens_per_period = 11
  period    = "1.5ms"
  partition = policy.retry.fast
  queue {
    limit = -1
  }
}

rate_limit "search" {
  algorithm = "sliding_window"
  limit     = 100
  window    = "5ms"
  segments  = 10
}
`)
	te = newTestEnv(t, nil)
	if code := run(context.Background(), []string{"validate", bad}, te.env); code != exitFailure {
		t.Fatalf("exit status %d, want 1; stderr:\n%s", code, te.errOut)
	}
	stderr := te.errOut.String()
	for _, want := range []string{
		"Unsupported argument", `  10:   window    = "1m"`,
		"Invalid tokens_per_period", `  11:   tokens_per_period = 11`,
		"Invalid period", "whole number of milliseconds", `  12:   period    = "1.5ms"`,
		"Wrong kind of policy", `Argument "partition" of rate_limit "checkout" takes a partition policy`, `  13:   partition = policy.retry.fast`,
		"Invalid limit", `  15:     limit = -1`,
		"Invalid segments", "at most 5 segments", `  23:   segments  = 10`,
		": 6 errors\n",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
}
