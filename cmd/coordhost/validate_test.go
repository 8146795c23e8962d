package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// brokenExample is the example with five mistakes; goodConfig is a small
// valid file with builtin policies only.
const brokenExample = "../../examples/broken.hcl"

const goodConfig = `
variable "ttl" {
  type    = string
  default = "5s"
}

server {
  log_format = "text"
  log_level  = "debug"
}

policy "retry" "quick" {
  driver = "builtin"
  kind   = "constant"
  delay  = "20ms"
}

policy "partition" "per_tenant" {
  driver   = "builtin"
  template = "$${tenant}"
}

lock "job" {
  ttl     = var.ttl
  fencing = true
  prefix  = "t:"
  retry   = policy.retry.quick
}

lock "tenant" {
  ttl       = "5s"
  prefix    = "t:"
  partition = policy.partition.per_tenant
}
`

// writeConfig writes a configuration file into a fresh directory and
// returns its path.
func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "coordhost.hcl")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestValidateBroken: all five mistakes of examples/broken.hcl at once,
// each with its line and source snippet, and exit status 1.
func TestValidateBroken(t *testing.T) {
	t.Parallel()
	te := newTestEnv(t, nil)
	code := run(context.Background(), []string{"validate", brokenExample}, te.env)
	if code != exitFailure {
		t.Fatalf("exit status %d, want 1; stderr:\n%s", code, te.errOut)
	}
	if te.out.String() != "" {
		t.Errorf("stdout = %q, want nothing", te.out)
	}
	stderr := te.errOut.String()
	if n := strings.Count(stderr, "Error: "); n != 5 {
		t.Errorf("%d errors, want 5; stderr:\n%s", n, stderr)
	}
	re := regexp.MustCompile(`on \.\./\.\./examples/broken\.hcl line (\d+), in `)
	var lines []string
	for _, m := range re.FindAllStringSubmatch(stderr, -1) {
		lines = append(lines, m[1])
	}
	if got, want := strings.Join(lines, ","), "5,12,22,23,28"; got != want {
		t.Errorf("error lines %s, want %s; stderr:\n%s", got, want, stderr)
	}
	for _, snippet := range []string{
		`   5:   log_format = "yaml"`,
		`  12:   max    = "1 second"`,
		`  22:   fencng  = true`,
		`  23:   retry   = policy.retry.fsat`,
		`  28:   partition = policy.retry.fast`,
		`Did you mean "fencing"?`,
	} {
		if !strings.Contains(stderr, snippet) {
			t.Errorf("stderr lacks %q:\n%s", snippet, stderr)
		}
	}
	if !strings.HasSuffix(stderr, "coordhost: validate: ../../examples/broken.hcl: 5 errors\n") {
		t.Errorf("stderr does not end with the summary:\n%s", stderr)
	}
	if strings.Contains(stderr, "\x1b[") {
		t.Errorf("colors in non-terminal output:\n%q", stderr)
	}
}

func TestValidateGood(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, goodConfig)
	for _, args := range [][]string{
		{path},
		{"-var", "ttl=1m", path},
		{path, "-var=ttl=1m"},
		{"-config", path, "-var", "ttl=2s"},
		{"--", path},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			te := newTestEnv(t, nil)
			code := run(context.Background(), append([]string{"validate"}, args...), te.env)
			if code != exitOK {
				t.Fatalf("exit status %d; stderr:\n%s", code, te.errOut)
			}
			if want := path + ": OK\n"; te.out.String() != want {
				t.Errorf("stdout = %q, want %q", te.out, want)
			}
			if te.errOut.String() != "" {
				t.Errorf("stderr = %q, want nothing", te.errOut)
			}
		})
	}
}

