package config

import (
	"path/filepath"
	"testing"

	"github.com/coordhost/coordhost/policies"
)

// TestWasmDefaults: a wasm policy without a limits block (or with one that
// leaves memory_pages out) gets the documented 512 pages, not "whatever the
// runtime allows"; the module attribute's range is kept for diagnostics.
func TestWasmDefaults(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "m.wasm", wasmStub, 0o644)
	src := `
policy "retry" "bare" {
  driver = "wasm"
  module = "m.wasm"
}

policy "retry" "timeout_only" {
  driver = "wasm"
  module = "m.wasm"
  limits { call_timeout = "20ms" }
}

policy "retry" "big" {
  driver = "wasm"
  module = "m.wasm"
  limits { memory_pages = 4096 }
}
`
	cfg, diags := parseIn(t, dir, src, LoadOptions{})
	if len(diags) > 0 {
		t.Fatalf("diagnostics:\n%s", render(t, cfg, diags))
	}
	for name, want := range map[string]uint32{"bare": DefaultWasmMemoryPages, "timeout_only": DefaultWasmMemoryPages, "big": 4096} {
		w := cfg.Policy(policies.KindRetry, name).Wasm
		if w.MemoryPages != want {
			t.Errorf("%s: MemoryPages %d, want %d", name, w.MemoryPages, want)
		}
	}
	if DefaultWasmMemoryPages != 512 {
		t.Errorf("DefaultWasmMemoryPages = %d; the documented default is 512", DefaultWasmMemoryPages)
	}
	r := cfg.Policy(policies.KindRetry, "big").Wasm.ModuleRange
	if filepath.Base(r.Filename) != "coordhost.hcl" || r.Start.Line != 15 || r.Start.Column != 12 {
		t.Errorf("ModuleRange %v, want coordhost.hcl:15,12 (the module attribute's value)", r)
	}
}
