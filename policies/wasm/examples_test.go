package wasm

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/policies"
)

// The example modules of plugins/examples/wasm, as users will load them.

func TestGoBackoffExample(t *testing.T) {
	r := newRuntime(t, RuntimeOptions{})
	m := load(t, r, goBackoff, ModuleOptions{Name: "gobackoff", Config: []byte(`{"base_ms": 10, "max_ms": 200, "give_up_after_ms": 5000}`)})
	p := m.Retry()
	for attempt := 1; attempt <= 8; attempt++ {
		upper := int64(10)
		for i := 1; i < attempt && upper < 200; i++ {
			upper *= 3
		}
		upper = min(upper, 200)
		for _, rnd := range []uint64{0, 1, 7, 1 << 63, math.MaxUint64, 0x9E3779B97F4A7C15} {
			want := time.Duration(10+int64(rnd%uint64(upper-10+1))) * ms
			got := p.DecideRetry(context.Background(), policies.RetryRequest{Attempt: attempt, Reason: policies.ReasonContended, Elapsed: 100 * ms, Rand: rnd})
			if got != (policies.RetryDecision{Action: policies.WaitForWake, Delay: want}) {
				t.Fatalf("attempt %d rand %#x: %+v, want wait %v", attempt, rnd, got, want)
			}
			got = p.DecideRetry(context.Background(), policies.RetryRequest{Attempt: attempt, Reason: policies.ReasonError, Elapsed: 100 * ms, Rand: rnd})
			if got != (policies.RetryDecision{Action: policies.RetryAfter, Delay: want}) {
				t.Fatalf("error, attempt %d rand %#x: %+v, want retry after %v", attempt, rnd, got, want)
			}
		}
	}
	if got := p.DecideRetry(context.Background(), policies.RetryRequest{Attempt: 3, Elapsed: 4995 * ms, Rand: 1000}); got.Delay != 5*ms {
		t.Errorf("near the give-up time: %+v, want the 5ms left", got)
	}
	if got := p.DecideRetry(context.Background(), policies.RetryRequest{Attempt: 3, Elapsed: 5 * time.Second}); got.Action != policies.GiveUp {
		t.Errorf("after give_up_after_ms: %+v", got)
	}
	if s := m.Stats(); s.Failures != 0 {
		t.Errorf("stats %+v", s)
	}
	_, err := r.Load(context.Background(), readWasm(t, goBackoff), ModuleOptions{Name: "bad", Config: []byte(`{"base_ms": 0}`)})
	if !errors.Is(err, ErrABI) || !strings.Contains(err.Error(), "gobackoff: base_ms must be positive") {
		t.Errorf("bad config: %v", err)
	}
	_, err = r.Load(context.Background(), readWasm(t, goBackoff), ModuleOptions{Name: "bad", Config: []byte(`{"base_ms": "x"}`)})
	if !errors.Is(err, ErrABI) || !strings.Contains(err.Error(), "gobackoff: config: base_ms: want an integer, got a string") {
		t.Errorf("bad config: %v", err)
	}
	_, err = r.Load(context.Background(), readWasm(t, goBackoff), ModuleOptions{Name: "bad", Config: []byte(`{"base_ms": 1`)})
	if !errors.Is(err, ErrABI) || !strings.Contains(err.Error(), "gobackoff: config: malformed JSON at offset 13") {
		t.Errorf("bad config: %v", err)
	}
}

