package plugin

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/coordhost/coordhost/policies"
)

// BenchmarkDecideRetry measures one DecideRetry through the example plugin
// (gRPC over a unix socket to another process), timing every call to
// report p50 and p99 next to the mean (and allocations in the host).
func BenchmarkDecideRetry(b *testing.B) {
	bin := examplePlugin(b)
	p, err := Launch(context.Background(), Options{Path: bin.path, SHA256: bin.sum, Logger: testLogger(), HealthInterval: time.Hour,
		// Measure latency, not the fallback: a loaded machine stalls a call
		// past the default 100ms now and then.
		CallTimeout: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	retry, err := p.Retry()
	if err != nil {
		b.Fatal(err)
	}
	req := policies.RetryRequest{Attempt: 3, Reason: policies.ReasonContended, Elapsed: 40 * time.Millisecond, HolderTTL: 250 * time.Millisecond, Rand: 12345}
	want := policies.RetryDecision{Action: policies.WaitForWake, Delay: 20 * time.Millisecond}
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		d := retry.DecideRetry(context.Background(), req)
		lat = append(lat, time.Since(start))
		if d != want {
			b.Fatalf("DecideRetry = %+v, want %+v", d, want)
		}
	}
	b.StopTimer()
	if st := p.Stats(); st.Retry.Fallbacks != 0 {
		b.Fatalf("%d decisions fell back", st.Retry.Fallbacks)
	}
	slices.Sort(lat)
	p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
	b.ReportMetric(float64(p50.Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(p99.Nanoseconds()), "p99-ns")
	b.Logf("N=%d p50=%v p99=%v max=%v", len(lat), p50, p99, lat[len(lat)-1])
}

// BenchmarkPartitionKeyCached measures a cache hit (no process involved).
func BenchmarkPartitionKeyCached(b *testing.B) {
	bin := examplePlugin(b)
	p, err := Launch(context.Background(), Options{Path: bin.path, SHA256: bin.sum, Logger: testLogger(), HealthInterval: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	part, err := p.Partition()
	if err != nil {
		b.Fatal(err)
	}
	req := policies.PartitionRequest{Kind: "rate_limit", Name: "checkout", Attributes: map[string]string{"tenant": "acme", "route": "/pay"}}
	if _, err := part.PartitionKey(context.Background(), req); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := part.PartitionKey(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}
