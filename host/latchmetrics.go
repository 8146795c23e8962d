package host

import (
	"context"
	"errors"
	"time"

	"github.com/coordhost/coordhost/policies"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/latch"
	"github.com/prometheus/client_golang/prometheus"
)

// latchOp is a host.Latch call, as the op label names it.
type latchOp string

const (
	opCreate    latchOp = "create"
	opReset     latchOp = "reset"
	opJoin      latchOp = "join"
	opCountDown latchOp = "count_down"
	opCount     latchOp = "count"
	opDelete    latchOp = "delete"
)

// The outcome label values of coordhost_latch_operations_total, per op
// (see docs/metrics.md); the error outcomes apply to every op.
var latchOutcomes = map[latchOp][]string{
	opCreate:    {"created", "exists"},
	opReset:     {"reset"},
	opJoin:      {"joined", "not_found"},
	opCountDown: {"counted", "completed", "not_current", "already_complete"},
	opCount:     {"counted", "not_current"},
	opDelete:    {"deleted", "not_current"},
}

var latchErrorOutcomes = []string{"cancelled", "deadline_exceeded", "closed", "partition_failed", "uncertain", "error"}

// latchMetrics are the collectors of the named latches (latch.go), by
// configured name, never by key.
type latchMetrics struct {
	ops  *prometheus.CounterVec   // latch, op, outcome
	wait *prometheus.HistogramVec // latch, outcome
}

func newLatchMetrics() *latchMetrics {
	return &latchMetrics{
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordhost_latch_operations_total",
			Help: "Calls on named countdown latches other than wait (create, reset, join, count_down, count, delete), by latch, op and outcome.",
		}, []string{"latch", "op", "outcome"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "coordhost_latch_wait_duration_seconds",
			Help:    "Time from a Wait call on a named countdown latch to its outcome (completed, not_current, cancelled, deadline_exceeded, closed, partition_failed, error), by latch and outcome.",
			Buckets: latchWaitBuckets,
		}, []string{"latch", "outcome"}),
	}
}

// latchWaitBuckets are the wait histogram's buckets, in seconds: latches
// are waited on for anything from milliseconds to hours.
var latchWaitBuckets = []float64{1e-3, 5e-3, 1e-2, 5e-2, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, 14400}

func (m *latchMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.ops, m.wait}
}

// declare creates every counter series of the latch name up front, so
// they are exported (as 0) from the start.
func (m *latchMetrics) declare(name string) {
	for op, outcomes := range latchOutcomes {
		for _, o := range append(outcomes, latchErrorOutcomes...) {
			m.ops.WithLabelValues(name, string(op), o)
		}
	}
}

// observe counts one call of op on the latch name; n is CountDown's or
// Count's result, or Delete's: 1 deleted, -1 not.
func (m *latchMetrics) observe(ctx context.Context, name string, op latchOp, n int64, err error) {
	outcome := latchErrorOutcome(ctx, err)
	if outcome == "" {
		switch {
		case errors.Is(err, latch.ErrExists):
			outcome = "exists"
		case errors.Is(err, latch.ErrNotFound):
			outcome = "not_found"
		case errors.Is(err, latch.ErrCompleted):
			outcome = "already_complete"
		case op == opCreate:
			outcome = "created"
		case op == opReset:
			outcome = "reset"
		case op == opJoin:
			outcome = "joined"
		case n < 0:
			outcome = "not_current"
		case op == opDelete:
			outcome = "deleted"
		case op == opCountDown && n == 0:
			outcome = "completed"
		default:
			outcome = "counted"
		}
	}
	m.ops.WithLabelValues(name, string(op), outcome).Inc()
}

// observeWait observes one Wait on the latch name that took d.
func (m *latchMetrics) observeWait(ctx context.Context, name string, ok bool, d time.Duration, err error) {
	outcome := latchErrorOutcome(ctx, err)
	switch {
	case outcome != "":
	case err != nil:
		outcome = "error"
	case ok:
		outcome = "completed"
	default:
		outcome = "not_current"
	}
	m.wait.WithLabelValues(name, outcome).Observe(d.Seconds())
}

// latchErrorOutcome classifies the errors every latch call shares; ""
// for none of them (no error, or one its op names).
func latchErrorOutcome(ctx context.Context, err error) string {
	if err == nil {
		return ""
	}
	var cerr error
	if ctx != nil {
		cerr = ctx.Err()
	}
	switch {
	case errors.Is(err, ErrClosed) || errors.Is(err, primitives.ErrClosed):
		return "closed"
	case cerr != nil && errors.Is(err, cerr) && !errors.Is(err, primitives.ErrUncertain):
		if errors.Is(cerr, context.DeadlineExceeded) {
			return "deadline_exceeded"
		}
		return "cancelled"
	case errors.Is(err, policies.ErrPartition):
		return "partition_failed"
	case errors.Is(err, primitives.ErrUncertain):
		return "uncertain"
	case errors.Is(err, latch.ErrExists), errors.Is(err, latch.ErrNotFound), errors.Is(err, latch.ErrCompleted):
		return ""
	}
	return "error"
}
