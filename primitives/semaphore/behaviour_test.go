package semaphore_test

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/semaphore"
	"github.com/redis/rueidis"
)

// NoExpiry permits keep the set (and the capacity) without a TTL; once the
// last of them is released the set expires at its latest finite deadline.
func TestNoExpiry(t *testing.T) {
	for _, tg := range targets() {
		t.Run(tg.name, func(t *testing.T) {
			c, cmd := tg.client(t)
			ctx := xtest.Ctx(t, 20*time.Second)
			s := newSems(t, c, semaphore.Options{Prefix: "app:"})
			forever, err := s.TryAcquire(ctx, "jobs", 2, semaphore.NoExpiry)
			if err != nil {
				t.Fatal(err)
			}
			if !forever.NoExpiry() || forever.Remaining() < semaphore.MaxTTL-time.Minute {
				t.Fatalf("NoExpiry %v, Remaining %v", forever.NoExpiry(), forever.Remaining())
			}
			if v := cmd("ZSCORE", "app:jobs", forever.Token()); v != "+Inf" && v != "inf" {
				t.Logf("score of a NoExpiry permit: %q", v)
			}
			short, err := s.TryAcquire(ctx, "jobs", 2, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"app:jobs", capKey} {
				if pttl := cmd("PTTL", k); pttl != "-1" {
					t.Fatalf("%s has PTTL %s while a NoExpiry permit lives; want none", k, pttl)
				}
			}
			// Full of a NoExpiry permit and a finite one: the error says when
			// the first expires.
			if _, err := s.TryAcquire(ctx, "jobs", 2, time.Second); !errors.Is(err, primitives.ErrNotAcquired) {
				t.Fatal(err)
			}
			if r, err := forever.Release(ctx); r != primitives.Released || err != nil {
				t.Fatal(r, err)
			}
			for _, k := range []string{"app:jobs", capKey} {
				if pttl := ms(t, cmd("PTTL", k)); pttl < 4000 || pttl > 5000 {
					t.Fatalf("%s has PTTL %dms after the NoExpiry permit left; want the 5s permit's", k, pttl)
				}
			}
			// Renewing a finite permit never gives the set a TTL while a
			// NoExpiry permit lives.
			again, err := s.TryAcquire(ctx, "jobs", 2, semaphore.NoExpiry)
			if err != nil {
				t.Fatal(err)
			}
			if ok, err := short.Renew(ctx, time.Second); !ok || err != nil {
				t.Fatal(ok, err)
			}
			if pttl := cmd("PTTL", "app:jobs"); pttl != "-1" {
				t.Fatalf("PTTL %s after a renewal while a NoExpiry permit lives", pttl)
			}
			// Full with NoExpiry permits only: TryAcquire says none expires.
			_, err = s.TryAcquire(ctx, "jobs", 2, time.Second)
			t.Log(err)
			short.Release(ctx)
			again.Release(ctx)
			if n := cmd("EXISTS", "app:jobs", capKey); n != "0" {
				t.Fatalf("%s keys left", n)
			}
		})
	}
}

