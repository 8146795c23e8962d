package main

import (
	"context"
	"strings"
	"testing"
)

// `coordhost validate` knows latch blocks: a good one passes, and each
// mistake is reported with its line.
func TestValidateLatch(t *testing.T) {
	t.Parallel()
	good := writeConfig(t, `
policy "retry" "quick" {
  driver = "builtin"
  kind   = "constant"
  delay  = "20ms"
}
latch "batch" {
  ttl     = "1h"
  recheck = "1s"
  retry   = policy.retry.quick
}
latch "forever" {
  ttl = "none"
}
`)
	te := newTestEnv(t, nil)
	if code := run(context.Background(), []string{"validate", good}, te.env); code != exitOK {
		t.Fatalf("exit status %d; stderr:\n%s", code, te.errOut)
	}
	if want := good + ": OK\n"; te.out.String() != want {
		t.Errorf("stdout = %q, want %q", te.out, want)
	}

	bad := writeConfig(t, `latch "batch" {
  ttl     = "0s"
  recheck = "1ms"
  retry   = policy.retry.missing
  count   = 3
}
latch "batch" {}
`)
	te = newTestEnv(t, nil)
	if code := run(context.Background(), []string{"validate", bad}, te.env); code != exitFailure {
		t.Fatalf("exit status %d, want 1; stderr:\n%s", code, te.errOut)
	}
	stderr := te.errOut.String()
	for _, w := range []string{"Invalid ttl", "line 2", "Invalid recheck", "line 3", "undeclared policy", "line 4",
		"Unsupported argument", "line 5", "Duplicate latch", "line 7"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("stderr lacks %q:\n%s", w, stderr)
		}
	}
}
