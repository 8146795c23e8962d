package lock

import (
	"context"
	"crypto/rand"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/internal/base"
	"github.com/coordhost/coordhost/primitives/internal/handle"
	"github.com/coordhost/coordhost/primitives/internal/keys"
	"github.com/coordhost/coordhost/primitives/internal/script"
	"github.com/coordhost/coordhost/primitives/internal/wait"
	"github.com/redis/rueidis"
)

// prepare validates one acquire of key and builds its request; nothing is
// sent. Fenced acquires go through prepareFenced.
func (l *Locker) prepare(ctx context.Context, key string, ttl time.Duration) (*request, error) {
	if err := l.check(ctx); err != nil {
		return nil, err
	}
	full, err := l.space.Key(key)
	if err != nil {
		return nil, fmt.Errorf("lock: %w: %w", primitives.ErrInvalidKey, err)
	}
	r := &request{key: full, channel: l.space.Channel("rel", key)}
	if r.ttl, r.ms, err = handle.Millis(ttl); err != nil {
		return nil, fmt.Errorf("lock %q: %w", full, err)
	}
	if l.fence {
		if r.fence, err = l.space.Derived("fence", key); err != nil {
			return nil, fmt.Errorf("lock: %w: %w", primitives.ErrInvalidKey, err)
		}
	}
	if l.fifo {
		if r.queue, err = l.space.Derived("queue", key); err == nil {
			r.deadlines, err = l.space.Derived("queue-deadlines", key)
		}
		if err != nil {
			return nil, fmt.Errorf("lock: %w: %w", primitives.ErrInvalidKey, err)
		}
		r.seq = strconv.FormatUint(l.seq.Add(1)%1024, 10)
		r.queueMs, r.waiter = "0", rand.Text()
	}
	return l.finish(ctx, r, key)
}

func (l *Locker) prepareFenced(ctx context.Context, leaseKey, counterKey string, ttl time.Duration) (*request, error) {
	if err := l.check(ctx); err != nil {
		return nil, err
	}
	full, err := l.space.Key(leaseKey)
	if err != nil {
		return nil, fmt.Errorf("lock: lease key: %w: %w", primitives.ErrInvalidKey, err)
	}
	counter, err := l.space.Key(counterKey)
	if err != nil {
		return nil, fmt.Errorf("lock: counter key: %w: %w", primitives.ErrInvalidKey, err)
	}
	if full == counter {
		return nil, fmt.Errorf("%w: lock: lease key and counter key are both %q", primitives.ErrInvalidKey, full)
	}
	if a, b := keys.Slot(full), keys.Slot(counter); a != b {
		return nil, fmt.Errorf("%w: lock: lease key %q (slot %d) and counter key %q (slot %d) are in different cluster slots; give them one hash tag", primitives.ErrInvalidKey, full, a, counter, b)
	}
	r := &request{key: full, fence: counter, channel: l.space.Channel("rel", leaseKey)}
	if r.ttl, r.ms, err = handle.Millis(ttl); err != nil {
		return nil, fmt.Errorf("lock %q: %w", full, err)
	}
	if l.fifo {
		if r.queue, err = l.space.Derived("queue", leaseKey); err == nil {
			r.deadlines, err = l.space.Derived("queue-deadlines", leaseKey)
		}
		if err != nil {
			return nil, fmt.Errorf("lock: %w: %w", primitives.ErrInvalidKey, err)
		}
		r.seq = strconv.FormatUint(l.seq.Add(1)%1024, 10)
		r.queueMs, r.waiter = "0", rand.Text()
	}
	return l.finish(ctx, r, leaseKey)
}

func (l *Locker) check(ctx context.Context) error {
	if l == nil || l.client == nil {
		return fmt.Errorf("%w: lock: nil Locker (use lock.New)", primitives.ErrInvalidOptions)
	}
	if ctx == nil {
		return fmt.Errorf("%w: lock: nil context", primitives.ErrInvalidOptions)
	}
	return nil
}

