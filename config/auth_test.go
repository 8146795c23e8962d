package config

import (
	"crypto/sha256"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/hcl/v2"
)

// The secrets of the auth tests.
const (
	secretA = "0123456789abcdef0123456789abcdef"
	secretB = "fedcba9876543210fedcba9876543210"
)

func TestServerAuth(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "tls/server.pem", "cert", 0o644)
	writeFile(t, dir, "tls/server.key", "key", 0o600)
	writeFile(t, dir, "tls/ca.pem", "ca", 0o644)
	writeFile(t, dir, "tokens/a", secretA+"\n", 0o600)
	writeFile(t, dir, "tokens/crlf", secretB+"\r\n", 0o600)
	t.Setenv("COORDHOST_TEST_TOKEN_C", "cccccccccccccccccccc")
	src := `
server {
  listen       = "0.0.0.0:7379"
  metrics_open = true
  tls {
    cert_file      = "tls/server.pem"
    key_file       = "${path.config}/tls/server.key"
    client_ca_file = "tls/ca.pem"
  }
  token "billing" {
    secret_file   = "tokens/a"
    names         = ["invoice", "tenant-*"]
    envoy_domains = ["edge"]
    max_streams   = 5
    max_sessions  = 7
  }
  token "ops.admin" {
    secret_file = "tokens/crlf"
    admin       = true
    metrics     = true
  }
  token "c" {
    secret_env = "COORDHOST_TEST_TOKEN_C"
  }
}

lock "invoice" {
  ttl = "1s"
}

rate_limit "tenant-x" {
  algorithm = "fixed_window"
  limit     = 1
  window    = "1s"
}

envoy_rate_limit "edge" {
  descriptor {
    entries    = [{ key = "k" }]
    rate_limit = "tenant-x"
  }
}
`
	cfg, diags := parseIn(t, dir, src, LoadOptions{})
	if len(diags) > 0 {
		t.Fatalf("diagnostics:\n%s", render(t, cfg, diags))
	}
	s := cfg.Server
	want := Server{
		Listen: "0.0.0.0:7379", LogFormat: LogText, LogLevel: LogInfo, MetricsOpen: true,
		TLS: &ServerTLS{CertFile: dir + "/tls/server.pem", KeyFile: dir + "/tls/server.key", ClientCAFile: dir + "/tls/ca.pem"},
		Tokens: []*Token{
			{Name: "billing", SecretSHA256: sha256.Sum256([]byte(secretA)), SecretSource: "secret_file " + dir + "/tokens/a",
				Names: []string{"invoice", "tenant-*"}, EnvoyDomains: []string{"edge"}, MaxStreams: 5, MaxSessions: 7},
			{Name: "ops.admin", SecretSHA256: sha256.Sum256([]byte(secretB)), SecretSource: "secret_file " + dir + "/tokens/crlf",
				Admin: true, Metrics: true, MaxStreams: DefaultTokenMaxStreams, MaxSessions: DefaultTokenMaxSessions},
			{Name: "c", SecretSHA256: sha256.Sum256([]byte("cccccccccccccccccccc")), SecretSource: "secret_env COORDHOST_TEST_TOKEN_C",
				MaxStreams: DefaultTokenMaxStreams, MaxSessions: DefaultTokenMaxSessions},
		},
	}
	if d := cmp.Diff(want, s, cmpOpts...); d != "" {
		t.Fatalf("server (-want +got):\n%s", d)
	}
	if !s.Auth() {
		t.Error("Auth() false with tokens")
	}
	b := s.Tokens[0]
	for name, ok := range map[string]bool{"invoice": true, "tenant-x": true, "tenant-": true, "tenant-a/b": false, "invoices": false, "": false} {
		if b.AllowsName(name) != ok {
			t.Errorf("AllowsName(%q) = %v", name, !ok)
		}
	}
	if !b.AllowsEnvoyDomain("edge") || b.AllowsEnvoyDomain("edge2") || s.Tokens[1].AllowsName("invoice") {
		t.Error("AllowsEnvoyDomain / empty names")
	}

	// No server block, or one without tokens: auth off.
	if cfg := mustParse(t, `server {}`, LoadOptions{}); cfg.Server.Auth() || cfg.Server.TLS != nil || cfg.Server.MetricsOpen {
		t.Errorf("empty server block: %+v", cfg.Server)
	}
}

