package lease_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/policies"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/lease"
	"github.com/redis/rueidis"
)

func TestMain(m *testing.M) { xtest.Main(m, xtest.ExampleServer(8, &exampleAddr)) }

// exampleAddr is the server the runnable examples talk to.
var exampleAddr string

func newLeases(t *testing.T, c rueidis.Client, o lease.Options) *lease.Leases {
	t.Helper()
	ls, err := lease.New(c, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ls.Close() })
	return ls
}

type target struct {
	name   string
	client func(t *testing.T) (rueidis.Client, func(...string) string)
}

// targets is every server kind with hash-field expiry, standalone, and a
// 3-master Redis 8.0 cluster.
func targets() []target {
	var ts []target
	for _, k := range redistest.Kinds() {
		if !k.Has(redistest.HashFieldExpiry) {
			continue
		}
		ts = append(ts, target{k.String(), func(t *testing.T) (rueidis.Client, func(...string) string) {
			s := redistest.Start(t, redistest.WithKind(k))
			return s.Client(t), func(a ...string) string { return s.MustCmd(t, a...) }
		}})
	}
	return append(ts, target{"cluster-8.0", func(t *testing.T) (rueidis.Client, func(...string) string) {
		cl := redistest.StartCluster(t, 3, redistest.Version(8))
		c := cl.Client(t)
		return c, func(a ...string) string {
			v, err := c.Do(context.Background(), c.B().Arbitrary(a...).Build()).ToAny()
			if err != nil && !rueidis.IsRedisNil(err) {
				t.Fatalf("%v: %v", a, err)
			}
			return fmt.Sprint(v)
		}
	}})
}

