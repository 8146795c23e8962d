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
	"github.com/coordhost/coordhost/primitives/lock"
)

// Verify on a key deleted from outside answers false without an error and
// closes Done, as it does for a key another owner took.
func TestVerifyAfterOutsideDelete(t *testing.T) {
	for _, f := range fleets() {
		t.Run(f.name, func(t *testing.T) {
			c, cmd := f.client(t)
			ctx := xtest.Ctx(t, 10*time.Second)
			l := newLocker(t, c, lock.Options{})
			for _, how := range [][]string{{"DEL", "gone"}, {"HSET", "gone", "f", "v"}} {
				a, err := l.TryAcquire(ctx, "gone", time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				done := a.Done()
				cmd("DEL", "gone")
				if how[0] != "DEL" {
					cmd(how...)
				}
				ok, err := a.Verify(ctx)
				if ok || err != nil {
					t.Fatalf("after %v: Verify = %v, %v; want false, nil", how, ok, err)
				}
				if !isClosed(done) {
					t.Fatalf("after %v: Done stayed open", how)
				}
				if a.Remaining() != 0 {
					t.Fatalf("after %v: Remaining %v, want 0", how, a.Remaining())
				}
				cmd("DEL", "gone")
			}
		})
	}
}

// The largest TTL is accepted and kept exactly; one millisecond more is
// refused before anything is sent.
func TestMaxTTL(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client(t)
	ctx := xtest.Ctx(t, 10*time.Second)
	l := newLocker(t, c, lock.Options{Fencing: true})
	a, err := l.TryAcquire(ctx, "long", lock.MaxTTL)
	if err != nil {
		t.Fatalf("TryAcquire(MaxTTL): %v", err)
	}
	pttl, _ := strconv.ParseInt(s.MustCmd(t, "PTTL", "long"), 10, 64)
	if want := lock.MaxTTL.Milliseconds(); pttl > want || pttl < want-10_000 {
		t.Fatalf("PTTL %d, want about %d", pttl, want)
	}
	if ok, err := a.Renew(ctx, lock.MaxTTL); !ok || err != nil {
		t.Fatalf("Renew(MaxTTL): %v %v", ok, err)
	}
	if ok, err := a.Renew(ctx, lock.MaxTTL+time.Millisecond); ok || !errors.Is(err, primitives.ErrInvalidTTL) {
		t.Fatalf("Renew(MaxTTL+1ms): %v %v", ok, err)
	}
	if ok, err := a.Verify(ctx); !ok || err != nil {
		t.Fatalf("refused Renew disturbed the lock: %v %v", ok, err)
	}
	if r, err := a.Release(ctx); r != primitives.Released || err != nil {
		t.Fatalf("Release: %v %v", r, err)
	}
}

// Error texts name the key and say what went wrong once, without Redis'
// script SHA or line.
func TestErrorTexts(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client(t)
	ctx := xtest.Ctx(t, 10*time.Second)
	s.MustCmd(t, "HSET", "h", "f", "v")
	for _, o := range []lock.Options{{}, {Fencing: true}, {FIFO: true}} {
		l := newLocker(t, c, o)
		_, err := l.TryAcquire(ctx, "h", time.Second)
		if !errors.Is(err, primitives.ErrWrongType) {
			t.Fatalf("%+v: %v", o, err)
		}
		if got, want := err.Error(), `lock "h": coordhost: key holds a value of the wrong type`; got != want {
			t.Errorf("%+v: error %q, want %q", o, got, want)
		}
	}
	l := newLocker(t, c, lock.Options{})
	held, err := l.TryAcquire(ctx, "busy", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	short, cancel := ctxWithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = l.Acquire(short, "busy", time.Second)
	if !errors.Is(err, short.Err()) || short.Err() == nil {
		t.Fatalf("Acquire on a held lock past its deadline: %v", err)
	}
	if msg := err.Error(); msg == short.Err().Error() || !strings.Contains(msg, `lock "busy"`) {
		t.Fatalf("timed-out Acquire says %q: it must name the key", msg)
	}
}

// Fencing tokens are strictly increasing only while the server keeps the
// counter: with appendonly on, a restart continues the sequence; without
// persistence it restarts at 1 (the hazard the package documentation
// describes, reproduced).
func TestFencingTokensAcrossRestart(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want int64 // first token after the restart
	}{
		{"appendonly always", []string{"--appendonly", "yes", "--appendfsync", "always"}, 6},
		{"no persistence", nil, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := redistest.Start(t, redistest.Args(tc.args...))
			ctx := xtest.Ctx(t, 30*time.Second)
			l := newLocker(t, s.Client(t), lock.Options{Fencing: true})
			for want := int64(1); want <= 5; want++ {
				a, err := l.TryAcquire(ctx, "job", time.Minute)
				if err != nil || a.FencingToken() != want {
					t.Fatalf("grant %d: token %v, %v", want, a, err)
				}
				a.Release(ctx)
			}
			s.Restart(t)
			var a *lock.Lock
			var err error
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				if a, err = l.TryAcquire(ctx, "job", time.Minute); err == nil || time.Now().After(deadline) {
					break
				}
			}
			if err != nil {
				t.Fatalf("after restart: %v", err)
			}
			if got := a.FencingToken(); got != tc.want {
				t.Fatalf("first token after the restart is %d, want %d", got, tc.want)
			}
			t.Logf("%s: first token after a restart: %d (the last before it was 5)", tc.name, a.FencingToken())
		})
	}
}

// A zero Lock and a nil *Lock are no grant: every call answers without a
// panic, and the ones that would talk to Redis fail with ErrInvalidOptions.
func TestZeroAndNilLock(t *testing.T) {
	ctx := xtest.Ctx(t, 5*time.Second)
	for name, l := range map[string]*lock.Lock{"zero": {}, "nil": nil} {
		if l.Key() != "" || l.Token() != "" || l.FencingToken() != 0 || l.Remaining() != 0 || !isClosed(l.Done()) {
			t.Errorf("%s: accessors %q %q %d %v %v", name, l.Key(), l.Token(), l.FencingToken(), l.Remaining(), isClosed(l.Done()))
		}
		if _, err := l.Renew(ctx, time.Second); !errors.Is(err, primitives.ErrInvalidOptions) {
			t.Errorf("%s: Renew: %v", name, err)
		}
		if _, err := l.Verify(ctx); !errors.Is(err, primitives.ErrInvalidOptions) {
			t.Errorf("%s: Verify: %v", name, err)
		}
		if _, err := l.Release(ctx); !errors.Is(err, primitives.ErrInvalidOptions) {
			t.Errorf("%s: Release: %v", name, err)
		}
		if err := l.Close(); err != nil {
			t.Errorf("%s: Close: %v", name, err)
		}
	}
}
