package main

import (
	"context"
	"strings"
	"testing"
)

// validate knows semaphore blocks: a good one passes; each mistake in one
// is reported with its line and snippet, all at once.
func TestValidateSemaphore(t *testing.T) {
	t.Parallel()
	good := writeConfig(t, `
policy "retry" "fast" {
  driver = "builtin"
  kind   = "constant"
  delay  = "10ms"
}

semaphore "workers" {
  capacity = 8
  ttl      = "30s"
  retry    = policy.retry.fast
}
semaphore "forever" {
  capacity = 1
  ttl      = "none"
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

semaphore "workers" {
  capacity  = 0
  ttl       = "30 seconds"
  partition = policy.retry.fast
}

semaphore "a/b" {
  capacity = 1
  ttl      = "1s"
}
`)
	te = newTestEnv(t, nil)
	if code := run(context.Background(), []string{"validate", bad}, te.env); code != exitFailure {
		t.Fatalf("exit status %d, want 1; stderr:\n%s", code, te.errOut)
	}
	stderr := te.errOut.String()
	for _, want := range []string{
		"Invalid capacity", `   8:   capacity  = 0`,
		"Invalid duration", `   9:   ttl       = "30 seconds"`,
		"Wrong kind of policy", `Argument "partition" of semaphore "workers" takes a partition policy`, `  10:   partition = policy.retry.fast`,
		"Invalid semaphore name", `  13: semaphore "a/b" {`,
		": 4 errors\n",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
}