// TestValidateBadFile: problems with the file itself or its variables are
// diagnostics (exit 1), not usage errors.
func TestValidateBadFile(t *testing.T) {
	t.Parallel()
	good := writeConfig(t, goodConfig)
	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"no such file", []string{filepath.Join(t.TempDir(), "none.hcl")}, []string{"Cannot read configuration file", "There is no file at"}},
		{"undeclared variable", []string{"-var", "nope=1", good}, []string{"nope"}},
		{"variable of the wrong kind", []string{"-var", "ttl=forever", good}, []string{`"forever"`, "line 24"}},
		{"syntax error", []string{writeConfig(t, "lock \"x\" {\n  ttl = \n}\n")}, []string{"Error: ", "line 2"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			te := newTestEnv(t, nil)
			code := run(context.Background(), append([]string{"validate"}, tc.args...), te.env)
			if code != exitFailure {
				t.Fatalf("exit status %d, want 1; stderr:\n%s", code, te.errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(te.errOut.String(), w) {
					t.Errorf("stderr lacks %q:\n%s", w, te.errOut)
				}
			}
			if te.out.String() != "" {
				t.Errorf("stdout = %q", te.out)
			}
		})
	}
}

func TestValidateBadArgs(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no FILE", nil, "validate: missing FILE"},
		{"only flags", []string{"-var", "a=b"}, "validate: missing FILE"},
		{"two files", []string{"a.hcl", "b.hcl"}, `validate: unexpected argument "b.hcl": validate takes one FILE`},
		{"FILE and -config", []string{"-config", "a.hcl", "b.hcl"}, `validate: FILE "b.hcl" and -config "a.hcl": give the file once`},
		{"empty FILE", []string{""}, "validate: FILE is empty"},
		{"empty -config", []string{"-config", ""}, "validate: missing FILE"},
		{"var without =", []string{"-var", "ttl", "a.hcl"}, `validate: -var "ttl": want NAME=VALUE`},
		{"var bad name", []string{"-var", "a.b=1", "a.hcl"}, `"a.b" is not a valid variable name`},
		{"var missing value", []string{"a.hcl", "-var"}, "flag needs an argument: -var"},
		{"unknown flag", []string{"-strict", "a.hcl"}, "flag provided but not defined: -strict"},
		{"misspelt flag", []string{"-vars", "a=b", "a.hcl"}, "flag provided but not defined: -vars (did you mean -var?)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			te := newTestEnv(t, nil)
			code := run(context.Background(), append([]string{"validate"}, tc.args...), te.env)
			if code != exitUsage {
				t.Fatalf("exit status %d, want 2; stderr:\n%s", code, te.errOut)
			}
			if !strings.Contains(te.errOut.String(), tc.want) || !strings.HasSuffix(te.errOut.String(), "\nRun 'coordhost validate -h' for usage.\n") {
				t.Fatalf("stderr = %q, want %q", te.errOut, tc.want)
			}
		})
	}
}

// TestValidateCompilesModules: validate refuses a module that serve would
// refuse (a forbidden import, a wrong ABI signature), naming the file and
// line of its module attribute, and accepts a good one; it runs none of
// the module's code.
func TestValidateCompilesModules(t *testing.T) {
	t.Parallel()
	abs := func(p string) string {
		a, err := filepath.Abs(p)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	cfg := func(module string) string {
		return `
policy "retry" "custom" {
  driver = "wasm"
  module = "` + abs(module) + `"
}

lock "job" {
  ttl   = "5s"
  retry = policy.retry.custom
}
`
	}
	for _, tc := range []struct {
		module string
		ok     bool
		want   string
	}{
		{"../../plugins/examples/wasm/gobackoff/gobackoff.wasm", true, ""},
		{"../../plugins/examples/wasm/wat/constant.wasm", true, ""},
		{"../../policies/wasm/testdata/bad_import.wasm", false, "line 4"},
		{"../../policies/wasm/testdata/bad_sig.wasm", false, "line 4"},
		{"../../policies/wasm/testdata/bad_memimport.wasm", false, "line 4"},
	} {
		t.Run(filepath.Base(tc.module), func(t *testing.T) {
			te := newTestEnv(t, nil)
			path := writeConfig(t, cfg(tc.module))
			code := run(context.Background(), []string{"validate", path}, te.env)
			if tc.ok {
				if code != exitOK {
					t.Fatalf("exit %d; stderr:\n%s", code, te.errOut)
				}
				return
			}
			if code != exitFailure || !strings.Contains(te.errOut.String(), tc.want) || !strings.Contains(te.errOut.String(), "Error:") {
				t.Fatalf("exit %d, want %d and an error at %s; stderr:\n%s", code, exitFailure, tc.want, te.errOut)
			}
		})
	}
}