// TestServerAuthMistakes is TestMistakes for the server block's tls and
// token blocks. No diagnostic may quote a secret.
func TestServerAuthMistakes(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "cert.pem", "cert", 0o644)
	writeFile(t, dir, "key.pem", "key", 0o600)
	writeFile(t, dir, "a", secretA+"\n", 0o600)
	writeFile(t, dir, "a2", secretA, 0o600) // the same secret, without the newline
	writeFile(t, dir, "b", secretB, 0o600)
	writeFile(t, dir, "short", "tooshort-secret\n", 0o600) // 15 bytes
	writeFile(t, dir, "spaces", "has a space in the secret", 0o600)
	writeFile(t, dir, "huge", strings.Repeat("x", MaxTokenSecretBytes+10), 0o600)
	writeFile(t, dir, "twolines", "0123456789abcdef\n\n", 0o600)
	if err := os.Mkdir(dir+"/adir", 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("COORDHOST_TEST_SHORT", "sh0rtval")
	os.Unsetenv("COORDHOST_TEST_UNSET")

	tests := []struct {
		name string
		src  string
		want []wantDiag
	}{
		{"tls without key", `server {
  tls {
    cert_file = "cert.pem"
  }
}`, []wantDiag{want(2, "Missing required argument", `"key_file"`)}},
		{"tls without cert", `server {
  tls {
    key_file = "key.pem"
  }
}`, []wantDiag{want(2, "Missing required argument", `"cert_file"`)}},
		{"tls files missing", `server {
  tls {
    cert_file      = "nope.pem"
    key_file       = "key.pem"
    client_ca_file = "adir"
  }
}`, []wantDiag{want(3, "File not found", "nope.pem"), want(5, "Cannot read file", "adir", "not a regular file")}},
		{"two tls blocks", `server {
  tls {
    cert_file = "cert.pem"
    key_file  = "key.pem"
  }
  tls {
    cert_file = "cert.pem"
    key_file  = "key.pem"
  }
}`, []wantDiag{want(6, "Duplicate tls block", "coordhost.hcl:2")}},
		{"tls unknown argument", `server {
  tls {
    cert_file = "cert.pem"
    key_file  = "key.pem"
    ca_file   = "cert.pem"
  }
}`, []wantDiag{want(5, "Unsupported argument", `"ca_file"`)}},
		{"metrics_open not a bool", `server {
  metrics_open = "yes"
}`, []wantDiag{want(2, "Incorrect attribute value type", `"metrics_open"`)}},

		{"token without secret", `server {
  token "a" {
    names = ["x"]
  }
}`, []wantDiag{want(2, "Missing secret", "secret_file", "secret_env")}},
		{"token with two secrets", `server {
  token "a" {
    secret_file = "a"
    secret_env  = "X"
  }
}`, []wantDiag{want(4, "Two secrets", "exactly one")}},
		{"literal secret", `server {
  token "a" {
    secret = "0123456789abcdef0123"
  }
}`, []wantDiag{want(2, "Missing secret"), want(3, "Unsupported argument", `"secret"`)}},
		{"secret file missing", `server {
  token "a" {
    secret_file = "nope"
  }
}`, []wantDiag{want(3, "File not found", "nope")}},
		{"secret too short", `server {
  token "a" {
    secret_file = "short"
  }
}`, []wantDiag{want(3, "Token secret too short", "15 bytes", "at least 16")}},
		{"secret: only one newline trimmed", `server {
  token "a" {
    secret_file = "twolines"
  }
}`, []wantDiag{want(3, "Invalid token secret", "offset 16")}},
		{"secret with spaces", `server {
  token "a" {
    secret_file = "spaces"
  }
}`, []wantDiag{want(3, "Invalid token secret", "offset 3")}},
		{"secret too long", `server {
  token "a" {
    secret_file = "huge"
  }
}`, []wantDiag{want(3, "Token secret too long")}},
		{"secret env unset", `server {
  token "a" {
    secret_env = "COORDHOST_TEST_UNSET"
  }
}`, []wantDiag{want(3, "Environment variable not set", "$COORDHOST_TEST_UNSET")}},
		{"secret env short", `server {
  token "a" {
    secret_env = "COORDHOST_TEST_SHORT"
  }
}`, []wantDiag{want(3, "Token secret too short", "$COORDHOST_TEST_SHORT", "8 bytes")}},
		{"secret env bad name", `server {
  token "a" {
    secret_env = "A=B"
  }
}`, []wantDiag{want(3, "Invalid environment variable name")}},
		{"same secret twice", `server {
  token "a" {
    secret_file = "a"
  }
  token "b" {
    secret_file = "b"
  }
  token "c" {
    secret_file = "a2"
  }
}`, []wantDiag{want(9, "Token secret used twice", `Token "c" has the same secret as token "a" (`, "coordhost.hcl:2")}},
		{"same label twice", `server {
  token "a" {
    secret_file = "a"
  }
  token "a" {
    secret_file = "b"
  }
}`, []wantDiag{want(5, "Duplicate token", `Token "a" was already declared at`, "coordhost.hcl:2")}},
		{"bad token name", `server {
  token "a b" {
    secret_file = "a"
  }
}`, []wantDiag{want(2, "Invalid token name", `"a b"`)}},
		{"bad patterns", `server {
  token "a" {
    secret_file   = "a"
    names         = ["ok", "x["]
    envoy_domains = [""]
  }
}`, []wantDiag{
			want(4, "Invalid pattern", `Element 1 of "names", "x["`, "syntax error in pattern"),
			want(5, "Invalid pattern", `Element 0 of "envoy_domains" is empty`),
		}},
		{"names not a list", `server {
  token "a" {
    secret_file = "a"
    names       = "invoice"
  }
}`, []wantDiag{want(4, "Incorrect attribute value type", `"names"`)}},
		{"bad limits", `server {
  token "a" {
    secret_file  = "a"
    max_streams  = 0
    max_sessions = 1.5
  }
}`, []wantDiag{
			want(4, "Invalid number", `"max_streams"`, "from 1 to 1000000, not 0"),
			want(5, "Invalid number", `"max_sessions"`, "not 1.5"),
		}},
		{"unknown token argument", `server {
  token "a" {
    secret_file = "a"
    admn        = true
  }
}`, []wantDiag{want(4, "Unsupported argument", `Did you mean "admin"?`)}},
		{"token without label", `server {
  token {
    secret_file = "a"
  }
}`, []wantDiag{want(2, "Missing name for token")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, diags := parseIn(t, dir, tt.src, LoadOptions{})
			checkDiags(t, cfg, diags, tt.want)
			for _, s := range []string{secretA, secretB, "tooshort-secret", "has a space", "xxxxxxxx", "sh0rtval"} {
				for _, d := range diags {
					if strings.Contains(d.Detail, s) || strings.Contains(d.Summary, s) {
						t.Errorf("diagnostic quotes a secret: %s", text(d))
					}
				}
			}
		})
	}
}

