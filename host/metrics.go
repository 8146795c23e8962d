package host

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/coordhost/coordhost/policies"
	"github.com/coordhost/coordhost/policies/plugin"
	"github.com/coordhost/coordhost/policies/wasm"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/lock"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics holds the Prometheus collectors of one Host (not per generation:
// counters survive reloads). docs/metrics.md lists every metric.
type metrics struct {
	reg       *prometheus.Registry
	calls     *prometheus.CounterVec   // policy, driver, kind, outcome
	latency   *prometheus.HistogramVec // policy, driver, kind
	fallbacks *prometheus.CounterVec   // policy, driver, kind
	restarts  *prometheus.CounterVec   // policy, result
	cache     *prometheus.CounterVec   // policy, result
	reloads   *prometheus.CounterVec   // result
	gen       prometheus.Gauge

	// Named locks (lock.go, lockObs), by configured name, never by key.
	acquires *prometheus.CounterVec   // lock, outcome
	wait     *prometheus.HistogramVec // lock, outcome
	hold     *prometheus.HistogramVec // lock
	releases *prometheus.CounterVec   // lock, result
	renewals *prometheus.CounterVec   // lock, outcome
	lost     *prometheus.CounterVec   // lock, reason

	latch     *latchMetrics     // named latches (latchmetrics.go)
	rwlock    *rwlockMetrics    // named rwlocks (rwlockmetrics.go)
	semaphore *semaphoreMetrics // named semaphores (semaphoremetrics.go)
	lease     *leaseMetrics     // named hash-field leases (leasemetrics.go)
	redlock   *redlockMetrics   // named redlocks (redlockmetrics.go)
	ratelimit *rateLimitMetrics // named rate limits (ratelimitmetrics.go)
	rls       *rlsMetrics       // the Envoy rate-limit service (rls.go)
	auth      *authMetrics      // refused API requests (auth.go)

	// Grants renewed and released through the API by grant id or by their
	// session (grants.go): handles this daemon rebuilt, which the
	// primitives' observers do not see.
	grantOps *prometheus.CounterVec // kind, op, via, result

	// runtime holds the Go and process collectors this Host registered
	// (not those the registry already had), to unregister them.
	runtime []prometheus.Collector
}

// grantOp counts one renewal (ok: renewed, else lost; err: error) or
// release (res) of a rebuilt grant of kind, via "grant_id" or "session".
func (m *metrics) grantOp(kind, op, via string, ok bool, res primitives.ReleaseResult, err error) {
	result := "error"
	switch {
	case err != nil:
	case op == "renew" && ok:
		result = "renewed"
	case op == "renew":
		result = "lost"
	default:
		result = strings.TrimPrefix(strings.ToLower(releaseResult(res).String()), "release_result_")
	}
	m.grantOps.WithLabelValues(kind, op, via, result).Inc()
}

