package wasm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/sys"

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

	// The pool: idle instances, and one token per instance that may still
	// be created. live + len(tokens) == cap(tokens) at rest.
	idle   chan *instance
	tokens chan struct{}
	done   chan struct{} // closed by Close
	closed atomic.Bool

	brk   breaker
	epoch time.Time // monotonic base of the breaker's clock
	st    counters
}

func newModule(r *Runtime, e *engine, c wazero.CompiledModule, kinds []policies.Kind, o ModuleOptions) *Module {
	n := maxInstances()
	m := &Module{
		rt: r, eng: e, compiled: c, kinds: kinds,
		name: o.Name, config: o.Config, logger: o.Logger, obs: o.Observer,
		fallbackRetry: o.FallbackRetry, fallbackStarvation: o.FallbackStarvation,
		idle:   make(chan *instance, n),
		tokens: make(chan struct{}, n),
		done:   make(chan struct{}),
		epoch:  time.Now(),
	}
	if o.CallTimeout > 0 {
		m.timeout = o.CallTimeout
	}
	m.brk.threshold = int32(min(o.CircuitThreshold, 1<<30))
	m.brk.cooldown = int64(o.CircuitCooldown)
	for range n {
		m.tokens <- struct{}{}
	}
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

// instance is one instantiated module. It is used by one goroutine at a
// time: whoever took it from the pool.
type instance struct {
	mod  api.Module
	mem  api.Memory
	ctx  context.Context // carries info for the host functions
	info *instInfo
	// With a deadline, ctx is cancelled by timer, which each call arms for
	// CallTimeout and stops, or by the caller's context (see invoke): no
	// context or timer is allocated per call. Once it fired, ctx stays
	// cancelled and the instance is discarded.
	timer  *time.Timer
	cancel context.CancelFunc
	lm     *linearMemory // the instance's memory (refuses to grow once ctx is done)
	retry  api.Function
	starv  api.Function
	part   api.Function
	ioPtr  uint32
	ioCap  uint32
	stack  [5]uint64
	keys   []string // scratch for sorting partition attributes
}

// newInstance instantiates and configures one instance. ctx bounds the
// instantiation together with instantiateTimeout.
func (m *Module) newInstance(ctx context.Context) (*instance, error) {
	start := time.Now()
	info := &instInfo{logger: m.logger}
	stderr := &lineWriter{info: info, level: slog.LevelWarn, stream: "stderr"}
	cfg := m.modCfg.
		WithStdout(&lineWriter{info: info, level: slog.LevelInfo, stream: "stdout"}).
		WithStderr(stderr)
	ictx, cancel := context.WithTimeout(context.WithValue(ctx, infoKey{}, info), instantiateTimeout)
	defer cancel()
	alloc := &memoryAllocator{}
	mod, err := m.eng.rt.InstantiateModule(experimental.WithMemoryAllocator(ictx, alloc), m.compiled, cfg)
	if err != nil {
		hint := ""
		if stderr.wrote {
			hint = " (the module's standard error is in the log)"
		}
		return nil, fmt.Errorf("%w: module %q: instantiate: %w%s", ErrCall, m.name, policies.EscapeError(err), hint)
	}
	in := &instance{
		mod:  mod,
		mem:  mod.ExportedMemory("memory"),
		ctx:  context.WithValue(context.Background(), infoKey{}, info),
		info: info,
		lm:   alloc.mem,
	}
	if err := m.setup(ictx, in); err != nil {
		_ = mod.Close(context.Background())
		return nil, err
	}
	if m.timeout > 0 {
		in.ctx, in.cancel = context.WithCancel(in.ctx)
		in.timer = time.AfterFunc(time.Hour, in.cancel)
		in.timer.Stop()
		if in.lm != nil {
			in.lm.done = in.ctx.Done()
		}
	}
	m.st.created.Add(1)
	live := m.st.live.Add(1)
	for {
		p := m.st.peak.Load()
		if live <= p || m.st.peak.CompareAndSwap(p, live) {
			break
		}
	}
	m.st.instantiateNanos.Add(int64(time.Since(start)))
	return in, nil
}

// setup checks the ABI version and the I/O area, and configures in.
func (m *Module) setup(ctx context.Context, in *instance) error {
	call0 := func(name string) (uint32, error) {
		s := in.stack[:1]
		if err := in.mod.ExportedFunction(name).CallWithStack(ctx, s); err != nil {
			return 0, fmt.Errorf("%w: module %q: %s: %w", ErrCall, m.name, name, policies.EscapeError(err))
		}
		return uint32(s[0]), nil
	}
	v, err := call0("policy_abi_version")
	if err != nil {
		return err
	}
	if v != 1 {
		return loadErr(ErrABI, m.name, "policy_abi_version returned %d, want 1", int32(v))
	}
	if in.ioPtr, err = call0("policy_io_ptr"); err != nil {
		return err
	}
	if in.ioCap, err = call0("policy_io_cap"); err != nil {
		return err
	}
	if in.mem == nil || uint64(in.ioPtr)+uint64(in.ioCap) > uint64(in.mem.Size()) {
		return loadErr(ErrABI, m.name, "I/O area [%d, +%d) outside memory", in.ioPtr, in.ioCap)
	}
	if len(m.config) > int(in.ioCap) {
		return loadErr(ErrABI, m.name, "config of %d bytes does not fit the I/O area of %d bytes", len(m.config), in.ioCap)
	}
	if !in.mem.Write(in.ioPtr, m.config) {
		return loadErr(ErrABI, m.name, "cannot write the config")
	}
	s := in.stack[:1]
	s[0] = api.EncodeI32(int32(len(m.config)))
	if err := in.mod.ExportedFunction("policy_configure").CallWithStack(ctx, s); err != nil {
		return fmt.Errorf("%w: module %q: policy_configure: %w", ErrCall, m.name, policies.EscapeError(err))
	}
	if rc := int32(s[0]); rc != 0 {
		msg := ""
		if rc < 0 {
			msg = ": " + policies.QuoteText(in.message(-int64(rc)-1))
		}
		return loadErr(ErrABI, m.name, "policy_configure returned %d%s", rc, msg)
	}
	in.retry = in.mod.ExportedFunction("retry_decide")
	in.starv = in.mod.ExportedFunction("starvation_bound")
	in.part = in.mod.ExportedFunction("partition_key")
	return nil
}

// message reads an n-byte message from the I/O area, truncated to the
// area and to policies.MaxTextLen+1 bytes (so that QuoteText marks the cut).
// The text is raw: quote it (policies.QuoteText) before printing it.
func (in *instance) message(n int64) string {
	n = min(n, int64(in.ioCap), policies.MaxTextLen+1)
	b, ok := in.mem.Read(in.ioPtr, uint32(n))
	if !ok {
		return "(message outside memory)"
	}
	return string(b)
}

// acquire takes an idle instance, or creates one if the pool has room, or
// waits for one until ctx ends (then it returns ctx's error).
func (m *Module) acquire(ctx context.Context) (*instance, error) {
	select {
	case in := <-m.idle:
		return in, nil
	default:
	}
	select {
	case in := <-m.idle:
		return in, nil
	case <-m.tokens:
		if m.closed.Load() {
			m.tokens <- struct{}{}
			return nil, ErrClosed
		}
		in, err := m.newInstance(ctx)
		if err != nil {
			m.tokens <- struct{}{}
			if ctx.Err() != nil {
				return nil, ctx.Err() // the caller gave up; no fault of the module
			}
			m.logger.Warn("wasm policy: cannot create an instance", slog.Any("error", err))
			return nil, err
		}
		return in, nil
	case <-m.done:
		return nil, ErrClosed
	case <-ctx.Done(): // nil (never ready) for a context that cannot end
		return nil, ctx.Err()
	}
}

// release returns a healthy instance to the pool.
func (m *Module) release(in *instance) {
	if m.closed.Load() {
		m.discard(in)
		return
	}
	m.idle <- in // never blocks: at most cap(idle) instances exist
	if m.closed.Load() {
		m.drain()
	}
}

// discard closes an instance after a failure (or Close) and frees its slot.
func (m *Module) discard(in *instance) {
	if in.timer != nil {
		in.timer.Stop()
		in.cancel()
	}
	_ = in.mod.Close(context.Background())
	m.st.discarded.Add(1)
	m.st.live.Add(-1)
	m.tokens <- struct{}{}
}

func (m *Module) drain() {
	for {
		select {
		case in := <-m.idle:
			m.discard(in)
		default:
			return
		}
	}
}

// Close closes the idle instances and the compiled module; instances busy
// in a call are closed when the call returns. Later calls get the
// fallback (retry, starvation) or an error (partition). Idempotent; the
// error is from wazero.
func (m *Module) Close(ctx context.Context) error {
	if !m.closed.CompareAndSwap(false, true) {
		return nil
	}
	close(m.done)
	m.drain()
	m.rt.forget(m)
	return m.compiled.Close(ctx)
}

// invoke calls fn on in with the module's deadline, cut short when ctx
// ends. stack holds the parameters and receives the result.
//
// The instance's own context in.ctx carries the deadline: the call arms
// in.timer, which cancels in.ctx. When the caller's ctx can end (Done is
// not nil), context.AfterFunc links it to in.ctx for the length of the
// call, so cancelling ctx stops the call at once (wazero closes the
// instance, which is then discarded); that link costs an allocation or
// two, and a context that cannot end (context.Background) costs nothing.
// On the uninterruptible runtime (NoCallTimeout) ctx is only checked
// before the call, by the caller.
func (m *Module) invoke(ctx context.Context, in *instance, fn api.Function, stack []uint64) error {
	var err error
	if in.timer != nil {
		var unlink func() bool
		if ctx.Done() != nil {
			unlink = context.AfterFunc(ctx, in.cancel)
		}
		in.timer.Reset(m.timeout)
		err = fn.CallWithStack(in.ctx, stack)
		fired := !in.timer.Stop()
		if unlink != nil && !unlink() {
			fired = true
		}
		if fired && err == nil {
			// The deadline or the caller's cancellation fired as the call
			// returned: in.ctx is cancelled for good, so the instance must
			// go.
			err = errDeadline
		}
	} else {
		err = fn.CallWithStack(in.ctx, stack)
	}
	if err == nil && in.mod.IsClosed() {
		// The guest exited (proc_exit(0)) without an error.
		err = errors.New("the module exited")
	}
	return err
}

// errDeadline reports a call whose deadline fired just as it returned.
var errDeadline = sys.NewExitError(sys.ExitCodeDeadlineExceeded)

// classify turns a call error into an outcome.
func classify(err error) Outcome {
	var exit *sys.ExitError
	if errors.As(err, &exit) && (exit.ExitCode() == sys.ExitCodeDeadlineExceeded || exit.ExitCode() == sys.ExitCodeContextCanceled) {
		return OutcomeTimeout // the instance's deadline timer cancels its context
	}
	return OutcomeTrap
}

// begin decides whether a call may reach the module: OutcomeOK, or
// OutcomeClosed or OutcomeCircuitOpen when it must go to the fallback.
func (m *Module) begin() Outcome {
	if m.closed.Load() {
		return OutcomeClosed
	}
	if !m.brk.allow(m.now()) {
		return OutcomeCircuitOpen
	}
	return OutcomeOK
}

func (m *Module) now() int64 { return int64(time.Since(m.epoch)) }

// finish records a call's outcome: statistics, the breaker (unless
// selfTest), the observer and, for failures, a warning.
func (m *Module) finish(kind policies.Kind, start time.Time, o Outcome, err error, selfTest bool) {
	d := time.Since(start)
	m.st.outcomes[o].Add(1)
	m.st.latencyNanos.Add(int64(d))
	switch {
	case selfTest:
	case o == OutcomeOK || o == OutcomeRefused:
		m.brk.success()
	case o.Failure():
		if m.brk.failure(m.now()) {
			m.st.circuitOpens.Add(1)
			m.logger.Warn("wasm policy: circuit opened; answering from the fallback",
				slog.Int("consecutive_failures", int(m.brk.threshold)),
				slog.Duration("cooldown", time.Duration(m.brk.cooldown)))
		}
	}
	if o.Failure() {
		m.logger.Warn("wasm policy: call failed", slog.String("kind", string(kind)),
			slog.String("outcome", o.String()), slog.Any("error", err))
	}
	if m.obs != nil {
		m.obs.ObserveCall(CallInfo{Module: m.name, Kind: kind, Duration: d, Outcome: o})
	}
}

// run calls fn on in with stack; after an error it discards in. It
// returns the outcome: OutcomeOK, OutcomeCanceled when ctx ended (whatever
// the call's error: the caller gave up, the module is not to blame) or a
// failure.
func (m *Module) run(ctx context.Context, in *instance, fn api.Function, stack []uint64) (Outcome, error) {
	if err := m.invoke(ctx, in, fn, stack); err != nil {
		m.discard(in)
		if ctx.Err() != nil {
			return OutcomeCanceled, fmt.Errorf("wasm: module %q: call stopped: %w", m.name, ctx.Err())
		}
		return classify(err), fmt.Errorf("%w: module %q: %w", ErrCall, m.name, policies.EscapeError(err))
	}
	return OutcomeOK, nil
}

// Outcome classifies one call.
type Outcome uint8

// The outcomes.
const (
	// OutcomeOK: the module answered.
	OutcomeOK Outcome = iota
	// OutcomeRefused: partition_key answered with an error (the policy's
	// own refusal, e.g. a missing attribute). Not a failure.
	OutcomeRefused
	// OutcomeTrap: the call trapped or the guest exited.
	OutcomeTrap
	// OutcomeTimeout: the call hit its deadline.
	OutcomeTimeout
	// OutcomeBadResult: the result is outside the ABI's range.
	OutcomeBadResult
	// OutcomeUnavailable: no instance could be created.
	OutcomeUnavailable
	// OutcomeCircuitOpen: the circuit breaker was open; the module was not
	// called.
	OutcomeCircuitOpen
	// OutcomeClosed: the module was closed; it was not called.
	OutcomeClosed
	// OutcomeCanceled: the caller's context ended before or during the
	// call, which was then stopped; the answer came from the fallback (or
	// partition failed with the context's error). Not a failure of the
	// module: the circuit breaker does not count it.
	OutcomeCanceled
	numOutcomes
)

// String returns the outcome's name, suitable as a metric label.
func (o Outcome) String() string {
	switch o {
	case OutcomeOK:
		return "ok"
	case OutcomeRefused:
		return "refused"
	case OutcomeTrap:
		return "trap"
	case OutcomeTimeout:
		return "timeout"
	case OutcomeBadResult:
		return "bad_result"
	case OutcomeUnavailable:
		return "unavailable"
	case OutcomeCircuitOpen:
		return "circuit_open"
	case OutcomeClosed:
		return "closed"
	case OutcomeCanceled:
		return "canceled"
	}
	return "unknown"
}

// Failure reports whether the outcome counts as a failure of the module
// (and towards opening the circuit).
func (o Outcome) Failure() bool { return o >= OutcomeTrap && o <= OutcomeUnavailable }

// Fallback reports whether the answer did not come from the module: the
// fallback policy answered, or partition failed closed.
func (o Outcome) Fallback() bool { return o >= OutcomeTrap }

// CallInfo describes one call for an Observer.
type CallInfo struct {
	Module   string        // ModuleOptions.Name
	Kind     policies.Kind // the policy kind called
	Duration time.Duration // time spent, including waiting for an instance
	Outcome  Outcome
}

// Observer is told about every call of a Module (every decision its
// policies make, including fallbacks), for metrics: e.g. a Prometheus
// histogram of Duration by Kind and Outcome. ObserveCall runs on the
// caller's goroutine, concurrently; it must be fast and must not call the
// Module.
type Observer interface {
	ObserveCall(CallInfo)
}

// Stats are cumulative counters of a Module, read with atomic loads (so
// the fields are consistent one by one, not together).
type Stats struct {
	Calls       uint64 // decisions asked for
	OK          uint64 // answered by the module
	Refused     uint64 // partition refusals by the module (not failures)
	Failures    uint64 // traps + timeouts + bad results + unavailable
	Traps       uint64
	Timeouts    uint64
	BadResults  uint64
	Unavailable uint64 // no instance could be created
	Canceled    uint64 // calls whose caller's context ended first (not failures)
	Fallbacks   uint64 // answers not from the module (failures, circuit open, closed, canceled)
	// Latency is the sum of the calls' durations (see CallInfo.Duration).
	Latency time.Duration

	Instances          int    // live instances now
	PeakInstances      int    // most live instances at once
	InstancesCreated   uint64 //
	InstancesDiscarded uint64 // after a failure or Close
	// InstantiateTime is the total time spent creating instances.
	InstantiateTime time.Duration

	CircuitOpen  bool   // the breaker is open or half-open now
	CircuitOpens uint64 // times the breaker opened
}

type counters struct {
	outcomes         [numOutcomes]atomic.Uint64
	latencyNanos     atomic.Int64
	created          atomic.Uint64
	discarded        atomic.Uint64
	live             atomic.Int64
	peak             atomic.Int64
	instantiateNanos atomic.Int64
	circuitOpens     atomic.Uint64
}

// Stats returns the module's counters.
func (m *Module) Stats() Stats {
	var s Stats
	var n [numOutcomes]uint64
	for i := range n {
		n[i] = m.st.outcomes[i].Load()
		s.Calls += n[i]
	}
	s.OK, s.Refused = n[OutcomeOK], n[OutcomeRefused]
	s.Traps, s.Timeouts, s.BadResults, s.Unavailable = n[OutcomeTrap], n[OutcomeTimeout], n[OutcomeBadResult], n[OutcomeUnavailable]
	s.Failures = s.Traps + s.Timeouts + s.BadResults + s.Unavailable
	s.Canceled = n[OutcomeCanceled]
	s.Fallbacks = s.Failures + n[OutcomeCircuitOpen] + n[OutcomeClosed] + n[OutcomeCanceled]
	s.Latency = time.Duration(m.st.latencyNanos.Load())
	s.Instances = int(m.st.live.Load())
	s.PeakInstances = int(m.st.peak.Load())
	s.InstancesCreated = m.st.created.Load()
	s.InstancesDiscarded = m.st.discarded.Load()
	s.InstantiateTime = time.Duration(m.st.instantiateNanos.Load())
	s.CircuitOpen = m.brk.state.Load() != stateClosed
	s.CircuitOpens = m.st.circuitOpens.Load()
	return s
}

// MaxInstances returns the pool's size.
func (m *Module) MaxInstances() int { return cap(m.tokens) }

// Breaker states.
const (
	stateClosed int32 = iota
	stateOpen
	stateHalfOpen
)

// breaker is a consecutive-failure circuit breaker. Times are nanoseconds
// on the module's monotonic clock.
type breaker struct {
	threshold int32 // 0: disabled
	cooldown  int64
	failures  atomic.Int32
	state     atomic.Int32
	openedAt  atomic.Int64
}

// allow reports whether a call may go to the module. After the cooldown,
// exactly one caller (the probe) gets true while the state is half-open.
func (b *breaker) allow(now int64) bool {
	switch b.state.Load() {
	case stateClosed:
		return true
	case stateOpen:
		if now-b.openedAt.Load() < b.cooldown {
			return false
		}
		return b.state.CompareAndSwap(stateOpen, stateHalfOpen)
	default:
		return false
	}
}

func (b *breaker) success() {
	if b.failures.Load() != 0 {
		b.failures.Store(0)
	}
	if b.state.Load() == stateHalfOpen {
		b.state.Store(stateClosed)
	}
}

// failure records a failure and reports whether the breaker opened now.
func (b *breaker) failure(now int64) bool {
	if b.threshold == 0 {
		return false
	}
	if b.state.Load() == stateHalfOpen {
		b.openedAt.Store(now)
		b.state.Store(stateOpen) // the probe failed
		return true
	}
	if b.failures.Add(1) >= b.threshold && b.state.Load() == stateClosed {
		// openedAt first: allow reads it as soon as the state is open.
		b.openedAt.Store(now)
		if b.state.CompareAndSwap(stateClosed, stateOpen) {
			b.failures.Store(0)
			return true
		}
	}
	return false
}
