package host

import (
	"context"
	"errors"
	"time"

	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/lock"
	"github.com/prometheus/client_golang/prometheus"
)

// outcomeUnsupported is the acquisition outcome of a lease on a server
// without hash-field expiry.
const outcomeUnsupported = "unsupported"

// leaseMetrics are the metrics of named leases (lease blocks), by
// configured name, never by key or field (docs/metrics.md): acquisitions
// only, counted by the host per call. Package lease has no observer, so
// renewals, releases and losses of granted leases are not counted.
type leaseMetrics struct {
	acquires *prometheus.CounterVec   // lease, outcome
	wait     *prometheus.HistogramVec // lease, outcome
}

func newLeaseMetrics() *leaseMetrics {
	return &leaseMetrics{
		acquires: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordhost_lease_acquisitions_total",
			Help: "Acquisitions of named hash-field leases (TryAcquire and Acquire calls), by lease and outcome (acquired, not_acquired, gave_up, cancelled, deadline_exceeded, closed, partition_failed, unsupported, error).",
		}, []string{"lease", "outcome"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "coordhost_lease_wait_duration_seconds",
			Help:    "Time from an acquisition call of a named hash-field lease to its outcome, by lease and outcome.",
			Buckets: lockWaitBuckets,
		}, []string{"lease", "outcome"}),
	}
}

func (m *leaseMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.acquires, m.wait}
}

// declare creates every acquisition series of the lease block name, so
// they are exported (as 0) from the start.
func (m *leaseMetrics) declare(name string) {
	for _, a := range []lock.AcquireOutcome{lock.AcquireAcquired, lock.AcquireNotAcquired, lock.AcquireGaveUp,
		lock.AcquireCancelled, lock.AcquireDeadlineExceeded, lock.AcquireClosed, lock.AcquireError} {
		m.acquires.WithLabelValues(name, a.String())
	}
	m.acquires.WithLabelValues(name, outcomePartitionFailed)
	m.acquires.WithLabelValues(name, outcomeUnsupported)
}

// observeAcquire counts one acquisition call of the lease block name.
func (m *leaseMetrics) observeAcquire(ctx context.Context, name string, waits bool, d time.Duration, err error) {
	if unconfiguredName(err) {
		return // a made-up name must not make a series (cardinality)
	}
	outcome := acquireOutcome(ctx, waits, err)
	if outcome == lock.AcquireError.String() && errors.Is(err, primitives.ErrUnsupported) {
		outcome = outcomeUnsupported
	}
	m.acquires.WithLabelValues(name, outcome).Inc()
	m.wait.WithLabelValues(name, outcome).Observe(d.Seconds())
}