// Every contender must use the capacity of the live permits; a lower one
// never revokes them, and once they are gone a new capacity applies.
func TestCapacityMismatch(t *testing.T) {
	for _, tg := range targets() {
		t.Run(tg.name, func(t *testing.T) {
			c, cmd := tg.client(t)
			ctx := xtest.Ctx(t, 20*time.Second)
			s := newSems(t, c, semaphore.Options{Prefix: "app:"})
			// The permits must live through the checks below (about 17
			// round trips, slow on a loaded machine), then expire.
			const ttl = 2 * time.Second
			var held []*semaphore.Permit
			for range 3 {
				p, err := s.TryAcquire(ctx, "jobs", 3, ttl)
				if err != nil {
					t.Fatal(err)
				}
				held = append(held, p)
			}
			for _, capacity := range []int{1, 2, 4, 100} {
				_, err := s.TryAcquire(ctx, "jobs", capacity, time.Second)
				if !errors.Is(err, semaphore.ErrCapacityMismatch) || errors.Is(err, primitives.ErrNotAcquired) {
					t.Fatalf("capacity %d against 3 live permits of 3: %v", capacity, err)
				}
				_, err = s.Acquire(ctx, "jobs", capacity, time.Second)
				if !errors.Is(err, semaphore.ErrCapacityMismatch) {
					t.Fatalf("Acquire with capacity %d: %v", capacity, err)
				}
			}
			for _, p := range held {
				if ok, err := p.Verify(ctx); !ok || err != nil {
					t.Fatalf("a live permit lost to a lower capacity: %v %v", ok, err)
				}
			}
			if n := cmd("ZCARD", "app:jobs"); n != "3" {
				t.Fatalf("ZCARD %s", n)
			}
			// Release one: the others still pin capacity 3.
			held[0].Release(ctx)
			if _, err := s.TryAcquire(ctx, "jobs", 1, time.Second); !errors.Is(err, semaphore.ErrCapacityMismatch) {
				t.Fatalf("capacity 1 with 2 live permits of 3: %v", err)
			}
			// Once every permit expired, a new capacity applies (a mismatch
			// while they live is final, also for Acquire, so ask only once
			// the server counts no live permit).
			xtest.Eventually(t, ttl+5*time.Second, "every permit expired", func() bool {
				now, err := c.Do(ctx, c.B().Time().Build()).AsStrSlice()
				if err != nil || len(now) != 2 {
					t.Fatalf("TIME: %v %v", now, err)
				}
				us, _ := strconv.ParseInt(now[1], 10, 64)
				live, err := c.Do(ctx, c.B().Zcount().Key("app:jobs").Min("("+now[0]+fmt.Sprintf("%03d", us/1000)).Max("+inf").Build()).AsInt64()
				if err != nil {
					t.Fatalf("ZCOUNT: %v", err)
				}
				return live == 0
			})
			p, err := s.TryAcquire(ctx, "jobs", 1, time.Second)
			if err != nil {
				t.Fatalf("capacity 1 after every permit expired: %v", err)
			}
			if v := cmd("GET", capKey); v != "1" {
				t.Fatalf("capacity key %q", v)
			}
			if n := cmd("ZCARD", "app:jobs"); n != "1" {
				t.Fatalf("expired permits not pruned: ZCARD %s", n)
			}
			if _, err := s.TryAcquire(ctx, "jobs", 1, time.Second); !errors.Is(err, primitives.ErrNotAcquired) {
				t.Fatalf("second permit of 1: %v", err)
			}
			p.Release(ctx)
		})
	}
}

