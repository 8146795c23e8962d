package latch

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"strconv"

	"github.com/coordhost/coordhost/primitives"
	"github.com/redis/rueidis"
)

// Latch is a handle on one generation of a latch. Its methods are safe for
// concurrent use, and a *Latch may be shared; a zero Latch, or a nil
// *Latch, is no handle: its calls fail with primitives.ErrInvalidOptions.
type Latch struct {
	ls      *Latches
	key     string // prefix included
	gen     string
	channel string
}

// Key returns the latch's key, prefix included.
func (l *Latch) Key() string {
	if l == nil {
		return ""
	}
	return l.key
}

// Generation returns the generation's token: random, unique to this
// generation (a Reset makes a new one). Another process can act on
// exactly this generation with Latches.Attach.
func (l *Latch) Generation() string {
	if l == nil {
		return ""
	}
	return l.gen
}

func (l *Latch) describe() string {
	return fmt.Sprintf("latch %q", l.key)
}

// check validates what every handle call shares.
func (l *Latch) check(ctx context.Context, op string) error {
	if l == nil || l.ls == nil {
		return fmt.Errorf("%w: latch: %s on a handle that no Create, Reset, Join or Attach returned", primitives.ErrInvalidOptions, op)
	}
	if ctx == nil {
		return fmt.Errorf("%w: latch: nil context", primitives.ErrInvalidOptions)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %s: %w", l.describe(), op, err)
	}
	return nil
}

// CountDown decrements this generation's count by one, atomically, and
// returns the remaining count; the count-down that reaches zero wakes the
// waiters. It returns -1 (and no error) when this generation is no longer
// the latch's current one: replaced by a Reset, deleted or expired;
// nothing is written then. On a generation whose count is already zero it
// writes nothing and fails with an error matching ErrCompleted: a count
// never goes below zero. Each count-down sets the key's expiry to
// Options.TTL from now.
//
// Never retried: when the reply is lost or ctx ends while it is in flight,
// the count-down may or may not have happened, and the error matches
// primitives.ErrUncertain. Other errors: primitives.ErrWrongType (the key
// now holds something that is not a latch), primitives.ErrInvalidOptions
// (nil ctx, no handle), ctx.Err() (nothing sent). It works after
// Latches.Close.
func (l *Latch) CountDown(ctx context.Context) (int64, error) {
	if err := l.check(ctx, "count down"); err != nil {
		return 0, err
	}
	c := l.ls.client
	n, err := countDownScript.Run(ctx, c, []string{l.key}, []string{l.gen, l.ls.ttlMs, l.channel}).AsInt64()
	if err != nil {
		return 0, l.explain("count down", countDownScript.Classify(err))
	}
	switch {
	case n == -2:
		return 0, fmt.Errorf("%w: %s generation %s has count 0", ErrCompleted, l.describe(), l.gen)
	case n < -1:
		return 0, fmt.Errorf("%s: count-down script returned %d", l.describe(), n)
	}
	return n, nil
}

// Count returns this generation's remaining count: 0 once it completed
// (also after a Reset replaced it, while the latch remembers that, see the
// package documentation), -1 when it is no longer the current generation
// and not known to have completed (replaced, deleted or expired). Reads
// never change the latch or its expiry. A transport error is retried as
// Options.Retry says. Other errors: primitives.ErrWrongType,
// primitives.ErrInvalidOptions, ctx.Err(). It works after Latches.Close.
func (l *Latch) Count(ctx context.Context) (int64, error) {
	if err := l.check(ctx, "count"); err != nil {
		return 0, err
	}
	var st state
	if err := l.ls.retrying(ctx, func() (err error) {
		st, err = read(ctx, l.ls.client, l.key)
		return err
	}); err != nil {
		return 0, l.explain("count", err)
	}
	switch {
	case st.exists && st.gen == l.gen:
		return st.count, nil
	case st.exists && st.done == l.gen:
		return 0, nil
	}
	return -1, nil
}

// Delete deletes the latch if this generation is still its current one,
// and wakes its waiters (they return false); it reports whether it
// deleted. Use it to end a latch before its TTL. Not retried: when the
// reply is lost the error matches primitives.ErrUncertain. Other errors as
// for CountDown. It works after Latches.Close.
func (l *Latch) Delete(ctx context.Context) (bool, error) {
	if err := l.check(ctx, "delete"); err != nil {
		return false, err
	}
	n, err := deleteScript.Run(ctx, l.ls.client, []string{l.key}, []string{l.gen, l.channel}).AsInt64()
	if err != nil {
		return false, l.explain("delete", deleteScript.Classify(err))
	}
	return n == 1, nil
}

// state is what latch_read found.
type state struct {
	exists bool
	gen    string
	count  int64
	done   string // the last replaced generation that had completed
	pttl   int64  // ms; -1 no expiry
}

// outcome says what st means for a waiter of generation gen: finished
// (true when the count reached zero, false when the generation is gone) or
// not yet.
func (st state) outcome(gen string) (finished, completed bool) {
	switch {
	case st.exists && st.gen == gen:
		return st.count == 0, st.count == 0
	case st.exists && st.done == gen:
		return true, true
	}
	return true, false
}

// read runs latch_read on c.
func read(ctx context.Context, c rueidis.CoreClient, key string) (state, error) {
	vals, err := readScript.Run(ctx, c, []string{key}, nil).ToArray()
	if err != nil {
		return state{}, readScript.Classify(err)
	}
	if len(vals) != 4 {
		return state{}, fmt.Errorf("read script returned %d values, want 4", len(vals))
	}
	var st state
	if st.gen, err = vals[0].ToString(); err != nil {
		return state{}, fmt.Errorf("read script: %w", err)
	}
	if st.pttl, err = vals[3].AsInt64(); err != nil {
		return state{}, fmt.Errorf("read script: %w", err)
	}
	if st.gen == "" {
		return state{}, nil
	}
	st.exists = true
	n, _ := vals[1].ToString()
	if st.count, err = strconv.ParseInt(n, 10, 64); err != nil {
		return state{}, fmt.Errorf("read script: count %q: %w", n, err)
	}
	st.done, _ = vals[2].ToString()
	return st, nil
}

func randUint64() uint64 { return mrand.Uint64() }
