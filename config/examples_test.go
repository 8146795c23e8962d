package config

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/policies"
	"github.com/google/go-cmp/cmp"
	"github.com/zclconf/go-cty/cty"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// The example files and the files examples/coordhost.hcl names, relative
// to this package's directory.
const (
	exampleFile   = "../examples/coordhost.hcl"
	brokenFile    = "../examples/broken.hcl"
	exampleWasm   = "../plugins/examples/wasm/gobackoff/gobackoff.wasm"
	exampleStarve = "../plugins/examples/wasm/gostarve/gostarve.wasm"
	examplePlugin = "../bin/coordhost-example-plugin"
)

// copyOrStub copies src to dst, or, when src does not exist (yet: other
// packages build it), writes stub instead and says so in the test log.
// It returns the bytes written.
func copyOrStub(t *testing.T, src, dst, stub string, mode os.FileMode) string {
	t.Helper()
	b, err := os.ReadFile(src)
	switch {
	case err == nil:
	case os.IsNotExist(err):
		t.Logf("%s does not exist (not built yet); using a stub in the copied tree", src)
		b = []byte(stub)
	default:
		t.Fatal(err)
	}
	writeFile(t, filepath.Dir(dst), filepath.Base(dst), string(b), mode)
	return string(b)
}

// TestExampleFile loads examples/coordhost.hcl from a copy of the file tree
// it refers to, with the WebAssembly module and the plugin binary copied in
// when they have been built and replaced by stubs when not, and the plugin's
// checksum set through the plugin_sha256 variable, as the file's header
// explains. So every check (files exist, module magic, executable, sha256
// pin) runs, whatever has been built.
func TestExampleFile(t *testing.T) {
	root := t.TempDir()
	copyOrStub(t, exampleFile, filepath.Join(root, "examples/coordhost.hcl"), "", 0o644)
	copyOrStub(t, exampleWasm, filepath.Join(root, "plugins/examples/wasm/gobackoff/gobackoff.wasm"), wasmStub, 0o644)
	copyOrStub(t, exampleStarve, filepath.Join(root, "plugins/examples/wasm/gostarve/gostarve.wasm"), wasmStub, 0o644)
	plugin := copyOrStub(t, examplePlugin, filepath.Join(root, "bin/coordhost-example-plugin"), plugScript, 0o755)

	path := filepath.Join(root, "examples/coordhost.hcl")
	cfg, diags := Load(path, LoadOptions{Vars: map[string]cty.Value{"plugin_sha256": cty.StringVal(sha256Hex(plugin))}})
	if len(diags) > 0 {
		t.Fatalf("diagnostics:\n%s", render(t, cfg, diags))
	}
	addrs := cty.ListVal([]cty.Value{cty.StringVal("127.0.0.1:6379")})
	placeholder := cty.StringVal(strings.Repeat("0", 64))
	want := &Config{
		Path: path,
		Dir:  filepath.Join(root, "examples"),
		Redis: &Redis{
			Addresses: []string{"127.0.0.1:6379"}, KeyPrefix: "app:", ClientCache: true,
		},
		Server: Server{Listen: "127.0.0.1:7379", LogFormat: LogJSON, LogLevel: LogInfo},
		Variables: []*Variable{
			{Name: "redis_addresses", Description: "Redis servers (host:port or a unix socket path).",
				Type: cty.List(cty.String), Default: addrs, Value: addrs},
			{Name: "plugin_sha256", Description: "sha256sum of bin/coordhost-example-plugin; the pin changes with every build.",
				Type: cty.String, Default: placeholder, Value: cty.StringVal(sha256Hex(plugin))},
		},
		Policies: []*Policy{
			{Kind: policies.KindRetry, Name: "fast", Driver: DriverBuiltin, Builtin: &BuiltinPolicy{
				Retry: RetryExponential, Base: 10 * time.Millisecond, Max: time.Second, GiveUpAfter: 30 * time.Second}},
			{Kind: policies.KindRetry, Name: "gobackoff", Driver: DriverWasm, Wasm: &WasmPolicy{
				Module:      filepath.Join(root, "plugins/examples/wasm/gobackoff/gobackoff.wasm"),
				MemoryPages: 64, CallTimeout: 50 * time.Millisecond,
				Config: []byte(`{"base_ms":25,"give_up_after_ms":60000,"max_ms":2000}`)}},
			{Kind: policies.KindPartition, Name: "per_tenant", Driver: DriverPlugin, Plugin: &PluginPolicy{
				Path: filepath.Join(root, "bin/coordhost-example-plugin"), SHA256: sha256Hex(plugin),
				Config: []byte(`{"tenant_prefix":"tenant:"}`), CallTimeout: 100 * time.Millisecond, HealthInterval: 5 * time.Second}},
			{Kind: policies.KindStarvation, Name: "writers_first", Driver: DriverBuiltin, Builtin: &BuiltinPolicy{
				Bound: 500 * time.Millisecond}},
			{Kind: policies.KindStarvation, Name: "writers_wasm", Driver: DriverWasm, Wasm: &WasmPolicy{
				Module:      filepath.Join(root, "plugins/examples/wasm/gostarve/gostarve.wasm"),
				MemoryPages: 64, CallTimeout: 50 * time.Millisecond,
				Config: []byte(`{"bound_ms":300,"crowd":4}`)}},
			{Kind: policies.KindPartition, Name: "tenant", Driver: DriverBuiltin, Builtin: &BuiltinPolicy{
				Template: "tenant:${tenant}"}},
		},
		Locks: []*Lock{
			{Name: "invoice", TTL: 30 * time.Second, Fencing: true, Prefix: DefaultLockPrefix,
				Retry: &PolicyRef{Kind: policies.KindRetry, Name: "fast"}},
			{Name: "report", TTL: 2 * time.Minute, FIFO: true, Prefix: "reports:",
				Retry:     &PolicyRef{Kind: policies.KindRetry, Name: "gobackoff"},
				Partition: &PolicyRef{Kind: policies.KindPartition, Name: "per_tenant"}},
		},
		RWLocks: []*RWLock{
			{Name: "report_cache", TTL: 5 * time.Second, Prefix: DefaultRWLockPrefix, MarkerTTL: 2 * time.Second,
				Starvation: &PolicyRef{Kind: policies.KindStarvation, Name: "writers_wasm"},
				Retry:      &PolicyRef{Kind: policies.KindRetry, Name: "fast"}},
		},
		Leases: []*Lease{
			{Name: "jobs", TTL: 30 * time.Second, MaxTTL: 30 * time.Second, Prefix: DefaultLeasePrefix},
		},
		RateLimits: []*RateLimit{
			{Name: "checkout", Algorithm: SlidingWindow, Limit: 3, Window: time.Minute, Segments: 10,
				Partition:  &PolicyRef{Kind: policies.KindPartition, Name: "tenant"},
				QueueLimit: 2, QueueOrder: OldestFirst, IdleTimeout: 5 * time.Minute},
			{Name: "per_ip", Algorithm: FixedWindow, Limit: 2, Window: time.Minute, QueueOrder: OldestFirst, IdleTimeout: time.Minute},
		},
		EnvoyRateLimits: []*EnvoyRateLimit{
			{Name: "edge", Domain: "edge", Descriptors: []*EnvoyDescriptor{
				{Entries: []EnvoyEntry{{Key: "remote_address"}}, RateLimit: "per_ip"},
			}},
		},
	}
	if diff := cmp.Diff(want, cfg, cmpOpts...); diff != "" {
		t.Errorf("examples/coordhost.hcl (-want +got):\n%s", diff)
	}

	// Without the pin the placeholder fails, on the sha256 line.
	cfg, diags = Load(path, LoadOptions{})
	if len(diags) != 1 || diags[0].Summary != "Plugin checksum mismatch" || diags[0].Subject.Start.Line != 63 {
		t.Errorf("placeholder pin: %s", render(t, cfg, diags))
	}
}

