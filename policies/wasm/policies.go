package wasm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/tetratelabs/wazero/api"

	"github.com/coordhost/coordhost/policies"
)

// MaxDelayMS is the largest delay or bound, in milliseconds, a module can
// return: the largest time.Duration.
const MaxDelayMS = math.MaxInt64 / int64(time.Millisecond)

// Retry returns the module's retry policy, or nil when the module does not
// export retry_decide. On a failure (trap, deadline, bad result, no
// instance), while the circuit is open and after Close, DecideRetry answers
// with ModuleOptions.FallbackRetry; so it does when ctx ends before or
// during the call, which then stops at once (see Module).
func (m *Module) Retry() policies.RetryPolicy {
	if !m.has(policies.KindRetry) {
		return nil
	}
	return retryPolicy{m}
}

// Starvation returns the module's starvation policy, or nil when the
// module does not export starvation_bound. On failure it answers with
// ModuleOptions.FallbackStarvation (default: strict writer preference), as
// it does when ctx ends before or during the call.
func (m *Module) Starvation() policies.StarvationPolicy {
	if !m.has(policies.KindStarvation) {
		return nil
	}
	return starvationPolicy{m}
}

// Partition returns the module's partition policy, or nil when the module
// does not export partition_key. Every error it returns wraps
// policies.ErrPartition: the module's own refusal (with its message), a
// failure (also wrapping ErrCall), an open circuit (ErrCircuitOpen),
// ErrClosed, or ctx's error when ctx ended before or during the call. It
// never guesses a key. The module's refusal message is quoted
// (policies.QuoteText) in the error.
func (m *Module) Partition() policies.PartitionPolicy {
	if !m.has(policies.KindPartition) {
		return nil
	}
	return partitionPolicy{m}
}

type retryPolicy struct{ m *Module }

func (p retryPolicy) DecideRetry(ctx context.Context, r policies.RetryRequest) policies.RetryDecision {
	m := p.m
	start := time.Now()
	o := m.begin()
	if o == OutcomeOK {
		d, o2, err := m.callRetry(ctx, r)
		m.finish(policies.KindRetry, start, o2, err, false)
		if o2 == OutcomeOK {
			return d
		}
	} else {
		m.finish(policies.KindRetry, start, o, nil, false)
	}
	if m.fallbackRetry != nil {
		return m.fallbackRetry.DecideRetry(ctx, r)
	}
	return policies.RetryDecision{Action: policies.WaitForWake}
}

type starvationPolicy struct{ m *Module }

func (p starvationPolicy) WriterBound(ctx context.Context, r policies.StarvationRequest) time.Duration {
	m := p.m
	start := time.Now()
	o := m.begin()
	if o == OutcomeOK {
		d, o2, err := m.callStarvation(ctx, r)
		m.finish(policies.KindStarvation, start, o2, err, false)
		if o2 == OutcomeOK {
			return d
		}
	} else {
		m.finish(policies.KindStarvation, start, o, nil, false)
	}
	if m.fallbackStarvation != nil {
		return m.fallbackStarvation.WriterBound(ctx, r)
	}
	return 0
}

type partitionPolicy struct{ m *Module }

func (p partitionPolicy) PartitionKey(ctx context.Context, r policies.PartitionRequest) (string, error) {
	m := p.m
	start := time.Now()
	o := m.begin()
	switch o {
	case OutcomeClosed:
		m.finish(policies.KindPartition, start, o, nil, false)
		return "", fmt.Errorf("%w: wasm module %q: %w", policies.ErrPartition, m.name, ErrClosed)
	case OutcomeCircuitOpen:
		m.finish(policies.KindPartition, start, o, nil, false)
		return "", fmt.Errorf("%w: wasm module %q: %w", policies.ErrPartition, m.name, ErrCircuitOpen)
	}
	key, o, err := m.callPartition(ctx, r)
	m.finish(policies.KindPartition, start, o, err, false)
	if err != nil {
		return "", fmt.Errorf("%w: %w", policies.ErrPartition, err)
	}
	return key, nil
}

