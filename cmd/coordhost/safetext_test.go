package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/coordhost/coordhost/config"
	"github.com/coordhost/coordhost/primitives"
	"github.com/hashicorp/hcl/v2"
)

// hostile is text from outside the process that tries to clear the screen
// and print a line of its own.
const hostile = "policy refused\x1b[2J\x1b[H\ncoordhost: acquired lock \"job\"\r\x07"

// assertOneSafeLine fails unless out is exactly the lines want (each one
// line, in order) and holds no byte that steers a terminal.
func assertOneSafeLine(t *testing.T, out string, want ...string) {
	t.Helper()
	if got := strings.Split(strings.TrimSuffix(out, "\n"), "\n"); len(got) != len(want) {
		t.Fatalf("output has %d lines, want %d:\n%q", len(got), len(want), out)
	}
	for _, w := range want {
		if !strings.Contains(out, w+"\n") {
			t.Errorf("output lacks line %q:\n%q", w, out)
		}
	}
	for _, b := range []byte(strings.TrimSuffix(out, "\n")) {
		if b < 0x20 && b != '\n' || b == 0x7f {
			t.Fatalf("output holds control byte %#x:\n%q", b, out)
		}
	}
}

func TestSafeText(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain text, ünïcödé, 日本語, emoji 🙂", "plain text, ünïcödé, 日本語, emoji 🙂"},
		{"", ""},
		{"clear\x1b[2Jscreen", `clear\x1b[2Jscreen`},
		{"two\nlines\r\n", `two\nlines\r\n`},
		{"tab\there", `tab\there`},
		{"bell\x07 del\x7f nul\x00", `bell\x07 del\x7f nul\x00`},
		{"c1 csi \u009b2J nel \u0085", `c1 csi \u009b2J nel \u0085`},
		{"bidi \u202eevil\u202c", `bidi \u202eevil\u202c`},
		{"line sep \u2028 para \u2029", `line sep \u2028 para \u2029`},
		{"bad utf8 \xff\xfe", `bad utf8 \xff\xfe`},
		{"replacement char \ufffd", `replacement char \ufffd`},
		{"private use \U000f0000", `private use \U000f0000`},
		{"no-break\u00a0space", "no-break\u00a0space"},
	} {
		if got := safeText(tc.in); got != tc.want {
			t.Errorf("safeText(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := safeLines("a\nb\x1b[2J\n"); got != "a\nb\\x1b[2J\n" {
		t.Errorf("safeLines = %q", got)
	}
}

// TestLogfEscapes: every "coordhost: ..." line goes through one helper
// that escapes what its arguments carry.
func TestLogfEscapes(t *testing.T) {
	te := newTestEnv(t, nil)
	te.logf("acquiring lock %q: %v", "job", errors.New(hostile))
	assertOneSafeLine(t, te.errOut.String(),
		`coordhost: acquiring lock "job": policy refused\x1b[2J\x1b[H\ncoordhost: acquired lock "job"\r\x07`)

	te = newTestEnv(t, nil)
	te.usageErrorFor("lock hold", "lock hold: %v", errors.New("bad\x1b[31m\nRun this"))
	assertOneSafeLine(t, te.errOut.String(), `coordhost: lock hold: bad\x1b[31m\nRun this`, "Run 'coordhost lock hold -h' for usage.")
}

// TestAcquireErrorEscaped: an error from the acquisition (a policy
// module's or plugin's refusal, Redis error text) with escapes and a
// newline stays on one escaped line, and the lock name is quoted.
func TestAcquireErrorEscaped(t *testing.T) {
	for _, tc := range []struct {
		name, lock string
		err        error
		want       string
	}{
		{"policy refusal", "job", errors.New(hostile),
			`coordhost: acquiring lock "job": policy refused\x1b[2J\x1b[H\ncoordhost: acquired lock "job"\r\x07`},
		{"hostile lock name", "a\x1b[2J\nb", errors.New("boom"), `coordhost: acquiring lock "a\x1b[2J\nb": boom`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			te := newTestEnv(t, nil)
			acquire := func(context.Context) (primitives.Lease, error) { return nil, tc.err }
			cfg := holdConfig{name: tc.lock, ttl: defaultTTL, argv: []string{"true"}}
			code := holdWithLock(context.Background(), acquire, cfg, "/bin/true", te.env, nil, func() {}, func(string) (int, bool) { return 0, false })
			if code != exitFailure {
				t.Fatalf("exit status %d", code)
			}
			assertOneSafeLine(t, te.errOut.String(), tc.want)
		})
	}
}

// TestHoldNameEscapedEndToEnd: a lock NAME with escapes, given on the
// command line, is printed quoted by lock hold (and CMD gets it as is).
func TestHoldNameEscapedEndToEnd(t *testing.T) {
	t.Parallel()
	d := startTestDevRedis(t)
	te := newTestEnv(t, nil)
	name := "lost\x1b[2J\nx"
	code := run(context.Background(), []string{"lock", "hold", "-redis", d.Socket(), name, "--", "sh", "-c", `printf %s "$COORDHOST_LOCK_NAME"`}, te.env)
	if code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", code, te.errOut)
	}
	if te.out.String() != name {
		t.Errorf("CMD got COORDHOST_LOCK_NAME %q, want %q", te.out, name)
	}
	want := []string{
		`coordhost: acquired lock "lost\x1b[2J\nx"; key "coordhost:lock:lost\x1b[2J\nx", ttl 15s`,
		`coordhost: released lock "lost\x1b[2J\nx"`,
	}
	// A slow acquisition (a loaded machine) first says it waits, escaped
	// the same way.
	if waiting := `coordhost: waiting for lock "lost\x1b[2J\nx"`; strings.HasPrefix(te.errOut.String(), waiting+"\n") {
		want = append([]string{waiting}, want...)
	}
	assertOneSafeLine(t, te.errOut.String(), want...)
}

// TestWriteDiagsEscapes: diagnostics (whose summaries and details may
// carry a module's text) and the file's source lines are escaped; the
// snippet still points at the right place.
func TestWriteDiagsEscapes(t *testing.T) {
	src := []byte("lock \"x\" {\n  ttl = \"\x1b[2J\u202e5s\"\n}\n")
	file := &hcl.File{Bytes: src}
	rng := hcl.Range{Filename: "c.hcl", Start: hcl.Pos{Line: 2, Column: 9, Byte: 19}, End: hcl.Pos{Line: 2, Column: 19, Byte: 29}}
	diags := hcl.Diagnostics{{
		Severity: hcl.DiagError,
		Summary:  "Module says \x1b[2J\nfake summary",
		Detail:   "First paragraph \x1b]0;title\x07.\n\nSecond paragraph.",
		Subject:  &rng,
	}}
	te := newTestEnv(t, nil)
	te.writeDiags("", map[string]*hcl.File{"c.hcl": file}, diags)
	out := te.errOut.String()
	if strings.ContainsAny(out, "\x1b\x07\u202e") {
		t.Fatalf("diagnostics hold control characters:\n%q", out)
	}
	for _, w := range []string{
		`Error: Module says \x1b[2J\nfake summary`,
		"on c.hcl line 2:\n",
		`2:   ttl = "?[2J???5s"` + "\n", // ESC and the 3 bytes of U+202E
		"First paragraph \\x1b]0;title\\x07.\n\nSecond paragraph.",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("diagnostics lack %q:\n%s", w, out)
		}
	}
	// The caller's values are untouched.
	if !bytes.Equal(file.Bytes, src) || diags[0].Summary != "Module says \x1b[2J\nfake summary" {
		t.Error("writeDiags changed its arguments")
	}
}

