package clock

import (
	"testing"
	"time"
)

func TestFakeTimers(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	a := f.NewTimer(time.Second)
	b := f.NewTimer(2 * time.Second)
	f.Advance(time.Second)
	select {
	case <-a.C():
	default:
		t.Fatal("a due timer did not fire")
	}
	select {
	case <-b.C():
		t.Fatal("a timer fired early")
	default:
	}
	// A fired timer's undelivered value is dropped by Stop and by Reset.
	c := f.NewTimer(time.Second)
	f.Advance(time.Second)
	if !c.Stop() {
		t.Fatal("Stop of a fired, undelivered timer returned false")
	}
	select {
	case <-c.C():
		t.Fatal("a stopped timer delivered a stale value")
	default:
	}
	d := f.NewTimer(time.Second)
	f.Advance(time.Second)
	d.Reset(time.Hour)
	select {
	case <-d.C():
		t.Fatal("a reset timer delivered a stale value")
	default:
	}
	f.Advance(time.Hour)
	select {
	case <-d.C():
	default:
		t.Fatal("a reset timer did not fire at its new time")
	}
	done := make(chan struct{})
	f.AfterFunc(time.Minute, func() { close(done) })
	if f.Timers() != 1 { // the AfterFunc (b came due with c)
		t.Fatalf("%d timers armed", f.Timers())
	}
	f.Advance(time.Minute)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("AfterFunc did not run")
	}
}
