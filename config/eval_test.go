package config

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/policies"
	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

func TestVarOverrides(t *testing.T) {
	const src = `
variable "ttl" {
  description = "lock lease"
  default     = "30s"
}
variable "fencing" {
  type    = bool
  default = false
}
variable "pages" {
  default = 16
}
variable "names" {
  default = ["a"]
}
variable "typed_names" {
  type    = list(string)
  default = []
}
variable "prefix" {}

lock "x" {
  ttl     = var.ttl
  fencing = var.fencing
  prefix  = var.prefix
}
`
	// Defaults, with the one required variable set.
	cfg := mustParse(t, src, LoadOptions{Vars: map[string]cty.Value{"prefix": cty.StringVal("p:")}})
	l := cfg.Lock("x")
	if l.TTL != 30*time.Second || l.Fencing || l.Prefix != "p:" {
		t.Errorf("with defaults: %+v", l)
	}
	v := cfg.Variables[0]
	if v.Name != "ttl" || v.Description != "lock lease" || !v.Default.RawEquals(cty.StringVal("30s")) {
		t.Errorf("variable ttl = %+v", v)
	}

	// Overrides as -var flags give them: strings, converted to each type.
	vars := map[string]cty.Value{}
	for _, flag := range []string{"ttl=1m", "fencing=true", "pages=32", `names=["b", "c"]`, `typed_names=["d"]`, "prefix=q:"} {
		name, val, err := ParseVarFlag(flag)
		if err != nil {
			t.Fatal(err)
		}
		vars[name] = val
	}
	cfg = mustParse(t, src, LoadOptions{Vars: vars})
	l = cfg.Lock("x")
	if l.TTL != time.Minute || !l.Fencing || l.Prefix != "q:" {
		t.Errorf("with overrides: %+v", l)
	}
	got := map[string]cty.Value{}
	for _, v := range cfg.Variables {
		got[v.Name] = v.Value
	}
	wantVals := map[string]cty.Value{
		"ttl":         cty.StringVal("1m"),
		"fencing":     cty.True,
		"pages":       cty.NumberIntVal(32),
		"names":       cty.TupleVal([]cty.Value{cty.StringVal("b"), cty.StringVal("c")}),
		"typed_names": cty.ListVal([]cty.Value{cty.StringVal("d")}),
		"prefix":      cty.StringVal("q:"),
	}
	if diff := cmp.Diff(wantVals, got, cmpOpts...); diff != "" {
		t.Errorf("variable values (-want +got):\n%s", diff)
	}

	// Typed values pass through unchanged.
	cfg = mustParse(t, src, LoadOptions{Vars: map[string]cty.Value{
		"prefix": cty.StringVal(""), "fencing": cty.True,
	}})
	if !cfg.Lock("x").Fencing {
		t.Error("typed override ignored")
	}
}

func TestDynamicBlocks(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "m.wasm", wasmStub, 0o644)
	src := `
variable "locks" {
  default = {
    invoice = "30s"
    report  = "2m"
  }
}
variable "limits" {
  default = [{ pages = 8, timeout = "20ms" }]
}

policy "retry" "fast" {
  driver = "builtin"
  kind   = "none"
}

lock "static" {
  ttl = "1s"
}

dynamic "lock" {
  for_each = var.locks
  labels   = [lock.key]
  content {
    ttl   = lock.value
    retry = policy.retry.fast
  }
}

policy "retry" "w" {
  driver = "wasm"
  module = "m.wasm"
  dynamic "limits" {
    for_each = var.limits
    iterator = l
    content {
      memory_pages = l.value.pages
      call_timeout = l.value.timeout
    }
  }
}
`
	cfg, diags := parseIn(t, dir, src, LoadOptions{})
	if len(diags) > 0 {
		t.Fatalf("diagnostics:\n%s", render(t, cfg, diags))
	}
	var names []string
	for _, l := range cfg.Locks {
		names = append(names, l.Name+"="+l.TTL.String())
		if l.Name != "static" && (l.Retry == nil || l.Retry.Name != "fast" || l.Retry.Range.Start.Line != 26) {
			t.Errorf("lock %q retry = %+v", l.Name, l.Retry)
		}
	}
	if want := []string{"static=1s", "invoice=30s", "report=2m0s"}; !slices.Equal(names, want) {
		t.Errorf("locks = %v, want %v", names, want)
	}
	if l := cfg.Lock("report"); l.Range.Start.Line != 21 {
		t.Errorf("generated lock's range %v, want the dynamic block (line 21)", l.Range)
	}
	w := cfg.Policy(policies.KindRetry, "w").Wasm
	if w.MemoryPages != 8 || w.CallTimeout != 20*time.Millisecond {
		t.Errorf("dynamic limits: %+v", w)
	}

	// Overriding the list variable changes the generated blocks.
	cfg, diags = parseIn(t, dir, src, LoadOptions{Vars: map[string]cty.Value{
		"locks": cty.StringVal(`{ only = "5s" }`),
	}})
	if len(diags) > 0 {
		t.Fatalf("diagnostics:\n%s", render(t, cfg, diags))
	}
	if len(cfg.Locks) != 2 || cfg.Lock("only") == nil || cfg.Lock("only").TTL != 5*time.Second {
		t.Errorf("locks after override: %+v", cfg.Locks)
	}

	// Generated duplicates are reported against the dynamic block.
	cfg, diags = parseIn(t, dir, src, LoadOptions{Vars: map[string]cty.Value{
		"locks": cty.StringVal(`{ static = "5s" }`),
	}})
	if len(diags) != 1 || diags[0].Summary != "Duplicate lock" || diags[0].Subject.Start.Line != 21 {
		t.Errorf("duplicate from dynamic: %s", render(t, cfg, diags))
	}
}

