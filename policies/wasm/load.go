package wasm

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"

	"github.com/coordhost/coordhost/policies"
)

// Defaults of ModuleOptions.
const (
	// DefaultCallTimeout is the deadline of one call into a module.
	DefaultCallTimeout = 50 * time.Millisecond
	// DefaultCircuitThreshold is how many consecutive failures open the
	// circuit breaker.
	DefaultCircuitThreshold = 5
	// DefaultCircuitCooldown is how long the breaker stays open before it
	// lets one probe call through.
	DefaultCircuitCooldown = 5 * time.Second
	// DefaultName names a module loaded without a name.
	DefaultName = "wasm"
)

// NoCallTimeout as ModuleOptions.CallTimeout runs calls without a deadline
// on an uninterruptible runtime (see the package documentation).
const NoCallTimeout time.Duration = -1

// instantiateTimeout bounds creating and configuring one instance (the Go
// runtime's initialisation runs then).
const instantiateTimeout = 5 * time.Second

// ModuleOptions configures Load. The zero value uses the documented
// defaults.
type ModuleOptions struct {
	// Name names the module in errors, logs and CallInfo; "" means
	// DefaultName.
	Name string
	// MemoryPages caps each instance's memory in 64 KiB pages; 0 means
	// DefaultMemoryLimitPages (512 pages, 32 MiB), or the Runtime's
	// MemoryLimitPages when that is lower. It may not exceed the Runtime's
	// MemoryLimitPages. A module whose initial memory is larger is refused;
	// beyond it, memory.grow returns -1 (and a module that then traps fails
	// the call). Once a call's deadline has passed or its caller's context
	// has ended, memory.grow fails too (see linearMemory).
	MemoryPages uint32
	// CallTimeout is the deadline of each call: 0 means DefaultCallTimeout,
	// NoCallTimeout means none (see the package documentation); other
	// negative values are invalid.
	CallTimeout time.Duration
	// Config is written into each new instance's I/O area before
	// policy_configure: the JSON of the HCL `config` object, or nil.
	Config []byte
	// Logger receives policy_host.log and the module's standard output and
	// error, and reports failures; nil means the Runtime's logger. The
	// module's name is added as attribute "policy".
	Logger *slog.Logger
	// FallbackRetry answers retry decisions while the module fails; nil
	// means "wait for a wake-up with no bound of its own" (the zero
	// policies.RetryDecision). The host passes builtin.Exponential{}.
	FallbackRetry policies.RetryPolicy
	// FallbackStarvation answers starvation bounds while the module fails;
	// nil means strict writer preference (bound 0).
	FallbackStarvation policies.StarvationPolicy
	// Observer, if not nil, is told about every call (see Observer).
	Observer Observer
	// CircuitThreshold is how many consecutive failures open the circuit
	// breaker: 0 means DefaultCircuitThreshold, negative disables it.
	CircuitThreshold int
	// CircuitCooldown is how long the breaker stays open before one probe
	// call may try the module again; 0 means DefaultCircuitCooldown.
	CircuitCooldown time.Duration
}

// signature is a function type of the ABI.
type signature struct {
	params, results []api.ValueType
}

var (
	i32 = api.ValueTypeI32
	i64 = api.ValueTypeI64
)

// abiExports are the exports every module has.
var abiExports = [...]struct {
	name string
	sig  signature
}{
	{"policy_abi_version", signature{nil, []api.ValueType{i32}}},
	{"policy_io_ptr", signature{nil, []api.ValueType{i32}}},
	{"policy_io_cap", signature{nil, []api.ValueType{i32}}},
	{"policy_configure", signature{[]api.ValueType{i32}, []api.ValueType{i32}}},
}

// kindExports are the exports of each kind, in the order of Kinds.
var kindExports = [...]struct {
	kind policies.Kind
	name string
	sig  signature
}{
	{policies.KindRetry, "retry_decide", signature{[]api.ValueType{i32, i32, i64, i64, i64}, []api.ValueType{i64}}},
	{policies.KindPartition, "partition_key", signature{[]api.ValueType{i32}, []api.ValueType{i32}}},
	{policies.KindStarvation, "starvation_bound", signature{[]api.ValueType{i32, i32, i64}, []api.ValueType{i64}}},
}

