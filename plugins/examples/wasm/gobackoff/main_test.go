package main

import (
	"testing"

	"github.com/coordhost/coordhost/plugins/sdk/guest"
)

func TestDecide(t *testing.T) {
	s := settings{BaseMS: 10, MaxMS: 100}
	for attempt := int32(1); attempt <= 6; attempt++ {
		upper := min(int64(10)*[]int64{1, 3, 9, 27, 81, 243}[attempt-1], 100)
		for rnd := uint64(0); rnd < 500; rnd += 7 {
			a, d, ok := guest.DecodeRetry(decide(s, attempt, guest.ReasonContended, 0, rnd))
			if !ok || a != guest.ActionWaitForWake || d < 10 || d > upper {
				t.Fatalf("attempt %d rand %d: %v %d, want a wait in [10, %d]", attempt, rnd, a, d, upper)
			}
		}
	}
	if a, d, _ := guest.DecodeRetry(decide(s, 2, guest.ReasonError, 0, 3)); a != guest.ActionRetryAfter || d != 13 {
		t.Errorf("error: %v %d", a, d)
	}
	s.GiveUpAfterMS = 50
	if a, _, _ := guest.DecodeRetry(decide(s, 1, guest.ReasonContended, 50, 3)); a != guest.ActionGiveUp {
		t.Errorf("after give_up_after_ms: %v", a)
	}
	if _, d, _ := guest.DecodeRetry(decide(s, 9, guest.ReasonContended, 45, 1<<40)); d > 5 {
		t.Errorf("near give_up_after_ms: %d, want at most the 5 ms left", d)
	}
}

func TestParse(t *testing.T) {
	if s, err := parse(nil); err != nil || s != (settings{BaseMS: 10, MaxMS: 1000}) {
		t.Errorf("defaults: %+v %v", s, err)
	}
	if s, err := parse([]byte(`{"base_ms": 5, "max_ms": 50, "give_up_after_ms": 900}`)); err != nil || s != (settings{5, 50, 900}) {
		t.Errorf("%+v %v", s, err)
	}
	for _, bad := range []string{`{"base_ms": 0}`, `{"base_ms": 20, "max_ms": 10}`, `{"give_up_after_ms": -1}`, `{"base_ms": "x"}`, `{`} {
		if _, err := parse([]byte(bad)); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}
