package wasm

import (
	"context"
	"log/slog"
	"time"

	"github.com/tetratelabs/wazero"

	"github.com/coordhost/coordhost/policies"
)

// Module is a loaded policy module: a compiled binary and a pool of at most
// GOMAXPROCS (at load time) instances. Its policies (Retry, Starvation,
// Partition) are safe for concurrent use; a call waits for a free instance
// when all are busy, and a call that finds the pool short of an instance
// creates one (about 50 µs for a small WAT module, 3.5 ms for a Go module;
// at most 5 s). Close it when done.
type Module struct {
	rt       *Runtime
	eng      *engine
	compiled wazero.CompiledModule
	modCfg   wazero.ModuleConfig
	kinds    []policies.Kind
	name     string
	config   []byte
	logger   *slog.Logger
	timeout  time.Duration // 0: no deadline
	obs      Observer

	fallbackRetry      policies.RetryPolicy
	fallbackStarvation policies.StarvationPolicy

	pool  *pool
	brk   breaker
	epoch time.Time // monotonic base of the breaker's clock
	st    counters
}

func newModule(r *Runtime, e *engine, c wazero.CompiledModule, kinds []policies.Kind, o ModuleOptions) *Module {
	m := &Module{
		rt: r, eng: e, compiled: c, kinds: kinds,
		name: o.Name, config: o.Config, logger: o.Logger, obs: o.Observer,
		fallbackRetry: o.FallbackRetry, fallbackStarvation: o.FallbackStarvation,
		epoch: time.Now(),
	}
	m.pool = newPool(maxInstances(), m.newInstance, m.closeInstance, m.logger)
	if o.CallTimeout > 0 {
		m.timeout = o.CallTimeout
	}
	m.brk.threshold = int32(min(o.CircuitThreshold, 1<<30))
	m.brk.cooldown = int64(o.CircuitCooldown)
	// No arguments, environment or files; wazero's fake clocks and
	// deterministic randomness; _initialize (Go's reactor entry) instead
	// of _start. The instance is anonymous so that any number may exist.
	m.modCfg = wazero.NewModuleConfig().WithName("").WithStartFunctions("_initialize")
	return m
}

// Kinds returns the policy kinds the module implements, in the order
// retry, partition, starvation.
func (m *Module) Kinds() []policies.Kind { return append([]policies.Kind(nil), m.kinds...) }

// Name returns the module's name (ModuleOptions.Name).
func (m *Module) Name() string { return m.name }

func (m *Module) has(k policies.Kind) bool {
	for _, x := range m.kinds {
		if x == k {
			return true
		}
	}
	return false
}

// MaxInstances returns the pool's size.
func (m *Module) MaxInstances() int { return m.pool.size() }

// Close closes the idle instances and the compiled module; instances busy
// in a call are closed when the call returns. Later calls get the
// fallback (retry, starvation) or an error (partition). Idempotent; the
// error is from wazero.
func (m *Module) Close(ctx context.Context) error {
	if !m.pool.close() {
		return nil
	}
	m.rt.forget(m)
	return m.compiled.Close(ctx)
}