func sigString(params, results []api.ValueType) string {
	names := func(ts []api.ValueType) string {
		s := make([]string, len(ts))
		for i, t := range ts {
			s[i] = api.ValueTypeName(t)
		}
		return strings.Join(s, ", ")
	}
	return "(" + names(params) + ") -> (" + names(results) + ")"
}

func checkSig(what string, def api.FunctionDefinition, want signature) error {
	if slices.Equal(def.ParamTypes(), want.params) && slices.Equal(def.ResultTypes(), want.results) {
		return nil
	}
	return fmt.Errorf("%s has type %s, want %s", what,
		sigString(def.ParamTypes(), def.ResultTypes()), sigString(want.params, want.results))
}

// Load compiles wasm (or finds it in the compilation cache), checks it
// against the coordpol v1 ABI without instantiating it (exactly as Check
// does), then creates and configures one instance to check the ABI
// version, the I/O area and the config. The returned Module must be
// closed. Errors wrap ErrInvalidOptions, ErrImport, ErrABI, ErrMemory,
// ErrClosed, or ErrCall when the first instance fails to start (e.g. a Go
// runtime that runs out of memory: its standard error is logged), or come
// from the compiler.
func (r *Runtime) Load(ctx context.Context, wasm []byte, o ModuleOptions) (*Module, error) {
	c, err := r.check(ctx, wasm, &o)
	if err != nil {
		return nil, err
	}
	m := newModule(r, c.eng, c.compiled, c.result.Kinds, o)
	if err := r.add(m); err != nil {
		_ = c.compiled.Close(ctx)
		return nil, err
	}
	// Create the first instance now, so a bad ABI version or config fails
	// Load; it waits in the pool for the first call.
	if err := m.pool.fill(ctx); err != nil {
		_ = m.Close(ctx)
		return nil, err
	}
	return m, nil
}

// CheckResult describes a module that passed Check.
type CheckResult struct {
	// Kinds are the policy kinds the module implements, in the order
	// retry, partition, starvation.
	Kinds []policies.Kind
	// Unchecked names what only instantiating the module (running its
	// code) can tell, and Check therefore left out: e.g. the value of
	// policy_abi_version when its body is not a constant (as in a Go
	// module), the I/O area when a start function or _initialize may grow
	// the memory first, and whether policy_configure accepts the config.
	Unchecked []string
}

// Check compiles wasm (or finds it in the compilation cache) and checks it
// exactly as Load does before it instantiates anything, without
// instantiating it or running any of its code: the options, the imports
// (modules, names, kinds, signatures), the exports and their signatures,
// the memory (its own, one, not shared, the initial size within
// o.MemoryPages) and which kinds it implements. Where the module's code
// makes them constants it also checks, as Load would only by running it,
// that policy_abi_version returns 1, that the I/O area lies within the
// initial memory and that o.Config fits it. Errors are those of Load
// (ErrInvalidOptions, ErrImport, ErrABI, ErrMemory, ErrClosed, or the
// compiler's); module text in them is escaped.
func (r *Runtime) Check(ctx context.Context, wasm []byte, o ModuleOptions) (CheckResult, error) {
	c, err := r.check(ctx, wasm, &o)
	if err != nil {
		return CheckResult{}, err
	}
	_ = c.compiled.Close(ctx)
	return c.result, nil
}

// Check checks wasm as Runtime.Check does, on a Runtime of its own with
// the largest memory limit (so that o.MemoryPages may ask for any size) and
// no disk cache. A program that checks several modules or loads them
// later should use one Runtime (with a CacheDir) instead.
func Check(ctx context.Context, wasm []byte, o ModuleOptions) (CheckResult, error) {
	r, err := NewRuntime(ctx, RuntimeOptions{MemoryLimitPages: MaxMemoryLimitPages})
	if err != nil {
		return CheckResult{}, err
	}
	defer r.Close(ctx)
	return r.Check(ctx, wasm, o)
}

