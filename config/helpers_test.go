package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
)

// cmpOpts compares Configs: cty values and types by equality, ranges
// ignored (tests check them separately), unexported indexes ignored.
var cmpOpts = []cmp.Option{
	cmp.Comparer(func(a, b cty.Value) bool {
		if a == cty.NilVal || b == cty.NilVal {
			return a == b
		}
		return a.RawEquals(b)
	}),
	cmp.Comparer(func(a, b cty.Type) bool { return a.Equals(b) }),
	cmpopts.IgnoreTypes(hcl.Range{}),
	cmpopts.IgnoreUnexported(Config{}),
}

// wasmStub is the smallest valid WebAssembly module: magic and version.
const wasmStub = "\x00asm\x01\x00\x00\x00"

// writeFile writes content to dir/name (creating parents) with mode and
// returns the path.
func writeFile(t *testing.T, dir, name, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil { // WriteFile's mode is masked by umask
		t.Fatal(err)
	}
	return p
}

func sha256Hex(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// parseIn writes src as dir/coordhost.hcl and loads it.
func parseIn(t *testing.T, dir, src string, opts LoadOptions) (*Config, hcl.Diagnostics) {
	t.Helper()
	p := writeFile(t, dir, "coordhost.hcl", src, 0o644)
	return Load(p, opts)
}

// mustParse parses src (in memory, as test.hcl) and fails on any
// diagnostic.
func mustParse(t *testing.T, src string, opts LoadOptions) *Config {
	t.Helper()
	cfg, diags := Parse([]byte(src), "test.hcl", opts)
	if len(diags) > 0 {
		t.Fatalf("unexpected diagnostics:\n%s", render(t, cfg, diags))
	}
	return cfg
}

// render renders diags as WriteDiagnostics does, without color.
func render(t *testing.T, cfg *Config, diags hcl.Diagnostics) string {
	t.Helper()
	var b bytes.Buffer
	if err := WriteDiagnostics(&b, cfg.Files(), diags, false); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// lines returns the start line of every diagnostic (0 without a subject).
func lines(diags hcl.Diagnostics) []int {
	out := make([]int, len(diags))
	for i, d := range diags {
		if d.Subject != nil {
			out[i] = d.Subject.Start.Line
		}
	}
	return out
}

// text is a diagnostic's summary and detail, for matching fragments.
func text(d *hcl.Diagnostic) string { return d.Summary + ": " + d.Detail }

func containsAll(s string, frags ...string) bool {
	for _, f := range frags {
		if !strings.Contains(s, f) {
			return false
		}
	}
	return true
}
