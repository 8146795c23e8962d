package config

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/coordhost/coordhost/policies"
	"github.com/google/go-cmp/cmp"
	"github.com/zclconf/go-cty/cty"
)

func TestLoadFull(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "wasm/backoff.wasm", wasmStub, 0o644)
	const plugin = "#!/bin/sh\nexit 1\n"
	writeFile(t, dir, "bin/plug", plugin, 0o755)
	writeFile(t, dir, "tls/ca.pem", "ca", 0o644)
	writeFile(t, dir, "tls/client.pem", "cert", 0o644)
	writeFile(t, dir, "tls/client.key", "key", 0o600)
	src := `
variable "prefix" {
  default = "app:"
}

redis {
  addresses    = ["10.0.0.1:6379", "[::1]:6380"]
  username     = "coord"
  password     = "secret"
  key_prefix   = var.prefix
  client_cache = false
  tls {
    ca_file     = "tls/ca.pem"
    cert_file   = "${path.config}/tls/client.pem"
    key_file    = "tls/client.key"
    server_name = "redis.internal"
  }
}

server {
  listen     = ":7380"
  log_format = "json"
  log_level  = "debug"
}

policy "retry" "exp" {
  driver        = "builtin"
  kind          = "exponential"
  base          = "10ms"
  max           = "1s"
  give_up_after = "30s"
}

policy "retry" "const" {
  driver = "builtin"
  kind   = "constant"
  delay  = "250ms"
}

policy "retry" "never" {
  driver = "builtin"
  kind   = "none"
}

policy "retry" "custom" {
  driver = "wasm"
  module = "wasm/backoff.wasm"
  limits {
    memory_pages = 16
    call_timeout = "50ms"
  }
  config = { base_ms = 25, name = "x", tags = ["a", "b"] }
}

policy "partition" "per_tenant" {
  driver   = "builtin"
  template = "{$${tenant}}:$${name}"
}

policy "partition" "plug" {
  driver          = "plugin"
  path            = "${path.config}/bin/plug"
  sha256          = "` + sha256Hex(plugin) + `"
  args            = ["-v"]
  config          = { tenant_prefix = "t:" }
  call_timeout    = "100ms"
  health_interval = "5s"
}

policy "starvation" "writers" {
  driver = "builtin"
  bound  = "500ms"
}

policy "starvation" "readers" {
  driver = "builtin"
  bound  = "unbounded"
}

lock "invoice" {
  ttl       = "30s"
  fencing   = true
  fifo      = true
  prefix    = "inv:"
  retry     = policy.retry.exp
  partition = policy.partition.per_tenant
}

lock "plain" {
  ttl = "1ms"
}
`
	cfg, diags := parseIn(t, dir, src, LoadOptions{WorkDir: "/somewhere"})
	if len(diags) > 0 {
		t.Fatalf("diagnostics:\n%s", render(t, cfg, diags))
	}
	want := &Config{
		Path: filepath.Join(dir, "coordhost.hcl"),
		Dir:  dir,
		Redis: &Redis{
			Addresses: []string{"10.0.0.1:6379", "[::1]:6380"},
			Username:  "coord", Password: "secret", KeyPrefix: "app:", ClientCache: false,
			TLS: &TLS{
				Enabled:    true,
				CAFile:     filepath.Join(dir, "tls/ca.pem"),
				CertFile:   filepath.Join(dir, "tls/client.pem"),
				KeyFile:    filepath.Join(dir, "tls/client.key"),
				ServerName: "redis.internal",
			},
		},
		Server: Server{Listen: ":7380", LogFormat: LogJSON, LogLevel: LogDebug},
		Variables: []*Variable{{
			Name: "prefix", Type: cty.DynamicPseudoType,
			Default: cty.StringVal("app:"), Value: cty.StringVal("app:"),
		}},
		Policies: []*Policy{
			{Kind: policies.KindRetry, Name: "exp", Driver: DriverBuiltin, Builtin: &BuiltinPolicy{
				Retry: RetryExponential, Base: 10 * time.Millisecond, Max: time.Second, GiveUpAfter: 30 * time.Second}},
			{Kind: policies.KindRetry, Name: "const", Driver: DriverBuiltin, Builtin: &BuiltinPolicy{
				Retry: RetryConstant, Delay: 250 * time.Millisecond}},
			{Kind: policies.KindRetry, Name: "never", Driver: DriverBuiltin, Builtin: &BuiltinPolicy{Retry: RetryNone}},
			{Kind: policies.KindRetry, Name: "custom", Driver: DriverWasm, Wasm: &WasmPolicy{
				Module: filepath.Join(dir, "wasm/backoff.wasm"), MemoryPages: 16, CallTimeout: 50 * time.Millisecond,
				Config: []byte(`{"base_ms":25,"name":"x","tags":["a","b"]}`)}},
			{Kind: policies.KindPartition, Name: "per_tenant", Driver: DriverBuiltin, Builtin: &BuiltinPolicy{
				Template: "{${tenant}}:${name}"}},
			{Kind: policies.KindPartition, Name: "plug", Driver: DriverPlugin, Plugin: &PluginPolicy{
				Path: filepath.Join(dir, "bin/plug"), SHA256: sha256Hex(plugin), Args: []string{"-v"},
				Config: []byte(`{"tenant_prefix":"t:"}`), CallTimeout: 100 * time.Millisecond, HealthInterval: 5 * time.Second}},
			{Kind: policies.KindStarvation, Name: "writers", Driver: DriverBuiltin, Builtin: &BuiltinPolicy{Bound: 500 * time.Millisecond}},
			{Kind: policies.KindStarvation, Name: "readers", Driver: DriverBuiltin, Builtin: &BuiltinPolicy{Bound: policies.Unbounded}},
		},
		Locks: []*Lock{
			{Name: "invoice", TTL: 30 * time.Second, Fencing: true, FIFO: true, Prefix: "inv:",
				Retry:     &PolicyRef{Kind: policies.KindRetry, Name: "exp"},
				Partition: &PolicyRef{Kind: policies.KindPartition, Name: "per_tenant"}},
			{Name: "plain", TTL: time.Millisecond, Prefix: DefaultLockPrefix},
		},
	}
	if diff := cmp.Diff(want, cfg, cmpOpts...); diff != "" {
		t.Errorf("config mismatch (-want +got):\n%s", diff)
	}

	// Lookups and ranges.
	if p := cfg.Policy(policies.KindRetry, "custom"); p == nil || p.Wasm == nil {
		t.Errorf("Policy(retry, custom) = %+v", p)
	}
	if p := cfg.Policy(policies.KindPartition, "exp"); p != nil {
		t.Errorf("Policy(partition, exp) = %+v, want nil (exp is a retry policy)", p)
	}
	l := cfg.Lock("invoice")
	if l == nil || cfg.Lock("nope") != nil {
		t.Fatalf("Lock lookups: invoice=%v nope=%v", l, cfg.Lock("nope"))
	}
	if l.Range.Start.Line != 80 || l.Retry.Range.Start.Line != 85 || l.Retry.Range.Start.Column != 15 {
		t.Errorf("lock range %v, retry ref range %v", l.Range, l.Retry.Range)
	}
	if got := l.Retry.String(); got != "policy.retry.exp" {
		t.Errorf("PolicyRef.String() = %q", got)
	}
	if p := cfg.Policy(policies.KindRetry, "exp"); p.Range.Start.Line != 26 {
		t.Errorf("policy range %v, want line 26", p.Range)
	}
	if len(cfg.Files()) != 1 || cfg.Files()[filepath.Join(dir, "coordhost.hcl")] == nil {
		t.Errorf("Files() = %v", cfg.Files())
	}
}

