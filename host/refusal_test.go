package host_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/policies"
)

// A partition policy's refusal (the policy's own "no key", here a missing
// tenant attribute) is counted as outcome="refused" by every driver:
// builtin, wasm and plugin alike; never as "ok" or "failure", and never as
// a fallback.
func TestPartitionRefusalOutcomeAgreesAcrossDrivers(t *testing.T) {
	s := redistest.Start(t)
	plug, sum := examplePlugin(t)
	src := fmt.Sprintf(`
redis { addresses = [%q] }

policy "partition" "b" {
  driver   = "builtin"
  template = "tenant:$${tenant}"
}

policy "partition" "w" {
  driver = "wasm"
  module = %q
  limits {
    memory_pages = 64
    call_timeout = "2s"
  }
}

policy "partition" "p" {
  driver       = "plugin"
  path         = %q
  sha256       = %q
  call_timeout = "5s"
}

lock "b" {
  ttl       = "10s"
  partition = policy.partition.b
}
lock "w" {
  ttl       = "10s"
  partition = policy.partition.w
}
lock "p" {
  ttl       = "10s"
  partition = policy.partition.p
}
`, s.Addr, abs(t, "../plugins/examples/wasm/gotenant/gotenant.wasm"), plug, sum)
	path := filepath.Join(t.TempDir(), "coordhost.hcl")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	h := newHost(t, path)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	series := func(driver, name, outcome string) string {
		return fmt.Sprintf(`coordhost_policy_calls_total{driver=%q,kind="partition",outcome=%q,policy="partition.%s"}`, driver, outcome, name)
	}
	drivers := map[string]string{"b": "builtin", "w": "wasm", "p": "plugin"}
	before := scrape(t, h) // load-time self-tests may have counted calls
	for name := range drivers {
		l, err := h.Lock(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.TryAcquire(ctx, nil); !errors.Is(err, policies.ErrPartition) {
			t.Fatalf("lock %s without a tenant: %v, want a partition refusal", name, err)
		}
	}
	after := scrape(t, h)
	for name, driver := range drivers {
		for outcome, want := range map[string]float64{"refused": 1, "ok": 0, "failure": 0, "fallback": 0} {
			s := series(driver, name, outcome)
			if got := metricValue(after, s) - metricValue(before, s); got != want {
				t.Errorf("%s: +%v, want +%v\n%s", s, got, want, grep(after, "coordhost_policy_calls_total"))
			}
		}
		fb := fmt.Sprintf(`coordhost_policy_fallbacks_total{driver=%q,kind="partition",policy="partition.%s"}`, driver, name)
		if got := metricValue(after, fb) - metricValue(before, fb); got != 0 {
			t.Errorf("%s: +%v, want 0: a refusal is the policy's answer", fb, got)
		}
	}
}
