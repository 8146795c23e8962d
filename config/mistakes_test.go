package config

import (
	"strings"
	"testing"

	"github.com/zclconf/go-cty/cty"
)

// wantDiag is one expected error: its line and fragments of its summary
// and detail.
type wantDiag struct {
	line  int
	frags []string
}

func want(line int, frags ...string) wantDiag { return wantDiag{line, frags} }

// plugScript is the fake plugin binary of the mistake tests; PLUGSHA in a
// source stands for its sha256.
const plugScript = "#!/bin/sh\nexit 1\n"

// mistakeCase is a source (PLUGSHA standing for plugScript's sha256) with
// variables, and the errors it must give: all of them, nothing else.
type mistakeCase struct {
	name string
	src  string
	vars map[string]cty.Value
	want []wantDiag
}

// runMistakes parses each case's source in dir, in a subtest, and checks
// its diagnostics: as many as want, each an error on its line with its
// fragments, rendered with the file name.
func runMistakes(t *testing.T, dir string, tests []mistakeCase) {
	t.Helper()
	sha := sha256Hex(plugScript)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := strings.ReplaceAll(tt.src, "PLUGSHA", sha)
			cfg, diags := parseIn(t, dir, src, LoadOptions{Vars: tt.vars})
			out := render(t, cfg, diags)
			if len(diags) != len(tt.want) {
				t.Fatalf("got %d diagnostics, want %d:\n%s", len(diags), len(tt.want), out)
			}
			for i, w := range tt.want {
				d := diags[i]
				frags := make([]string, len(w.frags))
				for j, f := range w.frags {
					frags[j] = strings.ReplaceAll(f, "PLUGSHA", sha)
				}
				if d.Severity != 1 /* hcl.DiagError */ {
					t.Errorf("diagnostic %d is not an error: %v", i, d)
				}
				line := 0
				if d.Subject != nil {
					line = d.Subject.Start.Line
				}
				if line != w.line {
					t.Errorf("diagnostic %d on line %d, want %d:\n%s", i, line, w.line, out)
				}
				if !containsAll(text(d), frags...) {
					t.Errorf("diagnostic %d = %q, want fragments %q", i, text(d), frags)
				}
				if d.Subject != nil && !strings.Contains(out, "  on "+d.Subject.Filename) {
					t.Errorf("rendering lacks the file name:\n%s", out)
				}
			}
		})
	}
}