// TestExampleFileInPlace loads examples/coordhost.hcl where it is. The
// module and plugin it names are built by other packages
// (plugins/examples); a file that does not exist yet must produce exactly
// its "File not found" diagnostic, and the test logs that the file checks
// were not exercised in place (TestExampleFile exercises them on a copy).
func TestExampleFileInPlace(t *testing.T) {
	vars := map[string]cty.Value{}
	var wantLines []int
	if _, err := os.Stat(exampleWasm); err != nil {
		t.Logf("not checked in place: %s missing (%v)", exampleWasm, err)
		wantLines = append(wantLines, 47)
	}
	if _, err := os.Stat(exampleStarve); err != nil {
		t.Logf("not checked in place: %s missing (%v)", exampleStarve, err)
		wantLines = append(wantLines, 80)
	}
	if b, err := os.ReadFile(examplePlugin); err != nil {
		t.Logf("not checked in place: %s missing (%v)", examplePlugin, err)
		wantLines = append(wantLines, 62)
	} else {
		vars["plugin_sha256"] = cty.StringVal(sha256Hex(string(b)))
	}
	cfg, diags := Load(exampleFile, LoadOptions{Vars: vars})
	if !slices.Equal(lines(diags), wantLines) {
		t.Fatalf("diagnostics on lines %v, want %v:\n%s", lines(diags), wantLines, render(t, cfg, diags))
	}
	for _, d := range diags {
		if d.Summary != "File not found" {
			t.Errorf("unexpected diagnostic:\n%s", render(t, cfg, diags))
		}
	}
	if len(cfg.Locks) != 2 || len(cfg.RWLocks) != 1 || len(cfg.Policies) != 6 || len(cfg.RateLimits) != 2 || len(cfg.Leases) != 1 || len(cfg.EnvoyRateLimits) != 1 {
		t.Errorf("locks %d, rwlocks %d, policies %d, rate limits %d, leases %d, envoy rate limits %d; want 2, 1, 6, 2, 1 and 1",
			len(cfg.Locks), len(cfg.RWLocks), len(cfg.Policies), len(cfg.RateLimits), len(cfg.Leases), len(cfg.EnvoyRateLimits))
	}
}