// TestJSONLogEscapes: serve's JSON log keeps each record one valid JSON
// line with nothing that steers a terminal, and the same values.
func TestJSONLogEscapes(t *testing.T) {
	var buf bytes.Buffer
	log, _ := newLogger(&buf, config.Server{LogFormat: config.LogJSON})
	msg := "plugin says \x1b[2J\nhi \u202eevil \u0085 \u2028 \U000f0000"
	log.Warn(msg, "err", errors.New(hostile))
	out := buf.String()
	if strings.Count(out, "\n") != 1 || !strings.HasSuffix(out, "\n") {
		t.Fatalf("not one line: %q", out)
	}
	if strings.ContainsAny(out, "\x1b\u202e\u0085\u2028\U000f0000") {
		t.Fatalf("record holds characters that steer a terminal: %q", out)
	}
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatal(err)
	}
	if rec["msg"] != msg || rec["err"] != hostile {
		t.Fatalf("values changed: %v", rec)
	}
}

// TestTextLogEscapes: the text log (serve's default, and the host's log in
// lock hold -config) quotes and escapes such values itself.
func TestTextLogEscapes(t *testing.T) {
	var buf bytes.Buffer
	log, _ := newLogger(&buf, config.Server{})
	log.Warn("plugin says \x1b[2J\nhi", "err", errors.New(hostile))
	cliLogger(&buf).Warn("module \u202e", "err", errors.New(hostile))
	out := buf.String()
	if strings.Count(out, "\n") != 2 || strings.ContainsAny(out, "\x1b\r\a\u202e") {
		t.Fatalf("log: %q", out)
	}
	if !strings.Contains(out, `err="policy refused\x1b[2J\x1b[H\ncoordhost: acquired lock \"job\"\r\a"`) {
		t.Fatalf("log: %s", out)
	}
}

// TestValidateFileNameEscaped: validate's "FILE: OK" goes through the same
// escaping.
func TestValidateFileNameEscaped(t *testing.T) {
	dir := t.TempDir()
	name := dir + "/ok\x1b[2J.hcl"
	if err := os.WriteFile(name, []byte(goodConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	te := newTestEnv(t, nil)
	if code := run(context.Background(), []string{"validate", name}, te.env); code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", code, te.errOut)
	}
	assertOneSafeLine(t, te.out.String(), safeText(name)+": OK")
}

// A file name with escapes and a newline, in a file with errors and as a
// missing file: every line of the diagnostics stays free of control
// characters, and the snippet is still shown.
func TestDiagnosticFileNamesEscaped(t *testing.T) {
	dir := t.TempDir()
	name := dir + "/evil\x1b[2J\u202e\nname.hcl"
	if err := os.WriteFile(name, []byte("lock \"job\" {\n  ttl = \"30 seconds\"\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{name, name + ".missing"} {
		te := newTestEnv(t, nil)
		if code := run(context.Background(), []string{"validate", file}, te.env); code != exitFailure {
			t.Fatalf("exit status %d; stderr:\n%s", code, te.errOut)
		}
		out := te.errOut.String()
		for _, bad := range []string{"\x1b", "\u202e", "evil\x1b"} {
			if strings.Contains(out, bad) {
				t.Fatalf("raw %q in:\n%s", bad, out)
			}
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "name.hcl") {
				t.Fatalf("the file name's newline split a line:\n%s", out)
			}
		}
		if file == name && !strings.Contains(out, `ttl = "30 seconds"`) {
			t.Fatalf("no snippet for the escaped file name:\n%s", out)
		}
	}
}
