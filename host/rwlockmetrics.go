package host

import (
	"context"
	"time"

	"github.com/coordhost/coordhost/policies"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/lock"
	"github.com/coordhost/coordhost/primitives/rwlock"
	"github.com/prometheus/client_golang/prometheus"
)

// rwlockMetrics are the metrics of named rwlocks, by configured name and
// mode (docs/metrics.md), the same set as named locks have.
type rwlockMetrics struct {
	acquires *prometheus.CounterVec   // rwlock, mode, outcome
	wait     *prometheus.HistogramVec // rwlock, mode, outcome
	hold     *prometheus.HistogramVec // rwlock, mode
	releases *prometheus.CounterVec   // rwlock, mode, result
	renewals *prometheus.CounterVec   // rwlock, mode, outcome
	lost     *prometheus.CounterVec   // rwlock, mode, reason
}

func newRWLockMetrics() *rwlockMetrics {
	return &rwlockMetrics{
		acquires: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordhost_rwlock_acquisitions_total",
			Help: "Acquisitions of named rwlocks (TryAcquireRead, AcquireRead, TryAcquireWrite, AcquireWrite calls), by rwlock, mode (read, write) and outcome (acquired, not_acquired, gave_up, cancelled, deadline_exceeded, closed, partition_failed, error).",
		}, []string{"rwlock", "mode", "outcome"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "coordhost_rwlock_wait_duration_seconds",
			Help:    "Time from an acquisition call of a named rwlock to its outcome, by rwlock, mode and outcome.",
			Buckets: lockWaitBuckets,
		}, []string{"rwlock", "mode", "outcome"}),
		hold: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "coordhost_rwlock_hold_duration_seconds",
			Help:    "Time from the grant of a named rwlock lease to the release that deleted it (result released), by rwlock and mode.",
			Buckets: lockHoldBuckets,
		}, []string{"rwlock", "mode"}),
		releases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordhost_rwlock_releases_total",
			Help: "Release (or Close) calls on granted named rwlock leases, by rwlock, mode and result (released, already_released, not_owned, error).",
		}, []string{"rwlock", "mode", "result"}),
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordhost_rwlock_renewals_total",
			Help: "Renew calls on granted named rwlock leases, by rwlock, mode and outcome (renewed, lost, error).",
		}, []string{"rwlock", "mode", "outcome"}),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordhost_rwlock_lost_total",
			Help: "Granted named rwlock leases whose handle found them gone before releasing them (at most once per grant), by rwlock, mode and reason (renew_refused, renew_uncertain, verify, expired, release_not_owned, release_absent).",
		}, []string{"rwlock", "mode", "reason"}),
	}
}

func (m *rwlockMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.acquires, m.wait, m.hold, m.releases, m.renewals, m.lost}
}

// observeAcquire counts one acquisition call of the named rwlock name.
func (m *rwlockMetrics) observeAcquire(ctx context.Context, name string, mode rwlock.Mode, waits bool, d time.Duration, err error) {
	if unconfiguredName(err) {
		return // a made-up name must not make a series (cardinality)
	}
	outcome := acquireOutcome(ctx, waits, err)
	m.acquires.WithLabelValues(name, mode.String(), outcome).Inc()
	m.wait.WithLabelValues(name, mode.String(), outcome).Observe(d.Seconds())
}

var rwModes = [...]rwlock.Mode{rwlock.Read, rwlock.Write}

// observer reports the renewals, releases and losses of the leases that
// one generation's Locker of the named rwlock name grants. Every series of
// the rwlock is created up front, so it is exported (as 0) from the start.
func (m *rwlockMetrics) observer(name string) rwlock.Observer {
	o := &rwlockObs{}
	for i, mode := range rwModes {
		mo := &o.modes[i]
		mo.hold = m.hold.WithLabelValues(name, mode.String())
		for _, r := range []primitives.ReleaseResult{primitives.Released, primitives.AlreadyReleased, primitives.NotOwned} {
			mo.releases[r] = m.releases.WithLabelValues(name, mode.String(), releaseLabel(r))
		}
		mo.releases[0] = m.releases.WithLabelValues(name, mode.String(), "error")
		for r := range mo.renewals {
			mo.renewals[r] = m.renewals.WithLabelValues(name, mode.String(), rwlock.RenewOutcome(r).String())
		}
		for r := range mo.lost {
			mo.lost[r] = m.lost.WithLabelValues(name, mode.String(), rwlock.LostReason(r).String())
		}
		for _, a := range []rwlock.AcquireOutcome{lock.AcquireAcquired, lock.AcquireNotAcquired, lock.AcquireGaveUp,
			lock.AcquireCancelled, lock.AcquireDeadlineExceeded, lock.AcquireClosed, lock.AcquireError} {
			m.acquires.WithLabelValues(name, mode.String(), a.String())
		}
		m.acquires.WithLabelValues(name, mode.String(), outcomePartitionFailed)
	}
	return o
}

type rwlockModeObs struct {
	hold     prometheus.Observer
	releases [primitives.NotOwned + 1]prometheus.Counter // by result; [0]: error
	renewals [lock.RenewError + 1]prometheus.Counter
	lost     [lock.LostReleaseAbsent + 1]prometheus.Counter
}

type rwlockObs struct {
	modes [len(rwModes)]rwlockModeObs
}

func (o *rwlockObs) of(l *rwlock.Lease) *rwlockModeObs {
	if l.Mode() == rwlock.Write {
		return &o.modes[1]
	}
	return &o.modes[0]
}

// ObserveAcquire does nothing: the host counts acquisitions per
// host.RWLock call (observeAcquire), which also sees partition failures.
func (o *rwlockObs) ObserveAcquire(string, rwlock.Mode, rwlock.AcquireOutcome, time.Duration, error) {
}

func (o *rwlockObs) ObserveRenew(l *rwlock.Lease, r rwlock.RenewOutcome, _ error) {
	if mo := o.of(l); int(r) < len(mo.renewals) {
		mo.renewals[r].Inc()
	}
}

func (o *rwlockObs) ObserveRelease(l *rwlock.Lease, r primitives.ReleaseResult, held time.Duration, err error) {
	if err != nil || r < 0 || r > primitives.NotOwned {
		r = 0
	}
	mo := o.of(l)
	mo.releases[r].Inc()
	if r == primitives.Released {
		mo.hold.Observe(held.Seconds())
	}
}

func (o *rwlockObs) ObserveLost(l *rwlock.Lease, reason rwlock.LostReason) {
	if mo := o.of(l); int(reason) < len(mo.lost) {
		mo.lost[reason].Inc()
	}
}

// timedStarvation wraps a builtin starvation policy with call metrics, as
// timedRetry does for retry policies: each consult of a waiting writer is
// counted.
type timedStarvation struct {
	p    policies.StarvationPolicy
	name string
	m    *metrics
}

func (t timedStarvation) WriterBound(ctx context.Context, r policies.StarvationRequest) time.Duration {
	start := time.Now()
	d := t.p.WriterBound(ctx, r)
	t.m.observe(t.name, "builtin", policies.KindStarvation, "ok", time.Since(start))
	return d
}

// wrapStarvation counts the decisions of a builtin starvation policy.
func (m *metrics) wrapStarvation(name string, p policies.StarvationPolicy) policies.StarvationPolicy {
	return timedStarvation{p: p, name: name, m: m}
}