// TestBrokenExample checks that all five mistakes of examples/broken.hcl
// come back at once, on their lines.
func TestBrokenExample(t *testing.T) {
	cfg, diags := Load(brokenFile, LoadOptions{})
	want := []wantDiag{
		want(5, "Invalid value", `"log_format"`, `got "yaml"`),
		want(12, "Invalid duration", `"max"`, `"1 second"`),
		want(22, "Unsupported argument", `"fencng"`, `Did you mean "fencing"?`),
		want(23, "Reference to undeclared policy", `Did you mean "policy.retry.fast"?`),
		want(28, "Wrong kind of policy", `takes a partition policy`, "policy.retry.fast is a retry policy"),
	}
	out := render(t, cfg, diags)
	if len(diags) != len(want) {
		t.Fatalf("got %d diagnostics, want %d:\n%s", len(diags), len(want), out)
	}
	for i, w := range want {
		d := diags[i]
		if d.Subject == nil || d.Subject.Filename != brokenFile || d.Subject.Start.Line != w.line {
			t.Errorf("diagnostic %d at %v, want %s line %d", i, d.Subject, brokenFile, w.line)
		}
		if !containsAll(text(d), w.frags...) {
			t.Errorf("diagnostic %d = %q, want fragments %q", i, text(d), w.frags)
		}
	}
}

// TestBrokenGolden compares the rendered diagnostics of
// examples/broken.hcl (file, line, snippet, detail) with
// testdata/broken.golden. Run with -update to rewrite it.
func TestBrokenGolden(t *testing.T) {
	cfg, diags := Load(brokenFile, LoadOptions{})
	got := render(t, cfg, diags)
	const golden = "testdata/broken.golden"
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("rendered diagnostics differ from %s (-want +got):\n%s", golden, diff)
	}

	// With color, the severity and the highlighted range are marked.
	cfg, diags = Load(brokenFile, LoadOptions{})
	var b strings.Builder
	if err := WriteDiagnostics(&b, cfg.Files(), diags, true); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "\x1b[31mError\x1b[0m: Invalid value") || !strings.Contains(b.String(), "\x1b[1;4m\"yaml\"\x1b[0m") {
		t.Errorf("colored output lacks escapes:\n%q", b.String())
	}
}
