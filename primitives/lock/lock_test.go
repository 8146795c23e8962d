package lock_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/policies"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/lease"
	"github.com/coordhost/coordhost/primitives/lock"
	"github.com/redis/rueidis"
)

func TestMain(m *testing.M) { xtest.Main(m, xtest.ExampleServer(7, &exampleAddr)) }

// exampleAddr is the server the runnable examples talk to.
var exampleAddr string

// fleet is one server kind a behaviour test runs against.
type fleet struct {
	name   string
	client func(t *testing.T) (rueidis.Client, func(args ...string) string)
}

func standalone(k redistest.Kind) fleet {
	return fleet{name: k.String(), client: func(t *testing.T) (rueidis.Client, func(...string) string) {
		s := redistest.Start(t, redistest.WithKind(k))
		return s.Client(t), func(args ...string) string { return s.MustCmd(t, args...) }
	}}
}

func cluster() fleet {
	return fleet{name: "cluster", client: func(t *testing.T) (rueidis.Client, func(...string) string) {
		c := redistest.StartCluster(t, 3)
		cl := c.Client(t)
		return cl, func(args ...string) string {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			v, err := cl.Do(ctx, cl.B().Arbitrary(args...).Build()).ToAny()
			if err != nil && !rueidis.IsRedisNil(err) {
				t.Fatalf("%v: %v", args, err)
			}
			return fmt.Sprint(v)
		}
	}}
}

// fleets is every server kind standalone (Redis 7.0, 8.0, 8.6, Valkey 8.1)
// and a 3-master Redis 7.0 cluster.
func fleets() []fleet {
	var fs []fleet
	for _, k := range redistest.Kinds() {
		fs = append(fs, standalone(k))
	}
	return append(fs, cluster())
}

