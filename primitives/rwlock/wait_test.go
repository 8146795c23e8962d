package rwlock_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/faulttest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/policies"
	"github.com/coordhost/coordhost/policies/builtin"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/rwlock"
	"github.com/redis/rueidis"
)

// writersKey is the pending-writer key of key (no prefix, no hash tag).
func writersKey(key string) string {
	if strings.HasPrefix(key, "{") {
		return "__coordhost:rw-writers:!" + key // escaped, see keys.Space.Derived
	}
	if strings.Contains(key, "{") {
		return "__coordhost:rw-writers:" + key
	}
	return "__coordhost:rw-writers:{" + key + "}"
}

// entry is one pending-writer entry as stored.
type entry struct{ arrival, bound, deadline int64 }

func entries(t *testing.T, cmd func(...string) string, key string) map[string]entry {
	t.Helper()
	out := map[string]entry{}
	flat := cmd("HGETALL", writersKey(key))
	if flat == "" {
		return out
	}
	fields := strings.Split(flat, "\n")
	for i := 0; i+1 < len(fields); i += 2 {
		p := strings.Fields(fields[i+1])
		if len(p) != 3 {
			t.Fatalf("entry %q = %q", fields[i], fields[i+1])
		}
		var e entry
		e.arrival, _ = strconv.ParseInt(p[0], 10, 64)
		e.bound, _ = strconv.ParseInt(p[1], 10, 64)
		e.deadline, _ = strconv.ParseInt(p[2], 10, 64)
		out[fields[i]] = e
	}
	return out
}

// waitEntries waits until key has n pending-writer entries.
func waitEntries(t *testing.T, cmd func(...string) string, key string, n int) map[string]entry {
	t.Helper()
	var es map[string]entry
	xtest.Eventually(t, 5*time.Second, "waiting writers registered", func() bool {
		es = entries(t, cmd, key)
		return len(es) == n
	})
	return es
}

// background runs an acquisition in a goroutine.
type background struct {
	done chan struct{}
	l    *rwlock.Lease
	err  error
	took time.Duration
	end  time.Time // when fn returned
}

func goAcquire(fn func() (*rwlock.Lease, error)) *background {
	b := &background{done: make(chan struct{})}
	start := time.Now()
	go func() {
		defer close(b.done)
		b.l, b.err = fn()
		b.end = time.Now()
		b.took = b.end.Sub(start)
	}()
	return b
}

func (b *background) wait(t *testing.T, within time.Duration) (*rwlock.Lease, error) {
	t.Helper()
	select {
	case <-b.done:
		return b.l, b.err
	case <-time.After(within):
		t.Fatalf("still waiting after %v", within)
		return nil, nil
	}
}

func (b *background) returned() bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

