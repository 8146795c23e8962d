package wasm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/sys"

	"github.com/coordhost/coordhost/policies"
)

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

// newInstance instantiates and configures one instance: the pool's create.
// ctx bounds the instantiation together with instantiateTimeout.
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
	m.st.instanceCreated(time.Since(start))
	return in, nil
}

// closeInstance closes an instance after a failure (or Close): the pool's
// destroy, after which the pool frees the instance's slot.
func (m *Module) closeInstance(in *instance) {
	if in.timer != nil {
		in.timer.Stop()
		in.cancel()
	}
	_ = in.mod.Close(context.Background())
	m.st.instanceDiscarded()
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
