package host

import (
	"context"
	"errors"
	"time"

	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/lock"
	"github.com/coordhost/coordhost/primitives/semaphore"
	"github.com/prometheus/client_golang/prometheus"
)

// outcomeCapacityMismatch is the acquisition outcome of a semaphore whose
// live permits were taken with another capacity.
const outcomeCapacityMismatch = "capacity_mismatch"

// The stage and reason label values of coordhost_semaphore_abandoned_total
// (semaphore.Abandon's Stage and Reason).
var (
	abandonStages  = []string{"release", "acquire"}
	abandonReasons = []string{"timeout", "noperm", "closed", "error"}
)

// semaphoreMetrics are the metrics of named semaphores, by configured name,
// never by key (docs/metrics.md): the set named locks have, plus the
// background cleanups that gave up.
type semaphoreMetrics struct {
	acquires  *prometheus.CounterVec   // semaphore, outcome
	wait      *prometheus.HistogramVec // semaphore, outcome
	hold      *prometheus.HistogramVec // semaphore
	releases  *prometheus.CounterVec   // semaphore, result
	renewals  *prometheus.CounterVec   // semaphore, outcome
	lost      *prometheus.CounterVec   // semaphore, reason
	abandoned *prometheus.CounterVec   // semaphore, stage, reason
}

func newSemaphoreMetrics() *semaphoreMetrics {
	return &semaphoreMetrics{
		acquires: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordhost_semaphore_acquisitions_total",
			Help: "Acquisitions of named semaphore permits (TryAcquire and Acquire calls), by semaphore and outcome (acquired, not_acquired, gave_up, cancelled, deadline_exceeded, closed, partition_failed, capacity_mismatch, error).",
		}, []string{"semaphore", "outcome"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "coordhost_semaphore_wait_duration_seconds",
			Help:    "Time from an acquisition call of a named semaphore to its outcome, by semaphore and outcome.",
			Buckets: lockWaitBuckets,
		}, []string{"semaphore", "outcome"}),
		hold: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "coordhost_semaphore_hold_duration_seconds",
			Help:    "Time from the grant of a named semaphore permit to the release that removed it (result released), by semaphore.",
			Buckets: lockHoldBuckets,
		}, []string{"semaphore"}),
		releases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordhost_semaphore_releases_total",
			Help: "Releases of granted named semaphore permits (Release, Close and Close's background retries), by semaphore and result (released, already_released, not_owned, error).",
		}, []string{"semaphore", "result"}),
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordhost_semaphore_renewals_total",
			Help: "Renew calls on granted named semaphore permits, by semaphore and outcome (renewed, lost, error).",
		}, []string{"semaphore", "outcome"}),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordhost_semaphore_lost_total",
			Help: "Granted named semaphore permits whose handle found them gone before releasing them (at most once per grant), by semaphore and reason (renew_refused, renew_uncertain, verify, expired, release_not_owned, release_absent).",
		}, []string{"semaphore", "reason"}),
		abandoned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordhost_semaphore_abandoned_total",
			Help: "Background cleanups of named semaphore permits that gave up, leaving a permit held by nobody until its ttl runs out (forever for ttl \"none\"), by semaphore, stage (release, acquire) and reason (timeout, noperm, closed, error).",
		}, []string{"semaphore", "stage", "reason"}),
	}
}

func (m *semaphoreMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.acquires, m.wait, m.hold, m.releases, m.renewals, m.lost, m.abandoned}
}

// observeAcquire counts one acquisition call of the named semaphore name.
func (m *semaphoreMetrics) observeAcquire(ctx context.Context, name string, waits bool, d time.Duration, err error) {
	if unconfiguredName(err) {
		return // a made-up name must not make a series (cardinality)
	}
	outcome := semaphoreOutcome(ctx, waits, err)
	m.acquires.WithLabelValues(name, outcome).Inc()
	m.wait.WithLabelValues(name, outcome).Observe(d.Seconds())
}

// semaphoreOutcome is acquireOutcome with capacity_mismatch.
func semaphoreOutcome(ctx context.Context, waits bool, err error) string {
	if err != nil && errors.Is(err, semaphore.ErrCapacityMismatch) {
		return outcomeCapacityMismatch
	}
	return acquireOutcome(ctx, waits, err)
}

// onAbandon returns the semaphore.Options.OnAbandon hook of the named
// semaphore name; every series it feeds exists (as 0) from the start.
func (m *semaphoreMetrics) onAbandon(name string) func(semaphore.Abandon) {
	for _, s := range abandonStages {
		for _, r := range abandonReasons {
			m.abandoned.WithLabelValues(name, s, r)
		}
	}
	return func(a semaphore.Abandon) { m.abandoned.WithLabelValues(name, a.Stage, a.Reason).Inc() }
}

// observer reports the renewals, releases and losses of the permits that
// one generation's Semaphores of the named semaphore name grants. Every
// series of the semaphore is created up front, so it is exported (as 0)
// from the start.
func (m *semaphoreMetrics) observer(name string) semaphore.Observer {
	o := &semaphoreObs{hold: m.hold.WithLabelValues(name)}
	for _, r := range []primitives.ReleaseResult{primitives.Released, primitives.AlreadyReleased, primitives.NotOwned} {
		o.releases[r] = m.releases.WithLabelValues(name, releaseLabel(r))
	}
	o.releases[0] = m.releases.WithLabelValues(name, "error")
	for r := range o.renewals {
		o.renewals[r] = m.renewals.WithLabelValues(name, semaphore.RenewOutcome(r).String())
	}
	for r := range o.lost {
		o.lost[r] = m.lost.WithLabelValues(name, semaphore.LostReason(r).String())
	}
	for _, a := range []semaphore.AcquireOutcome{lock.AcquireAcquired, lock.AcquireNotAcquired, lock.AcquireGaveUp,
		lock.AcquireCancelled, lock.AcquireDeadlineExceeded, lock.AcquireClosed, lock.AcquireError} {
		m.acquires.WithLabelValues(name, a.String())
	}
	m.acquires.WithLabelValues(name, outcomePartitionFailed)
	m.acquires.WithLabelValues(name, outcomeCapacityMismatch)
	return o
}

type semaphoreObs struct {
	hold     prometheus.Observer
	releases [primitives.NotOwned + 1]prometheus.Counter // by result; [0]: error
	renewals [lock.RenewError + 1]prometheus.Counter
	lost     [lock.LostReleaseAbsent + 1]prometheus.Counter
}

// ObserveAcquire does nothing: the host counts acquisitions per
// host.Semaphore call (observeAcquire), which also sees partition failures.
func (o *semaphoreObs) ObserveAcquire(string, semaphore.AcquireOutcome, time.Duration, error) {}

func (o *semaphoreObs) ObserveRenew(_ *semaphore.Permit, r semaphore.RenewOutcome, _ error) {
	if int(r) < len(o.renewals) {
		o.renewals[r].Inc()
	}
}

func (o *semaphoreObs) ObserveRelease(_ *semaphore.Permit, r primitives.ReleaseResult, held time.Duration, err error) {
	if err != nil || r < 0 || r > primitives.NotOwned {
		r = 0
	}
	o.releases[r].Inc()
	if r == primitives.Released {
		o.hold.Observe(held.Seconds())
	}
}

func (o *semaphoreObs) ObserveLost(_ *semaphore.Permit, reason semaphore.LostReason) {
	if int(reason) < len(o.lost) {
		o.lost[reason].Inc()
	}
}
