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
// against the coordpol v1 ABI without instantiating it, then creates and
// configures one instance to check the ABI version, the I/O area and the
// config. The returned Module must be closed. Errors wrap
// ErrInvalidOptions, ErrImport, ErrABI, ErrMemory, ErrClosed, or ErrCall
// when the first instance fails to start (e.g. a Go runtime that runs out
// of memory: its standard error is logged), or come from the compiler.
func (r *Runtime) Load(ctx context.Context, wasm []byte, o ModuleOptions) (*Module, error) {
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
		return nil, fmt.Errorf("wasm: module %q: compile: %w", o.Name, err)
	}
	kinds, err := checkModule(o.Name, e, compiled)
	if err != nil {
		_ = compiled.Close(ctx)
		return nil, err
	}
	m := newModule(r, e, compiled, kinds, o)
	if err := r.add(m); err != nil {
		_ = compiled.Close(ctx)
		return nil, err
	}
	// Create the first instance now, so a bad ABI version or config fails
	// Load; it waits in the pool for the first call.
	<-m.tokens
	in, err := m.newInstance(ctx)
	if err != nil {
		m.tokens <- struct{}{}
		_ = m.Close(ctx)
		return nil, err
	}
	m.release(in)
	return m, nil
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
			return nil, loadErr(ErrImport, name, "%s: %s has no function %q", ref, mod, fn)
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