func TestWATConstantExample(t *testing.T) {
	r := newRuntime(t, RuntimeOptions{})
	for _, c := range []struct {
		config string
		delay  time.Duration
	}{
		{`{"delay_ms": 25}`, 25 * ms},
		{``, 10 * ms},
		{`{"delay_ms":7}`, 7 * ms},
	} {
		m := load(t, r, watConstant, ModuleOptions{Config: []byte(c.config)})
		p := m.Retry()
		if got := p.DecideRetry(context.Background(), policies.RetryRequest{Attempt: 3, Reason: policies.ReasonContended}); got != (policies.RetryDecision{Action: policies.WaitForWake, Delay: c.delay}) {
			t.Errorf("config %q contended: %+v", c.config, got)
		}
		if got := p.DecideRetry(context.Background(), policies.RetryRequest{Attempt: 3, Reason: policies.ReasonError}); got != (policies.RetryDecision{Action: policies.RetryAfter, Delay: c.delay}) {
			t.Errorf("config %q error: %+v", c.config, got)
		}
	}
	if _, err := r.Load(context.Background(), readWasm(t, watConstant), ModuleOptions{Config: []byte(`{"delay_ms": 99999999999999}`)}); !errors.Is(err, ErrABI) {
		t.Errorf("absurd delay: %v", err)
	}
}

func TestGoTenantExample(t *testing.T) {
	logger, logs := newLogRecorder()
	r := newRuntime(t, RuntimeOptions{})
	m := load(t, r, goTenant, ModuleOptions{Name: "tenant", Logger: logger})
	p := m.Partition()
	key, err := p.PartitionKey(context.Background(), policies.PartitionRequest{Kind: "rate_limit", Name: "checkout", Attributes: map[string]string{"tenant": "acme", "user": "u1"}})
	if err != nil || key != "tenant:acme" {
		t.Fatalf("got %q, %v", key, err)
	}
	key, err = p.PartitionKey(context.Background(), policies.PartitionRequest{Kind: "lock", Name: "invoice", Attributes: map[string]string{"user": "u1"}})
	if key != "" || !errors.Is(err, policies.ErrPartition) || errors.Is(err, ErrCall) ||
		!strings.Contains(err.Error(), "gotenant: lock invoice: missing attribute tenant") {
		t.Fatalf("missing attribute: %q, %v", key, err)
	}
	if s := m.Stats(); s.OK != 1 || s.Refused != 1 || s.Failures != 0 {
		t.Errorf("stats %+v", s)
	}
	if n := countLines(logs(), "INFO gotenant: partitioning by attribute tenant policy=tenant"); n != 1 {
		t.Errorf("guest log lines: %q", logs())
	}

	m2 := load(t, r, goTenant, ModuleOptions{Config: []byte(`{"attr": "region", "prefix": "{r:"}`)})
	if key, err := m2.Partition().PartitionKey(context.Background(), policies.PartitionRequest{Attributes: map[string]string{"region": "eu"}}); key != "{r:eu" || err != nil {
		t.Errorf("configured: %q, %v", key, err)
	}
}

func TestGoStarveExample(t *testing.T) {
	r := newRuntime(t, RuntimeOptions{})
	m := load(t, r, goStarve, ModuleOptions{Name: "gostarve", Config: []byte(`{"bound_ms": 150, "crowd": 2}`)})
	p := m.Starvation()
	for _, c := range []struct {
		writers int
		want    time.Duration
	}{{1, 150 * ms}, {2, 150 * ms}, {3, 0}} {
		if got := p.WriterBound(context.Background(), policies.StarvationRequest{Readers: 8, Writers: c.writers, OldestWriterWait: time.Second}); got != c.want {
			t.Errorf("%d writers: bound %v, want %v", c.writers, got, c.want)
		}
	}
	reader := load(t, r, goStarve, ModuleOptions{Config: []byte(`{"bound_ms": -1}`)})
	if got := reader.Starvation().WriterBound(context.Background(), policies.StarvationRequest{Readers: 1, Writers: 1}); got != policies.Unbounded {
		t.Errorf("bound_ms -1: %v, want Unbounded", got)
	}
	if s := m.Stats(); s.Failures != 0 {
		t.Errorf("stats %+v", s)
	}
	_, err := r.Load(context.Background(), readWasm(t, goStarve), ModuleOptions{Name: "bad", Config: []byte(`{"crowd": -1}`)})
	if !errors.Is(err, ErrABI) || !strings.Contains(err.Error(), "gostarve: crowd must not be negative") {
		t.Errorf("bad config: %v", err)
	}
}
