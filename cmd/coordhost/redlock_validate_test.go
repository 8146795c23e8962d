package main

import (
	"context"
	"strings"
	"testing"
)

// `coordhost validate` knows the redlock block: a valid one is OK; an
// even node count and a duplicate node are reported with their lines and
// snippets, both at once, without dialling anything.
func TestValidateRedlock(t *testing.T) {
	t.Parallel()
	good := writeConfig(t, `
redlock "invoice" {
  addresses    = ["10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"]
  ttl          = "10s"
  node_timeout = "50ms"
}
`)
	te := newTestEnv(t, nil)
	if code := run(context.Background(), []string{"validate", good}, te.env); code != exitOK {
		t.Fatalf("exit status %d; stderr:\n%s", code, te.errOut)
	}
	bad := writeConfig(t, `
redlock "even" {
  addresses = ["a:1", "b:1", "c:1", "d:1"]
  ttl       = "10s"
}

redlock "twice" {
  addresses = [
    "a:1",
    "b:1",
    "a:1",
  ]
  ttl = "10s"
}
`)
	te = newTestEnv(t, nil)
	if code := run(context.Background(), []string{"validate", bad}, te.env); code != exitFailure {
		t.Fatalf("exit status %d, want 1; stderr:\n%s", code, te.errOut)
	}
	stderr := te.errOut.String()
	for _, frag := range []string{
		"Error: Even number of redlock nodes",
		"line 3, in redlock \"even\"",
		`   3:   addresses = ["a:1", "b:1", "c:1", "d:1"]`,
		"Error: Duplicate redlock node",
		"line 11, in redlock \"twice\"",
		`  11:     "a:1",`,
		"2 errors",
	} {
		if !strings.Contains(stderr, frag) {
			t.Errorf("stderr lacks %q:\n%s", frag, stderr)
		}
	}
}
