package host

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/coordhost/coordhost/config"
	"github.com/coordhost/coordhost/policies"
	"github.com/coordhost/coordhost/policies/wasm"
)

// loadTestPolicy decodes src (one wasm policy "retry" "p"), and loads it as
// a generation does, on a runtime like a generation's (which allows 4 GiB,
// so that memory_pages may ask for any size).
func loadTestPolicy(t *testing.T, src string, log *slog.Logger, edit func(*config.Policy)) *loadedPolicy {
	t.Helper()
	cfg, diags := config.Parse([]byte(src), filepath.Join(t.TempDir(), "test.hcl"), config.LoadOptions{})
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	p := cfg.Policy(policies.KindRetry, "p")
	if edit != nil {
		edit(p)
	}
	ctx := context.Background()
	rt, err := wasm.NewRuntime(ctx, wasm.RuntimeOptions{MemoryLimitPages: wasm.MaxMemoryLimitPages, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close(ctx) })
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	lp, err := loadPolicy(ctx, p, rt, m, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lp.close(ctx) })
	return lp
}

func testModule(t *testing.T, name string) string {
	p, err := filepath.Abs(filepath.Join("..", "policies", "wasm", "testdata", name+".wasm"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestWasmPolicyDefaultMemory: a wasm policy without a limits block gets
// the documented 512 pages (32 MiB), not the 4 GiB the host's runtime
// allows. growloop's retry_decide grows memory until it fails (or reaches
// 1024 pages) and answers the size in pages as the delay in ms.
func TestWasmPolicyDefaultMemory(t *testing.T) {
	src := fmt.Sprintf(`
policy "retry" "p" {
  driver = "wasm"
  module = %q
  limits { call_timeout = "10s" }
}
`, testModule(t, "growloop"))
	quiet := slog.New(slog.DiscardHandler)
	for name, edit := range map[string]func(*config.Policy){
		"from config":    nil,
		"config by hand": func(p *config.Policy) { p.Wasm.MemoryPages = 0 },
	} {
		lp := loadTestPolicy(t, src, quiet, edit)
		d := lp.retry.DecideRetry(context.Background(), policies.RetryRequest{Attempt: 1})
		if d.Delay != config.DefaultWasmMemoryPages*time.Millisecond {
			t.Errorf("%s: the module grew to %d pages, want the default limit of %d", name, d.Delay/time.Millisecond, config.DefaultWasmMemoryPages)
		}
	}
}

// TestWasmLogLinesNamePolicyOnce: a module's log line carries the policy's
// name once (echo logs its config from policy_configure).
func TestWasmLogLinesNamePolicyOnce(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	src := fmt.Sprintf(`
policy "retry" "p" {
  driver = "wasm"
  module = %q
  config = { marker = 1 }
}
`, testModule(t, "echo"))
	loadTestPolicy(t, src, log, nil)
	var line string
	for _, l := range strings.Split(buf.String(), "\n") {
		if strings.Contains(l, "marker") {
			line = l
		}
	}
	if line == "" {
		t.Fatalf("no log line from the module:\n%s", buf.String())
	}
	if n := strings.Count(line, "policy="); n != 1 {
		t.Errorf("the module's log line names the policy %d times: %s", n, line)
	}
	if !strings.Contains(line, "policy=retry.p") {
		t.Errorf("log line %s lacks policy=retry.p", line)
	}
}
