package host

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/coordhost/coordhost/policies"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/semaphore"
	"github.com/prometheus/client_golang/prometheus"
)

// Each error a semaphore acquisition can end with lands in its documented
// outcome, and every stage and reason of an abandoned cleanup has its
// series.
func TestSemaphoreOutcomes(t *testing.T) {
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	defer m.unregister()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	bg := context.Background()
	for _, c := range []struct {
		ctx   context.Context
		waits bool
		err   error
		want  string
	}{
		{bg, false, nil, "acquired"},
		{bg, false, fmt.Errorf("x: %w", primitives.ErrNotAcquired), "not_acquired"},
		{bg, true, fmt.Errorf("x: %w", primitives.ErrNotAcquired), "gave_up"},
		{bg, true, fmt.Errorf("x: %w", semaphore.ErrCapacityMismatch), "capacity_mismatch"},
		{bg, false, fmt.Errorf("x: %w", semaphore.ErrCapacityMismatch), "capacity_mismatch"},
		{cancelled, true, fmt.Errorf("x: %w", context.Canceled), "cancelled"},
		{bg, true, fmt.Errorf("x: %w", primitives.ErrClosed), "closed"},
		{bg, false, fmt.Errorf("x: %w", policies.ErrPartition), "partition_failed"},
		{bg, false, fmt.Errorf("x: %w", primitives.ErrUncertain), "error"},
		{bg, false, errors.New("io"), "error"},
	} {
		before := counterValue(t, m.semaphore.acquires.WithLabelValues("s", c.want))
		m.semaphore.observeAcquire(c.ctx, "s", c.waits, 0, c.err)
		if got := counterValue(t, m.semaphore.acquires.WithLabelValues("s", c.want)); got != before+1 {
			t.Errorf("waits %v, %v: %s not counted", c.waits, c.err, c.want)
		}
	}
	hook := m.semaphore.onAbandon("s")
	for _, stage := range abandonStages {
		for _, reason := range abandonReasons {
			hook(semaphore.Abandon{Stage: stage, Reason: reason})
			if got := counterValue(t, m.semaphore.abandoned.WithLabelValues("s", stage, reason)); got != 1 {
				t.Errorf("abandoned %s %s = %v, want 1", stage, reason, got)
			}
		}
	}
}