// TestMistakes checks each kind of mistake: the diagnostics that come back
// (all of them, nothing else), their lines and their wording.
func TestMistakes(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "ok.wasm", wasmStub, 0o644)
	writeFile(t, dir, "text.wasm", "(module)", 0o644)
	writeFile(t, dir, "plug", plugScript, 0o755)
	writeFile(t, dir, "noexec", plugScript, 0o644)
	writeFile(t, dir, "cert.pem", "cert", 0o644)

	tests := []mistakeCase{
		// Structure.
		{"unknown block", `bogus {}`, nil,
			[]wantDiag{want(1, "Unsupported block type", `"bogus"`)}},
		{"top-level argument", `x = 1`, nil,
			[]wantDiag{want(1, "Unsupported argument", `"x"`)}},
		{"unknown argument", `lock "a" {
  ttl    = "1s"
  fencng = true
}`, nil, []wantDiag{want(3, "Unsupported argument", `Did you mean "fencing"?`)}},
		{"missing label", `lock {
  ttl = "1s"
}`, nil, []wantDiag{want(1, "Missing name for lock")}},
		{"syntax error", `lock "a" {
  ttl = "1s"
`, nil, []wantDiag{want(1, "Unclosed configuration block")}},
		{"missing required ttl", `lock "a" {}`, nil,
			[]wantDiag{want(1, "Missing required argument", `"ttl"`)}},
		{"missing required driver", `policy "retry" "x" {}`, nil,
			[]wantDiag{want(1, "Missing required argument", `"driver"`)}},
		{"missing required sha256", `policy "retry" "x" {
  driver = "plugin"
  path   = "plug"
}`, nil, []wantDiag{want(1, "Missing required argument", `"sha256"`)}},
		{"missing redis addresses", `redis {}`, nil,
			[]wantDiag{want(1, "Missing required argument", `"addresses"`)}},

		// Duplicates.
		{"duplicate lock", `lock "x" {
  ttl = "1s"
}
lock "x" {
  ttl = "2s"
}`, nil, []wantDiag{want(4, "Duplicate lock", `Lock "x" was already declared at`, "coordhost.hcl:1")}},
		{"duplicate policy", `policy "retry" "p" {
  driver = "builtin"
  kind   = "none"
}
policy "retry" "p" {
  driver = "builtin"
  kind   = "none"
}
policy "partition" "p" {
  driver   = "builtin"
  template = "x"
}`, nil, []wantDiag{want(5, "Duplicate policy", `Policy "retry" "p"`, "coordhost.hcl:1")}},
		{"duplicate redis and server", `redis {
  addresses = ["a:1"]
}
redis {
  addresses = ["b:1"]
}
server {}
server {}`, nil, []wantDiag{
			want(4, "Duplicate redis block", "coordhost.hcl:1"),
			want(8, "Duplicate server block", "coordhost.hcl:7"),
		}},
		{"duplicate variable", `variable "v" {
  default = 1
}
variable "v" {
  default = 2
}`, nil, []wantDiag{want(4, "Duplicate variable", "coordhost.hcl:1")}},
		{"duplicate limits", `policy "retry" "w" {
  driver = "wasm"
  module = "ok.wasm"
  limits {}
  limits {}
}`, nil, []wantDiag{want(5, "Duplicate limits block")}},

		// Values.
		{"bad duration", `lock "a" {
  ttl = "30 seconds"
}`, nil, []wantDiag{want(2, "Invalid duration", `"ttl"`, `"30 seconds" is not one`)}},
		{"negative duration", `policy "retry" "p" {
  driver = "builtin"
  kind   = "exponential"
  base   = "-1s"
}`, nil, []wantDiag{want(4, "Invalid duration", "must not be negative")}},
		{"ttl below 1ms", `lock "a" {
  ttl = "500us"
}`, nil, []wantDiag{want(2, "Invalid ttl", "at least 1ms")}},
		{"max below base", `policy "retry" "p" {
  driver = "builtin"
  kind   = "exponential"
  base   = "1s"
  max    = "10ms"
}`, nil, []wantDiag{want(5, "Invalid backoff", "max (10ms) must not be below base (1s)")}},
		{"argument of another kind", `policy "retry" "p" {
  driver = "builtin"
  kind   = "constant"
  base   = "1s"
}`, nil, []wantDiag{want(4, "Argument not valid for this kind", `"base" does not apply to kind = "constant"`, "delay, give_up_after")}},
		{"bad enum: retry kind", `policy "retry" "p" {
  driver = "builtin"
  kind   = "exponentail"
}`, nil, []wantDiag{want(3, "Invalid value", `"exponential", "constant", "none"`, `Did you mean "exponential"?`)}},
		{"bad enum: driver", `policy "retry" "p" {
  driver = "native"
  whatever = 1
}`, nil, []wantDiag{want(2, "Invalid value", `"builtin", "wasm", "plugin"`, `got "native"`)}},
		{"bad enum: log level", `server {
  log_level = "verbose"
}`, nil, []wantDiag{want(2, "Invalid value", `"log_level"`, `"debug", "info", "warn", "error"`)}},
		{"wrong type", `lock "a" {
  ttl     = "1s"
  fencing = "yes"
}`, nil, []wantDiag{want(3, "Incorrect attribute value type", `"fencing"`, "a bool is required")}},
		{"null", `lock "a" {
  ttl = null
}`, nil, []wantDiag{want(2, "Null value", `"ttl"`)}},
		{"unknown policy kind label", `policy "retyr" "x" {
  driver = "builtin"
}`, nil, []wantDiag{want(1, "Unknown policy kind", `"retyr"`, `Did you mean "retry"?`)}},
		{"invalid policy name", `policy "retry" "my policy" {
  driver = "builtin"
  kind   = "none"
}`, nil, []wantDiag{want(1, "Invalid policy name", `"my policy"`)}},
		{"empty redis addresses", `redis {
  addresses = []
}`, nil, []wantDiag{want(2, "No Redis addresses")}},
		{"bad redis addresses", `redis {
  addresses = ["localhost", "::1:6379", "h:99999", "relative.sock"]
}`, nil, []wantDiag{
			want(2, "Invalid Redis address", `Element 0`, "missing port"),
			want(2, "Invalid Redis address", `Element 1`, "IPv6 address in brackets"),
			want(2, "Invalid Redis address", `Element 2`, `bad port "99999"`),
			want(2, "Invalid Redis address", `Element 3`, "missing port"),
		}},
		{"bad listen", `server {
  listen = "7379"
}`, nil, []wantDiag{want(2, "Invalid listen address", "missing port")}},
		{"tls cert without key", `redis {
  addresses = ["a:1"]
  tls {
    cert_file = "cert.pem"
  }
}`, nil, []wantDiag{want(4, "Missing key_file", "sets cert_file only")}},
		{"tls file missing", `redis {
  addresses = ["a:1"]
  tls {
    ca_file = "nope.pem"
  }
}`, nil, []wantDiag{want(4, "File not found", "nope.pem")}},

		// Policies.
		{"wasm module missing", `policy "retry" "w" {
  driver = "wasm"
  module = "${path.config}/missing.wasm"
}`, nil, []wantDiag{want(3, "File not found", `"module"`, "missing.wasm")}},
		{"wasm module not binary", `policy "retry" "w" {
  driver = "wasm"
  module = "text.wasm"
}`, nil, []wantDiag{want(3, "Not a WebAssembly module", "text.wasm")}},
		{"wasm limits", `policy "retry" "w" {
  driver = "wasm"
  module = "ok.wasm"
  limits {
    memory_pages = 0
    call_timeout = "0s"
  }
}`, nil, []wantDiag{
			want(5, "Invalid number", "whole number from 1 to 65536, not 0"),
			want(6, "Invalid duration", "must be above zero"),
		}},
		{"wasm config not an object", `policy "retry" "w" {
  driver = "wasm"
  module = "ok.wasm"
  config = "base_ms=25"
}`, nil, []wantDiag{want(4, "Incorrect attribute value type", "must be an object", "not string")}},
		{"bad sha256", `policy "partition" "p" {
  driver = "plugin"
  path   = "plug"
  sha256 = "ABCDEF"
}`, nil, []wantDiag{want(4, "Invalid sha256", "64 lowercase hex digits", `"ABCDEF"`)}},
		{"sha256 mismatch", `policy "partition" "p" {
  driver = "plugin"
  path   = "plug"
  sha256 = "0000000000000000000000000000000000000000000000000000000000000000"
}`, nil, []wantDiag{want(4, "Plugin checksum mismatch", "PLUGSHA", "pins 0000")}},
		{"plugin not executable", `policy "partition" "p" {
  driver = "plugin"
  path   = "noexec"
  sha256 = "PLUGSHA"
}`, nil, []wantDiag{want(3, "Plugin is not executable", "noexec")}},
		{"plugin missing", `policy "partition" "p" {
  driver = "plugin"
  path   = "nope"
  sha256 = "PLUGSHA"
  args   = [1, "x"]
}`, nil, []wantDiag{want(3, "File not found", "nope")}},
		{"bad templates", `policy "partition" "a" {
  driver   = "builtin"
  template = "{$${tenant"
}
policy "partition" "b" {
  driver   = "builtin"
  template = "$${a b}"
}
policy "partition" "c" {
  driver   = "builtin"
  template = ""
}
policy "partition" "d" {
  driver   = "builtin"
  template = "x$${}"
}`, nil, []wantDiag{
			want(3, "Invalid partition template", "never closed"),
			want(7, "Invalid partition template", `' ' in "${a b}" is not allowed`),
			want(11, "Invalid partition template", "empty"),
			want(15, "Invalid partition template", "names no attribute"),
		}},
		{"unescaped template placeholder", `policy "partition" "a" {
  driver   = "builtin"
  template = "{${tenant}}:${name}"
}`, nil, []wantDiag{
			want(3, "Unescaped template placeholder", "$${tenant}"),
			want(3, "Unescaped template placeholder", "$${name}"),
		}},
		{"bad starvation bound", `policy "starvation" "s" {
  driver = "builtin"
  bound  = "forever"
}`, nil, []wantDiag{want(3, "Invalid duration", `or "unbounded"`)}},

		// References.
		{"undeclared policy (suggestion)", `policy "retry" "fast" {
  driver = "builtin"
  kind   = "none"
}
lock "a" {
  ttl   = "1s"
  retry = policy.retry.fsat
}`, nil, []wantDiag{want(7, "Reference to undeclared policy", `No policy "retry" "fsat"`, `Did you mean "policy.retry.fast"?`)}},
		{"undeclared policy (list)", `policy "retry" "fast" {
  driver = "builtin"
  kind   = "none"
}
lock "a" {
  ttl   = "1s"
  retry = policy.retry.patient
}`, nil, []wantDiag{want(7, "Reference to undeclared policy", "The retry policies are: fast.")}},
		{"wrong kind of policy", `policy "partition" "per_tenant" {
  driver   = "builtin"
  template = "$${tenant}"
}
lock "a" {
  ttl   = "1s"
  retry = policy.partition.per_tenant
}`, nil, []wantDiag{want(7, "Wrong kind of policy", `Argument "retry" of lock "a" takes a retry policy`, "policy.partition.per_tenant is a partition policy")}},
		{"policy reference as a string", `lock "a" {
  ttl   = "1s"
  retry = "policy.retry.fast"
}`, nil, []wantDiag{want(3, "Invalid policy reference", "policy.retry.NAME without quotes")}},
		{"policy reference of unknown kind", `lock "a" {
  ttl   = "1s"
  retry = policy.backoff.fast
}`, nil, []wantDiag{want(3, "Unknown policy kind", `"backoff"`)}},
		{"policy reference too short", `lock "a" {
  ttl       = "1s"
  partition = policy.partition
}`, nil, []wantDiag{want(3, "Invalid policy reference")}},
		{"policy reference elsewhere", `lock "a" {
  ttl    = "1s"
  prefix = policy.retry.fast
}`, nil, []wantDiag{want(3, "Policy reference not allowed here")}},

		// Variables and functions.
		{"undeclared variable", `variable "ttl" {
  default = "1s"
}
lock "a" {
  ttl = var.tll
}`, nil, []wantDiag{want(5, "Reference to undeclared variable", `There is no variable "tll"`, `Did you mean "var.ttl"?`)}},
		{"variable default uses var", `variable "a" {
  default = "x"
}
variable "b" {
  default = var.a
}`, nil, []wantDiag{want(5, "Variables not allowed")}},
		{"variable without value", `variable "region" {}`, nil,
			[]wantDiag{want(1, "No value for required variable", `"region"`, "-var region=VALUE")}},
		{"variable default of wrong type", `variable "n" {
  type    = number
  default = "many"
}`, nil, []wantDiag{want(3, "Incorrect attribute value type", "a number is required")}},
		{"bad variable name", `variable "1st" {
  default = 1
}`, nil, []wantDiag{want(1, "Invalid variable name")}},
		{"override of undeclared variable", `variable "ttl" {
  default = "1s"
}`, map[string]cty.Value{"tl": cty.StringVal("2s")},
			[]wantDiag{want(0, "Value for undeclared variable", `"tl"`, `Did you mean "ttl"?`)}},
		{"override of wrong type", `variable "n" {
  type    = number
  default = 1
}`, map[string]cty.Value{"n": cty.StringVal("many")},
			[]wantDiag{want(0, "Invalid value for variable", `"n"`, "number required")}},
		{"bad value through a variable", `variable "ttl" {
  default = "soon"
}
lock "a" {
  ttl = var.ttl
}`, nil, []wantDiag{want(5, "Invalid duration", `"soon"`)}},
		{"unknown function", `lock "a" {
  ttl = env("TTL")
}`, nil, []wantDiag{want(2, "Call to unknown function", `"env"`)}},
		{"file() of a missing file", `lock "a" {
  ttl = trimspace(file("ttl.txt"))
}`, nil, []wantDiag{want(2, "Error in function call", "ttl.txt")}},
		{"dynamic variable", `dynamic "variable" {
  for_each = []
  content {}
}`, nil, []wantDiag{want(1, "Unsupported dynamic block", "Variables cannot be generated")}},
		{"dynamic of unknown type", `dynamic "bogus" {
  for_each = []
  content {}
}`, nil, []wantDiag{want(1, "Unsupported block type", `"bogus"`)}},
		{"dynamic block mistakes point into the content", `variable "names" {
  default = ["a", "b"]
}
dynamic "lock" {
  for_each = var.names
  labels   = [lock.value]
  content {
    ttl = "${lock.key}x"
  }
}`, nil, []wantDiag{
			want(8, "Invalid duration", `"0x"`),
			want(8, "Invalid duration", `"1x"`),
		}},
	}
	runMistakes(t, dir, tests)
}

func TestLockNameRules(t *testing.T) {
	for _, name := range []string{"a/b", "__coordhost:x"} {
		src := "lock \"" + name + "\" {\n  ttl = \"1s\"\n}\n"
		_, diags := Parse([]byte(src), "names.hcl", LoadOptions{})
		if !diags.HasErrors() || !strings.Contains(diags.Error(), "Invalid lock name") || diags[0].Subject.Start.Line != 1 {
			t.Errorf("lock %q: %v", name, diags)
		}
	}
}

func TestUnixSocketRules(t *testing.T) {
	for name, src := range map[string]string{
		"unix among others": "redis {\n  addresses = [\"/tmp/r.sock\", \"127.0.0.1:6379\"]\n}\n",
		"tls on unix":       "redis {\n  addresses = [\"/tmp/r.sock\"]\n  tls {\n    enabled = true\n  }\n}\n",
	} {
		_, diags := Parse([]byte(src), "unix.hcl", LoadOptions{})
		if !diags.HasErrors() {
			t.Errorf("%s: accepted", name)
		}
	}
}