// checkDiags checks that the error diagnostics are exactly want (warnings
// are ignored).
func checkDiags(t *testing.T, cfg *Config, diags hcl.Diagnostics, want []wantDiag) {
	t.Helper()
	out := render(t, cfg, diags)
	var errs hcl.Diagnostics
	for _, d := range diags {
		if d.Severity == hcl.DiagError {
			errs = append(errs, d)
		}
	}
	if len(errs) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%s", len(errs), len(want), out)
	}
	for i, w := range want {
		d := errs[i]
		line := 0
		if d.Subject != nil {
			line = d.Subject.Start.Line
		}
		if line != w.line {
			t.Errorf("diagnostic %d on line %d, want %d:\n%s", i, line, w.line, out)
		}
		if !containsAll(text(d), w.frags...) {
			t.Errorf("diagnostic %d = %q, want fragments %q", i, text(d), w.frags)
		}
	}
}

// TestServerAuthWarnings: patterns that match nothing configured, and
// tokens in clear text beyond loopback.
func TestServerAuthWarnings(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a", secretA, 0o600)
	src := `server {
  listen = ":7379"
  token "a" {
    secret_file   = "a"
    names         = ["invoce", "job*"]
    envoy_domains = ["edge"]
  }
}
lock "invoice" {
  ttl = "1s"
}
semaphore "jobs" {
  capacity = 1
  ttl      = "1s"
}
`
	cfg, diags := parseIn(t, dir, src, LoadOptions{})
	if diags.HasErrors() {
		t.Fatalf("errors:\n%s", render(t, cfg, diags))
	}
	var got []string
	for _, d := range diags {
		got = append(got, d.Summary+": "+d.Detail)
	}
	want := []string{
		`Tokens in clear text: `,
		`Pattern matches no primitive: Token "a"'s names pattern "invoce" matches no configured lock, redlock, rwlock, semaphore, latch or rate_limit. Did you mean "invoice"?`,
		`Pattern matches no Envoy domain: Token "a"'s envoy_domains pattern "edge" matches no envoy_rate_limit domain.`,
	}
	if len(got) != len(want) {
		t.Fatalf("warnings:\n%s", strings.Join(got, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("warning %d = %q, want %q", i, got[i], want[i])
		}
	}
	// On loopback, no clear-text warning.
	cfg, diags = parseIn(t, dir, strings.Replace(src, `":7379"`, `"127.0.0.1:7379"`, 1), LoadOptions{})
	if len(diags) != 2 || strings.Contains(render(t, cfg, diags), "clear text") {
		t.Errorf("loopback:\n%s", render(t, cfg, diags))
	}
}

// TestSandbox: a sandboxed parse reads no file and no environment
// variable, probes no path, and quotes nothing it could have read.
func TestSandbox(t *testing.T) {
	dir := t.TempDir()
	const content = "SECRET-CONTENT-1234567890"
	writeFile(t, dir, "secret.txt", content, 0o644)
	writeFile(t, dir, "ok.wasm", wasmStub, 0o644)
	writeFile(t, dir, "plug", plugScript, 0o755)
	t.Setenv("COORDHOST_TEST_SANDBOX", content)
	sha := sha256Hex(plugScript)
	for _, tc := range []struct {
		name, src string
		want      []wantDiag
	}{
		{"file()", `lock "a" {
  ttl = file("/etc/passwd")
}`, []wantDiag{want(2, "Error in function call", "file() is not available in a sandboxed check")}},
		{"file() of a readable file", `lock "a" {
  ttl = file("secret.txt")
}`, []wantDiag{want(2, "Error in function call", "not available in a sandboxed check")}},
		{"file() in a variable default", `variable "v" {
  default = file("secret.txt")
}`, []wantDiag{want(2, "Error in function call", "not available in a sandboxed check")}},
		{"secret_file", `server {
  token "a" {
    secret_file = "secret.txt"
  }
}`, []wantDiag{want(3, "Not available in a sandboxed check", `"secret_file" needs a file`)}},
		{"secret_env", `server {
  token "a" {
    secret_env = "COORDHOST_TEST_SANDBOX"
  }
}`, []wantDiag{want(3, "Not available in a sandboxed check", `"secret_env" needs the environment`)}},
		{"server tls", `server {
  tls {
    cert_file = "secret.txt"
    key_file  = "/nonexistent"
  }
}`, []wantDiag{want(3, "Not available in a sandboxed check"), want(4, "Not available in a sandboxed check")}},
		{"redis tls", `redis {
  addresses = ["a:1"]
  tls {
    ca_file = "/etc/ssl/certs/ca-certificates.crt"
  }
}`, []wantDiag{want(4, "Not available in a sandboxed check", `"ca_file"`)}},
		{"wasm module", `policy "retry" "w" {
  driver = "wasm"
  module = "ok.wasm"
}`, []wantDiag{want(3, "Not available in a sandboxed check", `"module"`)}},
		{"plugin checksum", `policy "partition" "p" {
  driver = "plugin"
  path   = "plug"
  sha256 = "` + strings.Repeat("0", 64) + `"
}`, []wantDiag{want(3, "Not available in a sandboxed check", `"path"`)}},
		{"path.cwd is path.config", `lock "a" {
  ttl = path.cwd
}`, []wantDiag{want(2, "Invalid duration", dir)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, diags := Parse([]byte(tc.src), dir+"/coordhost.hcl", LoadOptions{Sandbox: true, WorkDir: "/elsewhere"})
			checkDiags(t, cfg, diags, tc.want)
			out := render(t, cfg, diags)
			for _, leak := range []string{content, sha256Hex(content), sha, "root:", "/elsewhere"} {
				if strings.Contains(out, leak) {
					t.Errorf("diagnostics quote %q:\n%s", leak, out)
				}
			}
		})
	}
	// The same sources unsandboxed do read (the test is not vacuous).
	_, diags := Parse([]byte("lock \"a\" {\n  ttl = file(\"secret.txt\")\n}\n"), dir+"/coordhost.hcl", LoadOptions{})
	if !strings.Contains(diags.Error(), content) {
		t.Fatalf("unsandboxed file() did not read: %v", diags)
	}
}