// Buckets of the lock histograms, in seconds.
var (
	lockWaitBuckets = []float64{1e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
	lockHoldBuckets = []float64{1e-3, 5e-3, 1e-2, 5e-2, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600}
)

// newMetrics registers the Host's collectors in reg. A registry that
// already holds them (another Host's, still open) is refused with an error
// rather than a panic; a Host's Close unregisters them, so the registry
// can serve a new Host. The Go and process collectors are shared: if reg
// already has them (its owner registered them) they are used as they are
// and left in place at Close.
func newMetrics(reg *prometheus.Registry) (*metrics, error) {
	m := &metrics{
		reg:     reg,
		redlock: newRedlockMetrics(),
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
		acquires: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordhost_lock_acquisitions_total",
			Help: "Acquisitions of named locks (TryAcquire and Acquire calls), by lock and outcome (acquired, not_acquired, gave_up, cancelled, deadline_exceeded, closed, partition_failed, error).",
		}, []string{"lock", "outcome"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "coordhost_lock_wait_duration_seconds",
			Help:    "Time from an acquisition call of a named lock to its outcome, by lock and outcome.",
			Buckets: lockWaitBuckets,
		}, []string{"lock", "outcome"}),
		hold: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "coordhost_lock_hold_duration_seconds",
			Help:    "Time from the grant of a named lock to the release that deleted it (result released), by lock.",
			Buckets: lockHoldBuckets,
		}, []string{"lock"}),
		releases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordhost_lock_releases_total",
			Help: "Release (or Close) calls on granted named locks, by lock and result (released, already_released, not_owned, error).",
		}, []string{"lock", "result"}),
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordhost_lock_renewals_total",
			Help: "Renew calls on granted named locks, by lock and outcome (renewed, lost, error).",
		}, []string{"lock", "outcome"}),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordhost_lock_lost_total",
			Help: "Granted named locks whose handle found ownership gone before releasing it (at most once per grant), by lock and reason (renew_refused, renew_uncertain, verify, expired, release_not_owned, release_absent).",
		}, []string{"lock", "reason"}),
		latch:     newLatchMetrics(),
		rwlock:    newRWLockMetrics(),
		semaphore: newSemaphoreMetrics(),
		lease:     newLeaseMetrics(),
		ratelimit: newRateLimitMetrics(),
		rls:       newRLSMetrics(),
		auth:      newAuthMetrics(),
		grantOps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordhost_api_grant_operations_total",
			Help: "Grants the network API renewed or released by grant id (via grant_id: Renew, Release) or by their session (via session: RenewSession, KeepAlive, CloseSession), by kind (lock, redlock, lease, rwlock, semaphore), op (renew, release) and result (renewed, lost, released, already_released, not_owned, error).",
		}, []string{"kind", "op", "via", "result"}),
	}
	for i, c := range m.collectors() {
		if err := reg.Register(c); err != nil {
			// Unregister only what this call registered: Unregister goes
			// by descriptors, so it would remove the other Host's too.
			for _, r := range m.collectors()[:i] {
				reg.Unregister(r)
			}
			return nil, fmt.Errorf("host: metrics registry: %w", err)
		}
	}
	for _, c := range []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		// An error means the registry exports these series already: its
		// owner registered the collector (AlreadyRegisteredError), or one
		// with other options whose series overlap. Keep theirs, and leave
		// it in place at Close.
		if reg.Register(c) == nil {
			m.runtime = append(m.runtime, c)
		}
	}
	return m, nil
}

func (m *metrics) collectors() []prometheus.Collector {
	cs := append([]prometheus.Collector{m.calls, m.latency, m.fallbacks, m.restarts, m.cache, m.reloads, m.gen,
		m.acquires, m.wait, m.hold, m.releases, m.renewals, m.lost}, append(append(append(append(m.latch.collectors(), m.rwlock.collectors()...), m.semaphore.collectors()...), m.lease.collectors()...), append(append(m.redlock.collectors(), m.ratelimit.collectors()...), m.rls.collectors()...)...)...)
	return append(append(cs, m.auth.collectors()...), m.grantOps)
}

