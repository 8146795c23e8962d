package lock_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/internal/leasetest"
	"github.com/coordhost/coordhost/primitives/lock"
)

// replicated starts a primary and one replica of it.
func replicated(t *testing.T) (primary, replica *redistest.Server) {
	t.Helper()
	primary = redistest.Start(t)
	return primary, redistest.StartReplicaOf(t, primary)
}

// get reads key on s: "" when absent.
func get(t *testing.T, s *redistest.Server, key string) string {
	t.Helper()
	return leasetest.Read(t, s, "GET", key)
}

// With Replicas = 1 a grant, its fencing token and a renewal are on the
// replica by the time the call returns: WAIT confirmed them.
func TestReplicasConfirmGrants(t *testing.T) {
	p, r := replicated(t)
	c := p.Client(t)
	ctx := xtest.Ctx(t, 30*time.Second)
	l := newLocker(t, c, lock.Options{Replicas: 1, ReplicaTimeout: 5 * time.Second})

	lk, err := l.TryAcquire(ctx, "plain", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got := get(t, r, "plain"); got != lk.Token() {
		t.Fatalf("replica holds %q, want the grant's token %q", got, lk.Token())
	}
	if ok, err := lk.Renew(ctx, time.Hour); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if ms, _ := strconv.ParseInt(r.MustCmd(t, "PTTL", "plain"), 10, 64); ms < int64(59*time.Minute/time.Millisecond) {
		t.Fatalf("replica's PTTL %dms after a renewal for 1h", ms)
	}
	if res, err := lk.Release(ctx); res != primitives.Released || err != nil {
		t.Fatal(res, err)
	}

	// Fenced, caller-named counter: the token is on the replica too.
	for want := int64(1); want <= 3; want++ {
		fk, err := l.TryAcquireFenced(ctx, "{f}:lease", "{f}:counter", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if fk.FencingToken() != want || get(t, r, "{f}:counter") != strconv.FormatInt(want, 10) || get(t, r, "{f}:lease") != fk.Token() {
			t.Fatalf("token %d, replica counter %q lease %q", fk.FencingToken(), get(t, r, "{f}:counter"), get(t, r, "{f}:lease"))
		}
		if _, err := fk.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// A waiter's grant (on the wait engine's connection) is confirmed too.
	holder, err := l.TryAcquire(ctx, "waited", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *lock.Lock, 1)
	go func() {
		w, err := l.Acquire(ctx, "waited", time.Minute)
		if err != nil {
			t.Error(err)
		}
		got <- w
	}()
	time.Sleep(50 * time.Millisecond)
	if _, err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if w := <-got; w == nil || get(t, r, "waited") != w.Token() {
		t.Fatalf("waiter's grant %v not on the replica (%q)", w, get(t, r, "waited"))
	}
}

// With the replica paused (SIGSTOP), WAIT answers 0 after the timeout: the
// acquire fails with ErrNotReplicated and the key is released; a fenced
// acquire's token is skipped, never handed out again; a waiting Acquire
// keeps trying (each attempt given back) and gets the lock once the
// replica is back.
func TestReplicasUnconfirmedGrantIsReleased(t *testing.T) {
	p, r := replicated(t)
	c := p.Client(t)
	ctx := xtest.Ctx(t, 30*time.Second)
	const timeout = 200 * time.Millisecond
	l := newLocker(t, c, lock.Options{Replicas: 1, ReplicaTimeout: timeout})
	fenced := newLocker(t, c, lock.Options{Replicas: 1, ReplicaTimeout: timeout, Fencing: true})

	first, err := l.TryAcquireFenced(ctx, "{f}:lease", "{f}:counter", time.Minute)
	if err != nil || first.FencingToken() != 1 {
		t.Fatal(first, err)
	}
	if _, err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}

	r.Pause()
	defer r.Resume()
	for _, tc := range []struct {
		name string
		try  func() (*lock.Lock, error)
		key  string
	}{
		{"TryAcquire", func() (*lock.Lock, error) { return l.TryAcquire(ctx, "k", time.Minute) }, "k"},
		{"TryAcquireFenced", func() (*lock.Lock, error) {
			return l.TryAcquireFenced(ctx, "{f}:lease", "{f}:counter", time.Minute)
		}, "{f}:lease"},
		{"Fencing", func() (*lock.Lock, error) { return fenced.TryAcquire(ctx, "g", time.Minute) }, "g"},
	} {
		start := time.Now()
		lk, err := tc.try()
		took := time.Since(start)
		var nr *primitives.NotReplicated
		if lk != nil || !errors.Is(err, primitives.ErrNotReplicated) || !errors.As(err, &nr) || nr.Acked != 0 || nr.Want != 1 {
			t.Fatalf("%s: %v, %v; want ErrNotReplicated", tc.name, lk, err)
		}
		if took < timeout || took > timeout+2*time.Second {
			t.Errorf("%s took %v with a %v replica timeout", tc.name, took, timeout)
		}
		if v := get(t, p, tc.key); v != "" {
			t.Errorf("%s: the unconfirmed grant is still held on the primary (%q)", tc.name, v)
		}
		t.Logf("%s: %v after %v", tc.name, err, took.Round(time.Millisecond))
	}
	if v := get(t, p, "{f}:counter"); v != "2" {
		t.Fatalf("primary's counter %q after one unconfirmed fenced grant, want 2 (drawn, skipped)", v)
	}

	waited := make(chan error, 1)
	go func() {
		lk, err := l.Acquire(ctx, "w", time.Minute)
		if err == nil {
			_, err = lk.Release(ctx)
		}
		waited <- err
	}()
	time.Sleep(3 * timeout)
	select {
	case err := <-waited:
		t.Fatalf("a waiting Acquire returned while the replica was paused: %v", err)
	default:
	}
	r.Resume()
	select {
	case err := <-waited:
		if err != nil {
			t.Fatalf("the waiting Acquire after the replica resumed: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting Acquire did not get the lock after the replica resumed")
	}
	next, err := l.TryAcquireFenced(ctx, "{f}:lease", "{f}:counter", time.Minute)
	if err != nil || next.FencingToken() != 3 {
		t.Fatalf("after the replica resumed: %v %v, want token 3 (2 was drawn and never handed out)", next, err)
	}
}

// An unconfirmed renewal loses the handle (fail closed): false with
// ErrNotReplicated, Done closed, later renewals refused locally; Release
// still deletes the lock, which is ours on the primary.
func TestReplicasUnconfirmedRenewalLosesHandle(t *testing.T) {
	p, r := replicated(t)
	c := p.Client(t)
	ctx := xtest.Ctx(t, 30*time.Second)
	l := newLocker(t, c, lock.Options{Replicas: 1, ReplicaTimeout: 200 * time.Millisecond})
	lk, err := l.TryAcquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	r.Pause()
	defer r.Resume()
	ok, err := lk.Renew(ctx, time.Minute)
	if ok || !errors.Is(err, primitives.ErrNotReplicated) || errors.Is(err, primitives.ErrUncertain) {
		t.Fatalf("Renew: %v %v, want false and ErrNotReplicated", ok, err)
	}
	if !strings.Contains(err.Error(), `lock "k": renew not confirmed by replicas (handle lost): 0 of 1 replica(s) acknowledged within 200ms`) {
		t.Fatalf("error %q", err)
	}
	select {
	case <-lk.Done():
	default:
		t.Fatal("Done open after an unconfirmed renewal")
	}
	if ok, err := lk.Renew(ctx, time.Minute); ok || err != nil {
		t.Fatalf("second Renew: %v %v, want false without a round trip", ok, err)
	}
	if res, err := lk.Release(ctx); res != primitives.Released || err != nil {
		t.Fatal(res, err)
	}
}

func TestReplicasBadOptions(t *testing.T) {
	c := redistest.Start(t).Client(t)
	leasetest.BadReplicaOptions(t, "lock", func(n int, timeout time.Duration) (bool, error) {
		l, err := lock.New(c, lock.Options{Replicas: n, ReplicaTimeout: timeout})
		return l != nil, err
	})
}

// Replicas = 0 keeps the fast path: a plain acquire is one SET, a renewal
// and a release one EVALSHA each, and no WAIT; Replicas = 1 adds one WAIT
// per acquire (which then runs the script) and per renewal, and none per
// release.
func TestReplicasCommandsPerOperation(t *testing.T) {
	p, _ := replicated(t)
	c := p.Client(t)
	ctx := xtest.Ctx(t, 30*time.Second)
	const n = 20
	for _, tc := range []struct {
		name string
		opts lock.Options
		want map[string]int
	}{
		{"off", lock.Options{}, map[string]int{"set": n, "evalsha": 2 * n}},
		{"off fencing", lock.Options{Fencing: true}, map[string]int{"evalsha": 3 * n}},
		{"one replica", lock.Options{Replicas: 1}, map[string]int{"evalsha": 3 * n, "wait": 2 * n}},
		{"one replica fencing", lock.Options{Replicas: 1, Fencing: true}, map[string]int{"evalsha": 3 * n, "wait": 2 * n}},
	} {
		l := newLocker(t, c, tc.opts)
		warm, err := l.TryAcquire(ctx, "warm", time.Minute) // loads the scripts
		if err != nil {
			t.Fatal(err)
		}
		warm.Renew(ctx, time.Minute)
		warm.Release(ctx)
		p.MustCmd(t, "CONFIG", "RESETSTAT")
		for range n {
			lk, err := l.TryAcquire(ctx, "k", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if ok, err := lk.Renew(ctx, time.Minute); !ok || err != nil {
				t.Fatal(ok, err)
			}
			if _, err := lk.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		got := commandstats(t, p)
		// The commands a client sends (commandstats also counts those the
		// scripts call, and the replica's REPLCONF): SET counts only where
		// no script sets a key.
		watch := []string{"evalsha", "eval", "wait"}
		if _, ok := tc.want["set"]; ok {
			watch = append(watch, "set")
		}
		for _, cmd := range watch {
			if got[cmd] != tc.want[cmd] {
				t.Errorf("%s: %d %s calls for %d acquire+renew+release cycles, want %d (all: %v)", tc.name, got[cmd], cmd, n, tc.want[cmd], got)
			}
		}
	}
}
