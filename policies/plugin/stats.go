package plugin

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/coordhost/coordhost/policies"
)

// Observer is told about a Plugin's activity, typically to export metrics
// (the host turns it into Prometheus collectors; this package does not
// depend on Prometheus). Methods are called synchronously on the decision
// path and from background goroutines: they must be fast, must not block
// and must be safe for concurrent use.
type Observer interface {
	// ObserveCall reports one call that was sent to the plugin process:
	// its latency and its result: err is nil when the plugin answered,
	// wraps ErrRefused when a partition policy answered with a refusal
	// (the policy's own "no key", not a failure), and otherwise describes
	// the failure (transport error, deadline, invalid answer).
	ObserveCall(kind policies.Kind, latency time.Duration, err error)
	// ObserveFallback reports one decision not taken by the plugin: the
	// fallback policy answered (retry, starvation) or the acquisition
	// failed closed (partition).
	ObserveFallback(kind policies.Kind)
	// ObserveCache reports one partition-key cache lookup.
	ObserveCache(hit bool)
	// ObserveRestart reports one restart attempt; err is nil when the
	// plugin is back up.
	ObserveRestart(err error)
}

// ErrRefused is what Observer.ObserveCall receives for a partition call
// that the plugin answered with a refusal (e.g. a missing attribute): the
// policy's answer, not a failure of the plugin. (PartitionKey itself
// returns an error wrapping policies.ErrPartition with the plugin's
// message.)
var ErrRefused = errors.New("plugin: partition policy refused")

// ErrCanceled marks, in Observer.ObserveCall, a call cut short because the
// caller's context ended: not a failure of the plugin, and not counted as
// one.
var ErrCanceled = errors.New("plugin: call canceled by the caller")

func canceled(ctx context.Context) error {
	return fmt.Errorf("%w: %w", ErrCanceled, ctx.Err())
}

// KindStats counts one kind's decisions.
type KindStats struct {
	// Calls sent to the plugin process, Failures among them (transport
	// error, deadline, invalid answer), and their total Latency.
	Calls, Failures uint64
	Latency         time.Duration
	// Fallbacks counts decisions not taken by the plugin (plugin down,
	// call failed, or after Close).
	Fallbacks uint64
	// Refusals counts partition calls the plugin answered with a refusal
	// ("no key"), among Calls but not among Failures; always 0 for the
	// other kinds.
	Refusals uint64
}

// Stats is a snapshot of a Plugin's counters.
type Stats struct {
	// Up reports whether a healthy process is serving decisions.
	Up bool
	// PID of the current process; 0 while down.
	PID int
	// Restarts counts successful restarts, RestartFailures failed attempts.
	Restarts, RestartFailures uint64
	// Per-kind counters.
	Retry, Partition, Starvation KindStats
	// Partition-key cache lookups and current size.
	CacheHits, CacheMisses uint64
	CacheLen               int
}

type kindCounters struct {
	calls, failures, latencyNs, fallbacks, refusals atomic.Uint64
}

func (c *kindCounters) snapshot() KindStats {
	return KindStats{
		Calls:     c.calls.Load(),
		Failures:  c.failures.Load(),
		Latency:   time.Duration(c.latencyNs.Load()),
		Fallbacks: c.fallbacks.Load(),
		Refusals:  c.refusals.Load(),
	}
}

type counters struct {
	retry, partition, starvation kindCounters
	cacheHits, cacheMisses       atomic.Uint64
	restarts, restartFailures    atomic.Uint64
}

func (c *counters) kind(k policies.Kind) *kindCounters {
	switch k {
	case policies.KindRetry:
		return &c.retry
	case policies.KindPartition:
		return &c.partition
	}
	return &c.starvation
}

// refusal returns the result of a partition call for recordCall: the
// call's error, or ErrRefused when the plugin answered with a refusal
// (msg, the response's error text, is not empty), or nil.
func refusal(err error, msg string) error {
	if err == nil && msg != "" {
		return ErrRefused
	}
	return err
}

// recordCall counts one call sent to the plugin; err is nil on success,
// ErrRefused for a partition refusal (see refusal), else the failure.
func (p *Plugin) recordCall(k policies.Kind, latency time.Duration, err error) {
	c := p.stats.kind(k)
	c.calls.Add(1)
	c.latencyNs.Add(uint64(max(latency, 0)))
	switch {
	case errors.Is(err, ErrRefused):
		c.refusals.Add(1)
	case errors.Is(err, ErrCanceled):
	case err != nil:
		c.failures.Add(1)
	}
	if o := p.opts.Observer; o != nil {
		o.ObserveCall(k, latency, err)
	}
}

func (p *Plugin) recordFallback(k policies.Kind) {
	p.stats.kind(k).fallbacks.Add(1)
	if o := p.opts.Observer; o != nil {
		o.ObserveFallback(k)
	}
}

func (p *Plugin) recordCache(hit bool) {
	if hit {
		p.stats.cacheHits.Add(1)
	} else {
		p.stats.cacheMisses.Add(1)
	}
	if o := p.opts.Observer; o != nil {
		o.ObserveCache(hit)
	}
}

func (p *Plugin) recordRestart(err error) {
	if err == nil {
		p.stats.restarts.Add(1)
	} else {
		p.stats.restartFailures.Add(1)
	}
	if o := p.opts.Observer; o != nil {
		o.ObserveRestart(err)
	}
}

// Stats returns a snapshot of the counters. Safe for concurrent use.
func (p *Plugin) Stats() Stats {
	s := Stats{
		Restarts:        p.stats.restarts.Load(),
		RestartFailures: p.stats.restartFailures.Load(),
		Retry:           p.stats.retry.snapshot(),
		Partition:       p.stats.partition.snapshot(),
		Starvation:      p.stats.starvation.snapshot(),
		CacheHits:       p.stats.cacheHits.Load(),
		CacheMisses:     p.stats.cacheMisses.Load(),
	}
	if c := p.cur.Load(); c != nil {
		s.Up, s.PID = true, c.pid
	}
	if p.cache != nil {
		s.CacheLen = p.cache.len()
	}
	return s
}