// checked is a module that passed check.
type checked struct {
	eng      *engine
	compiled wazero.CompiledModule // the caller closes it
	result   CheckResult
}

// check applies the defaults to *o and validates it, prepares, compiles
// and checks wasm: everything Load does before it instantiates the module.
func (r *Runtime) check(ctx context.Context, wasm []byte, o *ModuleOptions) (*checked, error) {
	if o.Name == "" {
		o.Name = DefaultName
	}
	if o.MemoryPages == 0 {
		// The documented default, whatever the runtime allows: a host
		// whose runtime allows 4 GiB (so that memory_pages may ask for it)
		// still gives a module without limits 32 MiB.
		o.MemoryPages = min(DefaultMemoryLimitPages, r.limitPages)
	}
	switch {
	case o.MemoryPages > r.limitPages:
		return nil, fmt.Errorf("%w: module %q: MemoryPages %d above the runtime's limit of %d", ErrInvalidOptions, o.Name, o.MemoryPages, r.limitPages)
	case o.CallTimeout == 0:
		o.CallTimeout = DefaultCallTimeout
	case o.CallTimeout < 0 && o.CallTimeout != NoCallTimeout:
		return nil, fmt.Errorf("%w: module %q: negative CallTimeout %v (use NoCallTimeout for none)", ErrInvalidOptions, o.Name, o.CallTimeout)
	}
	switch {
	case o.CircuitThreshold == 0:
		o.CircuitThreshold = DefaultCircuitThreshold
	case o.CircuitThreshold < 0:
		o.CircuitThreshold = 0 // disabled
	}
	switch {
	case o.CircuitCooldown == 0:
		o.CircuitCooldown = DefaultCircuitCooldown
	case o.CircuitCooldown < 0:
		return nil, fmt.Errorf("%w: module %q: negative CircuitCooldown %v", ErrInvalidOptions, o.Name, o.CircuitCooldown)
	}
	if o.Logger == nil {
		o.Logger = r.logger
	}
	o.Logger = o.Logger.With(slog.String("policy", o.Name))
	o.Config = slices.Clone(o.Config)

	bin, err := prepareBinary(o.Name, wasm, o.MemoryPages)
	if err != nil {
		return nil, err
	}
	e, err := r.engine(ctx, o.CallTimeout != NoCallTimeout)
	if err != nil {
		return nil, err
	}
	// Compile the functions on GOMAXPROCS goroutines (a Go module has
	// thousands); a cache hit skips this.
	compiled, err := e.rt.CompileModule(experimental.WithCompilationWorkers(ctx, runtime.GOMAXPROCS(0)), bin)
	if err != nil {
		return nil, fmt.Errorf("wasm: module %q: compile: %w", o.Name, policies.EscapeError(err))
	}
	kinds, err := checkModule(o.Name, e, compiled)
	if err == nil {
		var unchecked []string
		unchecked, err = checkStatic(o.Name, bin, compiled, len(o.Config))
		if err == nil {
			return &checked{eng: e, compiled: compiled, result: CheckResult{Kinds: kinds, Unchecked: unchecked}}, nil
		}
	}
	_ = compiled.Close(ctx)
	return nil, err
}

