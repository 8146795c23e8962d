package ratelimit

import (
	"context"
	"time"

	"github.com/coordhost/coordhost/primitives/internal/clock"
)

// waiter is one queued Acquire call.
type waiter struct {
	n      int64 // permits to consume
	need   int64 // permits it waits for: n, or 1 for n = 0 (a queued peek holds room too)
	ctx    context.Context
	wakeAt time.Time // when the server said its permits would be back
	done   chan struct{}
	res    Result
	err    error
	prev   *waiter
	next   *waiter
	queued bool
}

func (w *waiter) finish(res Result, err error) {
	w.res, w.err = res, err
	close(w.done)
}

// queue is a deque of waiters; the front is served next. It keeps the sum
// of their permits. Guarded by Limiter.mu.
type queue struct {
	head, tail *waiter
	n          int
	permits    int64
}

func (q *queue) len() int { return q.n }

func (q *queue) pushFront(w *waiter) {
	w.prev, w.next, w.queued = nil, q.head, true
	if q.head != nil {
		q.head.prev = w
	} else {
		q.tail = w
	}
	q.head = w
	q.n++
	q.permits += w.need
}

func (q *queue) pushBack(w *waiter) {
	w.prev, w.next, w.queued = q.tail, nil, true
	if q.tail != nil {
		q.tail.next = w
	} else {
		q.head = w
	}
	q.tail = w
	q.n++
	q.permits += w.need
}

func (q *queue) remove(w *waiter) {
	if !w.queued {
		return
	}
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		q.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		q.tail = w.prev
	}
	w.prev, w.next, w.queued = nil, nil, false
	q.n--
	q.permits -= w.need
}

func (q *queue) popFront() *waiter {
	w := q.head
	if w != nil {
		q.remove(w)
	}
	return w
}

// Acquire grants n permits like TryAcquire, and when they are not
// available, queues the call in this Limiter (if the queue has room for n
// more permits) until the server says they are back, then retries; it
// never polls. Queued calls are served in the QueueOrder of the options;
// only the call at the front of the queue asks the server, so a queue
// costs one round trip per retry, not one per caller. The order is local:
// other processes, and calls in this one that arrive while the front is
// being retried, can take permits first.
//
// Not acquired (no error) when n is more than the limit (RetryAfter 0),
// or when the queue has no room (with the RetryAfter of the server's
// refusal); with NewestFirst, a full queue refuses its oldest calls to
// make room for a new one. With QueueLimit 0 (the default) the queue never
// has room, so Acquire answers at once, as TryAcquire does; use Wait or
// WaitN to sleep until the permits are back. n = 0 waits until a permit is
// available and consumes nothing.
//
// A call whose permits the server says are back only after ctx's deadline
// (or, OldestFirst, that would queue behind a call waiting beyond it) is
// not queued, or leaves the queue when a retry learns it: it returns not
// acquired with a RetryAfter at once, instead of holding queue room until
// the deadline (WaitN turns this into ErrWouldExceedDeadline).
//
// Errors: as TryAcquire; ctx.Err() when ctx ends while queued (nothing was
// consumed for it unless a retry was under way); primitives.ErrClosed when
// the Limiter is closed while queued. After an error, permits may have been
// consumed on the server for a retry that was under way.
func (l *Limiter) Acquire(ctx context.Context, n int64) (Result, error) {
	return l.run(ctx, n, (*Limiter).acquire)
}

// acquire is Acquire after its checks and begin.
func (l *Limiter) acquire(ctx context.Context, n int64, never bool) (Result, error) {
	if never {
		return l.never(ctx), nil
	}
	need := max(n, 1)
	l.mu.Lock()
	jump := l.order == NewestFirst || l.q.len() == 0
	l.mu.Unlock()
	var (
		res Result
		got time.Time
		err error
	)
	if jump {
		res, got, err = l.decide(ctx, n, need)
		if err != nil || res.Acquired || l.queueLimit < need || pastDeadline(ctx, got.Add(res.RetryAfter)) {
			return l.count(res, err)
		}
	}
	w := &waiter{n: n, need: need, ctx: ctx, done: make(chan struct{})}
	if jump {
		w.wakeAt = got.Add(res.RetryAfter)
	}
	ok, behind, err := l.enqueue(w)
	if err != nil {
		return Result{}, err
	}
	if !ok {
		if !jump {
			// Refused without asking: the RetryAfter of a peek, which
			// consumes nothing, or the front's wait when longer.
			res, _, err = l.decide(ctx, 0, need)
			if err == nil {
				res.Acquired = false
				res.RetryAfter = max(res.RetryAfter, behind.Sub(l.ls.clk.Now()), time.Millisecond)
			}
		}
		return l.count(res, err)
	}
	select {
	case <-w.done:
		return l.count(w.res, w.err)
	case <-ctx.Done():
	}
	l.mu.Lock()
	select {
	case <-w.done:
		// Served while ctx ended: report the grant, not a lost one.
		l.mu.Unlock()
		return l.count(w.res, w.err)
	default:
	}
	front := l.q.head == w
	l.q.remove(w)
	l.mu.Unlock()
	if front {
		l.poke()
	}
	return Result{}, ctx.Err()
}

