package wasm

import (
	"sync/atomic"
	"time"

	"github.com/coordhost/coordhost/policies"
)

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

// counters are the atomics behind Stats.
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

// call counts one call's outcome and duration.
func (c *counters) call(o Outcome, d time.Duration) {
	c.outcomes[o].Add(1)
	c.latencyNanos.Add(int64(d))
}

// instanceCreated counts a new instance that took d to create.
func (c *counters) instanceCreated(d time.Duration) {
	c.created.Add(1)
	live := c.live.Add(1)
	for {
		p := c.peak.Load()
		if live <= p || c.peak.CompareAndSwap(p, live) {
			break
		}
	}
	c.instantiateNanos.Add(int64(d))
}

// instanceDiscarded counts an instance closed after a failure or Close.
func (c *counters) instanceDiscarded() {
	c.discarded.Add(1)
	c.live.Add(-1)
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
	s.CircuitOpen = m.brk.open()
	s.CircuitOpens = m.st.circuitOpens.Load()
	return s
}
