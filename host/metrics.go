package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coordhost/coordhost/policies"
	"github.com/coordhost/coordhost/policies/plugin"
	"github.com/coordhost/coordhost/policies/wasm"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics holds the Prometheus collectors of one Host (not per generation:
// counters survive reloads).
type metrics struct {
	reg       *prometheus.Registry
	calls     *prometheus.CounterVec   // policy, driver, kind, outcome
	latency   *prometheus.HistogramVec // policy, driver, kind
	fallbacks *prometheus.CounterVec   // policy, driver, kind
	restarts  *prometheus.CounterVec   // policy, result
	cache     *prometheus.CounterVec   // policy, result
	reloads   *prometheus.CounterVec   // result
	gen       prometheus.Gauge
}

// newMetrics registers the Host's collectors in reg. A registry that
// already holds them (a Host created again after Close, or after a failed
// New) is refused with an error rather than a panic.
func newMetrics(reg *prometheus.Registry) (*metrics, error) {
	m := &metrics{
		reg: reg,
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordhost_policy_calls_total",
			Help: "Policy decisions asked for, by policy, driver, kind and outcome (ok, refused, failure, fallback).",
		}, []string{"policy", "driver", "kind", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "coordhost_policy_call_duration_seconds",
			Help:    "Time to get one policy decision, by policy, driver and kind.",
			Buckets: []float64{1e-7, 5e-7, 1e-6, 5e-6, 2e-5, 1e-4, 5e-4, 1e-3, 5e-3, 2e-2, 1e-1},
		}, []string{"policy", "driver", "kind"}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordhost_policy_fallbacks_total",
			Help: "Decisions taken by the fallback (retry, starvation) or failed closed (partition) because the policy failed.",
		}, []string{"policy", "driver", "kind"}),
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordhost_plugin_restarts_total",
			Help: "Plugin restart attempts, by result.",
		}, []string{"policy", "result"}),
		cache: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordhost_plugin_partition_cache_total",
			Help: "Partition-key cache lookups of plugin policies, by result (hit, miss).",
		}, []string{"policy", "result"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordhost_reloads_total",
			Help: "Configuration reloads, by result (ok, error).",
		}, []string{"result"}),
		gen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "coordhost_config_generation",
			Help: "Generation number of the configuration in use (1 after start, +1 per successful reload).",
		}),
	}
	for _, c := range m.collectors() {
		if err := reg.Register(c); err != nil {
			m.unregister()
			return nil, fmt.Errorf("host: metrics registry: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.calls, m.latency, m.fallbacks, m.restarts, m.cache, m.reloads, m.gen}
}

// unregister removes the collectors, so the registry can serve a new Host.
func (m *metrics) unregister() {
	for _, c := range m.collectors() {
		m.reg.Unregister(c)
	}
}

// timedRetry wraps a builtin retry policy with call metrics.
type timedRetry struct {
	p    policies.RetryPolicy
	name string
	m    *metrics
}

func (t timedRetry) DecideRetry(ctx context.Context, r policies.RetryRequest) policies.RetryDecision {
	start := time.Now()
	d := t.p.DecideRetry(ctx, r)
	t.m.observe(t.name, "builtin", policies.KindRetry, "ok", time.Since(start))
	return d
}

// wrapRetry counts the decisions of a builtin retry policy.
func (m *metrics) wrapRetry(name string, p policies.RetryPolicy) policies.RetryPolicy {
	return timedRetry{p: p, name: name, m: m}
}

type timedPartition struct {
	p    policies.PartitionPolicy
	name string
	m    *metrics
}

func (t timedPartition) PartitionKey(ctx context.Context, r policies.PartitionRequest) (string, error) {
	start := time.Now()
	k, err := t.p.PartitionKey(ctx, r)
	outcome := "ok"
	if err != nil {
		outcome = "refused"
	}
	t.m.observe(t.name, "builtin", policies.KindPartition, outcome, time.Since(start))
	return k, err
}

// wrapPartition counts the decisions of a builtin partition policy.
func (m *metrics) wrapPartition(name string, p policies.PartitionPolicy) policies.PartitionPolicy {
	return timedPartition{p: p, name: name, m: m}
}

func (m *metrics) observe(policy, driver string, kind policies.Kind, outcome string, d time.Duration) {
	m.calls.WithLabelValues(policy, driver, string(kind), outcome).Inc()
	m.latency.WithLabelValues(policy, driver, string(kind)).Observe(d.Seconds())
}

// wasmObserver turns wasm call reports into metrics.
func (m *metrics) wasmObserver() wasm.Observer { return wasmObs{m} }

type wasmObs struct{ m *metrics }

// Outcomes: "ok", "refused" (partition policy said no), "failure" (the
// module failed: trap, deadline, bad result) and "fallback" (the module was
// not asked: circuit open or closed). Failures and fallbacks both count in
// coordhost_policy_fallbacks_total, since the fallback (or fail-closed)
// decided instead.
func (o wasmObs) ObserveCall(ci wasm.CallInfo) {
	outcome := "ok"
	switch {
	case ci.Outcome.Failure():
		outcome = "failure"
	case ci.Outcome.Fallback():
		outcome = "fallback"
	case ci.Outcome == wasm.OutcomeRefused:
		outcome = "refused"
	}
	if ci.Outcome.Fallback() {
		o.m.fallbacks.WithLabelValues(ci.Module, "wasm", string(ci.Kind)).Inc()
	}
	o.m.observe(ci.Module, "wasm", ci.Kind, outcome, ci.Duration)
}

// pluginObserver turns plugin reports into metrics.
func (m *metrics) pluginObserver(name string) pluginObs { return pluginObs{m: m, name: name} }

type pluginObs struct {
	m    *metrics
	name string
}

// ObserveCall counts one call sent to the plugin with the outcomes the
// wasm and builtin drivers use: "ok", "refused" (a partition policy's own
// refusal, not a failure) or "failure".
func (o pluginObs) ObserveCall(kind policies.Kind, d time.Duration, err error) {
	outcome := "ok"
	switch {
	case errors.Is(err, plugin.ErrRefused):
		outcome = "refused"
	case err != nil:
		outcome = "failure"
	}
	o.m.observe(o.name, "plugin", kind, outcome, d)
}

// ObserveFallback counts a decision the plugin did not take. A failed call
// was already counted as a "failure" call, so only the fallback counter
// moves here.
func (o pluginObs) ObserveFallback(kind policies.Kind) {
	o.m.fallbacks.WithLabelValues(o.name, "plugin", string(kind)).Inc()
}

func (o pluginObs) ObserveCache(hit bool) {
	r := "miss"
	if hit {
		r = "hit"
	}
	o.m.cache.WithLabelValues(o.name, r).Inc()
}

func (o pluginObs) ObserveRestart(err error) {
	r := "ok"
	if err != nil {
		r = "error"
	}
	o.m.restarts.WithLabelValues(o.name, r).Inc()
}
