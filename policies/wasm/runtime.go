package wasm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// Errors returned by this package; details are added with %w.
var (
	// ErrInvalidOptions is wrapped by errors about RuntimeOptions and
	// ModuleOptions.
	ErrInvalidOptions = errors.New("wasm: invalid options")
	// ErrABI is wrapped when a module does not implement the coordpol v1
	// ABI: a missing export, a wrong signature, a wrong ABI version, an
	// I/O area outside memory, a failed policy_configure.
	ErrABI = errors.New("wasm: module does not implement the coordpol v1 ABI")
	// ErrImport is wrapped when a module imports something it may not.
	ErrImport = errors.New("wasm: forbidden import")
	// ErrMemory is wrapped when a module needs more memory than allowed.
	ErrMemory = errors.New("wasm: memory limit")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("wasm: closed")
	// ErrCircuitOpen is wrapped by partition errors while the module's
	// circuit breaker is open.
	ErrCircuitOpen = errors.New("wasm: circuit open after repeated failures")
	// ErrCall is wrapped when a call fails: a trap, the deadline, a bad
	// result or an instance that could not be created.
	ErrCall = errors.New("wasm: policy call failed")
)

// Defaults of RuntimeOptions.
const (
	// DefaultMemoryLimitPages caps an instance's memory at 32 MiB: the
	// runtime's limit when RuntimeOptions.MemoryLimitPages is 0, and a
	// module's when ModuleOptions.MemoryPages is 0 (whatever the runtime's
	// limit, if that is not lower).
	DefaultMemoryLimitPages = 512
	// MaxMemoryLimitPages is the most WebAssembly (32-bit) can address, 4 GiB.
	MaxMemoryLimitPages = 65536
)

const (
	hostModuleName = "policy_host"
	wasiModuleName = wasi_snapshot_preview1.ModuleName
)

// RuntimeOptions configures NewRuntime. The zero value is valid: no disk
// cache, DefaultMemoryLimitPages, logs discarded.
type RuntimeOptions struct {
	// CacheDir, when not empty, is the directory of wazero's on-disk
	// compilation cache (created if missing). A later Runtime with the same
	// directory (and wazero version) loads compiled code from it instead of
	// compiling again.
	CacheDir string
	// MemoryLimitPages caps every instance's linear memory, in 64 KiB
	// pages: 0 means DefaultMemoryLimitPages; at most MaxMemoryLimitPages.
	// It is the most ModuleOptions.MemoryPages may ask for, not what a
	// module gets by default (DefaultMemoryLimitPages).
	MemoryLimitPages uint32
	// Logger receives the logs of modules loaded without a logger of their
	// own. Nil discards them.
	Logger *slog.Logger
}

// Runtime compiles and hosts policy modules. Create it with NewRuntime and
// close it (after the modules) with Close. Safe for concurrent use.
type Runtime struct {
	cache      wazero.CompilationCache
	limitPages uint32
	logger     *slog.Logger

	mu      sync.Mutex
	closed  bool
	engines [2]*engine // guarded (interruptible) and unguarded, created lazily
	modules map[*Module]struct{}
}

// engine is one wazero runtime with the host modules the ABI allows.
type engine struct {
	rt      wazero.Runtime
	allowed map[string]map[string]api.FunctionDefinition // module → name → definition
}

// NewRuntime returns a Runtime. Errors wrap ErrInvalidOptions, or come from
// creating the cache directory.
func NewRuntime(ctx context.Context, o RuntimeOptions) (*Runtime, error) {
	if o.MemoryLimitPages == 0 {
		o.MemoryLimitPages = DefaultMemoryLimitPages
	}
	if o.MemoryLimitPages > MaxMemoryLimitPages {
		return nil, fmt.Errorf("%w: MemoryLimitPages %d above %d", ErrInvalidOptions, o.MemoryLimitPages, MaxMemoryLimitPages)
	}
	r := &Runtime{limitPages: o.MemoryLimitPages, logger: o.Logger, modules: map[*Module]struct{}{}}
	if r.logger == nil {
		r.logger = slog.New(slog.DiscardHandler)
	}
	if o.CacheDir != "" {
		c, err := wazero.NewCompilationCacheWithDir(o.CacheDir)
		if err != nil {
			return nil, fmt.Errorf("wasm: compilation cache: %w", err)
		}
		r.cache = c
	} else {
		r.cache = wazero.NewCompilationCache()
	}
	// The guarded engine serves the default configuration; create it now so
	// a broken environment shows at once.
	if _, err := r.engine(ctx, true); err != nil {
		_ = r.cache.Close(ctx)
		return nil, err
	}
	return r, nil
}

// engine returns the guarded (interruptible, WithCloseOnContextDone) or the
// unguarded wazero runtime, creating it on first use.
func (r *Runtime) engine(ctx context.Context, guarded bool) (*engine, error) {
	i := 0
	if !guarded {
		i = 1
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, ErrClosed
	}
	if e := r.engines[i]; e != nil {
		return e, nil
	}
	cfg := wazero.NewRuntimeConfig().
		WithCompilationCache(r.cache).
		WithMemoryLimitPages(r.limitPages).
		WithCloseOnContextDone(guarded)
	rt := wazero.NewRuntimeWithConfig(ctx, cfg)
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
		_ = rt.Close(ctx)
		return nil, fmt.Errorf("wasm: instantiating WASI: %w", err)
	}
	_, err := rt.NewHostModuleBuilder(hostModuleName).
		NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(hostLog), []api.ValueType{api.ValueTypeI32, api.ValueTypeI32}, nil).
		WithParameterNames("ptr", "len").
		Export("log").
		Instantiate(ctx)
	if err != nil {
		_ = rt.Close(ctx)
		return nil, fmt.Errorf("wasm: instantiating %s: %w", hostModuleName, err)
	}
	e := &engine{rt: rt, allowed: map[string]map[string]api.FunctionDefinition{}}
	for _, name := range []string{hostModuleName, wasiModuleName} {
		e.allowed[name] = rt.Module(name).ExportedFunctionDefinitions()
	}
	r.engines[i] = e
	return e, nil
}

func allowedImportModule(m string) bool { return m == hostModuleName || m == wasiModuleName }

// Close closes every Module loaded by r, then the wazero runtimes and the
// compilation cache (the cache directory stays). Close it after the calls
// into its modules have returned. Idempotent.
func (r *Runtime) Close(ctx context.Context) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	mods := make([]*Module, 0, len(r.modules))
	for m := range r.modules {
		mods = append(mods, m)
	}
	r.mu.Unlock()
	var errs []error
	for _, m := range mods {
		errs = append(errs, m.Close(ctx))
	}
	for _, e := range r.engines {
		if e != nil {
			errs = append(errs, e.rt.Close(ctx))
		}
	}
	errs = append(errs, r.cache.Close(ctx))
	return errors.Join(errs...)
}

// add registers m, failing after Close.
func (r *Runtime) add(m *Module) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrClosed
	}
	r.modules[m] = struct{}{}
	return nil
}

func (r *Runtime) forget(m *Module) {
	r.mu.Lock()
	delete(r.modules, m)
	r.mu.Unlock()
}
