package host

import (
	"sync/atomic"

	"github.com/coordhost/coordhost/primitives/ratelimit"
	"github.com/prometheus/client_golang/prometheus"
)

// Decision outcomes of named rate limits.
var rateLimitOutcomes = []string{"granted", "rejected", "error"}

// fastPathStates are the values of coordhost_ratelimit_fast_path's state
// label, indexed by ratelimit.FastPath.
var fastPathStates = []ratelimit.FastPath{ratelimit.FastPathUnknown, ratelimit.FastPathIncrex, ratelimit.FastPathLua}

// rateLimitMetrics are the metrics of named rate limits, by configured
// name, never by key (docs/metrics.md): decisions counted per call, and
// gauges read from the generation in use when scraped.
type rateLimitMetrics struct {
	decisions *prometheus.CounterVec // rate_limit, outcome
	gauges    *rateLimitGauges
}

func newRateLimitMetrics() *rateLimitMetrics {
	return &rateLimitMetrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordhost_ratelimit_decisions_total",
			Help: "Decisions of named rate limits (TryAcquire and Acquire calls), by rate_limit and outcome (granted, rejected, error).",
		}, []string{"rate_limit", "outcome"}),
		gauges: &rateLimitGauges{
			queued: prometheus.NewDesc("coordhost_ratelimit_queued_permits",
				"Permits of the Acquire calls queued now in a named rate limit's limiters (all partitions), by rate_limit.",
				[]string{"rate_limit"}, nil),
			partitions: prometheus.NewDesc("coordhost_ratelimit_partitions",
				"Limiters (one per partition key) a named rate limit holds now, by rate_limit; idle ones are dropped after its idle_timeout.",
				[]string{"rate_limit"}, nil),
			fastPath: prometheus.NewDesc("coordhost_ratelimit_fast_path",
				"How fixed windows reach Redis: 1 for the current state (unknown: no fixed window has consumed yet; increx: the server's INCREX; lua: the script, INCREX refused), 0 for the others.",
				[]string{"state"}, nil),
		},
	}
}

func (m *rateLimitMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.decisions, m.gauges}
}

// declare creates the decision series of the named rate limit name, so
// they are exported (as 0) from the start.
func (m *rateLimitMetrics) declare(name string) {
	for _, o := range rateLimitOutcomes {
		m.decisions.WithLabelValues(name, o)
	}
}

// observe counts one decision of the named rate limit name.
func (m *rateLimitMetrics) observe(name string, res ratelimit.Result, err error) {
	outcome := "rejected"
	switch {
	case err != nil:
		outcome = "error"
	case res.Acquired:
		outcome = "granted"
	}
	m.decisions.WithLabelValues(name, outcome).Inc()
}

// rateLimitGauges is a collector that reads the rate limits of the Host's
// generation in use at every scrape: a gauge kept up to date by every call
// would cost each decision a lock.
type rateLimitGauges struct {
	host                         atomic.Pointer[Host] // set once the Host has its first generation
	queued, partitions, fastPath *prometheus.Desc
}

func (c *rateLimitGauges) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.queued
	ch <- c.partitions
	ch <- c.fastPath
}

func (c *rateLimitGauges) Collect(ch chan<- prometheus.Metric) {
	h := c.host.Load()
	if h == nil {
		return
	}
	g := h.gen.Load()
	if g == nil || g.limiters == nil {
		return
	}
	state := g.limiters.FastPath()
	for _, s := range fastPathStates {
		v := 0.0
		if s == state {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.fastPath, prometheus.GaugeValue, v, s.String())
	}
	for name, n := range g.rateLimits {
		ch <- prometheus.MustNewConstMetric(c.queued, prometheus.GaugeValue, float64(n.prim.Statistics().Queued), name)
		ch <- prometheus.MustNewConstMetric(c.partitions, prometheus.GaugeValue, float64(n.prim.Len()), name)
	}
}
