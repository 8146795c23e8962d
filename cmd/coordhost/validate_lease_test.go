package main

import (
	"context"
	"strings"
	"testing"
)

// validate knows lease blocks: a good one passes; each mistake in one is
// reported with its line and snippet, all at once.
func TestValidateLease(t *testing.T) {
	t.Parallel()
	good := writeConfig(t, `
policy "retry" "fast" {
  driver = "builtin"
  kind   = "constant"
  delay  = "10ms"
}

lease "jobs" {
  ttl     = "30s"
  max_ttl = "5m"
  retry   = policy.retry.fast
}
lease "plain" {
  ttl = "1s"
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

lease "jobs" {
  ttl       = "30 seconds"
  partition = policy.retry.fast
}
lease "short" {
  ttl     = "1m"
  max_ttl = "30s"
}
lease "a/b" {
  ttl = "1s"
}
`)
	te = newTestEnv(t, nil)
	if code := run(context.Background(), []string{"validate", bad}, te.env); code != exitFailure {
		t.Fatalf("exit status %d, want 1; stderr:\n%s", code, te.errOut)
	}
	stderr := te.errOut.String()
	for _, want := range []string{
		"Invalid duration", `   8:   ttl       = "30 seconds"`,
		"Wrong kind of policy", `Argument "partition" of lease "jobs" takes a partition policy`, `   9:   partition = policy.retry.fast`,
		"Invalid max_ttl", "its ttl (1m0s); got 30s", `  13:   max_ttl = "30s"`,
		"Invalid lease name", `  15: lease "a/b" {`,
		": 4 errors\n",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
}
