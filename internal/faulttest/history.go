package faulttest

import (
	"math"
	"slices"
	"sync"
	"time"
)

// Infinity is the Return of an operation whose outcome is unknown: it may
// take effect at any point after its call (porcupine's convention for
// pending operations).
const Infinity = time.Duration(math.MaxInt64)

// Op is one recorded operation.
type Op struct {
	Client int
	// Call is when the operation was invoked, Return when its outcome was
	// known, both measured from the history's start on the monotonic
	// clock. Return is Infinity when the outcome is unknown.
	Call, Return time.Duration
	// Ended is when the call came back to its caller, even with an unknown
	// outcome (for reports and for settling).
	Ended  time.Duration
	Input  any
	Output any
	// Err is the error that made the outcome unknown, if any.
	Err error
}

// Unknown reports whether the operation's outcome is unknown.
func (o Op) Unknown() bool { return o.Return == Infinity }

// History records operations from many goroutines. Safe for concurrent use.
type History struct {
	start time.Time
	mu    sync.Mutex
	ops   []Op
}

// NewHistory starts a history; times are measured from now.
func NewHistory() *History { return &History{start: time.Now()} }

// Since returns the history time of t.
func (h *History) Since(t time.Time) time.Duration { return t.Sub(h.start) }

// Now returns the current history time.
func (h *History) Now() time.Duration { return time.Since(h.start) }

// Pending is an operation that has been called and not yet recorded. It
// belongs to the goroutine that called Begin.
type Pending struct {
	h  *History
	op Op
}

// Begin records the invocation of an operation by client, now.
func (h *History) Begin(client int, input any) *Pending {
	return &Pending{h: h, op: Op{Client: client, Input: input, Call: h.Now()}}
}

// SetInput replaces the input (for inputs learnt during the call, such as
// the token an acquire sent).
func (p *Pending) SetInput(input any) { p.op.Input = input }

// Return records a known outcome, now.
func (p *Pending) Return(output any) {
	p.op.Return = p.h.Now()
	p.op.Ended = p.op.Return
	p.op.Output = output
	p.h.add(p.op)
}

// Unknown records an outcome that is unknown because of err (a timeout or
// transport error): Return is Infinity. output is what is known, if
// anything (e.g. an acquire's "unknown" marker).
func (p *Pending) Unknown(output any, err error) {
	p.op.Ended = p.h.Now()
	p.op.Return = Infinity
	p.op.Output = output
	p.op.Err = err
	p.h.add(p.op)
}

func (h *History) add(op Op) {
	h.mu.Lock()
	h.ops = append(h.ops, op)
	h.mu.Unlock()
}

// Ops returns a copy of the recorded operations ordered by call time.
func (h *History) Ops() []Op {
	h.mu.Lock()
	ops := slices.Clone(h.ops)
	h.mu.Unlock()
	slices.SortStableFunc(ops, func(a, b Op) int {
		switch {
		case a.Call < b.Call:
			return -1
		case a.Call > b.Call:
			return 1
		}
		return 0
	})
	return ops
}

// Len returns the number of recorded operations.
func (h *History) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.ops)
}
