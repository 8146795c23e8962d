// Package plugin runs coordhost policies in separate processes with
// hashicorp/go-plugin over gRPC: the host side of plugins/sdk.
//
// Launch verifies the executable's sha256, starts it with an empty
// environment (only go-plugin's handshake variables), checks the versioned
// handshake, asks which kinds it serves and configures it. A background
// supervisor pings it every HealthInterval and restarts it with capped
// exponential backoff when it dies or stops answering. Decisions never wait
// for a restart: while the plugin is down, or when a call fails or runs past
// CallTimeout, the kind's fallback applies (retry: Options.FallbackRetry;
// starvation: Options.FallbackStarvation, default strict writer preference;
// partition: the acquisition fails closed with an error wrapping
// policies.ErrPartition). Partition keys, being pure functions of their
// input, are cached in a bounded LRU for the Plugin's lifetime (a reload
// builds a new Plugin).
//
// A caller's context bounds its call: each call's deadline is the earlier
// of the caller's and CallTimeout, and a caller that gives up gets the
// fallback (or, for partition, an error wrapping its context's error)
// without the plugin being counted as failing.
//
// No process a plugin starts outlives it (Linux): plugins built with
// plugins/sdk are child subreapers, so whatever they start stays below
// them in /proc however it detaches itself (setsid, setpgid, a double
// fork); when a plugin stops (Close, a restart) its descendants are
// stopped and killed first, and so are processes seen below it earlier
// that were reparented away since. See plugins/sdk/proctree. Elsewhere
// only the plugin's process group is killed.
//
// Text from a plugin (refusals, error messages, its standard error lines,
// which go-plugin logs) is escaped before it reaches an error or a log
// (policies.EscapeText, policies.QuoteText).
package plugin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coordhost/coordhost/plugins/sdk"
	"github.com/coordhost/coordhost/plugins/sdk/proto/policyv1"
	"github.com/coordhost/coordhost/policies"
)

// Plugin is a running policy plugin. Its methods are safe for concurrent
// use. Close it when done.
type Plugin struct {
	opts  Options
	hlog  *slogHCLog
	kinds []policies.Kind // sorted; set by the first start, then read-only

	cur   atomic.Pointer[proc] // nil while down or closed
	cache *lru                 // nil when disabled
	stats counters

	life       context.Context // cancelled by Close after closeGrace: kills every process
	cancel     context.CancelFunc
	stopping   context.Context // cancelled when Close starts: ends pings and restarts
	stopCancel context.CancelFunc
	done       chan struct{} // closed by Close
	kick       chan struct{} // a failed call asks the supervisor for a ping
	wg         sync.WaitGroup
	closeOnce  sync.Once
}

// Launch starts the plugin described by opts and returns it once it has
// completed the handshake, advertised its kinds and accepted its
// configuration. ctx bounds the start (so does Options.StartTimeout); the
// Plugin outlives ctx. Errors wrap ErrInvalidOptions, ErrChecksum (the
// executable was not started), or describe the failed start; a process that
// was started is killed again.
func Launch(ctx context.Context, opts Options) (*Plugin, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	p := &Plugin{
		opts: o,
		done: make(chan struct{}),
		kick: make(chan struct{}, 1),
	}
	p.hlog = newSlogHCLog(o.Logger, "go-plugin."+o.Name)
	if o.PartitionCacheSize > 0 {
		p.cache = newLRU(o.PartitionCacheSize)
	}
	p.life, p.cancel = context.WithCancel(context.WithoutCancel(ctx))
	p.stopping, p.stopCancel = context.WithCancel(p.life)
	if err := ctx.Err(); err != nil {
		p.cancel()
		return nil, err
	}
	first, err := p.start(ctx)
	if err != nil {
		p.cancel()
		return nil, err
	}
	p.cur.Store(first)
	p.wg.Add(1)
	go p.supervise(first)
	o.Logger.Debug("policy plugin started", "plugin", o.Name, "pid", first.pid, "kinds", p.kinds)
	return p, nil
}

// Close stops the supervisor and the plugin process (asking it to exit,
// killing it after a second) and drops the partition cache. It is
// idempotent and always returns nil. Afterwards retry and starvation
// decisions use their fallbacks and partition keys fail with ErrClosed.
func (p *Plugin) Close() error {
	p.closeOnce.Do(func() {
		close(p.done)
		p.stopCancel()
		t := time.AfterFunc(closeGrace, p.cancel)
		p.wg.Wait()
		t.Stop()
		p.cancel()
		if p.cache != nil {
			p.cache.clear()
		}
	})
	return nil
}

func (p *Plugin) closed() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Name returns the plugin's name (Options.Name or the executable's base
// name).
func (p *Plugin) Name() string { return p.opts.Name }

// Kinds returns the kinds the plugin serves, sorted.
func (p *Plugin) Kinds() []policies.Kind { return slices.Clone(p.kinds) }

