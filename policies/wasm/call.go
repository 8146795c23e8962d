package wasm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"

	"github.com/coordhost/coordhost/policies"
)

// begin decides whether a call may reach the module: OutcomeOK, or
// OutcomeClosed or OutcomeCircuitOpen when it must go to the fallback.
func (m *Module) begin() Outcome {
	if m.pool.closed.Load() {
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
	m.st.call(o, d)
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
		m.pool.discard(in)
		if ctx.Err() != nil {
			return OutcomeCanceled, fmt.Errorf("wasm: module %q: call stopped: %w", m.name, ctx.Err())
		}
		return classify(err), fmt.Errorf("%w: module %q: %w", ErrCall, m.name, policies.EscapeError(err))
	}
	return OutcomeOK, nil
}

// classify turns a call error into an outcome.
func classify(err error) Outcome {
	var exit *sys.ExitError
	if errors.As(err, &exit) && (exit.ExitCode() == sys.ExitCodeDeadlineExceeded || exit.ExitCode() == sys.ExitCodeContextCanceled) {
		return OutcomeTimeout // the instance's deadline timer cancels its context
	}
	return OutcomeTrap
}