func mustRead(t *testing.T, ctx context.Context, l *rwlock.Locker, key string, ttl time.Duration) *rwlock.Lease {
	t.Helper()
	r, err := l.TryAcquireRead(ctx, key, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func bounded(d time.Duration) rwlock.Options {
	return rwlock.Options{Starvation: builtin.WriterPreference{Bound: d}}
}

func testReaderWaitsForWriter(t *testing.T, tg *target) {
	ctx := xtest.Ctx(t, 20*time.Second)
	l := newLocker(t, tg.c, rwlock.Options{})
	w, err := l.TryAcquireWrite(ctx, "rw1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	readers := make([]*background, 3)
	for i := range readers {
		readers[i] = goAcquire(func() (*rwlock.Lease, error) { return l.AcquireRead(ctx, "rw1", time.Minute) })
	}
	time.Sleep(100 * time.Millisecond)
	for _, r := range readers {
		if r.returned() {
			t.Fatalf("a reader returned while the writer holds: %v", r.err)
		}
	}
	w.Release(ctx)
	for _, r := range readers {
		lease, err := r.wait(t, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer lease.Release(ctx)
	}
	if n := len(members(tg.cmd, "rw1")); n != 3 {
		t.Fatalf("%d members, want the 3 readers", n)
	}
}

func testWriterWaitsForReaders(t *testing.T, tg *target) {
	ctx := xtest.Ctx(t, 20*time.Second)
	l := newLocker(t, tg.c, rwlock.Options{})
	var rs []*rwlock.Lease
	for range 3 {
		rs = append(rs, mustRead(t, ctx, l, "rw2", time.Minute))
	}
	w := goAcquire(func() (*rwlock.Lease, error) { return l.AcquireWrite(ctx, "rw2", time.Minute) })
	for _, r := range rs {
		time.Sleep(50 * time.Millisecond)
		if w.returned() {
			t.Fatalf("the writer returned while readers hold: %v", w.err)
		}
		r.Release(ctx)
	}
	lease, err := w.wait(t, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	lease.Release(ctx)
	if n := tg.cmd("EXISTS", writersKey("rw2")); n != "0" {
		t.Fatalf("pending-writer key left behind (EXISTS %s)", n)
	}
}

// With bound 0 a waiting writer refuses new readers at once; readers that
// hold may renew; the writer is granted when they leave.
func testStrictWriterPreference(t *testing.T, tg *target) {
	ctx := xtest.Ctx(t, 20*time.Second)
	readers := newLocker(t, tg.c, rwlock.Options{})
	writer := newLocker(t, tg.client(t), bounded(0))
	r := mustRead(t, ctx, readers, "rw3", 10*time.Second)
	w := goAcquire(func() (*rwlock.Lease, error) { return writer.AcquireWrite(ctx, "rw3", time.Minute) })
	es := waitEntries(t, tg.cmd, "rw3", 1)
	for _, e := range es {
		if e.bound != 0 || e.deadline-e.arrival > rwlock.DefaultMarkerTTL.Milliseconds() {
			t.Fatalf("entry %+v", e)
		}
	}
	_, err := readers.TryAcquireRead(ctx, "rw3", time.Second)
	if !errors.Is(err, primitives.ErrNotAcquired) || !strings.Contains(err.Error(), "waiting writers") {
		t.Fatalf("a new reader while a writer waits with bound 0: %v", err)
	}
	blocked := goAcquire(func() (*rwlock.Lease, error) { return readers.AcquireRead(ctx, "rw3", time.Minute) })
	if ok, err := r.Renew(ctx, 10*time.Second); !ok || err != nil {
		t.Fatalf("a holding reader renews while held off: %v, %v", ok, err)
	}
	time.Sleep(50 * time.Millisecond)
	if w.returned() || blocked.returned() {
		t.Fatalf("returned early: writer %v, reader %v", w.err, blocked.err)
	}
	r.Release(ctx)
	lease, err := w.wait(t, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if blocked.returned() {
		t.Fatalf("a reader was granted while the writer holds: %v", blocked.err)
	}
	lease.Release(ctx)
	rl, err := blocked.wait(t, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	rl.Release(ctx)
}

// Until its bound has passed, a waiting writer lets readers in.
func testBoundNotReached(t *testing.T, tg *target) {
	ctx := xtest.Ctx(t, 20*time.Second)
	l := newLocker(t, tg.c, bounded(time.Hour))
	r := mustRead(t, ctx, l, "rw4", 10*time.Second)
	wctx, stop := context.WithCancel(ctx)
	w := goAcquire(func() (*rwlock.Lease, error) { return l.AcquireWrite(wctx, "rw4", time.Minute) })
	for _, e := range waitEntries(t, tg.cmd, "rw4", 1) {
		if e.bound != time.Hour.Milliseconds() {
			t.Fatalf("entry %+v, want the policy's bound of 1h", e)
		}
	}
	r2 := mustRead(t, ctx, l, "rw4", time.Second)
	r2.Release(ctx)
	stop()
	if _, err := w.wait(t, 5*time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled writer: %v", err)
	}
	r.Release(ctx)
}

// A writer whose context ends removes its entry, and readers it held off
// are admitted at once (woken by the announcement).
func testWriterGivesUp(t *testing.T, tg *target) {
	// The writer's context must outlast its registration and the poll that
	// sees its entry, also on a loaded machine; its entry lives much
	// longer, so a reader that missed the announcement would wait for the
	// entry's expiry (about 8 s after the give-up) rather than happen to
	// wake near the give-up.
	const giveUp, markerTTL = 2 * time.Second, 10 * time.Second
	ctx := xtest.Ctx(t, 20*time.Second)
	readers := newLocker(t, tg.c, rwlock.Options{})
	wopts := bounded(0)
	wopts.MarkerTTL = markerTTL
	writer := newLocker(t, tg.client(t), wopts)
	r := mustRead(t, ctx, readers, "rw5", 10*time.Second)
	wctx, cancel := context.WithTimeout(ctx, giveUp)
	defer cancel()
	w := goAcquire(func() (*rwlock.Lease, error) { return writer.AcquireWrite(wctx, "rw5", time.Minute) })
	waitEntries(t, tg.cmd, "rw5", 1)
	blocked := goAcquire(func() (*rwlock.Lease, error) { return readers.AcquireRead(ctx, "rw5", time.Minute) })
	if _, err := w.wait(t, giveUp+5*time.Second); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "rw5") {
		t.Fatalf("writer: %v", err)
	}
	if n := tg.cmd("EXISTS", writersKey("rw5")); n != "0" {
		t.Fatalf("the entry outlived the writer that gave up (EXISTS %s)", n)
	}
	// The entry went with an announcement: the held-off reader wakes well
	// before the entry would have expired.
	rl, err := blocked.wait(t, markerTTL/5)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("held-off reader admitted %v after it started waiting (the writer gave up at %v)", blocked.took, giveUp)
	rl.Release(ctx)
	r.Release(ctx)
}

func testCloseRemovesEntry(t *testing.T, tg *target) {
	ctx := xtest.Ctx(t, 20*time.Second)
	readers := newLocker(t, tg.c, rwlock.Options{})
	writer, err := rwlock.New(tg.client(t), bounded(0))
	if err != nil {
		t.Fatal(err)
	}
	r := mustRead(t, ctx, readers, "rw6", 10*time.Second)
	w := goAcquire(func() (*rwlock.Lease, error) { return writer.AcquireWrite(ctx, "rw6", time.Minute) })
	waitEntries(t, tg.cmd, "rw6", 1)
	writer.Close()
	if _, err := w.wait(t, 5*time.Second); !errors.Is(err, primitives.ErrClosed) {
		t.Fatalf("writer after Close: %v", err)
	}
	if n := tg.cmd("EXISTS", writersKey("rw6")); n != "0" {
		t.Fatalf("the entry outlived the closed Locker (EXISTS %s)", n)
	}
	mustRead(t, ctx, readers, "rw6", time.Second).Release(ctx)
	r.Release(ctx)
}

// The policy is asked before each registering attempt with what the
// previous attempt saw.
func testPolicyInputs(t *testing.T, tg *target) {
	ctx := xtest.Ctx(t, 20*time.Second)
	var mu sync.Mutex
	var seen []policies.StarvationRequest
	l := newLocker(t, tg.c, rwlock.Options{
		Starvation: policies.StarvationFunc(func(_ context.Context, r policies.StarvationRequest) time.Duration {
			mu.Lock()
			seen = append(seen, r)
			mu.Unlock()
			return time.Hour
		}),
		// Re-attempt often, so the policy is asked several times.
		Retry: builtin.Constant{Delay: 20 * time.Millisecond},
	})
	r1 := mustRead(t, ctx, l, "rw7", 10*time.Second)
	r2 := mustRead(t, ctx, l, "rw7", 10*time.Second)
	w := goAcquire(func() (*rwlock.Lease, error) { return l.AcquireWrite(ctx, "rw7", time.Minute) })
	xtest.Eventually(t, 5*time.Second, "the policy asked three times", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) >= 3
	})
	r1.Release(ctx)
	r2.Release(ctx)
	lease, err := w.wait(t, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	lease.Release(ctx)
	mu.Lock()
	defer mu.Unlock()
	if s := seen[0]; s.Readers != 2 || s.Writers != 1 || s.OldestWriterWait < 0 || s.OldestWriterWait > time.Second {
		t.Fatalf("first request %+v, want 2 readers, 1 writer (this one)", s)
	}
	if s := seen[2]; s.Readers != 2 || s.Writers != 1 || s.OldestWriterWait <= seen[0].OldestWriterWait {
		t.Fatalf("third request %+v after %+v: the wait must grow", s, seen[0])
	}
}

// When one waiting writer is granted, the others' arrival restarts, so
// readers get a turn before the next writer holds them off.
func testGrantResetsArrival(t *testing.T, tg *target) {
	ctx := xtest.Ctx(t, 20*time.Second)
	l := newLocker(t, tg.c, bounded(time.Hour))
	other := newLocker(t, tg.client(t), bounded(time.Hour))
	r := mustRead(t, ctx, l, "rw8", 10*time.Second)
	a := goAcquire(func() (*rwlock.Lease, error) { return l.AcquireWrite(ctx, "rw8", time.Minute) })
	b := goAcquire(func() (*rwlock.Lease, error) { return other.AcquireWrite(ctx, "rw8", time.Minute) })
	before := waitEntries(t, tg.cmd, "rw8", 2)
	time.Sleep(20 * time.Millisecond)
	r.Release(ctx)
	var first, second *background
	xtest.Eventually(t, 5*time.Second, "one writer granted", func() bool {
		switch {
		case a.returned():
			first, second = a, b
		case b.returned():
			first, second = b, a
		}
		return first != nil
	})
	if first.err != nil {
		t.Fatal(first.err)
	}
	after := entries(t, tg.cmd, "rw8")
	if len(after) != 1 {
		t.Fatalf("%d entries after one writer was granted, want 1", len(after))
	}
	granted := first.l.GrantedAt().UnixMilli()
	for id, e := range after {
		if e.arrival != granted || e.arrival <= before[id].arrival {
			t.Fatalf("the remaining writer's arrival is %d (was %d), want the grant's time %d", e.arrival, before[id].arrival, granted)
		}
	}
	first.l.Release(ctx)
	lease, err := second.wait(t, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	lease.Release(ctx)
}

// A writer that stops refreshing its entry (its network is gone) holds
// readers off until the entry's deadline, at most MarkerTTL after its last
// refresh.
func testCrashedWriter(t *testing.T, tg *target) {
	const markerTTL = 300 * time.Millisecond
	ctx := xtest.Ctx(t, 20*time.Second)
	readers := newLocker(t, tg.c, rwlock.Options{})
	p := faulttest.New(t)
	wc := tg.client(t, p.Option(), func(o *rueidis.ClientOption) { o.DisableRetry = true })
	o := bounded(0)
	o.MarkerTTL = markerTTL
	writer := newLocker(t, wc, o)
	r := mustRead(t, ctx, readers, "rw9", 10*time.Second)
	wctx, cancel := context.WithCancel(ctx)
	w := goAcquire(func() (*rwlock.Lease, error) { return writer.AcquireWrite(wctx, "rw9", time.Minute) })
	waitEntries(t, tg.cmd, "rw9", 1)
	p.Blackhole(true)
	cut := time.Now()
	blocked := goAcquire(func() (*rwlock.Lease, error) { return readers.AcquireRead(ctx, "rw9", time.Minute) })
	rl, err := blocked.wait(t, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	held := time.Since(cut)
	t.Logf("a writer cut off from the server held readers off for %v (MarkerTTL %v)", held, markerTTL)
	if held > markerTTL+200*time.Millisecond {
		t.Errorf("readers held off %v by a writer that stopped refreshing: more than MarkerTTL %v", held, markerTTL)
	}
	if len(entries(t, tg.cmd, "rw9")) != 0 {
		t.Error("the dead entry was not pruned")
	}
	cancel()
	p.Blackhole(false)
	w.wait(t, 10*time.Second)
	rl.Release(ctx)
	r.Release(ctx)
}

// scriptCalls is the number of EVALSHA and EVAL calls the server has run.
func scriptCalls(t *testing.T, cmd func(...string) string) int {
	t.Helper()
	n := 0
	for _, line := range strings.Split(cmd("INFO", "commandstats"), "\n") {
		if strings.HasPrefix(line, "cmdstat_evalsha:") || strings.HasPrefix(line, "cmdstat_eval:") {
			i := strings.Index(line, "calls=")
			j := strings.IndexByte(line[i:], ',')
			k, _ := strconv.Atoi(line[i+6 : i+j])
			n += k
		}
	}
	return n
}

// A writer waiting on a reader that never releases, and a reader held off
// by that writer, wake at the deadlines the server reported and on
// notifications, not on a poll: with a retry policy that sets no bound of
// its own (the default backoff would add its own re-attempts, capped at
// 1s), a handful of attempts over the reader's 600ms lease, and the writer
// is granted at its end.
func testNoBlindPolling(t *testing.T, tg *target) {
	if tg.cluster {
		t.Skip("INFO commandstats is per node")
	}
	ctx := xtest.Ctx(t, 20*time.Second)
	wakeOnly := policies.RetryFunc(func(context.Context, policies.RetryRequest) policies.RetryDecision {
		return policies.RetryDecision{} // wait for a wake-up or the deadline
	})
	holder := newLocker(t, tg.c, rwlock.Options{})
	o := bounded(0)
	o.Retry = wakeOnly
	writer := newLocker(t, tg.client(t), o)
	reader := newLocker(t, tg.client(t), rwlock.Options{Retry: wakeOnly})
	leased := time.Now() // the reader's 600ms run from after this
	mustRead(t, ctx, holder, "poll", 600*time.Millisecond)
	before := scriptCalls(t, tg.cmd)
	w := goAcquire(func() (*rwlock.Lease, error) { return writer.AcquireWrite(ctx, "poll", time.Minute) })
	waitEntries(t, tg.cmd, "poll", 1)
	r := goAcquire(func() (*rwlock.Lease, error) { return reader.AcquireRead(ctx, "poll", time.Minute) })
	wl, err := w.wait(t, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	calls := scriptCalls(t, tg.cmd) - before - 1 // INFO's own count is not a script; the grant is
	t.Logf("writer granted after %v; %d script calls by the two waiters meanwhile", w.took, calls)
	// From before the reader's request, so slow set-up calls cannot make
	// a correct grant look early (less 2 ms of the server's rounding).
	if early := w.end.Sub(leased); early < 598*time.Millisecond {
		t.Fatalf("the writer was granted %v after the 600ms reader asked, before its lease ran out", early)
	}
	if calls > 10 {
		t.Fatalf("%d script calls while two waiters waited ~600ms: they poll", calls)
	}
	wl.Release(ctx)
	rl, err := r.wait(t, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	rl.Release(ctx)
}

// Keys are binary-safe: any bytes, a hash tag or not.
func testBinaryKeys(t *testing.T, tg *target) {
	ctx := xtest.Ctx(t, 20*time.Second)
	l := newLocker(t, tg.c, rwlock.Options{Prefix: "\x00p\xff:"})
	for _, key := range []string{"bin\x00\xff\r\n key", "{tag\x00}\xfe"} {
		r, err := l.TryAcquireRead(ctx, key, time.Minute)
		if err != nil {
			t.Fatalf("%q: %v", key, err)
		}
		if r.Key() != "\x00p\xff:"+key {
			t.Fatalf("key %q", r.Key())
		}
		if ms := members(tg.cmd, r.Key()); len(ms) != 1 || ms[0] != "r:"+r.Token() {
			t.Fatalf("members of %q: %q", r.Key(), ms)
		}
		if _, err := l.TryAcquireWrite(ctx, key, time.Second); !errors.Is(err, primitives.ErrNotAcquired) {
			t.Fatalf("%q: writer: %v", key, err)
		}
		r.Release(ctx)
		w, err := l.AcquireWrite(ctx, key, time.Minute)
		if err != nil {
			t.Fatalf("%q: writer: %v", key, err)
		}
		w.Release(ctx)
	}
}
