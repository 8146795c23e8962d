package rwlock

import (
	"context"
	"crypto/rand"
	"fmt"
	"strconv"
	"time"

	"github.com/coordhost/coordhost/policies"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/internal/base"
	"github.com/coordhost/coordhost/primitives/internal/handle"
	"github.com/coordhost/coordhost/primitives/internal/keys"
	"github.com/coordhost/coordhost/primitives/internal/replica"
	"github.com/coordhost/coordhost/primitives/internal/script"
	"github.com/coordhost/coordhost/primitives/internal/wait"
)

// request is one validated acquisition: keys are copies, safe to keep.
type request struct {
	key     string // holders: the lock's sorted set
	writers string // pending-writer entries (same slot)
	channel string
	grants  string // test-only grant log (same slot); "" without
	mode    Mode
	ttl     time.Duration // rounded up to whole ms
	ms      string
	token   string
	wid     string // writer id: the pending-writer entry of one AcquireWrite call
	entryMs string // AcquireWrite: the entry's lease in ms
	rep     replica.Wait
}

func (r *request) member() string { return memberOf(r.mode, r.token) }

func (r *request) newToken() { r.token = rand.Text() }

func memberOf(m Mode, token string) string {
	if m == Write {
		return "w:" + token
	}
	return "r:" + token
}

