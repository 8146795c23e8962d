package config

import (
	"fmt"
	"testing"
)

// Every block whose name goes into Redis keys refuses the same names, with
// one diagnostic on the label naming the block's type.
func TestKeyedNames(t *testing.T) {
	bodies := map[string]string{
		"lock":       `ttl = "1s"`,
		"latch":      ``,
		"rwlock":     `ttl = "1s"`,
		"semaphore":  "capacity = 1\n  ttl = \"1s\"",
		"redlock":    "addresses = [\"a:1\", \"b:1\", \"c:1\"]\n  ttl = \"1s\"",
		"rate_limit": "algorithm = \"fixed_window\"\n  limit = 1\n  window = \"1s\"",
		"lease":      `ttl = "1s"`,
	}
	for typ, body := range bodies {
		for _, bad := range []struct{ name, frag string }{
			{"", "non-empty"},
			{"a/b", `may not contain "/"`},
			{"__coordhost:x", "reserved for keys coordhost derives"},
		} {
			t.Run(typ+"/"+bad.name, func(t *testing.T) {
				src := fmt.Sprintf("\n%s %q {\n  %s\n}\n", typ, bad.name, body)
				cfg, diags := Parse([]byte(src), "test.hcl", LoadOptions{})
				if len(diags) != 1 {
					t.Fatalf("%d diagnostics, want 1:\n%s", len(diags), render(t, cfg, diags))
				}
				d := diags[0]
				if d.Subject == nil || d.Subject.Start.Line != 2 || !containsAll(text(d), "Invalid "+typ+" name", fmt.Sprintf("%q", bad.name), bad.frag) {
					t.Fatalf("got %q at %v", text(d), d.Subject)
				}
			})
		}
		t.Run(typ+"/good", func(t *testing.T) {
			mustParse(t, fmt.Sprintf("%s \"a-b.c:d\" {\n  %s\n}\n", typ, body), LoadOptions{})
		})
	}
}
