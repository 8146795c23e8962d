package wasm

import (
	"context"
	"testing"
	"time"

	"github.com/coordhost/coordhost/policies"
)

// BenchmarkRetryDecision measures one DecideRetry through the pool:
// "deadline" is the default (a 50 ms deadline per call, on the
// interruptible runtime), "nodeadline" is CallTimeout = NoCallTimeout (the
// uninterruptible runtime), and "guarded-nodeadline" calls without a
// deadline on the interruptible runtime, to show what wazero's
// WithCloseOnContextDone costs by itself.
func BenchmarkRetryDecision(b *testing.B) {
	r := newRuntime(b, RuntimeOptions{})
	req := policies.RetryRequest{Attempt: 3, Reason: policies.ReasonContended, Elapsed: 12 * time.Millisecond, HolderTTL: 250 * time.Millisecond, Rand: 0x9E3779B97F4A7C15}
	for _, mod := range []struct{ name, path string }{{"wat", watConstant}, {"go", goBackoff}} {
		for _, mode := range []string{"deadline", "nodeadline", "guarded-nodeadline"} {
			b.Run(mod.name+"/"+mode, func(b *testing.B) {
				o := ModuleOptions{CallTimeout: DefaultCallTimeout}
				if mode == "nodeadline" {
					o.CallTimeout = NoCallTimeout
				}
				m := load(b, r, mod.path, o)
				if mode == "guarded-nodeadline" {
					m.timeout = 0
					m.pool.drain() // the instance Load made has a deadline timer
				}
				p := m.Retry()
				warm(b, m)
				b.ReportAllocs()
				for b.Loop() {
					p.DecideRetry(context.Background(), req)
				}
				b.StopTimer()
				if s := m.Stats(); s.Failures != 0 {
					b.Fatalf("failures: %+v", s)
				}
			})
		}
	}
}

// BenchmarkRetryDecisionParallel runs decisions from GOMAXPROCS goroutines
// through the pool (at most GOMAXPROCS instances).
func BenchmarkRetryDecisionParallel(b *testing.B) {
	r := newRuntime(b, RuntimeOptions{})
	req := policies.RetryRequest{Attempt: 3, Reason: policies.ReasonContended, Rand: 42}
	for _, mode := range []string{"deadline", "nodeadline"} {
		b.Run("go/"+mode, func(b *testing.B) {
			o := ModuleOptions{CallTimeout: DefaultCallTimeout}
			if mode == "nodeadline" {
				o.CallTimeout = NoCallTimeout
			}
			m := load(b, r, goBackoff, o)
			p := m.Retry()
			warm(b, m)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					p.DecideRetry(context.Background(), req)
				}
			})
		})
	}
}

// BenchmarkPartition measures one PartitionKey of the Go tenant example.
func BenchmarkPartition(b *testing.B) {
	r := newRuntime(b, RuntimeOptions{})
	m := load(b, r, goTenant, ModuleOptions{CallTimeout: DefaultCallTimeout})
	warm(b, m)
	p := m.Partition()
	req := policies.PartitionRequest{Kind: "rate_limit", Name: "checkout", Attributes: map[string]string{"tenant": "acme", "route": "/pay"}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.PartitionKey(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkInstantiate measures creating and configuring one instance (and
// closing it); B/op includes the instance's linear memory, and the
// "memory-bytes" metric is that memory's size after policy_configure.
func BenchmarkInstantiate(b *testing.B) {
	r := newRuntime(b, RuntimeOptions{})
	for _, mod := range []struct{ name, path string }{{"wat", watConstant}, {"go", goBackoff}} {
		b.Run(mod.name, func(b *testing.B) {
			m := load(b, r, mod.path, ModuleOptions{CallTimeout: DefaultCallTimeout, Config: []byte(`{"base_ms": 10}`)})
			var size uint32
			b.ReportAllocs()
			for b.Loop() {
				in, err := m.newInstance(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				size = in.mem.Size()
				<-m.pool.tokens // newInstance expects the caller to hold a token
				m.pool.discard(in)
			}
			b.ReportMetric(float64(size), "memory-bytes")
		})
	}
}

// warm fills m's pool, so that benchmarks do not time instantiation.
func warm(b *testing.B, m *Module) {
	b.Helper()
	var ins []*instance
	for range m.MaxInstances() {
		in, err := m.pool.acquire(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		ins = append(ins, in)
	}
	for _, in := range ins {
		m.pool.release(in)
	}
}