// enqueue queues w if the queue has room (after refusing its oldest calls,
// for NewestFirst), and starts the dispatcher. False: no room, or (behind
// a front that waits beyond w's deadline) no use; behind is then when the
// front's permits were said to be back. w's own wakeAt is never the
// front's: if the front leaves, w retries at once.
func (l *Limiter) enqueue(w *waiter) (ok bool, behind time.Time, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.isClosed {
		return false, time.Time{}, l.closedErr()
	}
	if l.order == NewestFirst {
		// Refuse the oldest calls to make room, but never one whose
		// retry is in flight: the server may be granting it right now.
		room := l.queueLimit - l.q.permits
		for old := l.q.tail; old != nil && room < w.need; old = old.prev {
			if old != l.inflight {
				room += old.need
			}
		}
		if room < w.need {
			return false, time.Time{}, nil
		}
		for old := l.q.tail; old != nil && l.q.permits+w.need > l.queueLimit; {
			prev := old.prev
			if old != l.inflight {
				l.q.remove(old)
				old.finish(Result{Remaining: l.available.Load(), RetryAfter: l.untilWake(old), Limit: l.policy.Limit, Window: l.policy.Window}, nil)
			}
			old = prev
		}
		l.q.pushFront(w)
	} else {
		if h := l.q.head; h != nil {
			// Served after the front: when refused, come back no sooner
			// than the front's permits are back.
			behind = h.wakeAt
		}
		if l.q.permits+w.need > l.queueLimit || pastDeadline(w.ctx, behind) {
			return false, behind, nil
		}
		l.q.pushBack(w)
	}
	if !l.running {
		l.running = true
		l.done.Add(1)
		go l.dispatch()
	} else if l.q.head == w {
		l.poke()
	}
	return true, time.Time{}, nil
}

// pastDeadline reports whether ctx ends before at.
func pastDeadline(ctx context.Context, at time.Time) bool {
	dl, ok := ctx.Deadline()
	return ok && dl.Before(at)
}

// untilWake is how long until w's permits were said to be back.
func (l *Limiter) untilWake(w *waiter) time.Duration {
	return max(w.wakeAt.Sub(l.ls.clk.Now()), time.Millisecond)
}

// poke tells the dispatcher the front of the queue changed.
func (l *Limiter) poke() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// dispatch serves the queue: it waits until the front call's permits were
// said to be back, retries it, and on a refusal waits for the new time the
// server gives. It ends when the queue is empty or the Limiter closed.
func (l *Limiter) dispatch() {
	defer l.done.Done()
	clk := l.ls.clk
	var timer clock.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		l.mu.Lock()
		w := l.q.head
		if w == nil || l.isClosed {
			l.running = false
			l.mu.Unlock()
			return
		}
		wakeAt := w.wakeAt
		l.mu.Unlock()

		if d := wakeAt.Sub(clk.Now()); d > 0 {
			if timer == nil {
				timer = clk.NewTimer(d)
			} else {
				timer.Stop()
				timer.Reset(d)
			}
			select {
			case <-timer.C():
			case <-l.kick:
				continue
			case <-l.closed:
				continue
			}
		}

		l.mu.Lock()
		if !w.queued {
			l.mu.Unlock()
			continue
		}
		l.inflight = w
		l.mu.Unlock()
		ctx, cancel := context.WithCancel(w.ctx)
		stop := context.AfterFunc(l.stopCtx, cancel)
		res, got, err := l.decide(ctx, w.n, w.need)
		stop()
		cancel()

		l.mu.Lock()
		l.inflight = nil
		switch {
		case !w.queued:
			// Cancelled or closed meanwhile: its caller is gone, and
			// any permits this retry consumed are lost with it.
		case err != nil || res.Acquired:
			l.q.remove(w)
			w.finish(res, err)
		case pastDeadline(w.ctx, got.Add(res.RetryAfter)):
			// Its caller would wait in vain and hold room others can
			// use: refuse it now, with when to come back.
			l.q.remove(w)
			w.finish(res, nil)
		default:
			w.wakeAt = got.Add(res.RetryAfter)
			w.res = res
		}
		l.mu.Unlock()
	}
}