// unregister removes the collectors this Host registered, so the registry
// can serve a new Host.
func (m *metrics) unregister() {
	for _, c := range m.collectors() {
		m.reg.Unregister(c)
	}
	for _, c := range m.runtime {
		m.reg.Unregister(c)
	}
	m.runtime = nil
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
// module failed: trap, deadline, bad result), "fallback" (the module was
// not asked: circuit open or closed) and "canceled" (the caller's context
// ended before or during the call). Failures and fallbacks both count in
// coordhost_policy_fallbacks_total, since the fallback (or fail-closed)
// decided instead; a canceled call's answer is read by nobody.
func (o wasmObs) ObserveCall(ci wasm.CallInfo) {
	if ci.Outcome == wasm.OutcomeCanceled {
		o.m.observe(ci.Module, "wasm", ci.Kind, "canceled", ci.Duration)
		return
	}
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
	case errors.Is(err, plugin.ErrCanceled):
		outcome = "canceled"
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

// Acquisition outcomes of named locks: lock.AcquireOutcome's names, plus
// partition_failed.
const outcomePartitionFailed = "partition_failed"

// observeAcquire counts one acquisition call of the named lock name that
// took d: waits says Acquire (true) or TryAcquire; ctx is the caller's.
func (m *metrics) observeAcquire(ctx context.Context, name string, waits bool, d time.Duration, err error) {
	if unconfiguredName(err) {
		return // a made-up name must not make a series (cardinality)
	}
	outcome := acquireOutcome(ctx, waits, err)
	m.acquires.WithLabelValues(name, outcome).Inc()
	m.wait.WithLabelValues(name, outcome).Observe(d.Seconds())
}

func acquireOutcome(ctx context.Context, waits bool, err error) string {
	var cerr error
	if ctx != nil { // a nil ctx is refused as invalid input (error)
		cerr = ctx.Err()
	}
	switch {
	case err == nil:
		return lock.AcquireAcquired.String()
	case errors.Is(err, ErrClosed) || errors.Is(err, primitives.ErrClosed):
		return lock.AcquireClosed.String()
	case cerr != nil && errors.Is(err, cerr):
		if errors.Is(cerr, context.DeadlineExceeded) {
			return lock.AcquireDeadlineExceeded.String()
		}
		return lock.AcquireCancelled.String()
	case errors.Is(err, policies.ErrPartition):
		return outcomePartitionFailed
	case errors.Is(err, primitives.ErrNotAcquired):
		if waits {
			return lock.AcquireGaveUp.String()
		}
		return lock.AcquireNotAcquired.String()
	}
	return lock.AcquireError.String()
}

// lockObserver reports the renewals, releases and losses of the locks that
// one generation's Locker of the named lock name grants. Counters are
// created up front, so every outcome of every configured lock is exported
// (as 0) from the start.
func (m *metrics) lockObserver(name string) lock.Observer {
	o := &lockObs{hold: m.hold.WithLabelValues(name)}
	for _, r := range []primitives.ReleaseResult{primitives.Released, primitives.AlreadyReleased, primitives.NotOwned} {
		o.releases[r] = m.releases.WithLabelValues(name, releaseLabel(r))
	}
	o.releases[0] = m.releases.WithLabelValues(name, "error")
	for _, r := range []lock.RenewOutcome{lock.RenewRenewed, lock.RenewLost, lock.RenewError} {
		o.renewals[r] = m.renewals.WithLabelValues(name, r.String())
	}
	for r := range o.lost {
		o.lost[r] = m.lost.WithLabelValues(name, lock.LostReason(r).String())
	}
	for _, a := range []lock.AcquireOutcome{lock.AcquireAcquired, lock.AcquireNotAcquired, lock.AcquireGaveUp,
		lock.AcquireCancelled, lock.AcquireDeadlineExceeded, lock.AcquireClosed, lock.AcquireError} {
		m.acquires.WithLabelValues(name, a.String())
	}
	m.acquires.WithLabelValues(name, outcomePartitionFailed)
	return o
}

// releaseLabel is a release result as a label value.
func releaseLabel(r primitives.ReleaseResult) string {
	switch r {
	case primitives.Released:
		return "released"
	case primitives.AlreadyReleased:
		return "already_released"
	case primitives.NotOwned:
		return "not_owned"
	}
	return "error"
}

type lockObs struct {
	hold     prometheus.Observer
	releases [primitives.NotOwned + 1]prometheus.Counter // by result; [0]: error
	renewals [lock.RenewError + 1]prometheus.Counter
	lost     [lock.LostReleaseAbsent + 1]prometheus.Counter
}

// ObserveAcquire does nothing: the host counts acquisitions per host.Lock
// call (observeAcquire), which also sees partition failures and counts a
// waiter that a reload moves to the new generation's Locker once.
func (o *lockObs) ObserveAcquire(string, lock.AcquireOutcome, time.Duration, error) {}

func (o *lockObs) ObserveRenew(_ *lock.Lock, r lock.RenewOutcome, _ error) {
	if r <= lock.RenewError {
		o.renewals[r].Inc()
	}
}

func (o *lockObs) ObserveRelease(_ *lock.Lock, r primitives.ReleaseResult, held time.Duration, err error) {
	if err != nil || r < 0 || r > primitives.NotOwned {
		r = 0
	}
	o.releases[r].Inc()
	if r == primitives.Released {
		o.hold.Observe(held.Seconds())
	}
}

func (o *lockObs) ObserveLost(_ *lock.Lock, reason lock.LostReason) {
	if reason <= lock.LostReleaseAbsent {
		o.lost[reason].Inc()
	}
}