// prepare validates one acquisition of key; nothing is sent.
func (l *Locker) prepare(ctx context.Context, key string, ttl time.Duration, mode Mode) (*request, error) {
	if l == nil || l.client == nil {
		return nil, fmt.Errorf("%w: rwlock: nil Locker (use rwlock.New)", primitives.ErrInvalidOptions)
	}
	if ctx == nil {
		return nil, fmt.Errorf("%w: rwlock: nil context", primitives.ErrInvalidOptions)
	}
	r, err := l.derive(key, mode)
	if err != nil {
		return nil, err
	}
	if r.ttl, r.ms, err = handle.Millis(ttl); err != nil {
		return nil, fmt.Errorf("rwlock: %w", err)
	}
	if l.isClosed() {
		return nil, fmt.Errorf("rwlock %q: %w", r.key, primitives.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("rwlock %q: %w", r.key, err)
	}
	r.token = rand.Text()
	if mode == Write {
		r.wid = rand.Text()
	}
	return r, nil
}

// derive returns a request for key in mode holding the keys and channel
// every call on key uses: the lock's sorted set, its pending-writer key and
// (tests only) the grant log, all in one slot. Errors match
// primitives.ErrInvalidKey; nothing is sent. Acquisitions (prepare) and
// Resume both derive their keys here.
func (l *Locker) derive(key string, mode Mode) (*request, error) {
	full, err := l.space.Key(key)
	if err != nil {
		return nil, fmt.Errorf("%w: rwlock: %w", primitives.ErrInvalidKey, err)
	}
	r := &request{key: full, mode: mode, channel: l.space.Channel("rw", key), rep: l.rep}
	if r.writers, err = l.space.Derived("rw-writers", key); err != nil {
		return nil, fmt.Errorf("%w: rwlock: %w", primitives.ErrInvalidKey, err)
	}
	if l.grantLog {
		if r.grants, err = l.space.Derived("rw-grants", key); err != nil {
			return nil, fmt.Errorf("%w: rwlock: %w", primitives.ErrInvalidKey, err)
		}
	}
	// Check in Go what the scripts rely on: every key in one slot.
	if a, b := keys.Slot(r.key), keys.Slot(r.writers); a != b {
		return nil, fmt.Errorf("%w: rwlock: %q (slot %d) and its pending-writer key %q (slot %d) are in different slots", primitives.ErrInvalidKey, r.key, a, r.writers, b)
	}
	return r, nil
}

// ops are the owner-checked operations of the lease r grants (or
// resumes).
func (r *request) ops() leaseOps {
	return leaseOps{key: r.key, member: r.member(), channel: r.channel, mode: r.mode, rep: r.rep}
}

// Why an attempt was refused (the scripts' reason codes).
const (
	heldByWriter   = 1
	heldByReaders  = 2
	writersWaiting = 3
)

// state is what a refused attempt saw on the server.
type state struct {
	reason  int
	wait    time.Duration // until the deadline that can change the answer; -1 unknown
	readers int           // live readers (writer attempts only)
	writers int           // live pending-writer entries (writer attempts only)
	oldest  time.Duration // the oldest entry's wait; -1 none (writer attempts only)
}

// waitOr returns the state's wait, or d for no state.
func (s *state) waitOr(d time.Duration) time.Duration {
	if s == nil {
		return d
	}
	return s.wait
}

func (s *state) notAcquired(r *request) error {
	name := fmt.Sprintf("rwlock %q", r.key)
	switch s.reason {
	case heldByWriter:
		return fmt.Errorf("%w: %s is held by a writer (expires in %v)", primitives.ErrNotAcquired, name, s.wait)
	case heldByReaders:
		return fmt.Errorf("%w: %s is held by %d reader(s) (the last lease ends in %v)", primitives.ErrNotAcquired, name, s.readers, s.wait)
	case writersWaiting:
		return fmt.Errorf("%w: %s: waiting writers hold new readers off", primitives.ErrNotAcquired, name)
	}
	return fmt.Errorf("%w: %s is held", primitives.ErrNotAcquired, name)
}

// unboundedMs is the bound the write script reads as "never hold readers
// off".
const unboundedMs = "-1"

// attempt runs the acquire script of r's mode once on c. For a writer,
// bound (ms, or unboundedMs) with r.entryMs registers or refreshes its
// pending-writer entry; "" registers nothing. It returns the lease, or nil
// and what the server showed, or an error; after an uncertain outcome it
// settles before returning.
func (l *Locker) attempt(ctx context.Context, c wait.Conn, r *request, bound string) (*Lease, *state, error) {
	sc, keys := l.reads, []string{r.key, r.writers}
	if sc == nil {
		sc = readScript
	}
	var args []string
	if r.mode == Write {
		sc, args = writeScript, []string{r.token, r.ms, r.wid, "0", unboundedMs}
		if bound != "" {
			args[3], args[4] = r.entryMs, bound
		}
	} else {
		args = []string{r.token, r.ms}
	}
	if r.grants != "" {
		keys, args = append(keys, r.grants), append(args, "1")
	}
	name := fmt.Sprintf("rwlock %q", r.key)
	sent := l.clk.Now()
	res, ack := l.rep.Run(ctx, c, sc, keys, args)
	vals, err := res.ToArray()
	if err == nil && len(vals) < 2 {
		err = fmt.Errorf("%s: %s returned %d values", name, sc.Name(), len(vals))
	}
	if err != nil {
		err = sc.Classify(err)
		if script.IsUncertain(err) {
			l.settle(ctx, c, r)
			return nil, nil, &base.Uncertain{Name: name, Op: "acquire", Settled: "released best effort", Err: err}
		}
		return nil, nil, handle.MapScriptErr(name, err)
	}
	ints := make([]int64, len(vals))
	for i, v := range vals {
		if ints[i], err = v.AsInt64(); err != nil {
			return nil, nil, fmt.Errorf("%s: %s: value %d: %w", name, sc.Name(), i, err)
		}
	}
	if ints[0] == 0 {
		st := &state{wait: time.Duration(ints[1]) * time.Millisecond, oldest: -1}
		if len(ints) > 2 {
			st.reason = int(ints[2])
		}
		if len(ints) > 5 {
			st.readers, st.writers = int(ints[3]), int(ints[4])
			if ints[5] >= 0 {
				st.oldest = time.Duration(ints[5]) * time.Millisecond
			}
		}
		return nil, st, nil
	}
	if !ack.OK() {
		// Granted on the primary only, as far as anyone knows.
		l.settle(ctx, c, r)
		return nil, nil, ack.Err(name, "acquire", "released")
	}
	ls := &Lease{mode: r.mode, granted: ints[1]}
	ls.h.Init(l.client, l.clk, r.key, r.token, r.ops(), sent, r.ttl)
	if ls.h.Expired() {
		// The grant arrived after the whole lease had run out locally.
		l.settle(ctx, c, r)
		return nil, nil, &base.LateGrant{Name: name}
	}
	return ls, nil, nil
}

// bound consults the starvation policy for a waiting writer with what its
// previous attempt saw, and returns the bound for the script: whole ms
// rounded up, or unboundedMs. The policy sees this writer among the
// waiting writers, and the oldest wait at least as long as its own.
func (l *Locker) bound(ctx context.Context, r *request, seen *state, start time.Time, registered bool) (string, error) {
	if l.starve == nil {
		return unboundedMs, nil
	}
	req := policies.StarvationRequest{Readers: seen.readers, Writers: seen.writers, OldestWriterWait: max(seen.oldest, time.Since(start))}
	if !registered {
		req.Writers++
	}
	d := l.starve.WriterBound(ctx, req)
	if err := ctx.Err(); err != nil {
		return "", err // the answer may be a fallback nobody asked for
	}
	switch {
	case d <= 0:
		return "0", nil
	case d > MaxTTL:
		return unboundedMs, nil
	}
	return msString(d), nil
}

// msString is d in whole milliseconds, rounded up.
func msString(d time.Duration) string {
	return strconv.FormatInt(int64((d+time.Millisecond-1)/time.Millisecond), 10)
}