func (p *Plugin) serves(k policies.Kind) error {
	if slices.Contains(p.kinds, k) {
		return nil
	}
	return fmt.Errorf("%w: plugin %q serves %v, not %s", ErrKindNotServed, p.opts.Name, p.kinds, k)
}

// Retry returns the plugin's retry policy, or an error wrapping
// ErrKindNotServed.
func (p *Plugin) Retry() (policies.RetryPolicy, error) {
	if err := p.serves(policies.KindRetry); err != nil {
		return nil, err
	}
	fb := p.opts.FallbackRetry
	if fb == nil {
		fb = policies.RetryFunc(func(context.Context, policies.RetryRequest) policies.RetryDecision {
			return policies.RetryDecision{Action: policies.WaitForWake, Delay: DefaultFallbackRetryDelay}
		})
	}
	return &retryPolicy{p: p, fallback: fb}, nil
}

// Partition returns the plugin's partition policy, or an error wrapping
// ErrKindNotServed.
func (p *Plugin) Partition() (policies.PartitionPolicy, error) {
	if err := p.serves(policies.KindPartition); err != nil {
		return nil, err
	}
	return &partitionPolicy{p: p}, nil
}

// Starvation returns the plugin's starvation policy, or an error wrapping
// ErrKindNotServed.
func (p *Plugin) Starvation() (policies.StarvationPolicy, error) {
	if err := p.serves(policies.KindStarvation); err != nil {
		return nil, err
	}
	fb := p.opts.FallbackStarvation
	if fb == nil {
		fb = policies.StarvationFunc(func(context.Context, policies.StarvationRequest) time.Duration { return 0 })
	}
	return &starvationPolicy{p: p, fallback: fb}, nil
}

// failed asks the supervisor to check the process now rather than at the
// next tick, after a failed call.
func (p *Plugin) failed() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// unavailable is the error of a partition decision the plugin could not
// take.
func (p *Plugin) unavailable(cause error) error {
	if p.closed() {
		return fmt.Errorf("plugin %q: %w: %w", p.opts.Name, policies.ErrPartition, ErrClosed)
	}
	if cause == nil {
		return fmt.Errorf("plugin %q: %w: %w (restarting)", p.opts.Name, policies.ErrPartition, ErrUnavailable)
	}
	return fmt.Errorf("plugin %q: %w: %w: %w", p.opts.Name, policies.ErrPartition, ErrUnavailable, policies.EscapeError(cause))
}

type retryPolicy struct {
	p        *Plugin
	fallback policies.RetryPolicy
}

// DecideRetry asks the plugin, or the fallback when it is down or the call
// fails.
func (r *retryPolicy) DecideRetry(ctx context.Context, req policies.RetryRequest) policies.RetryDecision {
	p := r.p
	c := p.cur.Load()
	if c == nil {
		p.recordFallback(policies.KindRetry)
		return r.fallback.DecideRetry(ctx, req)
	}
	cctx, cancel := context.WithTimeout(ctx, p.opts.CallTimeout)
	start := time.Now()
	resp, err := c.api.Policy.DecideRetry(cctx, sdk.RetryRequestToProto(req))
	lat := time.Since(start)
	cancel()
	var d policies.RetryDecision
	if err == nil {
		d, err = sdk.RetryDecisionFromProto(resp)
	}
	if err != nil && ctx.Err() != nil {
		// The caller gave up: no fault of the plugin's, and nobody reads
		// the answer.
		p.recordCall(policies.KindRetry, lat, canceled(ctx))
		return r.fallback.DecideRetry(ctx, req)
	}
	p.recordCall(policies.KindRetry, lat, err)
	if err != nil {
		p.failed()
		p.recordFallback(policies.KindRetry)
		return r.fallback.DecideRetry(ctx, req)
	}
	return d
}

type starvationPolicy struct {
	p        *Plugin
	fallback policies.StarvationPolicy
}

// WriterBound asks the plugin, or the fallback when it is down or the call
// fails.
func (s *starvationPolicy) WriterBound(ctx context.Context, req policies.StarvationRequest) time.Duration {
	p := s.p
	c := p.cur.Load()
	if c == nil {
		p.recordFallback(policies.KindStarvation)
		return s.fallback.WriterBound(ctx, req)
	}
	cctx, cancel := context.WithTimeout(ctx, p.opts.CallTimeout)
	start := time.Now()
	resp, err := c.api.Policy.WriterBound(cctx, sdk.StarvationRequestToProto(req))
	lat := time.Since(start)
	cancel()
	var bound time.Duration
	if err == nil {
		bound, err = sdk.WriterBoundFromProto(resp)
	}
	if err != nil && ctx.Err() != nil {
		p.recordCall(policies.KindStarvation, lat, canceled(ctx))
		return s.fallback.WriterBound(ctx, req) // the caller gave up
	}
	p.recordCall(policies.KindStarvation, lat, err)
	if err != nil {
		p.failed()
		p.recordFallback(policies.KindStarvation)
		return s.fallback.WriterBound(ctx, req)
	}
	return bound
}