func TestDefaults(t *testing.T) {
	cfg := mustParse(t, "", LoadOptions{})
	if cfg.Redis != nil {
		t.Errorf("Redis = %+v, want nil (dev mode)", cfg.Redis)
	}
	want := Server{Listen: DefaultListen, LogFormat: LogText, LogLevel: LogInfo}
	if diff := cmp.Diff(want, cfg.Server, cmpOpts...); diff != "" {
		t.Errorf("Server defaults (-want +got):\n%s", diff)
	}
	if len(cfg.Policies)+len(cfg.Locks)+len(cfg.Variables) != 0 {
		t.Errorf("empty file declared something: %+v", cfg)
	}
	wd, _ := os.Getwd()
	if cfg.Dir != wd || cfg.Path != filepath.Join(wd, "test.hcl") {
		t.Errorf("Path, Dir = %q, %q", cfg.Path, cfg.Dir)
	}

	cfg = mustParse(t, `
redis {
  addresses = ["localhost:6379"]
  tls {}
}
server {}
lock "a" {
  ttl = "1s"
}
`, LoadOptions{})
	if r := cfg.Redis; !r.ClientCache || r.TLS == nil || !r.TLS.Enabled || r.KeyPrefix != "" {
		t.Errorf("redis defaults: %+v tls %+v", r, r.TLS)
	}
	if cfg.Server.Listen != DefaultListen || cfg.Server.LogFormat != LogText || cfg.Server.LogLevel != LogInfo {
		t.Errorf("server defaults: %+v", cfg.Server)
	}
	if l := cfg.Locks[0]; l.Prefix != DefaultLockPrefix || l.Fencing || l.FIFO || l.Retry != nil || l.Partition != nil {
		t.Errorf("lock defaults: %+v", l)
	}
}

func TestJSONSyntax(t *testing.T) {
	src := `{
  "policy": {"retry": {"fast": {"driver": "builtin", "kind": "constant", "delay": "5ms"}}},
  "lock": {"invoice": {"ttl": "10s", "retry": "policy.retry.fast"}}
}`
	cfg, diags := Parse([]byte(src), "coordhost.hcl.json", LoadOptions{})
	if len(diags) > 0 {
		t.Fatalf("diagnostics:\n%s", render(t, cfg, diags))
	}
	l := cfg.Lock("invoice")
	if l == nil || l.TTL != 10*time.Second || l.Retry == nil || l.Retry.Name != "fast" {
		t.Fatalf("lock from JSON: %+v", l)
	}
}

func TestLoadMissingFile(t *testing.T) {
	cfg, diags := Load(filepath.Join(t.TempDir(), "nope.hcl"), LoadOptions{})
	if cfg == nil || len(diags) != 1 || !containsAll(text(diags[0]), "Cannot read configuration file", "nope.hcl") {
		t.Fatalf("cfg=%v diags=%v", cfg, diags)
	}
	if out := render(t, cfg, diags); !containsAll(out, "Error: Cannot read configuration file") {
		t.Errorf("rendered: %s", out)
	}
}

func TestParseVarFlag(t *testing.T) {
	name, v, err := ParseVarFlag("ttl=30s")
	if err != nil || name != "ttl" || !v.RawEquals(cty.StringVal("30s")) {
		t.Errorf("ParseVarFlag(ttl=30s) = %q, %#v, %v", name, v, err)
	}
	name, v, err = ParseVarFlag("x=a=b")
	if err != nil || name != "x" || v.AsString() != "a=b" {
		t.Errorf("ParseVarFlag(x=a=b) = %q, %#v, %v", name, v, err)
	}
	for _, bad := range []string{"novalue", "=x", "1x=2", "a b=c"} {
		if _, _, err := ParseVarFlag(bad); err == nil {
			t.Errorf("ParseVarFlag(%q) succeeded", bad)
		}
	}
}
