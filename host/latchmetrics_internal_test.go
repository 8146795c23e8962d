package host

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/coordhost/coordhost/policies"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/latch"
	"github.com/prometheus/client_golang/prometheus"
)

// Each error a latch call can end with lands in its documented outcome.
func TestLatchOutcomes(t *testing.T) {
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	defer m.unregister()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	bg := context.Background()
	for _, c := range []struct {
		ctx  context.Context
		op   latchOp
		n    int64
		err  error
		want string
	}{
		{bg, opCreate, 0, nil, "created"},
		{bg, opCreate, 0, fmt.Errorf("x: %w", latch.ErrExists), "exists"},
		{bg, opJoin, 0, fmt.Errorf("x: %w", latch.ErrNotFound), "not_found"},
		{bg, opCountDown, 3, nil, "counted"},
		{bg, opCountDown, 0, nil, "completed"},
		{bg, opCountDown, -1, nil, "not_current"},
		{bg, opCountDown, 0, fmt.Errorf("x: %w", latch.ErrCompleted), "already_complete"},
		{bg, opCount, 0, nil, "counted"},
		{bg, opCount, -1, nil, "not_current"},
		{bg, opDelete, 1, nil, "deleted"},
		{bg, opDelete, -1, nil, "not_current"},
		{bg, opDelete, 0, fmt.Errorf("x: %w", primitives.ErrUncertain), "uncertain"},
		{cancelled, opCountDown, 0, fmt.Errorf("x: %w", context.Canceled), "cancelled"},
		{cancelled, opCountDown, 0, fmt.Errorf("x: %w: %w", primitives.ErrUncertain, context.Canceled), "uncertain"},
		{bg, opReset, 0, fmt.Errorf("x: %w", primitives.ErrUncertain), "uncertain"},
		{bg, opReset, 0, fmt.Errorf("x: %w", primitives.ErrClosed), "closed"},
		{bg, opJoin, 0, fmt.Errorf("x: %w", policies.ErrPartition), "partition_failed"},
		{bg, opJoin, 0, errors.New("io"), "error"},
	} {
		before := counterValue(t, m.latch.ops.WithLabelValues("l", string(c.op), c.want))
		m.latch.observe(c.ctx, "l", c.op, c.n, c.err)
		if got := counterValue(t, m.latch.ops.WithLabelValues("l", string(c.op), c.want)); got != before+1 {
			t.Errorf("%s %d %v: %s not counted", c.op, c.n, c.err, c.want)
		}
	}
}
