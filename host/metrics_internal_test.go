package host

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/coordhost/coordhost/policies"
	"github.com/coordhost/coordhost/policies/plugin"
	"github.com/coordhost/coordhost/policies/wasm"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// A call the caller cancelled is outcome="canceled" for wasm and plugin
// alike: not a failure and not a fallback.
func TestCanceledPolicyCallsAreNotFailures(t *testing.T) {
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	defer m.unregister()
	m.wasmObserver().ObserveCall(wasm.CallInfo{Module: "retry.w", Kind: policies.KindRetry, Duration: time.Millisecond, Outcome: wasm.OutcomeCanceled})
	m.pluginObserver("retry.p").ObserveCall(policies.KindRetry, time.Millisecond, fmt.Errorf("%w: %w", plugin.ErrCanceled, context.Canceled))
	m.pluginObserver("retry.p").ObserveCall(policies.KindRetry, time.Millisecond, errors.New("transport"))
	for _, c := range []struct {
		policy, driver, outcome string
		want                    float64
	}{
		{"retry.w", "wasm", "canceled", 1},
		{"retry.w", "wasm", "failure", 0},
		{"retry.p", "plugin", "canceled", 1},
		{"retry.p", "plugin", "failure", 1},
	} {
		if got := counterValue(t, m.calls.WithLabelValues(c.policy, c.driver, "retry", c.outcome)); got != c.want {
			t.Errorf("calls{%s,%s,%s} = %v, want %v", c.policy, c.driver, c.outcome, got, c.want)
		}
	}
	if got := counterValue(t, m.fallbacks.WithLabelValues("retry.w", "wasm", "retry")); got != 0 {
		t.Errorf("a canceled wasm call counted as a fallback")
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
