package builtin

import (
	"context"
	"testing"
	"time"

	"github.com/coordhost/coordhost/policies"
)

func TestExponentialBoundsAndJitter(t *testing.T) {
	e := Exponential{Base: 10 * time.Millisecond, Max: 80 * time.Millisecond}
	wantBound := []time.Duration{10, 20, 40, 80, 80, 80}
	for i, b := range wantBound {
		b *= time.Millisecond
		var maxSeen time.Duration
		for r := uint64(0); r < 2000; r++ {
			d := e.DecideRetry(context.Background(), policies.RetryRequest{Attempt: i + 1, Rand: r * 0x9E3779B97F4A7C15})
			if d.Action != policies.WaitForWake {
				t.Fatalf("attempt %d: action %v", i+1, d.Action)
			}
			if d.Delay <= 0 || d.Delay > b {
				t.Fatalf("attempt %d: delay %v outside (0, %v]", i+1, d.Delay, b)
			}
			maxSeen = max(maxSeen, d.Delay)
		}
		if maxSeen < b/2 {
			t.Errorf("attempt %d: jitter never went above %v of bound %v", i+1, maxSeen, b)
		}
	}
}

func TestExponentialGiveUp(t *testing.T) {
	e := Exponential{GiveUpAfter: time.Second}
	if d := e.DecideRetry(context.Background(), policies.RetryRequest{Attempt: 3, Elapsed: time.Second}); d.Action != policies.GiveUp {
		t.Fatalf("got %v, want give up", d.Action)
	}
	d := e.DecideRetry(context.Background(), policies.RetryRequest{Attempt: 30, Elapsed: 999 * time.Millisecond, Rand: ^uint64(0)})
	if d.Action != policies.WaitForWake || d.Delay > time.Millisecond {
		t.Fatalf("got %+v, want a wait of at most the 1ms left", d)
	}
}

func TestExponentialValidate(t *testing.T) {
	for _, e := range []Exponential{{Base: -1}, {Max: -1}, {GiveUpAfter: -1}, {Base: time.Second, Max: time.Millisecond}} {
		if e.Validate() == nil {
			t.Errorf("%+v: want error", e)
		}
	}
	if err := (Exponential{}).Validate(); err != nil {
		t.Errorf("zero value: %v", err)
	}
}

func TestConstantAndNoRetry(t *testing.T) {
	if d := (Constant{Delay: 5 * time.Millisecond}).DecideRetry(context.Background(), policies.RetryRequest{Attempt: 9}); d.Delay != 5*time.Millisecond || d.Action != policies.WaitForWake {
		t.Fatalf("constant: %+v", d)
	}
	if d := (NoRetry{}).DecideRetry(context.Background(), policies.RetryRequest{Attempt: 1}); d.Action != policies.GiveUp {
		t.Fatalf("none: %+v", d)
	}
}
