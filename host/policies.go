package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"

	"github.com/coordhost/coordhost/config"
	"github.com/coordhost/coordhost/policies"
	"github.com/coordhost/coordhost/policies/builtin"
	"github.com/coordhost/coordhost/policies/plugin"
	"github.com/coordhost/coordhost/policies/wasm"
)

// loadedPolicy is one configured policy, ready to consult.
type loadedPolicy struct {
	cfg        *config.Policy
	retry      policies.RetryPolicy
	partition  policies.PartitionPolicy
	starvation policies.StarvationPolicy
	selfTest   func(context.Context) error
	close      func(context.Context) error
}

// fallbacks are what a failing wasm or plugin policy falls back to
// (DESIGN.md §5): retry → built-in backoff, starvation → writer preference;
// partition fails closed inside the backends.
var (
	fallbackRetry      policies.RetryPolicy      = builtin.Exponential{}
	fallbackStarvation policies.StarvationPolicy = builtin.WriterPreference{}
)

// loadPolicy builds one policy. rt is the generation's wasm runtime.
func loadPolicy(ctx context.Context, p *config.Policy, rt *wasm.Runtime, m *metrics, log *slog.Logger) (*loadedPolicy, error) {
	lp := &loadedPolicy{cfg: p, selfTest: func(context.Context) error { return nil }, close: func(context.Context) error { return nil }}
	name := string(p.Kind) + "." + p.Name
	switch p.Driver {
	case config.DriverBuiltin:
		b := p.Builtin
		switch p.Kind {
		case policies.KindRetry:
			switch b.Retry {
			case config.RetryExponential:
				e := builtin.Exponential{Base: b.Base, Max: b.Max, GiveUpAfter: b.GiveUpAfter}
				if err := e.Validate(); err != nil {
					return nil, err
				}
				lp.retry = e
			case config.RetryConstant:
				lp.retry = builtin.Constant{Delay: b.Delay, GiveUpAfter: b.GiveUpAfter}
			case config.RetryNone:
				lp.retry = builtin.NoRetry{}
			default:
				return nil, fmt.Errorf("policy %s: unknown builtin retry kind %q", name, b.Retry)
			}
			lp.retry = m.wrapRetry(name, lp.retry)
		case policies.KindPartition:
			t, err := builtin.ParseTemplate(b.Template)
			if err != nil {
				return nil, fmt.Errorf("policy %s: %w", name, err)
			}
			lp.partition = m.wrapPartition(name, t)
		case policies.KindStarvation:
			w := builtin.WriterPreference{Bound: b.Bound}
			if err := w.Validate(); err != nil {
				return nil, fmt.Errorf("policy %s: %w", name, err)
			}
			lp.starvation = m.wrapStarvation(name, w)
		}
	case config.DriverWasm:
		src, err := os.ReadFile(p.Wasm.Module)
		if err != nil {
			return nil, fmt.Errorf("policy %s: %w", name, err)
		}
		o := wasmOptions(p, name, log)
		o.Observer = m.wasmObserver()
		mod, err := rt.Load(ctx, src, o)
		if err != nil {
			return nil, fmt.Errorf("policy %s: %w", name, err)
		}
		lp.close = mod.Close
		lp.selfTest = mod.SelfTest
		if !slices.Contains(mod.Kinds(), p.Kind) {
			mod.Close(ctx)
			return nil, fmt.Errorf("policy %s: module %s exports no %s policy (it has %v)", name, p.Wasm.Module, p.Kind, mod.Kinds())
		}
		switch p.Kind {
		case policies.KindRetry:
			lp.retry = mod.Retry()
		case policies.KindPartition:
			lp.partition = mod.Partition()
		case policies.KindStarvation:
			lp.starvation = mod.Starvation()
		}
	case config.DriverPlugin:
		pl, err := plugin.Launch(ctx, plugin.Options{
			Name: name, Path: p.Plugin.Path, SHA256: p.Plugin.SHA256, Args: p.Plugin.Args,
			Config: p.Plugin.Config, CallTimeout: p.Plugin.CallTimeout, HealthInterval: p.Plugin.HealthInterval,
			FallbackRetry: fallbackRetry, FallbackStarvation: fallbackStarvation,
			Observer: m.pluginObserver(name), Logger: log.With("policy", name),
		})
		if err != nil {
			return nil, fmt.Errorf("policy %s: %w", name, err)
		}
		lp.close = func(context.Context) error { return pl.Close() }
		lp.selfTest = pl.SelfTest
		switch p.Kind {
		case policies.KindRetry:
			lp.retry, err = pl.Retry()
		case policies.KindPartition:
			lp.partition, err = pl.Partition()
		case policies.KindStarvation:
			lp.starvation, err = pl.Starvation()
		}
		if err != nil {
			pl.Close()
			return nil, fmt.Errorf("policy %s: %w", name, err)
		}
	default:
		return nil, fmt.Errorf("policy %s: unknown driver %q", name, p.Driver)
	}
	return lp, nil
}

// wasmOptions are the module options of wasm policy p (named name), as
// both loading (loadPolicy) and checking (CheckPolicies) use them. The
// module adds the attribute policy=name to log's lines itself.
func wasmOptions(p *config.Policy, name string, log *slog.Logger) wasm.ModuleOptions {
	pages := p.Wasm.MemoryPages
	if pages == 0 {
		pages = config.DefaultWasmMemoryPages // a Config built by hand
	}
	return wasm.ModuleOptions{
		Name: name, MemoryPages: pages, CallTimeout: p.Wasm.CallTimeout,
		Config: p.Wasm.Config, Logger: log,
		FallbackRetry: fallbackRetry, FallbackStarvation: fallbackStarvation,
	}
}

var errNoPolicy = errors.New("host: no such policy")

// defaultWasmCacheDir is where compiled WASM policies are cached.
func defaultWasmCacheDir() string {
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "coordhost", "wasm")
	}
	return filepath.Join(os.TempDir(), "coordhost-wasm-cache")
}
