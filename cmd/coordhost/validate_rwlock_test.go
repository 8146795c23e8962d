package main

import (
	"context"
	"strings"
	"testing"
)

// validate knows rwlock blocks: a good one passes; each mistake in one is
// reported with its line and snippet, all at once.
func TestValidateRWLock(t *testing.T) {
	t.Parallel()
	good := writeConfig(t, `
policy "starvation" "writers_first" {
  driver = "builtin"
  bound  = "200ms"
}

rwlock "accounts" {
  ttl        = "30s"
  marker_ttl = "1s"
  starvation = policy.starvation.writers_first
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

rwlock "accounts" {
  ttl        = "30 seconds"
  marker_ttl = "1ms"
  starvation = policy.retry.fast
}

rwlock "a/b" {
  ttl = "1s"
}
`)
	te = newTestEnv(t, nil)
	if code := run(context.Background(), []string{"validate", bad}, te.env); code != exitFailure {
		t.Fatalf("exit status %d, want 1; stderr:\n%s", code, te.errOut)
	}
	stderr := te.errOut.String()
	for _, want := range []string{
		"Invalid duration", `   8:   ttl        = "30 seconds"`,
		"Invalid marker_ttl", `   9:   marker_ttl = "1ms"`,
		"Wrong kind of policy", `Argument "starvation" of rwlock "accounts" takes a starvation policy`, `  10:   starvation = policy.retry.fast`,
		"Invalid rwlock name", `  13: rwlock "a/b" {`,
		": 4 errors\n",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
}