// finish fills what every request needs once its keys are valid.
func (l *Locker) finish(ctx context.Context, r *request, key string) (*request, error) {
	r.token = rand.Text()
	if l.grantLog {
		var err error
		if r.grants, err = l.space.Derived("grants", key); err != nil {
			return nil, fmt.Errorf("lock: %w: %w", primitives.ErrInvalidKey, err)
		}
	}
	if l.isClosed() {
		return nil, fmt.Errorf("lock %q: %w", r.key, primitives.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("lock %q: %w", r.key, err)
	}
	return r, nil
}

// attempt runs the acquire script once on c. It returns the lock, or nil
// and the holder's TTL, or an error. After an uncertain outcome it releases
// the token best effort before returning the error.
func (l *Locker) attempt(ctx context.Context, c wait.Conn, r *request) (*Lock, time.Duration, error) {
	return l.attemptOn(ctx, c, r)
}

// attemptFirst is the caller's first attempt, on the shared client. For a
// plain lock (no fencing, FIFO or grant log) it sends SET NX GET PX (Redis
// 7.0+), which costs the server less than a script and still answers in
// one round trip: nil when granted, the holder's token when held, WRONGTYPE
// for a foreign value. The holder's TTL is then unknown (-1); a waiter
// learns it from its next attempt. With Options.Replicas the script runs
// instead, followed by WAIT (attemptOn).
func (l *Locker) attemptFirst(ctx context.Context, r *request) (*Lock, time.Duration, error) {
	if r.fence != "" || r.queue != "" || r.grants != "" || l.rep.On() {
		return l.attemptOn(ctx, wait.Conn{CoreClient: l.client}, r)
	}
	sent := l.clk.Now()
	err := script.Do(ctx, l.client, func() rueidis.Completed {
		return l.client.B().Set().Key(r.key).Value(r.token).Nx().Get().PxMilliseconds(int64(r.ttl / time.Millisecond)).Build()
	}).Error()
	switch {
	case rueidis.IsRedisNil(err):
		return l.granted(ctx, wait.Conn{}, r, sent, 0)
	case err == nil:
		return nil, -1, nil
	case script.IsUncertain(err):
		l.settle(ctx, wait.Conn{}, r, false)
		return nil, 0, uncertain(r.key, err)
	}
	if rerr, ok := rueidis.IsRedisErr(err); ok && strings.HasPrefix(rerr.Error(), "WRONGTYPE") {
		return nil, 0, fmt.Errorf("lock %q: %w", r.key, primitives.ErrWrongType)
	}
	if _, refused := script.IsRefusal(err); refused {
		return nil, 0, fmt.Errorf("lock %q: %w: %w", r.key, primitives.ErrUnavailable, err)
	}
	return nil, 0, fmt.Errorf("lock %q: %w", r.key, err)
}

func (l *Locker) attemptOn(ctx context.Context, c wait.Conn, r *request) (*Lock, time.Duration, error) {
	sc, keys, args := acquireScript, []string{r.key}, []string{r.token, r.ms}
	if r.queue != "" {
		sc, keys, args = fifoScript, append(keys, r.queue, r.deadlines), append(args, r.seq, r.queueMs, r.waiter)
	}
	if r.fence != "" {
		keys = append(keys, r.fence)
	}
	if r.grants != "" && r.queue == "" {
		keys, args = append(keys, r.grants), append(args, "1")
	}
	sent := l.clk.Now()
	res, ack := l.rep.Run(ctx, c, sc, keys, args)
	vals, err := res.ToArray()
	if err == nil && len(vals) != 2 {
		err = fmt.Errorf("lock: acquire script returned %d values, want 2", len(vals))
	}
	if err != nil {
		err = sc.Classify(err)
		if script.IsUncertain(err) {
			// A FIFO waiter keeps its queue entry (and so its place): the
			// next attempt refreshes it under a fresh token. Leaving here
			// best effort, then queueing anew, left orphaned entries at
			// the head that held everyone up until QueueEntryTTL. (When
			// the lost attempt was itself the grant, the entry went with
			// it: once the cleanup releases that grant, the waiter queues
			// again at the tail.)
			l.settle(ctx, c, r, l.freshQueueEntry)
			return nil, 0, uncertain(r.key, err)
		}
		return nil, 0, handle.MapScriptErr(fmt.Sprintf("lock %q", r.key), err)
	}
	flag, err := vals[0].AsInt64()
	if err != nil {
		return nil, 0, fmt.Errorf("lock %q: acquire script: %w", r.key, err)
	}
	if flag == 0 {
		pttl, err := vals[1].AsInt64()
		if err != nil {
			return nil, 0, fmt.Errorf("lock %q: acquire script: %w", r.key, err)
		}
		return nil, time.Duration(pttl) * time.Millisecond, nil
	}
	var fence int64
	if r.fence != "" {
		s, err := vals[1].ToString()
		if err == nil {
			fence, err = strconv.ParseInt(s, 10, 64)
		}
		if err != nil {
			l.settle(ctx, c, r, true)
			return nil, 0, fmt.Errorf("lock %q: fencing token: %w", r.key, err)
		}
	}
	if !ack.OK() {
		// Granted (and the token drawn) on the primary only, as far as
		// anyone knows: a failover could hand the lock out again.
		l.settle(ctx, c, r, false)
		return nil, 0, ack.Err(fmt.Sprintf("lock %q", r.key), "acquire", "released")
	}
	return l.granted(ctx, c, r, sent, fence)
}

// granted builds the handle for a grant whose command was sent at sent.
func (l *Locker) granted(ctx context.Context, c wait.Conn, r *request, sent time.Time, fence int64) (*Lock, time.Duration, error) {
	lk := &Lock{fence: fence}
	lk.h.Init(l.client, l.clk, r.key, r.token, lockOps{key: r.key, channel: r.channel, rep: l.rep}, sent, r.ttl)
	if lk.h.Expired() {
		// The grant arrived after the whole lease had run out locally: not
		// acquired, and someone else may already hold it.
		l.settle(ctx, c, r, false)
		return nil, 0, &base.LateGrant{Name: fmt.Sprintf("lock %q", r.key)}
	}
	return lk, 0, nil
}

func uncertain(key string, err error) error {
	return &base.Uncertain{Name: fmt.Sprintf("lock %q", key), Op: "acquire", Settled: "released best effort", Err: err}
}

func notAcquired(key string, holderTTL time.Duration) error {
	if holderTTL == -2*time.Millisecond {
		// PTTL -2: no holder, but FIFO waiters are queued before us.
		return fmt.Errorf("%w: lock %q is free but earlier waiters are queued (FIFO)", primitives.ErrNotAcquired, key)
	}
	if holderTTL >= 0 {
		return fmt.Errorf("%w: lock %q is held (expires in %v)", primitives.ErrNotAcquired, key, holderTTL)
	}
	return fmt.Errorf("%w: lock %q is held", primitives.ErrNotAcquired, key)
}

// request is one validated acquire: keys are copies, safe to keep.
type request struct {
	key, fence, channel string
	queue, deadlines    string        // FIFO only
	ttl                 time.Duration // rounded up to whole ms
	ms                  string
	token               string
	seq                 string // FIFO arrival sequence
	queueMs             string // FIFO queue entry lease; "0" = do not queue
	waiter              string // FIFO queue member: one per Acquire call, kept across tokens
	grants              string // test-only grant log key (see grantLog)
}