func TestLeaseLifecycle(t *testing.T) {
	for _, tg := range targets() {
		t.Run(tg.name, func(t *testing.T) {
			c, cmd := tg.client(t)
			ctx := xtest.Ctx(t, 20*time.Second)
			ls := newLeases(t, c, lease.Options{Prefix: "app:"})
			a, err := ls.TryAcquire(ctx, "workers", "w1", 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if a.Key() != "app:workers" || a.Field() != "w1" {
				t.Fatal(a.Key(), a.Field())
			}
			if got := cmd("HGET", "app:workers", "w1"); got != a.Token() {
				t.Fatalf("field holds %q", got)
			}
			if pttl := cmd("HPTTL", "app:workers", "FIELDS", "1", "w1"); !strings.Contains(pttl, "99") && !strings.Contains(pttl, "100") {
				t.Fatalf("HPTTL %s", pttl)
			}
			if got := cmd("PTTL", "app:workers"); got != "-1" {
				t.Fatalf("key-level TTL %s", got)
			}
			// A sibling field is independent.
			b, err := ls.TryAcquire(ctx, "workers", "w2", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ls.TryAcquire(ctx, "workers", "w1", time.Second); !errors.Is(err, primitives.ErrNotAcquired) {
				t.Fatalf("contended: %v", err)
			}
			if ok, err := a.Renew(ctx, time.Minute); !ok || err != nil {
				t.Fatal(ok, err)
			}
			if ok, err := a.Verify(ctx); !ok || err != nil {
				t.Fatal(ok, err)
			}
			if r, err := a.Release(ctx); r != primitives.Released || err != nil {
				t.Fatal(r, err)
			}
			if r, _ := a.Release(ctx); r != primitives.AlreadyReleased {
				t.Fatal(r)
			}
			if got := cmd("HGET", "app:workers", "w2"); got != b.Token() {
				t.Fatal("releasing w1 touched w2")
			}
			b.Close()
		})
	}
}

// An expired owner's handle cannot touch the replacement or a sibling.
func TestExpiredOwnerCannotTouchReplacement(t *testing.T) {
	s := redistest.Start(t, redistest.Version(8))
	c := s.Client(t)
	ctx := xtest.Ctx(t, 10*time.Second)
	ls := newLeases(t, c, lease.Options{})
	old, err := ls.TryAcquire(ctx, "h", "f", 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	sib, err := ls.TryAcquire(ctx, "h", "g", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	<-old.Done()
	repl, err := ls.Acquire(ctx, "h", "f", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if ok, _ := old.Renew(ctx, time.Minute); ok {
		t.Fatal("expired handle renewed")
	}
	if ok, _ := old.Verify(ctx); ok {
		t.Fatal("expired handle verified")
	}
	if r, err := old.Release(ctx); r != primitives.NotOwned || err != nil {
		t.Fatal(r, err)
	}
	if s.MustCmd(t, "HGET", "h", "f") != repl.Token() || s.MustCmd(t, "HGET", "h", "g") != sib.Token() {
		t.Fatal("old handle changed the hash")
	}
}

// On every server kind without hash-field expiry (Redis 7.0, Valkey 8.1)
// leases fail before writing, with an error naming the feature, the
// version that has it, and the server as it is.
func TestRefusedWithoutFieldExpiry(t *testing.T) {
	for _, k := range redistest.Kinds() {
		if k.Has(redistest.HashFieldExpiry) {
			continue
		}
		t.Run(k.String(), func(t *testing.T) {
			s := redistest.Start(t, redistest.WithKind(k))
			c := s.Client(t)
			ctx := xtest.Ctx(t, 10*time.Second)
			ls := newLeases(t, c, lease.Options{})
			for name, call := range map[string]func() (*lease.Lease, error){
				"TryAcquire": func() (*lease.Lease, error) { return ls.TryAcquire(ctx, "h", "f", time.Second) },
				"Acquire":    func() (*lease.Lease, error) { return ls.Acquire(ctx, "h", "f", time.Second) },
			} {
				_, err := call()
				if !errors.Is(err, lease.ErrUnsupportedServer) || !errors.Is(err, primitives.ErrUnsupported) ||
					!strings.Contains(err.Error(), "7.4") || !strings.Contains(err.Error(), k.Product()+" "+k.Version()) {
					t.Fatalf("%s: %v", name, err)
				}
			}
			if n := s.MustCmd(t, "DBSIZE"); n != "0" {
				t.Fatalf("DBSIZE %s after refusal", n)
			}
		})
	}
}

func TestLeaseBadInputsWriteNothing(t *testing.T) {
	s := redistest.Start(t, redistest.Version(8))
	c := s.Client(t)
	ls := newLeases(t, c, lease.Options{Prefix: "p:"})
	ok := xtest.Ctx(t, 10*time.Second)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	s.MustCmd(t, "SET", "p:str", "x")
	s.MustCmd(t, "HSET", "p:ttl", "other", "v")
	s.MustCmd(t, "PEXPIRE", "p:ttl", "600000")
	cases := []struct {
		name        string
		ctx         context.Context
		hash, field string
		ttl         time.Duration
		want        error
	}{
		{"empty hash", ok, "", "f", time.Second, primitives.ErrInvalidKey},
		{"empty field", ok, "h", "", time.Second, primitives.ErrInvalidKey},
		{"reserved hash", ok, "__coordhost:x", "f", time.Second, primitives.ErrInvalidKey},
		{"zero ttl", ok, "h", "f", 0, primitives.ErrInvalidTTL},
		{"negative ttl", ok, "h", "f", -time.Second, primitives.ErrInvalidTTL},
		{"sub-ms ttl", ok, "h", "f", time.Microsecond, primitives.ErrInvalidTTL},
		{"ttl above MaxTTL", ok, "h", "f", lease.MaxTTL + time.Millisecond, primitives.ErrInvalidTTL},
		{"MaxInt64 ttl", ok, "h", "f", math.MaxInt64, primitives.ErrInvalidTTL},
		{"cancelled", cancelled, "h", "f", time.Second, context.Canceled},
		{"wrong type", ok, "str", "f", time.Second, primitives.ErrWrongType},
		{"hash with key TTL", ok, "ttl", "f", time.Second, lease.ErrHashHasTTL},
	}
	for name, fn := range map[string]func(context.Context, string, string, time.Duration) (*lease.Lease, error){
		"TryAcquire": ls.TryAcquire, "Acquire": ls.Acquire,
	} {
		for _, tc := range cases {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				before := s.MustCmd(t, "DBSIZE")
				l, err := fn(tc.ctx, tc.hash, tc.field, tc.ttl)
				if !errors.Is(err, tc.want) || l != nil {
					t.Fatalf("got %v, %v; want %v", l, err, tc.want)
				}
				if after := s.MustCmd(t, "DBSIZE"); after != before {
					t.Fatalf("DBSIZE %s -> %s", before, after)
				}
				if s.MustCmd(t, "HEXISTS", "p:ttl", "f") != "0" {
					t.Fatal("field written into a hash with a key TTL")
				}
			})
		}
	}
	if _, err := lease.New(nil, lease.Options{}); !errors.Is(err, primitives.ErrInvalidOptions) {
		t.Fatal(err)
	}
}

// Waiters for one field wake when it is released; waiters for other fields
// of the same hash keep waiting; only the queue head of each field attempts.
func TestWaitersPerField(t *testing.T) {
	s := redistest.Start(t, redistest.Version(8))
	c := s.Client(t)
	ctx := xtest.Ctx(t, 20*time.Second)
	ls := newLeases(t, c, lease.Options{Retry: policies.RetryFunc(func(context.Context, policies.RetryRequest) policies.RetryDecision {
		return policies.RetryDecision{}
	})})
	f1, err := ls.TryAcquire(ctx, "h", "f1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	f2, err := ls.TryAcquire(ctx, "h", "f2", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	var wg sync.WaitGroup
	got1 := make(chan struct{}, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := ls.Acquire(ctx, "h", "f1", time.Minute)
			if err != nil {
				t.Error(err)
				return
			}
			got1 <- struct{}{}
			l.Release(ctx)
		}()
	}
	f2done := make(chan error, 1)
	go func() {
		l, err := ls.Acquire(ctx, "h", "f2", time.Minute)
		if err == nil {
			l.Release(ctx)
		}
		f2done <- err
	}()
	time.Sleep(200 * time.Millisecond)
	s.MustCmd(t, "CONFIG", "RESETSTAT")
	f1.Release(ctx)
	wg.Wait()
	select {
	case err := <-f2done:
		t.Fatalf("f2 waiter returned while f2 is held: %v", err)
	default:
	}
	evals := 0
	for _, line := range strings.Split(s.MustCmd(t, "INFO", "commandstats"), "\n") {
		if strings.HasPrefix(line, "cmdstat_evalsha:") || strings.HasPrefix(line, "cmdstat_eval:") {
			i := strings.Index(line, "calls=")
			j := strings.IndexByte(line[i:], ',')
			k, _ := strconv.Atoi(line[i+6 : i+j])
			evals += k
		}
	}
	t.Logf("%d script calls for %d f1 handoffs", evals, n)
	// Per handoff: the release, the new head's attempt, and the f2 head's
	// attempt on the hash's invalidation, plus the odd extra wake (60–100
	// measured); without coalescing every f1 waiter attempts (400+).
	if evals > 8*n {
		t.Fatalf("%d script calls for %d handoffs: waiters are not coalesced", evals, n)
	}
	f2.Release(ctx)
	if err := <-f2done; err != nil {
		t.Fatal(err)
	}
}

// A holder that never releases: the waiter wakes by its HPTTL timer.
func TestFieldExpiryWakesWaiter(t *testing.T) {
	s := redistest.Start(t, redistest.Version(8))
	c := s.Client(t)
	ctx := xtest.Ctx(t, 10*time.Second)
	ls := newLeases(t, c, lease.Options{Retry: policies.RetryFunc(func(context.Context, policies.RetryRequest) policies.RetryDecision {
		return policies.RetryDecision{}
	})})
	if _, err := ls.TryAcquire(ctx, "h", "f", 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	expires := time.Now().Add(300 * time.Millisecond)
	l, err := ls.Acquire(ctx, "h", "f", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("acquired %v after the field's expiry", time.Since(expires))
	l.Release(ctx)
}

// The handle's entry points refuse bad input locally and leave the lease
// as it was.
func TestLeaseHandleBadInputs(t *testing.T) {
	s := redistest.Start(t, redistest.Version(8))
	c := s.Client(t)
	ls := newLeases(t, c, lease.Options{})
	ctx := xtest.Ctx(t, 10*time.Second)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	l, err := ls.TryAcquire(ctx, "h", "f", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, ttl := range []time.Duration{0, -time.Second, time.Microsecond, lease.MaxTTL + time.Millisecond, math.MaxInt64} {
		if ok, err := l.Renew(ctx, ttl); ok || !errors.Is(err, primitives.ErrInvalidTTL) {
			t.Fatalf("Renew(%v): %v %v", ttl, ok, err)
		}
	}
	if ok, err := l.Renew(cancelled, time.Second); ok || !errors.Is(err, context.Canceled) {
		t.Fatalf("Renew(cancelled): %v %v", ok, err)
	}
	if _, err := l.Release(cancelled); !errors.Is(err, context.Canceled) {
		t.Fatalf("Release(cancelled): %v", err)
	}
	if _, err := l.Verify(cancelled); !errors.Is(err, context.Canceled) {
		t.Fatalf("Verify(cancelled): %v", err)
	}
	if ok, err := l.Verify(ctx); !ok || err != nil {
		t.Fatalf("the bad calls disturbed the lease: %v %v", ok, err)
	}
	if got := s.MustCmd(t, "HGET", "h", "f"); got != l.Token() {
		t.Fatalf("field holds %q", got)
	}
	if r, err := l.Release(ctx); r != primitives.Released || err != nil {
		t.Fatal(r, err)
	}
}

// A server without field expiry behind a cached "yes" (a failover to an
// older server): the acquire script refuses before writing, the error is
// ErrUnsupportedServer, and the next call asks the server again.
func TestStaleProbeWritesNothing(t *testing.T) {
	for _, k := range redistest.Kinds() {
		if k.Has(redistest.HashFieldExpiry) {
			continue
		}
		t.Run(k.String(), func(t *testing.T) {
			s := redistest.Start(t, redistest.WithKind(k))
			ctx := xtest.Ctx(t, 10*time.Second)
			ls := newLeases(t, s.Client(t), lease.Options{})
			lease.AssumeFieldExpiry(ls)
			_, err := ls.TryAcquire(ctx, "h", "f", time.Minute)
			if !errors.Is(err, lease.ErrUnsupportedServer) {
				t.Fatalf("TryAcquire behind a stale probe: %v", err)
			}
			if n := s.MustCmd(t, "DBSIZE"); n != "0" {
				t.Fatalf("DBSIZE %s: the refused acquire wrote", n)
			}
			_, err = ls.TryAcquire(ctx, "h", "f", time.Minute)
			if !errors.Is(err, lease.ErrUnsupportedServer) || !strings.Contains(err.Error(), k.Product()+" "+k.Version()) {
				t.Fatalf("the next call did not probe again: %v", err)
			}
		})
	}
}