type partitionPolicy struct {
	p *Plugin
}

// PartitionKey returns the cached key, or asks the plugin. When the plugin
// is down or the call fails it fails closed: the error wraps
// policies.ErrPartition and ErrUnavailable (or ErrClosed). A refusal by the
// policy wraps policies.ErrPartition and quotes its message
// (policies.QuoteText); refusals are not cached. Any text from the plugin
// in an error is escaped.
func (pp *partitionPolicy) PartitionKey(ctx context.Context, req policies.PartitionRequest) (string, error) {
	p := pp.p
	if p.closed() {
		p.recordFallback(policies.KindPartition)
		return "", p.unavailable(nil)
	}
	var buf [256]byte
	var ck []byte
	if p.cache != nil {
		ck = appendPartitionKey(buf[:0], req)
		if key, ok := p.cache.get(ck); ok {
			p.recordCache(true)
			return key, nil
		}
		p.recordCache(false)
	}
	c := p.cur.Load()
	if c == nil {
		p.recordFallback(policies.KindPartition)
		return "", p.unavailable(nil)
	}
	cctx, cancel := context.WithTimeout(ctx, p.opts.CallTimeout)
	start := time.Now()
	resp, err := c.api.Policy.PartitionKey(cctx, sdk.PartitionRequestToProto(req))
	lat := time.Since(start)
	cancel()
	if err != nil && ctx.Err() != nil {
		p.recordCall(policies.KindPartition, lat, canceled(ctx))
		return "", fmt.Errorf("%w: plugin %q: %w", policies.ErrPartition, p.opts.Name, ctx.Err()) // the caller gave up
	}
	p.recordCall(policies.KindPartition, lat, refusal(err, resp.GetError()))
	if err != nil {
		p.failed()
		p.recordFallback(policies.KindPartition)
		return "", p.unavailable(err)
	}
	if msg := resp.GetError(); msg != "" {
		return "", fmt.Errorf("plugin %q: %w: refused: %s", p.opts.Name, policies.ErrPartition, policies.QuoteText(msg))
	}
	key := resp.GetKey()
	if p.cache != nil {
		p.cache.add(ck, key)
	}
	return key, nil
}

// SelfTest checks that the plugin answers now: a health ping and one
// decision per kind it serves, sent to the process (no cache, no fallback),
// each within CallTimeout. A partition refusal counts as an answer. It is
// what a reload runs on a new Plugin before swapping it in.
func (p *Plugin) SelfTest(ctx context.Context) error {
	if p.closed() {
		return fmt.Errorf("plugin %q: %w", p.opts.Name, ErrClosed)
	}
	c := p.cur.Load()
	if c == nil {
		return fmt.Errorf("plugin %q: %w (restarting)", p.opts.Name, ErrUnavailable)
	}
	if err := p.ping(ctx, c); err != nil {
		return fmt.Errorf("plugin %q: self-test: health: %w", p.opts.Name, policies.EscapeError(err))
	}
	call := func(kind policies.Kind, f func(context.Context) error) error {
		cctx, cancel := context.WithTimeout(ctx, p.opts.CallTimeout)
		defer cancel()
		if err := f(cctx); err != nil {
			return fmt.Errorf("plugin %q: self-test: %s: %w", p.opts.Name, kind, policies.EscapeError(err))
		}
		return nil
	}
	var errs []error
	for _, k := range p.kinds {
		var err error
		switch k {
		case policies.KindRetry:
			err = call(k, func(ctx context.Context) error {
				resp, err := c.api.Policy.DecideRetry(ctx, sdk.RetryRequestToProto(policies.RetryRequest{
					Attempt: 1, Reason: policies.ReasonContended, HolderTTL: 100 * time.Millisecond, Rand: 1,
				}))
				if err == nil {
					_, err = sdk.RetryDecisionFromProto(resp)
				}
				return err
			})
		case policies.KindStarvation:
			err = call(k, func(ctx context.Context) error {
				resp, err := c.api.Policy.WriterBound(ctx, sdk.StarvationRequestToProto(policies.StarvationRequest{
					Readers: 1, Writers: 1, OldestWriterWait: 10 * time.Millisecond,
				}))
				if err == nil {
					_, err = sdk.WriterBoundFromProto(resp)
				}
				return err
			})
		case policies.KindPartition:
			err = call(k, func(ctx context.Context) error {
				_, err := c.api.Policy.PartitionKey(ctx, &policyv1.PartitionKeyRequest{Kind: "self-test", Name: "self-test"})
				return err
			})
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// remoteStats asks the current process for its own counters (tests and
// diagnostics).
func (p *Plugin) remoteStats(ctx context.Context) (*policyv1.StatsResponse, error) {
	c := p.cur.Load()
	if c == nil {
		return nil, ErrUnavailable
	}
	ctx, cancel := context.WithTimeout(ctx, p.opts.PingTimeout)
	defer cancel()
	return c.api.Policy.Stats(ctx, &policyv1.StatsRequest{})
}
