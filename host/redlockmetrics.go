package host

import (
	"context"
	"strconv"
	"time"

	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/lock"
	"github.com/coordhost/coordhost/primitives/redlock"
	"github.com/prometheus/client_golang/prometheus"
)

// redlockMetrics are the collectors of named redlocks, by configured name
// (never by key); docs/metrics.md lists them.
type redlockMetrics struct {
	acquires *prometheus.CounterVec   // redlock, outcome
	wait     *prometheus.HistogramVec // redlock, outcome
	hold     *prometheus.HistogramVec // redlock
	releases *prometheus.CounterVec   // redlock, result
	renewals *prometheus.CounterVec   // redlock, outcome
	lost     *prometheus.CounterVec   // redlock, reason
	restarts *prometheus.CounterVec   // redlock, node
}

func newRedlockMetrics() *redlockMetrics {
	return &redlockMetrics{
		acquires: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordhost_redlock_acquisitions_total",
			Help: "Acquisitions of named redlocks (TryAcquire and Acquire calls), by redlock and outcome (acquired, not_acquired, gave_up, cancelled, deadline_exceeded, closed, partition_failed, error; a lack of quorum is error).",
		}, []string{"redlock", "outcome"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "coordhost_redlock_wait_duration_seconds",
			Help:    "Time from an acquisition call of a named redlock to its outcome, by redlock and outcome.",
			Buckets: lockWaitBuckets,
		}, []string{"redlock", "outcome"}),
		hold: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "coordhost_redlock_hold_duration_seconds",
			Help:    "Time from the grant of a named redlock to the release that deleted it (result released), by redlock.",
			Buckets: lockHoldBuckets,
		}, []string{"redlock"}),
		releases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordhost_redlock_releases_total",
			Help: "Release (or Close) calls on granted named redlocks, by redlock and result (released, already_released, not_owned, error: too few nodes answered).",
		}, []string{"redlock", "result"}),
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordhost_redlock_renewals_total",
			Help: "Renew calls on granted named redlocks, by redlock and outcome (renewed, lost, error).",
		}, []string{"redlock", "outcome"}),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordhost_redlock_lost_total",
			Help: "Granted named redlocks whose handle found ownership gone before releasing it (at most once per grant), by redlock and reason.",
		}, []string{"redlock", "reason"}),
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordhost_redlock_node_restarts_total",
			Help: "Nodes of named redlocks found restarted (younger than max_ttl when first met, or a changed run_id) and kept out of quorums by the restart guard, by redlock and node (index in addresses).",
		}, []string{"redlock", "node"}),
	}
}

func (r *redlockMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{r.acquires, r.wait, r.hold, r.releases, r.renewals, r.lost, r.restarts}
}

// observeAcquire counts one acquisition call of the named redlock name.
func (r *redlockMetrics) observeAcquire(ctx context.Context, name string, waits bool, d time.Duration, err error) {
	if unconfiguredName(err) {
		return // a made-up name must not make a series (cardinality)
	}
	outcome := acquireOutcome(ctx, waits, err)
	r.acquires.WithLabelValues(name, outcome).Inc()
	r.wait.WithLabelValues(name, outcome).Observe(d.Seconds())
}

// observer reports the renewals, releases, losses and node restarts of
// one generation's Group of the named redlock name. Series of every label
// value are created up front.
func (r *redlockMetrics) observer(name string, nodes int) redlock.Observer {
	o := &redlockObs{hold: r.hold.WithLabelValues(name)}
	for _, res := range []primitives.ReleaseResult{primitives.Released, primitives.AlreadyReleased, primitives.NotOwned} {
		o.releases[res] = r.releases.WithLabelValues(name, releaseLabel(res))
	}
	o.releases[0] = r.releases.WithLabelValues(name, "error")
	for _, x := range []redlock.RenewOutcome{lock.RenewRenewed, lock.RenewLost, lock.RenewError} {
		o.renewals[x] = r.renewals.WithLabelValues(name, x.String())
	}
	for x := range o.lost {
		o.lost[x] = r.lost.WithLabelValues(name, redlock.LostReason(x).String())
	}
	for _, a := range []redlock.AcquireOutcome{lock.AcquireAcquired, lock.AcquireNotAcquired, lock.AcquireGaveUp,
		lock.AcquireCancelled, lock.AcquireDeadlineExceeded, lock.AcquireClosed, lock.AcquireError} {
		r.acquires.WithLabelValues(name, a.String())
	}
	r.acquires.WithLabelValues(name, outcomePartitionFailed)
	for i := range nodes {
		o.restarts = append(o.restarts, r.restarts.WithLabelValues(name, strconv.Itoa(i)))
	}
	return o
}

type redlockObs struct {
	hold     prometheus.Observer
	releases [primitives.NotOwned + 1]prometheus.Counter // by result; [0]: error
	renewals [lock.RenewError + 1]prometheus.Counter
	lost     [lock.LostReleaseAbsent + 1]prometheus.Counter
	restarts []prometheus.Counter // by node
}

// ObserveAcquire does nothing: the host counts acquisitions per
// host.Redlock call (observeAcquire).
func (o *redlockObs) ObserveAcquire(string, redlock.AcquireOutcome, time.Duration, error) {}

func (o *redlockObs) ObserveRenew(_ *redlock.Lock, x redlock.RenewOutcome, _ error) {
	if x <= lock.RenewError {
		o.renewals[x].Inc()
	}
}

func (o *redlockObs) ObserveRelease(_ *redlock.Lock, res primitives.ReleaseResult, held time.Duration, err error) {
	if err != nil || res < 0 || res > primitives.NotOwned {
		res = 0
	}
	o.releases[res].Inc()
	if res == primitives.Released {
		o.hold.Observe(held.Seconds())
	}
}

func (o *redlockObs) ObserveLost(_ *redlock.Lock, reason redlock.LostReason) {
	if reason <= lock.LostReleaseAbsent {
		o.lost[reason].Inc()
	}
}

func (o *redlockObs) ObserveRestart(node int, _ time.Duration) {
	if node >= 0 && node < len(o.restarts) {
		o.restarts[node].Inc()
	}
}