func newLocker(t *testing.T, c rueidis.Client, o lock.Options) *lock.Locker {
	t.Helper()
	l, err := lock.New(c, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func TestLockLifecycle(t *testing.T) {
	for _, f := range fleets() {
		t.Run(f.name, func(t *testing.T) {
			c, cmd := f.client(t)
			ctx := xtest.Ctx(t, 20*time.Second)
			l := newLocker(t, c, lock.Options{Prefix: "app:", Fencing: true})

			a, err := l.TryAcquire(ctx, "inv", 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if a.Key() != "app:inv" || a.FencingToken() != 1 || a.Token() == "" {
				t.Fatalf("key %q fence %d token %q", a.Key(), a.FencingToken(), a.Token())
			}
			if got := cmd("GET", "app:inv"); got != a.Token() {
				t.Fatalf("server holds %q, want the token", got)
			}
			if r := a.Remaining(); r <= 9*time.Second || r > 10*time.Second {
				t.Fatalf("Remaining %v", r)
			}
			if _, err := l.TryAcquire(ctx, "inv", time.Second); !errors.Is(err, primitives.ErrNotAcquired) {
				t.Fatalf("contended TryAcquire: %v", err)
			}
			if ok, err := a.Verify(ctx); !ok || err != nil {
				t.Fatalf("Verify: %v %v", ok, err)
			}
			if ok, err := a.Renew(ctx, 30*time.Second); !ok || err != nil {
				t.Fatalf("Renew: %v %v", ok, err)
			}
			if pttl, _ := strconv.Atoi(cmd("PTTL", "app:inv")); pttl < 29000 {
				t.Fatalf("PTTL after renew %d", pttl)
			}
			if r, err := a.Release(ctx); r != primitives.Released || err != nil {
				t.Fatalf("Release: %v %v", r, err)
			}
			select {
			case <-a.Done():
			default:
				t.Fatal("Done open after release")
			}
			if r, err := a.Release(ctx); r != primitives.AlreadyReleased || err != nil {
				t.Fatalf("second Release: %v %v", r, err)
			}
			if ok, _ := a.Renew(ctx, time.Second); ok {
				t.Fatal("renewed a released lock")
			}
			b, err := l.TryAcquire(ctx, "inv", time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if b.FencingToken() != 2 {
				t.Fatalf("second grant fence %d, want 2", b.FencingToken())
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestNotOwnedAfterTakeover(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client(t)
	ctx := xtest.Ctx(t, 10*time.Second)
	l := newLocker(t, c, lock.Options{Fencing: true})
	a, err := l.TryAcquire(ctx, "k", 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	<-a.Done() // the estimate runs out no later than the server's TTL
	b, err := l.Acquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if b.FencingToken() <= a.FencingToken() {
		t.Fatalf("fence %d not above %d", b.FencingToken(), a.FencingToken())
	}
	if ok, err := a.Renew(ctx, time.Second); ok || err != nil {
		t.Fatalf("expired handle renewed: %v %v", ok, err)
	}
	if ok, _ := a.Verify(ctx); ok {
		t.Fatal("expired handle verified")
	}
	if r, err := a.Release(ctx); r != primitives.NotOwned || err != nil {
		t.Fatalf("Release by the old owner: %v %v", r, err)
	}
	if got := s.MustCmd(t, "GET", "k"); got != b.Token() {
		t.Fatal("old owner's release touched the new owner's lock")
	}
}

func TestFencingTokensExactAndValidated(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client(t)
	ctx := xtest.Ctx(t, 10*time.Second)
	l := newLocker(t, c, lock.Options{Fencing: true})
	counter := lock.ReservedPrefix + "fence:{k}"
	for _, start := range []string{"9007199254740992", "9223372036854775805"} { // 2^53, MaxInt64-2
		s.MustCmd(t, "SET", counter, start)
		a, err := l.TryAcquire(ctx, "k", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := strconv.ParseInt(start, 10, 64)
		if a.FencingToken() != want+1 {
			t.Fatalf("fence %d, want %d", a.FencingToken(), want+1)
		}
		a.Release(ctx)
	}
	for _, bad := range []string{"9223372036854775807", "-1", "nan", "inf", "0x10", "1e3", " 5 ", "007", "abc", ""} {
		s.MustCmd(t, "SET", counter, bad)
		_, err := l.TryAcquire(ctx, "k", time.Second)
		if !errors.Is(err, primitives.ErrCorruptCounter) {
			t.Fatalf("counter %q: got %v", bad, err)
		}
		if n := s.MustCmd(t, "EXISTS", "k"); n != "0" {
			t.Fatalf("counter %q: lease created", bad)
		}
		if got := s.MustCmd(t, "GET", counter); got != bad {
			t.Fatalf("counter %q changed to %q", bad, got)
		}
	}
	s.MustCmd(t, "SET", counter, "5", "PX", "100000")
	if _, err := l.TryAcquire(ctx, "k", time.Second); !errors.Is(err, primitives.ErrCorruptCounter) || !strings.Contains(err.Error(), "TTL") {
		t.Fatalf("expiring counter: %v", err)
	}
}

func TestBadInputsWriteNothing(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client(t)
	l := newLocker(t, c, lock.Options{Prefix: "p:", Fencing: true})
	s.MustCmd(t, "HSET", "p:hash", "f", "v")
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	ok := xtest.Ctx(t, 10*time.Second)

	type call func(ctx context.Context, key string, ttl time.Duration) (*lock.Lock, error)
	entries := map[string]call{"TryAcquire": l.TryAcquire, "Acquire": l.Acquire}
	cases := []struct {
		name string
		ctx  context.Context
		key  string
		ttl  time.Duration
		want error
	}{
		{"empty key", ok, "", time.Second, primitives.ErrInvalidKey},
		{"reserved key", ok, lock.ReservedPrefix + "fence:x", time.Second, primitives.ErrInvalidKey},
		{"unplaceable key", ok, "a}b", time.Second, primitives.ErrInvalidKey},
		{"zero ttl", ok, "k", 0, primitives.ErrInvalidTTL},
		{"negative ttl", ok, "k", -time.Second, primitives.ErrInvalidTTL},
		{"sub-ms ttl", ok, "k", 999 * time.Microsecond, primitives.ErrInvalidTTL},
		{"ttl above MaxTTL", ok, "k", lock.MaxTTL + time.Millisecond, primitives.ErrInvalidTTL},
		{"MaxInt64 ttl", ok, "k", math.MaxInt64, primitives.ErrInvalidTTL},
		{"cancelled ctx", cancelled, "k", time.Second, context.Canceled},
		{"wrong type", ok, "hash", time.Second, primitives.ErrWrongType},
	}
	for name, fn := range entries {
		for _, tc := range cases {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				before := s.MustCmd(t, "DBSIZE")
				lk, err := fn(tc.ctx, tc.key, tc.ttl)
				if !errors.Is(err, tc.want) || lk != nil {
					t.Fatalf("got %v, %v; want %v", lk, err, tc.want)
				}
				if err.Error() == tc.want.Error() {
					t.Fatalf("error %q names no detail", err)
				}
				if after := s.MustCmd(t, "DBSIZE"); after != before {
					t.Fatalf("DBSIZE %s -> %s", before, after)
				}
				if got := s.MustCmd(t, "HGET", "p:hash", "f"); got != "v" {
					t.Fatalf("hash changed: %q", got)
				}
			})
		}
	}
	if _, err := lock.New(nil, lock.Options{}); !errors.Is(err, primitives.ErrInvalidOptions) {
		t.Fatalf("nil client: %v", err)
	}
	if _, err := primitives.NewWaiter(c, primitives.WaiterOptions{Mode: 9}); !errors.Is(err, primitives.ErrInvalidOptions) {
		t.Fatalf("bad wait mode: %v", err)
	}
	if _, err := primitives.NewWaiter(nil, primitives.WaiterOptions{}); !errors.Is(err, primitives.ErrInvalidOptions) {
		t.Fatalf("nil client for a waiter: %v", err)
	}
	if _, err := primitives.NewWaiter(c, primitives.WaiterOptions{PollInterval: -1}); !errors.Is(err, primitives.ErrInvalidOptions) {
		t.Fatalf("negative poll interval: %v", err)
	}
	if _, err := primitives.NewWaiter(c, primitives.WaiterOptions{PollInterval: time.Microsecond}); !errors.Is(err, primitives.ErrInvalidOptions) {
		t.Fatalf("a poll interval that would hammer Redis: %v", err)
	}
	// A Waiter serves the client it was made for: another client's would
	// make re-attempts on the wrong server.
	other := redistest.Start(t).Client(t)
	closedWaiter := newWaiter(t, c, primitives.WaitAuto)
	closedWaiter.Close()
	for name, w := range map[string]*primitives.Waiter{
		"another client's Waiter": newWaiter(t, other, primitives.WaitAuto),
		"a zero Waiter":           {},
		"a closed Waiter":         closedWaiter,
	} {
		if _, err := lock.New(c, lock.Options{Waiter: w}); !errors.Is(err, primitives.ErrInvalidOptions) {
			t.Errorf("lock.New with %s: %v", name, err)
		}
		if _, err := lease.New(c, lease.Options{Waiter: w}); !errors.Is(err, primitives.ErrInvalidOptions) {
			t.Errorf("lease.New with %s: %v", name, err)
		}
	}
	if err := (&primitives.Waiter{}).Close(); err != nil {
		t.Fatalf("closing a zero Waiter: %v", err)
	}
	var nilLocker *lock.Locker
	if _, err := nilLocker.TryAcquire(ok, "k", time.Second); !errors.Is(err, primitives.ErrInvalidOptions) {
		t.Fatalf("nil locker: %v", err)
	}
	// Renew on a live handle with bad ttl or a cancelled ctx sends nothing.
	a, err := l.TryAcquire(ok, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	pttl := s.MustCmd(t, "PTTL", "p:k")
	for _, ttl := range []time.Duration{0, -1, time.Microsecond, lock.MaxTTL + time.Millisecond, math.MaxInt64} {
		if okk, err := a.Renew(ok, ttl); okk || !errors.Is(err, primitives.ErrInvalidTTL) {
			t.Fatalf("Renew(%v): %v %v", ttl, okk, err)
		}
	}
	if after := s.MustCmd(t, "PTTL", "p:k"); after > pttl || after == "-2" {
		t.Fatalf("a refused Renew changed the key: PTTL %s -> %s", pttl, after)
	}
	if okk, err := a.Renew(cancelled, time.Second); okk || !errors.Is(err, context.Canceled) {
		t.Fatalf("Renew(cancelled): %v %v", okk, err)
	}
	if _, err := a.Release(cancelled); !errors.Is(err, context.Canceled) {
		t.Fatalf("Release(cancelled): %v", err)
	}
	if _, err := a.Verify(cancelled); !errors.Is(err, context.Canceled) {
		t.Fatalf("Verify(cancelled): %v", err)
	}
	if okk, err := a.Verify(ok); !okk || err != nil {
		t.Fatalf("the bad calls disturbed the lock: %v %v", okk, err)
	}
}

// waitModes are the wake-up sources Acquire must work with.
var waitModes = []struct {
	name string
	mode primitives.WaitMode
	opt  func(*rueidis.ClientOption)
}{
	{"track", primitives.WaitAuto, nil},
	{"channel", primitives.WaitChannel, nil},
	{"resp2", primitives.WaitAuto, func(o *rueidis.ClientOption) { o.AlwaysRESP2 = true; o.DisableCache = true }},
	{"poll", primitives.WaitPoll, nil},
}

func TestAcquireWaitsForRelease(t *testing.T) {
	for _, f := range fleets() {
		for _, wm := range waitModes {
			if f.name == "cluster" && wm.opt != nil {
				continue
			}
			t.Run(f.name+"/"+wm.name, func(t *testing.T) {
				var c rueidis.Client
				if wm.opt != nil {
					s := redistest.Start(t)
					c = s.Client(t, wm.opt)
				} else {
					c, _ = f.client(t)
				}
				ctx := xtest.Ctx(t, 20*time.Second)
				l := newLocker(t, c, lock.Options{Fencing: true, Waiter: newWaiter(t, c, wm.mode)})
				holder, err := l.TryAcquire(ctx, "job", time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				got := make(chan *lock.Lock, 1)
				errc := make(chan error, 1)
				go func() {
					w, err := l.Acquire(ctx, "job", time.Minute)
					errc <- err
					got <- w
				}()
				time.Sleep(100 * time.Millisecond)
				select {
				case err := <-errc:
					t.Fatalf("Acquire returned while held: %v", err)
				default:
				}
				released := time.Now()
				if r, err := holder.Release(ctx); r != primitives.Released || err != nil {
					t.Fatal(r, err)
				}
				if err := <-errc; err != nil {
					t.Fatal(err)
				}
				w := <-got
				t.Logf("handoff took %v", time.Since(released))
				if w.FencingToken() != holder.FencingToken()+1 {
					t.Fatalf("fence %d after %d", w.FencingToken(), holder.FencingToken())
				}
				w.Release(ctx)
			})
		}
	}
}

func TestAcquireHonoursContext(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client(t)
	l := newLocker(t, c, lock.Options{})
	ctx := xtest.Ctx(t, 10*time.Second)
	if _, err := l.TryAcquire(ctx, "busy", time.Minute); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	defer cancel()
	_, err := l.Acquire(short, "busy", time.Second)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want deadline exceeded", err)
	}
	// A policy that gives up ends the wait with ErrNotAcquired.
	giveUp := newLocker(t, c, lock.Options{Retry: policies.RetryFunc(func(_ context.Context, r policies.RetryRequest) policies.RetryDecision {
		return policies.RetryDecision{Action: policies.GiveUp}
	})})
	if _, err := giveUp.Acquire(ctx, "busy", time.Second); !errors.Is(err, primitives.ErrNotAcquired) {
		t.Fatalf("give up: %v", err)
	}
	// Close wakes blocked waiters.
	done := make(chan error, 1)
	go func() { _, err := l.Acquire(ctx, "busy", time.Second); done <- err }()
	time.Sleep(50 * time.Millisecond)
	l.Close()
	if err := <-done; !errors.Is(err, primitives.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

// A holder that never releases: the waiter must get the lock by its own
// timer at the holder's expiry, not by the (late) expiry notification.
func TestHolderNeverReleases(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client(t)
	ctx := xtest.Ctx(t, 20*time.Second)
	// Long-TTL keys make Redis' active expiry slow to notice ours.
	for i := range 2000 {
		s.MustCmd(t, "SET", fmt.Sprintf("filler:%d", i), "x", "EX", "3600")
	}
	l := newLocker(t, c, lock.Options{Retry: policies.RetryFunc(func(context.Context, policies.RetryRequest) policies.RetryDecision {
		return policies.RetryDecision{} // wake-ups and the holder's expiry only
	})})
	if _, err := l.TryAcquire(ctx, "crash", 400*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	expires := time.Now().Add(400 * time.Millisecond)
	w, err := l.Acquire(ctx, "crash", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	late := time.Since(expires)
	t.Logf("acquired %v after the holder's expiry", late)
	if late > 300*time.Millisecond {
		// Not a speed check: without the TTL timer this wait is unbounded
		// (only the policy-free notification path would wake it).
		t.Fatalf("waiter acquired %v after expiry; the TTL timer did not fire", late)
	}
	w.Release(ctx)
}

// The waiter's dedicated connection is killed while it sleeps: it must
// notice, reconnect and still acquire when the lock is released.
func TestWaiterConnectionKilled(t *testing.T) {
	for _, wm := range waitModes[:2] {
		t.Run(wm.name, func(t *testing.T) {
			s := redistest.Start(t)
			c := s.Client(t)
			ctx := xtest.Ctx(t, 20*time.Second)
			l := newLocker(t, c, lock.Options{Waiter: newWaiter(t, c, wm.mode), Retry: policies.RetryFunc(func(context.Context, policies.RetryRequest) policies.RetryDecision {
				return policies.RetryDecision{}
			})})
			holder, err := l.TryAcquire(ctx, "k", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				w, err := l.Acquire(ctx, "k", time.Minute)
				if err == nil {
					w.Release(ctx)
				}
				done <- err
			}()
			var id string
			xtest.Eventually(t, 5*time.Second, "the condition", func() bool { id = waitConnID(t, s); return id != "" })
			s.MustCmd(t, "CLIENT", "KILL", "ID", id)
			time.Sleep(100 * time.Millisecond)
			if _, err := holder.Release(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("waiter never acquired after its connection was killed")
			}
		})
	}
}

// A release whose notification never arrives (a raw DEL on a client whose
// waiters listen to the release channel): the policy's bound still ends the
// wait.
func TestLostReleaseMessage(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client(t)
	ctx := xtest.Ctx(t, 20*time.Second)
	l := newLocker(t, c, lock.Options{Waiter: newWaiter(t, c, primitives.WaitChannel)})
	if _, err := l.TryAcquire(ctx, "k", time.Minute); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		w, err := l.Acquire(ctx, "k", time.Minute)
		if err == nil {
			w.Release(ctx)
		}
		done <- err
	}()
	time.Sleep(300 * time.Millisecond)
	s.MustCmd(t, "DEL", "k") // no PUBLISH: the release message is lost
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("waiter stuck after a lost release message")
	}
}

// With many local waiters, each release costs O(1) commands: only the
// queue head re-attempts.
func TestLocalCoalescing(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client(t)
	ctx := xtest.Ctx(t, 60*time.Second)
	l := newLocker(t, c, lock.Options{Retry: policies.RetryFunc(func(context.Context, policies.RetryRequest) policies.RetryDecision {
		return policies.RetryDecision{}
	})})
	const waiters = 100
	first, err := l.TryAcquire(ctx, "hot", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var inside, maxInside atomic.Int32
	var wg sync.WaitGroup
	for range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w, err := l.Acquire(ctx, "hot", time.Minute)
			if err != nil {
				t.Error(err)
				return
			}
			n := inside.Add(1)
			if n > maxInside.Load() {
				maxInside.Store(n)
			}
			inside.Add(-1)
			w.Release(ctx)
		}()
	}
	time.Sleep(300 * time.Millisecond) // let every waiter queue up
	s.MustCmd(t, "CONFIG", "RESETSTAT")
	first.Release(ctx)
	wg.Wait()
	if maxInside.Load() != 1 {
		t.Fatalf("%d holders at once", maxInside.Load())
	}
	stats := commandStats(t, s)
	perRelease := float64(stats) / waiters
	t.Logf("%d commands for %d handoffs: %.2f per release", stats, waiters, perRelease)
	if perRelease > 5 {
		t.Fatalf("%.2f commands per release with %d local waiters, want <= 5", perRelease, waiters)
	}
}

// scriptInternal are the commands our scripts call; INFO commandstats
// counts calls made inside scripts too, so they are left out of the count
// of commands a client sent.
var scriptInternal = map[string]bool{"set": true, "get": true, "del": true, "pttl": true, "publish": true, "incr": true, "pexpire": true, "info": true, "config": true}

// commandStats sums the calls of commands clients sent (see scriptInternal).
func commandStats(t *testing.T, s *redistest.Server) int {
	t.Helper()
	stats := commandstats(t, s)
	total := 0
	for _, name := range slices.Sorted(maps.Keys(stats)) {
		if scriptInternal[name] {
			continue
		}
		t.Logf("cmdstat_%s:calls=%d", name, stats[name])
		total += stats[name]
	}
	return total
}

// commandstats returns the calls per command since the last CONFIG
// RESETSTAT.
func commandstats(t *testing.T, s *redistest.Server) map[string]int {
	t.Helper()
	out := map[string]int{}
	for line := range strings.Lines(s.MustCmd(t, "INFO", "commandstats")) {
		name, rest, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "cmdstat_"), ":calls=")
		if !ok {
			continue
		}
		n, _, _ := strings.Cut(rest, ",")
		out[name], _ = strconv.Atoi(n)
	}
	return out
}

// waitConnID returns the CLIENT ID of the wait engine's connection.
func waitConnID(t *testing.T, s *redistest.Server) string {
	t.Helper()
	id, _ := s.ClientField(t, "coordhost-wait", "id")
	return id
}

func ctxWithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}

// SCRIPT FLUSH in the middle of a run: EVALSHA fails with NOSCRIPT and the
// runner falls back to EVAL; callers see nothing.
func TestScriptFlushIsInvisible(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client(t)
	ctx := xtest.Ctx(t, 10*time.Second)
	l := newLocker(t, c, lock.Options{Fencing: true})
	for i := range 6 {
		if i%2 == 0 {
			s.MustCmd(t, "SCRIPT", "FLUSH")
		}
		a, err := l.TryAcquire(ctx, "f", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if a.FencingToken() != int64(i+1) {
			t.Fatalf("fence %d, want %d", a.FencingToken(), i+1)
		}
		s.MustCmd(t, "SCRIPT", "FLUSH")
		if ok, err := a.Renew(ctx, time.Second); !ok || err != nil {
			t.Fatal(ok, err)
		}
		s.MustCmd(t, "SCRIPT", "FLUSH")
		if r, err := a.Release(ctx); r != primitives.Released || err != nil {
			t.Fatal(r, err)
		}
	}
}

// Lockers and Leases on one client that share a Waiter hold one waiting
// connection between them, each keeps its own options, and closing one
// ends its own waiters only; closing the Waiter ends every waiter.
func TestWaiterShared(t *testing.T) {
	s := redistest.Start(t, redistest.Version(8))
	c := s.Client(t)
	ctx := xtest.Ctx(t, 10*time.Second)
	w := newWaiter(t, c, primitives.WaitAuto)
	a := newLocker(t, c, lock.Options{Prefix: "a:", Fencing: true, Waiter: w})
	b := newLocker(t, c, lock.Options{Prefix: "b:", Waiter: w})
	ls, err := lease.New(c, lease.Options{Waiter: w})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ls.Close() })
	ha, _ := a.TryAcquire(ctx, "k", time.Minute)
	hb, _ := b.TryAcquire(ctx, "k", time.Minute)
	hl, _ := ls.TryAcquire(ctx, "h", "f", time.Minute)
	if ha == nil || hb == nil || hl == nil || ha.FencingToken() != 1 || hb.FencingToken() != 0 {
		t.Fatal("per-Locker options not applied")
	}
	errs := make(chan error, 3)
	for _, l := range []*lock.Locker{a, b} {
		go func() { _, err := l.Acquire(ctx, "k", time.Minute); errs <- err }()
	}
	go func() { _, err := ls.Acquire(ctx, "h", "f", time.Minute); errs <- err }()
	xtest.Eventually(t, 5*time.Second, "the condition", func() bool { return strings.Count(s.MustCmd(t, "CLIENT", "LIST"), "name=coordhost-wait") >= 1 })
	time.Sleep(100 * time.Millisecond)
	if n := strings.Count(s.MustCmd(t, "CLIENT", "LIST"), "name=coordhost-wait"); n != 1 {
		t.Fatalf("%d waiting connections for two Lockers and a Leases on one Waiter, want 1", n)
	}
	b.Close()
	if err := <-errs; !errors.Is(err, primitives.ErrClosed) || strings.Contains(err.Error(), "Waiter") {
		t.Fatalf("waiter of the closed Locker: %v (want ErrClosed, not blaming the Waiter)", err)
	}
	if _, err := b.TryAcquire(ctx, "x", time.Second); !errors.Is(err, primitives.ErrClosed) {
		t.Fatalf("closed Locker: %v", err)
	}
	if _, err := a.TryAcquire(ctx, "y", time.Second); err != nil {
		t.Fatalf("the other Locker stopped working when one closed: %v", err)
	}
	w.Close()
	for range 2 {
		if err := <-errs; !errors.Is(err, primitives.ErrClosed) || !strings.Contains(err.Error(), "Waiter was closed") {
			t.Fatalf("waiter after the Waiter closed: %v (want ErrClosed naming the Waiter)", err)
		}
	}
}

func newWaiter(t *testing.T, c rueidis.Client, mode primitives.WaitMode) *primitives.Waiter {
	t.Helper()
	w, err := primitives.NewWaiter(c, primitives.WaiterOptions{Mode: mode})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}