// checkStatic checks what the module's code makes constant: the ABI
// version, the I/O area against the initial memory (when no start
// function or _initialize runs first) and the config's size against the
// I/O area. It returns what it could not check. The messages are those of
// the checks Load makes by calling the exports (setup).
func checkStatic(name string, bin []byte, c wazero.CompiledModule, configLen int) ([]string, error) {
	l := staticLayout(bin)
	exports := c.ExportedFunctions()
	value := func(export string) (uint32, bool) {
		v, ok := l.constResult(exports[export].Index())
		return uint32(v), ok
	}
	var unchecked []string
	if v, ok := value("policy_abi_version"); !ok {
		unchecked = append(unchecked, "the ABI version (policy_abi_version is not a constant)")
	} else if v != 1 {
		return nil, loadErr(ErrABI, name, "policy_abi_version returned %d, want 1", int32(v))
	}
	ptr, okPtr := value("policy_io_ptr")
	ioCap, okCap := value("policy_io_cap")
	_, initialize := exports["_initialize"]
	switch {
	case !okPtr || !okCap:
		unchecked = append(unchecked, "the I/O area (policy_io_ptr or policy_io_cap is not a constant)")
	case l.start || initialize || !l.hasMemory:
		unchecked = append(unchecked, "the I/O area (a start function or _initialize may grow the memory first)")
	case uint64(ptr)+uint64(ioCap) > uint64(l.minPages)*65536:
		return nil, loadErr(ErrABI, name, "I/O area [%d, +%d) outside memory (%d bytes before any code runs)", ptr, ioCap, uint64(l.minPages)*65536)
	}
	if okCap && configLen > int(ioCap) {
		return nil, loadErr(ErrABI, name, "config of %d bytes does not fit the I/O area of %d bytes", configLen, ioCap)
	}
	unchecked = append(unchecked, "whether policy_configure accepts the config")
	return unchecked, nil
}

// checkModule checks imports and exports of a compiled module and returns
// the kinds it implements.
func checkModule(name string, e *engine, c wazero.CompiledModule) ([]policies.Kind, error) {
	for _, def := range c.ImportedFunctions() {
		mod, fn, _ := def.Import()
		ref := importRef{module: mod, name: fn}
		allowed, ok := e.allowed[mod]
		if !ok {
			return nil, loadErr(ErrImport, name, "%s: only %s.* and %s.* may be imported", ref, hostModuleName, wasiModuleName)
		}
		want, ok := allowed[fn]
		if !ok {
			return nil, loadErr(ErrImport, name, "%s: %s has no function %s", ref, mod, policies.QuoteText(fn))
		}
		if err := checkSig("import "+ref.String(), def, signature{want.ParamTypes(), want.ResultTypes()}); err != nil {
			return nil, loadErr(ErrImport, name, "%v", err)
		}
	}
	if len(c.ImportedMemories()) > 0 {
		return nil, loadErr(ErrImport, name, "imported memory: a policy module must define its own memory")
	}
	if _, ok := c.ExportedMemories()["memory"]; !ok {
		return nil, loadErr(ErrABI, name, "no memory exported as \"memory\"")
	}
	exports := c.ExportedFunctions()
	if _, ok := exports["_start"]; ok {
		return nil, loadErr(ErrABI, name, "a WASI command (it exports _start); build a reactor (Go: -buildmode=c-shared)")
	}
	for _, x := range abiExports {
		def, ok := exports[x.name]
		if !ok {
			return nil, loadErr(ErrABI, name, "missing export %s", x.name)
		}
		if err := checkSig("export "+x.name, def, x.sig); err != nil {
			return nil, loadErr(ErrABI, name, "%v", err)
		}
	}
	var kinds []policies.Kind
	for _, x := range kindExports {
		def, ok := exports[x.name]
		if !ok {
			continue
		}
		if err := checkSig("export "+x.name, def, x.sig); err != nil {
			return nil, loadErr(ErrABI, name, "%v", err)
		}
		kinds = append(kinds, x.kind)
	}
	if len(kinds) == 0 {
		return nil, loadErr(ErrABI, name, "no policy export (retry_decide, partition_key or starvation_bound)")
	}
	return kinds, nil
}

// loadErr wraps sentinel with the module's name and a detail:
// "wasm: forbidden import: module "x": env.f (function): ...".
func loadErr(sentinel error, module, format string, args ...any) error {
	return fmt.Errorf("%w: module %q: %s", sentinel, module, fmt.Sprintf(format, args...))
}

// maxInstances is the pool size: GOMAXPROCS at load time.
func maxInstances() int { return max(runtime.GOMAXPROCS(0), 1) }
