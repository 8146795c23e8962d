package wasm

import (
	"sync"
	"sync/atomic"
	"testing"
)

// The breaker's clock is passed in (nanoseconds on the module's monotonic
// clock), so these tests need no sleeping.

func TestBreakerOpensAfterThresholdConsecutiveFailures(t *testing.T) {
	b := breaker{threshold: 3, cooldown: 100}
	// A success in between resets the count: only consecutive failures open.
	if b.failure(1) || b.failure(2) {
		t.Fatal("opened before the threshold")
	}
	b.success()
	if b.failure(3) || b.failure(4) {
		t.Fatal("a success did not reset the count")
	}
	if !b.allow(5) || b.open() {
		t.Fatal("not closed below the threshold")
	}
	if !b.failure(6) {
		t.Fatal("did not open at the third consecutive failure")
	}
	if !b.open() || b.allow(6) {
		t.Fatal("open breaker let a call through")
	}
	// Failures of calls that were let in before it opened do not open it
	// again (nor count as an opening).
	for now := int64(7); now < 20; now++ {
		if b.failure(now) {
			t.Fatal("an open breaker opened again")
		}
	}
}

func TestBreakerHalfOpenAfterCooldown(t *testing.T) {
	b := breaker{threshold: 1, cooldown: 100}
	if !b.failure(1000) {
		t.Fatal("threshold 1: not opened by one failure")
	}
	// The cooldown counts from the opening: 1099 is inside, 1100 is not.
	if b.allow(1099) {
		t.Fatal("allowed during the cooldown")
	}
	if !b.allow(1100) {
		t.Fatal("no probe at the end of the cooldown")
	}
	if b.state.Load() != stateHalfOpen || !b.open() {
		t.Fatalf("state %d after the probe was let in, want half-open", b.state.Load())
	}
	// The probe fails: open again, with a new cooldown from the failure.
	if !b.failure(1150) {
		t.Fatal("a failed probe did not reopen the breaker")
	}
	if b.state.Load() != stateOpen {
		t.Fatalf("state %d after a failed probe, want open", b.state.Load())
	}
	if b.allow(1200) || b.allow(1249) {
		t.Fatal("the cooldown did not restart at the failed probe")
	}
	if !b.allow(1250) {
		t.Fatal("no second probe after the new cooldown")
	}
	// The probe succeeds: closed, and the count starts from zero.
	b.success()
	if b.open() || !b.allow(1251) || !b.allow(1252) {
		t.Fatal("not closed after a successful probe")
	}
}

func TestBreakerOpensOnceUnderConcurrentFailures(t *testing.T) {
	// Many callers crossing the threshold at once open it once, and after
	// the cooldown exactly one of many callers is the probe.
	const callers = 64
	b := breaker{threshold: 8, cooldown: 100}
	var opened, probes atomic.Int32
	run := func(f func()) {
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				f()
			}()
		}
		close(start)
		wg.Wait()
	}
	run(func() {
		if b.failure(10) {
			opened.Add(1)
		}
	})
	if opened.Load() != 1 || !b.open() {
		t.Fatalf("opened %d times by %d concurrent failures, want once", opened.Load(), callers)
	}
	run(func() {
		if b.allow(200) {
			probes.Add(1)
		}
	})
	if probes.Load() != 1 {
		t.Fatalf("%d probes let in after the cooldown, want 1", probes.Load())
	}
}

func TestBreakerHalfOpenAdmitsOneProbe(t *testing.T) {
	b := breaker{threshold: 2, cooldown: 100}
	if !b.allow(0) || b.failure(1) || !b.failure(2) {
		t.Fatal("should open at the second failure")
	}
	if b.allow(50) || b.allow(101) {
		t.Fatal("allowed during the cooldown")
	}
	if !b.allow(102) {
		t.Fatal("no probe after the cooldown")
	}
	if b.allow(103) || b.allow(500) {
		t.Fatal("a second caller got through while half-open")
	}
	b.success()
	if !b.allow(501) || !b.allow(502) {
		t.Fatal("not closed after a successful probe")
	}
	disabled := breaker{}
	for i := range 100 {
		if disabled.failure(int64(i)) || !disabled.allow(int64(i)) {
			t.Fatal("a disabled breaker opened")
		}
	}
}