// acquireFor is acquire with the outcome of a failure to get an instance.
// A ctx that already ended gets OutcomeCanceled without an instance.
func (m *Module) acquireFor(ctx context.Context) (*instance, Outcome, error) {
	if err := ctx.Err(); err != nil {
		return nil, OutcomeCanceled, fmt.Errorf("wasm: module %q: not called: %w", m.name, err)
	}
	in, err := m.pool.acquire(ctx)
	switch {
	case err == nil:
		return in, OutcomeOK, nil
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return nil, OutcomeCanceled, fmt.Errorf("wasm: module %q: not called: %w", m.name, err)
	case errors.Is(err, ErrClosed):
		return nil, OutcomeClosed, fmt.Errorf("wasm: module %q: %w", m.name, err)
	case errors.Is(err, ErrCall):
		return nil, OutcomeUnavailable, err
	default: // e.g. a later instance's policy_configure failed
		return nil, OutcomeUnavailable, fmt.Errorf("%w: %w", ErrCall, err)
	}
}

// callRetry calls retry_decide.
func (m *Module) callRetry(ctx context.Context, r policies.RetryRequest) (policies.RetryDecision, Outcome, error) {
	in, o, err := m.acquireFor(ctx)
	if err != nil {
		return policies.RetryDecision{}, o, err
	}
	s := in.stack[:5]
	s[0] = api.EncodeI32(int32(min(max(r.Attempt, 0), math.MaxInt32)))
	s[1] = api.EncodeI32(int32(min(max(int(r.Reason), 0), math.MaxInt32)))
	s[2] = api.EncodeI64(floorMS(r.Elapsed))
	s[3] = api.EncodeI64(hintMS(r.HolderTTL))
	s[4] = r.Rand
	if o, err := m.run(ctx, in, in.retry, s); err != nil {
		return policies.RetryDecision{}, o, err
	}
	v := int64(s[0])
	d, ok := decodeRetry(v)
	if !ok {
		m.pool.discard(in)
		return d, OutcomeBadResult, fmt.Errorf("%w: module %q: retry_decide returned %d: delay above %d ms", ErrCall, m.name, v, MaxDelayMS)
	}
	m.pool.release(in)
	return d, OutcomeOK, nil
}

// decodeRetry decodes retry_decide's result (see the package
// documentation); ok is false for a delay above MaxDelayMS.
func decodeRetry(v int64) (policies.RetryDecision, bool) {
	switch {
	case v >= 0:
		return policies.RetryDecision{Action: policies.WaitForWake, Delay: time.Duration(v) * time.Millisecond}, v <= MaxDelayMS
	case v == -1:
		return policies.RetryDecision{Action: policies.GiveUp}, true
	default:
		d := -(v + 2)
		return policies.RetryDecision{Action: policies.RetryAfter, Delay: time.Duration(d) * time.Millisecond}, d <= MaxDelayMS
	}
}

// floorMS is d in whole milliseconds, rounded down; negative becomes 0.
func floorMS(d time.Duration) int64 { return int64(max(d, 0) / time.Millisecond) }

// hintMS is the holder's TTL in milliseconds rounded up, or -1 if unknown.
func hintMS(d time.Duration) int64 {
	if d < 0 {
		return -1
	}
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond != 0 {
		ms++
	}
	return ms
}

// callStarvation calls starvation_bound.
func (m *Module) callStarvation(ctx context.Context, r policies.StarvationRequest) (time.Duration, Outcome, error) {
	in, o, err := m.acquireFor(ctx)
	if err != nil {
		return 0, o, err
	}
	s := in.stack[:3]
	s[0] = api.EncodeI32(int32(min(max(r.Readers, 0), math.MaxInt32)))
	s[1] = api.EncodeI32(int32(min(max(r.Writers, 0), math.MaxInt32)))
	s[2] = api.EncodeI64(floorMS(r.OldestWriterWait))
	if o, err := m.run(ctx, in, in.starv, s); err != nil {
		return 0, o, err
	}
	m.pool.release(in)
	v := int64(s[0])
	if v < 0 || v > MaxDelayMS {
		return policies.Unbounded, OutcomeOK, nil
	}
	return time.Duration(v) * time.Millisecond, OutcomeOK, nil
}

