package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"

	"github.com/hashicorp/hcl/v2"

	"github.com/coordhost/coordhost/config"
	"github.com/coordhost/coordhost/policies/wasm"
)

// CheckOptions configures CheckPolicies. The zero value is valid.
type CheckOptions struct {
	// WasmCacheDir is the on-disk compilation cache, as Options.WasmCacheDir:
	// "" means the directory New uses by default, so that a later serve
	// finds the modules compiled. When it cannot be used, the check runs
	// with an in-memory cache.
	WasmCacheDir string
}

// CheckPolicies checks the policies of cfg as far as New would, without
// running any policy code and without dialing Redis or starting plugins:
// every wasm policy's module is read and compiled and checked by
// wasm.Runtime.Check exactly as New's wasm.Runtime.Load does before it
// instantiates the module (imports, exports and their signatures, memory
// limits, the ABI version and I/O area where the module's code makes them
// constants, the config's size), with the policy's own limits and config,
// and must implement the policy's kind. Plugin blocks need nothing more:
// config.Load already checked that each plugin's path is an executable
// regular file whose sha256 matches the pin (all New can check without
// starting it). cfg must come from config.Load or config.Parse without
// errors (policies without a decoded module are skipped).
//
// CheckPolicies returns one error diagnostic per failing policy, its
// subject the policy's module attribute (file, line and column), its
// detail the loader's error with any text from the module escaped; none
// when every policy passes. ctx bounds compilation.
func CheckPolicies(ctx context.Context, cfg *config.Config, opts CheckOptions) hcl.Diagnostics {
	var diags hcl.Diagnostics
	var rt *wasm.Runtime
	defer func() {
		if rt != nil {
			_ = rt.Close(context.WithoutCancel(ctx))
		}
	}()
	for _, p := range cfg.Policies {
		if p.Driver != config.DriverWasm || p.Wasm == nil || p.Wasm.Module == "" {
			continue
		}
		if rt == nil {
			var err error
			if rt, err = checkRuntime(ctx, opts); err != nil {
				return append(diags, &hcl.Diagnostic{
					Severity: hcl.DiagError,
					Summary:  "Cannot check WebAssembly policies",
					Detail:   err.Error(),
					Subject:  p.Wasm.ModuleRange.Ptr(),
				})
			}
		}
		if d := checkWasmPolicy(ctx, rt, p); d != nil {
			diags = append(diags, d)
		}
	}
	return diags
}

// checkRuntime is a wasm runtime like a generation's, with the cache
// directory of opts, or an in-memory cache when that fails.
func checkRuntime(ctx context.Context, opts CheckOptions) (*wasm.Runtime, error) {
	dir := opts.WasmCacheDir
	if dir == "" {
		dir = defaultWasmCacheDir()
	}
	o := wasm.RuntimeOptions{CacheDir: dir, MemoryLimitPages: wasm.MaxMemoryLimitPages}
	rt, err := wasm.NewRuntime(ctx, o)
	if err != nil && ctx.Err() == nil {
		o.CacheDir = ""
		rt, err = wasm.NewRuntime(ctx, o)
	}
	return rt, err
}

// checkWasmPolicy checks one wasm policy; nil when it passes.
func checkWasmPolicy(ctx context.Context, rt *wasm.Runtime, p *config.Policy) *hcl.Diagnostic {
	name := string(p.Kind) + "." + p.Name
	fail := func(summary string, err error) *hcl.Diagnostic {
		return &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  summary,
			Detail:   fmt.Sprintf("Policy %s: %s: %v.", name, p.Wasm.Module, err), // wasm escapes the module's text
			Subject:  p.Wasm.ModuleRange.Ptr(),
		}
	}
	src, err := os.ReadFile(p.Wasm.Module)
	if err != nil {
		return fail("Cannot read WebAssembly module", err)
	}
	res, err := rt.Check(ctx, src, wasmOptions(p, name, slog.New(slog.DiscardHandler)))
	switch {
	case errors.Is(err, wasm.ErrImport), errors.Is(err, wasm.ErrABI), errors.Is(err, wasm.ErrMemory):
		return fail("WebAssembly module does not fit the policy ABI", err)
	case err != nil:
		return fail("Invalid WebAssembly module", err)
	case !slices.Contains(res.Kinds, p.Kind):
		return fail("WebAssembly module lacks the policy's kind",
			fmt.Errorf("the module exports no %s policy (it has %v)", p.Kind, res.Kinds))
	}
	return nil
}
