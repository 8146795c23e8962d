package ratetest

import (
	"testing"
	"time"
)

var base = time.Unix(1000, 0)

func ms(m float64) time.Time { return base.Add(time.Duration(m * float64(time.Millisecond))) }

func TestOverstated(t *testing.T) {
	grants := []Grant{{At: ms(0), N: 1}, {At: ms(50), N: 1}, {At: ms(100), N: 2}, {At: ms(130), N: 1}}
	// Refused at 10 for 2 permits, told to wait 90: the first grant of 2
	// is at 100, exactly when it said.
	got, _, _, found := Overstated(grants, []Refusal{{At: ms(10), N: 2, RetryAfter: 90 * time.Millisecond}})
	if !found || got != 0 {
		t.Errorf("exact RetryAfter: %v %v, want 0 true", got, found)
	}
	// Told to wait 95: the grant at 100 shows it was 5ms too long (the
	// 1-permit grant at 50 does not count: it asked for 2).
	got, r, g, _ := Overstated(grants, []Refusal{{At: ms(10), N: 2, RetryAfter: 95 * time.Millisecond}})
	if got != 5*time.Millisecond || !g.At.Equal(ms(100)) || r.RetryAfter != 95*time.Millisecond {
		t.Errorf("overstated by 5ms: got %v at grant %v", got, g.At.Sub(base))
	}
	// The worst of several; the grant at the refusal's own instant does
	// not count as after it.
	refs := []Refusal{
		{At: ms(0), N: 1, RetryAfter: 20 * time.Millisecond},  // next grant of 1 at 50: -30ms
		{At: ms(50), N: 1, RetryAfter: 40 * time.Millisecond}, // next at 100: -10ms
		{At: ms(130), N: 1, RetryAfter: time.Second},          // none after
	}
	got, r, _, found = Overstated(grants, refs)
	if !found || got != -10*time.Millisecond || !r.At.Equal(ms(50)) {
		t.Errorf("worst of several: %v at %v, want -10ms at 50ms", got, r.At.Sub(base))
	}
	if _, _, _, found := Overstated(grants, refs[2:]); found {
		t.Error("a refusal with no later grant was measured")
	}
}

func TestSlidingAvailable(t *testing.T) {
	w := 100 * time.Millisecond
	for _, c := range []struct {
		name   string
		grants []Grant
		limit  int64
		n      int64
		want   time.Time
	}{
		{"none", nil, 3, 1, time.Time{}},
		{"room left", []Grant{{At: ms(0), N: 1}, {At: ms(5), N: 1}}, 3, 1, ms(5)},
		{"first frees it", []Grant{{At: ms(0), N: 1}, {At: ms(5), N: 2}}, 3, 1, ms(100)},
		{"needs the second too", []Grant{{At: ms(0), N: 1}, {At: ms(5), N: 2}}, 3, 2, ms(105)},
		{"ties expire together", []Grant{{At: ms(0), N: 1}, {At: ms(0), N: 1}, {At: ms(7), N: 1}}, 3, 2, ms(100)},
		{"not before the last grant", []Grant{{At: ms(0), N: 2}, {At: ms(150), N: 1}}, 2, 2, ms(250)},
		{"old grants already out", []Grant{{At: ms(0), N: 2}, {At: ms(150), N: 1}}, 3, 2, ms(150)},
	} {
		if got := SlidingAvailable(c.grants, c.limit, w, c.n); !got.Equal(c.want) {
			t.Errorf("%s: %v, want %v", c.name, got.Sub(base), c.want.Sub(base))
		}
	}
	// The instant it returns is the first the sliding-log bound allows.
	g := []Grant{{At: ms(0), N: 1}, {At: ms(20), N: 1}, {At: ms(40), N: 1}}
	at := SlidingAvailable(g, 3, w, 1)
	before := append(append([]Grant(nil), g...), Grant{At: at.Add(-time.Microsecond), N: 1})
	if most, _ := MaxIn(before, w); most != 4 {
		t.Errorf("a grant just before %v: most %d, want 4", at.Sub(base), most)
	}
	on := append(append([]Grant(nil), g...), Grant{At: at, N: 1})
	if most, _ := MaxIn(on, w); most != 3 {
		t.Errorf("a grant at %v: most %d, want 3", at.Sub(base), most)
	}
}

func TestFixedWindows(t *testing.T) {
	w := 100 * time.Millisecond
	// Two windows; ends within a window differ by rounding.
	grants := []WindowGrant{
		{At: ms(0), N: 2, End: ms(101)},
		{At: ms(40), N: 1, End: ms(100.6)},
		{At: ms(99.5), N: 1, End: ms(100.9)},
		{At: ms(101.2), N: 3, End: ms(202.2)},
		{At: ms(150), N: 1, End: ms(202)},
	}
	ws := FixedWindows(grants, w)
	if len(ws) != 2 || ws[0].N != 4 || ws[1].N != 4 || !ws[0].Start.Equal(ms(0)) || !ws[0].Last.Equal(ms(99.5)) ||
		!ws[1].Start.Equal(ms(101.2)) || !ws[0].End.Equal(ms(101)) {
		t.Fatalf("two windows: %+v", ws)
	}
	// Unknown outcomes: one inside the first window, one after its end
	// (goes to the next window), one after everything (a window of its own).
	grants = append(grants,
		WindowGrant{At: ms(50), N: 1},
		WindowGrant{At: ms(101.1), N: 2},
		WindowGrant{At: ms(400), N: 1},
	)
	ws = FixedWindows(grants, w)
	if len(ws) != 3 {
		t.Fatalf("with unknowns: %d windows %+v", len(ws), ws)
	}
	if ws[0].N != 5 || ws[0].Unknown != 1 || ws[1].N != 6 || ws[1].Unknown != 2 || !ws[1].Start.Equal(ms(101.1)) ||
		ws[2].N != 1 || ws[2].Unknown != 1 {
		t.Errorf("with unknowns: %+v", ws)
	}
	if got := FixedWindows(nil, w); len(got) != 0 {
		t.Errorf("no grants: %+v", got)
	}
}

func TestClockOffset(t *testing.T) {
	var o ClockOffset
	if _, _, ok := o.Bounds(); ok {
		t.Error("zero ClockOffset has bounds")
	}
	// Without observations Place is the middle of [sent, got].
	if got := o.Place(ms(0), ms(10)); !got.Equal(ms(5)) {
		t.Errorf("Place without observations: %v", got.Sub(base))
	}
	// The server is 100ms ahead: decisions made within their round trips.
	o.Observe(ms(0), ms(4), ms(101))  // offset in [97, 101]
	o.Observe(ms(10), ms(12), ms(12)) // [0, 2]: a clock stepped back meanwhile
	lo, hi, ok := o.Bounds()
	if !ok || lo != 97*time.Millisecond || hi != 2*time.Millisecond {
		t.Errorf("contradicting observations: [%v, %v]", lo, hi)
	}
	o = ClockOffset{}
	o.Observe(ms(0), ms(4), ms(101))   // [97, 101]
	o.Observe(ms(10), ms(12), ms(110)) // [98, 100]
	lo, hi, _ = o.Bounds()
	if lo != 98*time.Millisecond || hi != 100*time.Millisecond {
		t.Errorf("bounds [%v, %v], want [98ms, 100ms]", lo, hi)
	}
	// A lost reply sent at 20, given up at 30: made in [118, 130].
	if got := o.Place(ms(20), ms(30)); !got.Equal(ms(124)) {
		t.Errorf("Place: %v, want 124ms", got.Sub(base))
	}
}