// A waiting Acquire is woken by a release, and at the earliest permit's
// expiry when nobody releases; it waits for a NoExpiry permit's release.
func TestAcquireWakes(t *testing.T) {
	for _, tg := range targets() {
		t.Run(tg.name, func(t *testing.T) {
			c, _ := tg.client(t)
			ctx := xtest.Ctx(t, 20*time.Second)
			s := newSems(t, c, semaphore.Options{})

			// Woken by a release of a NoExpiry permit.
			a, err := s.TryAcquire(ctx, "w", 1, semaphore.NoExpiry)
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan time.Time, 1)
			go func() {
				p, err := s.Acquire(ctx, "w", 1, time.Second)
				if err != nil {
					t.Error(err)
					close(got)
					return
				}
				got <- time.Now()
				p.Release(ctx)
			}()
			time.Sleep(200 * time.Millisecond)
			select {
			case <-got:
				t.Fatal("Acquire returned while a NoExpiry permit was held")
			default:
			}
			rel := time.Now()
			a.Release(ctx)
			if at, ok := <-got; ok {
				t.Logf("woken %v after the release", at.Sub(rel))
			}

			// Woken at the earliest expiry (of two permits, 300ms and 5s).
			s1, err := s.TryAcquire(ctx, "e", 2, 300*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			s2, err := s.TryAcquire(ctx, "e", 2, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			p, err := s.Acquire(ctx, "e", 2, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			t.Logf("woken %v after a 300ms permit was taken", took)
			if took > 2*time.Second {
				t.Fatalf("waited %v for a 300ms permit to expire", took)
			}
			_ = s1
			p.Release(ctx)
			s2.Release(ctx)
		})
	}
}

// A holder that dies (its client closed without releasing) frees its
// permit within its ttl + 50ms: a waiting Acquire on another client gets
// it at most 50ms after the holder's deadline, never before. Both are
// read on the server's clock, from the permits' scores (deadlines in
// server ms): the holder's right after its acquire, the waiter's grant as
// its own deadline minus its ttl. So the time the test's own calls take
// on a loaded machine is not counted, only the waiter's wake-up and
// claim.
func TestDeadHolderFreesWithinTTL(t *testing.T) {
	const ttl = 300 * time.Millisecond
	const waiterTTL = time.Minute
	const bound = 50 * time.Millisecond // after the holder's deadline
	fleets := []struct {
		name    string
		clients func(t *testing.T) func() rueidis.Client
	}{}
	for _, k := range redistest.Kinds() {
		fleets = append(fleets, struct {
			name    string
			clients func(t *testing.T) func() rueidis.Client
		}{k.String(), func(t *testing.T) func() rueidis.Client {
			srv := redistest.Start(t, redistest.WithKind(k))
			return func() rueidis.Client { return srv.Client(t) }
		}})
	}
	fleets = append(fleets, struct {
		name    string
		clients func(t *testing.T) func() rueidis.Client
	}{"cluster-8.0", func(t *testing.T) func() rueidis.Client {
		cl := redistest.StartCluster(t, 3, redistest.Version(8))
		return func() rueidis.Client { return cl.Client(t) }
	}})
	for _, f := range fleets {
		t.Run(f.name, func(t *testing.T) {
			newClient := f.clients(t)
			ctx := xtest.Ctx(t, 30*time.Second)
			rc := newClient() // reads the scores
			score := func(key, token string) int64 {
				t.Helper()
				v, err := rc.Do(ctx, rc.B().Zscore().Key(key).Member(token).Build()).ToString()
				if err != nil {
					t.Fatalf("ZSCORE %s: %v", key, err)
				}
				return ms(t, v)
			}
			waiters := newSems(t, newClient(), semaphore.Options{})
			var lat []time.Duration
			skipped := 0
			for i := 0; len(lat) < 5; i++ {
				key := fmt.Sprintf("dead%d", i)
				// Two other holders that stay; the third place is the dead
				// holder's.
				for range 2 {
					if _, err := waiters.TryAcquire(ctx, key, 3, time.Minute); err != nil {
						t.Fatal(err)
					}
				}
				hc := newClient()
				hs, err := semaphore.New(hc, semaphore.Options{})
				if err != nil {
					t.Fatal(err)
				}
				hp, err := hs.TryAcquire(ctx, key, 3, ttl)
				if err != nil {
					t.Fatal(err)
				}
				deadline := score(hp.Key(), hp.Token())
				got := make(chan *semaphore.Permit, 1)
				go func() {
					p, err := waiters.Acquire(ctx, key, 3, waiterTTL)
					if err != nil {
						t.Error(err)
						close(got)
						return
					}
					got <- p
				}()
				// Wait until the waiter is asleep (its first attempt found
				// the semaphore full), then let the holder die.
				var p *semaphore.Permit
				ok, queued := true, false
				for !queued && p == nil && ok {
					select {
					case p, ok = <-got:
					case <-time.After(time.Millisecond):
						queued = semaphore.Queued(waiters, key)
					}
				}
				hs.Close()
				hc.Close() // the holder dies: no release is ever sent
				if p == nil && ok {
					p, ok = <-got
				}
				if !ok {
					return
				}
				if !queued {
					// Granted by its first attempt: it was sent after the
					// holder's deadline (a slow start on a loaded machine),
					// so it measures no wake-up.
					t.Logf("%s: the waiter's first attempt came after the holder's deadline; sample not counted", key)
					if skipped++; skipped > 5 {
						t.Fatalf("the waiter was never seen asleep before the holder's %v ttl ran out", ttl)
					}
					continue
				}
				granted := score(p.Key(), p.Token()) - waiterTTL.Milliseconds()
				if granted < deadline {
					t.Fatalf("the waiter was granted %dms before the dead holder's permit expired", deadline-granted)
				}
				lat = append(lat, time.Duration(granted-deadline)*time.Millisecond)
			}
			slices.Sort(lat)
			t.Logf("dead holder's deadline -> waiter granted, server clock (ttl %v): %v", ttl, lat)
			if worst := lat[len(lat)-1]; worst > bound {
				t.Errorf("a dead holder's permit went to a waiter %v after its deadline; want <= %v", worst, bound)
			}
		})
	}
}