func TestFunctions(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "etc/ttl.txt", "45s\n", 0o644)
	writeFile(t, dir, "etc/bin.dat", "\xff\xfe", 0o644)
	src := `
variable "env" {
  default = "Prod"
}
variable "extra" {
  default = { give_up_after_ms = 100 }
}
redis {
  addresses  = concat(["a:1"], [format("%s:%d", "b", 2)])
  key_prefix = join(":", [lower(var.env), upper("x"), ""])
  username   = coalesce(null, "fallback")
  password   = tostring(length([1, 2, 3]))
}
server {
  listen = "${path.cwd == "/wd" ? "127.0.0.1" : "bad"}:${tonumber("7001") + max(1, 2) - min(1, 2)}"
}
policy "retry" "w" {
  driver = "wasm"
  module = "m.wasm"
  config = merge({ base_ms = 5 }, var.extra, { raw = jsonencode({ a = tobool("true") }) })
}
lock "x" {
  ttl    = trimspace(file("etc/ttl.txt"))
  prefix = split(",", "p,q")[1]
}
`
	writeFile(t, dir, "m.wasm", wasmStub, 0o644)
	cfg, diags := parseIn(t, dir, src, LoadOptions{WorkDir: "/wd"})
	if len(diags) > 0 {
		t.Fatalf("diagnostics:\n%s", render(t, cfg, diags))
	}
	r := cfg.Redis
	if !slices.Equal(r.Addresses, []string{"a:1", "b:2"}) || r.KeyPrefix != "prod:X:" || r.Username != "fallback" || r.Password != "3" {
		t.Errorf("redis = %+v", r)
	}
	if cfg.Server.Listen != "127.0.0.1:7002" {
		t.Errorf("listen = %q", cfg.Server.Listen)
	}
	if got, want := string(cfg.Policy(policies.KindRetry, "w").Wasm.Config), `{"base_ms":5,"give_up_after_ms":100,"raw":"{\"a\":true}"}`; got != want {
		t.Errorf("config = %s, want %s", got, want)
	}
	if l := cfg.Lock("x"); l.TTL != 45*time.Second || l.Prefix != "q" {
		t.Errorf("lock = %+v", l)
	}

	// file() refuses what is not UTF-8 text, directories and missing files;
	// an absolute path works.
	for _, tc := range []struct{ arg, frag string }{
		{`"etc/bin.dat"`, "not UTF-8"},
		{`"etc"`, "not a regular file"},
		{`"etc/none.txt"`, "There is no file at " + filepath.Join(dir, "etc/none.txt")},
	} {
		_, diags := parseIn(t, dir, `lock "x" {
  ttl = file(`+tc.arg+`)
}`, LoadOptions{})
		if len(diags) != 1 || !strings.Contains(diags[0].Detail, tc.frag) || diags[0].Subject.Start.Line != 2 {
			t.Errorf("file(%s): %v, want %q", tc.arg, diags, tc.frag)
		}
	}
	abs := filepath.Join(dir, "etc/ttl.txt")
	cfg = mustParse(t, `lock "x" {
  ttl = trimspace(file("`+abs+`"))
}`, LoadOptions{})
	if cfg.Lock("x").TTL != 45*time.Second {
		t.Errorf("file(absolute) ttl = %v", cfg.Lock("x").TTL)
	}
}

// TestNoNetwork checks that nothing package config depends on imports net:
// decoding cannot dial anything. It needs the go command.
func TestNoNetwork(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go command not in PATH; cannot list dependencies")
	}
	out, err := exec.Command(goBin, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if dep == "net" || strings.HasPrefix(dep, "net/") || dep == "os/exec" || dep == "crypto/tls" {
			t.Errorf("package config depends on %s", dep)
		}
	}
}

// format() refuses a width or precision above maxFormatWidth (cty pads %s
// itself: a huge width would allocate without bound), and keeps working
// below it.
func TestFormatWidthBound(t *testing.T) {
	for _, tc := range []struct {
		src string
		ok  bool
	}{
		{`format("%5s|%-3d|%.2f|%[1]s", "ab", 7, 1.5)`, true},
		{`format("%4096s", "x")`, true},
		{`format("%4097s", "x")`, false},
		{`format("%100000000s", "x")`, false},
		{`format("%.99999f", 1)`, false},
		{`format("%[99999999999999999999]s", "x")`, false},
	} {
		expr, diags := hclsyntax.ParseExpression([]byte(tc.src), "t.hcl", hcl.Pos{Line: 1, Column: 1})
		if diags.HasErrors() {
			t.Fatal(diags)
		}
		_, diags = expr.Value(&hcl.EvalContext{Functions: functions(t.TempDir(), true)})
		if diags.HasErrors() == tc.ok {
			t.Errorf("%s: %v", tc.src, diags)
		}
	}
}