// callPartition encodes r into the I/O area, calls partition_key and reads
// the key. Errors are the module's refusal (OutcomeRefused), a request too
// large for the I/O area (OutcomeRefused too: the module is fine) or a
// failure.
func (m *Module) callPartition(ctx context.Context, r policies.PartitionRequest) (string, Outcome, error) {
	in, o, err := m.acquireFor(ctx)
	if err != nil {
		return "", o, err
	}
	buf, ok := in.mem.Read(in.ioPtr, in.ioCap)
	if !ok {
		m.pool.discard(in)
		return "", OutcomeBadResult, fmt.Errorf("%w: module %q: I/O area outside memory", ErrCall, m.name)
	}
	n, ok := encodePartition(buf, r, &in.keys)
	if !ok {
		m.pool.release(in)
		return "", OutcomeRefused, fmt.Errorf("wasm module %q: partition request of kind %s, name %s with %d attributes does not fit the I/O area of %d bytes",
			m.name, policies.QuoteText(r.Kind), policies.QuoteText(r.Name), len(r.Attributes), in.ioCap)
	}
	s := in.stack[:1]
	s[0] = api.EncodeI32(int32(n))
	if o, err := m.run(ctx, in, in.part, s); err != nil {
		return "", o, err
	}
	res := int32(s[0])
	switch {
	case res > 0 && uint32(res) <= in.ioCap:
		// Read again: the call may have grown (and moved) the memory.
		b, ok := in.mem.Read(in.ioPtr, uint32(res))
		if !ok {
			break
		}
		key := string(b)
		m.pool.release(in)
		return key, OutcomeOK, nil
	case res == 0:
		m.pool.release(in)
		return "", OutcomeRefused, fmt.Errorf("wasm module %q: empty partition key", m.name)
	case res < 0 && int64(-res)-1 <= int64(in.ioCap):
		msg := in.message(int64(-res) - 1)
		m.pool.release(in)
		if msg == "" {
			return "", OutcomeRefused, fmt.Errorf("wasm module %q: refused (no message)", m.name)
		}
		return "", OutcomeRefused, fmt.Errorf("wasm module %q: refused: %s", m.name, policies.QuoteText(msg))
	}
	m.pool.discard(in)
	return "", OutcomeBadResult, fmt.Errorf("%w: module %q: partition_key returned %d (I/O area of %d bytes)", ErrCall, m.name, res, in.ioCap)
}

// encodePartition writes r into buf (see the package documentation) with
// the attributes sorted by key, using *keys as scratch. It returns the
// length, or false if buf is too small.
func encodePartition(buf []byte, r policies.PartitionRequest, keys *[]string) (int, bool) {
	ks := (*keys)[:0]
	for k := range r.Attributes {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	defer func() {
		clear(ks) // keep no references to the caller's strings
		*keys = ks[:0]
	}()
	off := 0
	put := func(s string) bool {
		if len(buf)-off < 4 || uint64(len(s)) > uint64(len(buf)-off-4) {
			return false
		}
		binary.LittleEndian.PutUint32(buf[off:], uint32(len(s)))
		off += 4 + copy(buf[off+4:], s)
		return true
	}
	if !put(r.Kind) || !put(r.Name) || len(buf)-off < 4 {
		return 0, false
	}
	binary.LittleEndian.PutUint32(buf[off:], uint32(len(ks)))
	off += 4
	for _, k := range ks {
		if !put(k) || !put(r.Attributes[k]) {
			return 0, false
		}
	}
	return off, true
}

// SelfTest calls every kind the module implements once with sample inputs,
// bypassing the circuit breaker and the fallbacks, and returns the
// failures (wrapping ErrCall) or ErrClosed. A partition refusal is not a
// failure: the sample request may lack the attributes the policy needs.
// Each call is bounded by the module's CallTimeout and stopped when ctx
// ends (then the error wraps ctx's). The host runs it at load and reload.
func (m *Module) SelfTest(ctx context.Context) error {
	if m.pool.closed.Load() {
		return fmt.Errorf("wasm: module %q: %w", m.name, ErrClosed)
	}
	var errs []error
	for _, k := range m.kinds {
		if err := ctx.Err(); err != nil {
			return errors.Join(append(errs, err)...)
		}
		start := time.Now()
		var o Outcome
		var err error
		switch k {
		case policies.KindRetry:
			_, o, err = m.callRetry(ctx, policies.RetryRequest{
				Attempt: 1, Reason: policies.ReasonContended, Elapsed: 3 * time.Millisecond,
				HolderTTL: 250 * time.Millisecond, Rand: 0x9E3779B97F4A7C15,
			})
		case policies.KindStarvation:
			_, o, err = m.callStarvation(ctx, policies.StarvationRequest{Readers: 2, Writers: 1, OldestWriterWait: 5 * time.Millisecond})
		case policies.KindPartition:
			_, o, err = m.callPartition(ctx, policies.PartitionRequest{
				Kind: "lock", Name: "selftest", Attributes: map[string]string{"tenant": "selftest", "route": "/"},
			})
		}
		m.finish(k, start, o, err, true)
		if o.Failure() || o == OutcomeClosed || o == OutcomeCanceled {
			errs = append(errs, fmt.Errorf("self-test of %s: %w", k, err))
		}
	}
	return errors.Join(errs...)
}
