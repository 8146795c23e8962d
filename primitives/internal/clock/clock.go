// Package clock is the time source of the primitives' local estimates and
// timers, so that tests can move time instead of sleeping. Real is the
// system clock; Fake moves only when told to.
package clock

import (
	"sort"
	"sync"
	"time"
)

// Clock tells the time and makes timers.
type Clock interface {
	Now() time.Time
	// NewTimer returns a timer that sends on its channel after d.
	NewTimer(d time.Duration) Timer
	// AfterFunc calls f in its own goroutine after d.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a stoppable, resettable timer of a Clock.
type Timer interface {
	// C is the channel of a NewTimer timer (nil for AfterFunc).
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

// Real is the system clock.
var Real Clock = real{}

// Or returns c, or Real when c is nil.
func Or(c Clock) Clock {
	if c == nil {
		return Real
	}
	return c
}

type real struct{}

func (real) Now() time.Time { return time.Now() }

func (real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

func (real) AfterFunc(d time.Duration, f func()) Timer { return realTimer{time.AfterFunc(d, f)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }

// Fake is a clock for tests: it stands still until Advance moves it, and
// then fires the timers that came due, earliest first (an AfterFunc
// function runs in its own goroutine, as with time.AfterFunc, so those may
// run in any order). Stop and Reset drop a value a fired timer has not yet
// delivered, as Go 1.23's timers do. Safe for concurrent use.
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

// NewFake returns a Fake clock reading start.
func NewFake(start time.Time) *Fake { return &Fake{now: start} }

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Advance moves the clock forward by d and fires every timer due by then.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	now := f.now
	var due []*fakeTimer
	keep := f.timers[:0]
	for _, t := range f.timers {
		if !t.at.After(now) {
			due = append(due, t)
		} else {
			keep = append(keep, t)
		}
	}
	f.timers = keep
	f.mu.Unlock()
	sort.Slice(due, func(i, j int) bool { return due[i].at.Before(due[j].at) })
	for _, t := range due {
		t.fire(now)
	}
}

// Timers returns how many timers are armed (for tests that wait until a
// goroutine has armed its timer before advancing).
func (f *Fake) Timers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

// NewTimer returns a timer whose channel receives once the clock reaches
// now+d.
func (f *Fake) NewTimer(d time.Duration) Timer {
	t := &fakeTimer{f: f, ch: make(chan time.Time, 1)}
	t.arm(d)
	return t
}

// AfterFunc calls fn in its own goroutine once the clock reaches now+d.
func (f *Fake) AfterFunc(d time.Duration, fn func()) Timer {
	t := &fakeTimer{f: f, fn: fn}
	t.arm(d)
	return t
}

type fakeTimer struct {
	f  *Fake
	at time.Time
	ch chan time.Time
	fn func()
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) arm(d time.Duration) {
	t.f.mu.Lock()
	t.at = t.f.now.Add(d)
	due := d <= 0
	if !due {
		t.f.timers = append(t.f.timers, t)
	}
	now := t.f.now
	t.f.mu.Unlock()
	if due {
		t.fire(now)
	}
}

func (t *fakeTimer) fire(now time.Time) {
	if t.fn != nil {
		go t.fn()
		return
	}
	select {
	case t.ch <- now:
	default:
	}
}

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	for i, x := range t.f.timers {
		if x == t {
			t.f.timers = append(t.f.timers[:i], t.f.timers[i+1:]...)
			return true
		}
	}
	// Fired: a value not yet received is dropped, and the timer counts as
	// stopped, as with Go 1.23's synchronous timer channels.
	select {
	case <-t.ch:
		return true
	default:
		return false
	}
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	active := t.Stop()
	t.arm(d)
	return active
}
