package host_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/config"
	"github.com/coordhost/coordhost/host"
)

// TestCheckPolicies: the check `coordhost validate` runs finds what New
// would refuse in wasm modules (the config only checks their magic bytes),
// without running them, and names the module attribute's file and line.
func TestCheckPolicies(t *testing.T) {
	dir := t.TempDir()
	mod := func(name string) string {
		return abs(t, filepath.Join("..", "policies", "wasm", "testdata", name+".wasm"))
	}
	type want struct {
		policy, detail string
	}
	var src strings.Builder
	var wants []want
	lines := map[string]int{} // policy → line of its module attribute
	add := func(kind, name, module, extra string, w string) {
		fmt.Fprintf(&src, "\npolicy %q %q {\n  driver = \"wasm\"\n", kind, name)
		lines[kind+"."+name] = strings.Count(src.String(), "\n") + 1
		fmt.Fprintf(&src, "  module = %q\n%s}\n", module, extra)
		if w != "" {
			wants = append(wants, want{kind + "." + name, w})
		}
	}
	add("retry", "good", abs(t, "testdata/giveup3.wasm"), "", "")
	add("retry", "version", mod("bad_version"), "", "policy_abi_version returned 2, want 1")
	add("retry", "sig", mod("bad_sig"), "", "export retry_decide has type (i32, i32) -> (i64), want (i32, i32, i64, i64, i64) -> (i64)")
	add("retry", "import", mod("bad_import"), "", "env.abort (function): only policy_host.* and wasi_snapshot_preview1.* may be imported")
	add("retry", "hostsig", mod("bad_hostsig"), "", "import policy_host.log (function) has type (i32) -> ()")
	add("retry", "memimport", mod("bad_memimport"), "", "policy_host.memory (memory)")
	add("retry", "nokind", mod("bad_nokind"), "", "no policy export")
	add("retry", "command", mod("bad_command"), "", "exports _start")
	add("retry", "ioarea", mod("bad_ioarea"), "", "I/O area [65000, +1024) outside memory")
	add("retry", "nomem", mod("bad_nomem"), "", `no memory exported as "memory"`)
	add("retry", "bigmem", mod("bigmem"), "  limits { memory_pages = 16 }\n", "initial memory of 64 pages is above the limit of 16 pages")
	add("retry", "bigconfig", mod("echo"), fmt.Sprintf("  config = { big = %q }\n", strings.Repeat("x", 9000)), "does not fit the I/O area of 8192 bytes")
	add("partition", "wrongkind", abs(t, "testdata/giveup3.wasm"), "", "the module exports no partition policy (it has [retry])")
	add("retry", "started", mod("started"), "", "") // its start function would log; it passes

	path := filepath.Join(dir, "coordhost.hcl")
	if err := os.WriteFile(path, []byte(src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, diags := config.Load(path, config.LoadOptions{})
	if diags.HasErrors() {
		t.Fatalf("config.Load: %s", diags.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	diags = host.CheckPolicies(ctx, cfg, host.CheckOptions{WasmCacheDir: t.TempDir()})
	if len(diags) != len(wants) {
		t.Errorf("%d diagnostics, want %d:\n%s", len(diags), len(wants), diags.Error())
	}
	for i, w := range wants {
		if i >= len(diags) {
			break
		}
		d := diags[i]
		if d.Subject == nil || d.Subject.Filename != path || d.Subject.Start.Line != lines[w.policy] {
			t.Errorf("%s: subject %v, want %s:%d", w.policy, d.Subject, path, lines[w.policy])
		}
		if !strings.Contains(d.Detail, "Policy "+w.policy+":") || !strings.Contains(d.Detail, w.detail) {
			t.Errorf("%s: detail %q, want one containing %q", w.policy, d.Detail, w.detail)
		}
	}
	// Rendered as validate prints them: file:line and the snippet.
	var out bytes.Buffer
	if err := config.WriteDiagnostics(&out, cfg.Files(), diags, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), fmt.Sprintf("coordhost.hcl line %d", lines["retry.version"])) ||
		!strings.Contains(out.String(), "bad_version.wasm") {
		t.Errorf("rendered diagnostics:\n%s", out.String())
	}
	t.Logf("rendered:\n%s", out.String())

	// A clean file has none; ctx ending is reported, not ignored.
	good, diags := config.Parse([]byte(fmt.Sprintf("policy \"retry\" \"g\" {\n  driver = \"wasm\"\n  module = %q\n}\n", abs(t, "testdata/giveup3.wasm"))),
		filepath.Join(dir, "good.hcl"), config.LoadOptions{})
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	if diags := host.CheckPolicies(ctx, good, host.CheckOptions{WasmCacheDir: t.TempDir()}); len(diags) != 0 {
		t.Errorf("clean config: %s", diags.Error())
	}
	cancelled, stop := context.WithCancel(context.Background())
	stop()
	if diags := host.CheckPolicies(cancelled, cfg, host.CheckOptions{WasmCacheDir: t.TempDir()}); !diags.HasErrors() {
		t.Error("a cancelled check passed")
	}
}
