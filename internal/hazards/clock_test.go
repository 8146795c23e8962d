package hazards_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives/lock"
	"github.com/coordhost/coordhost/primitives/ratelimit"
	"github.com/coordhost/coordhost/primitives/rwlock"
	"github.com/coordhost/coordhost/primitives/semaphore"
)

// clockServer is a Redis 7.0 whose wall clock the test moves: the server
// runs under testdata/clockshim.c, compiled at test time, which adds the
// offset in ms written to a file to CLOCK_REALTIME, gettimeofday and time
// (CLOCK_MONOTONIC stays, as on a real clock step).
type clockServer struct {
	*redistest.Server
	file   string
	offset time.Duration
}

// startClockServer compiles the shim into t.TempDir() and starts Redis
// 7.0 (Debian's binary, loaded the ordinary way) under it.
func startClockServer(t *testing.T) *clockServer {
	t.Helper()
	dir := t.TempDir()
	so := filepath.Join(dir, "clockshim.so")
	src, err := filepath.Abs(filepath.Join("testdata", "clockshim.c"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("gcc", "-shared", "-fPIC", "-O2", "-Wall", "-o", so, src, "-ldl").CombinedOutput()
	if err != nil {
		t.Fatalf("compiling the clock shim (gcc is required): %v\n%s", err, out)
	}
	cs := &clockServer{file: filepath.Join(dir, "offset-ms")}
	cs.set(t, 0)
	cs.Server = redistest.Start(t, redistest.WithKind(redistest.Redis70),
		redistest.Env("LD_PRELOAD="+so, "CLOCKSHIM_FILE="+cs.file))
	// The shim works: a jump of an hour shows in TIME.
	ctx := xtest.Ctx(t, 10*time.Second)
	cs.jump(t, time.Hour)
	if d := time.Duration(serverMillis(t, ctx, cs.Server)-time.Now().UnixMilli()) * time.Millisecond; d < time.Hour-2*time.Second || d > time.Hour+2*time.Second {
		t.Fatalf("the clock shim does not work: the server's clock is %v off after a jump of an hour", d)
	}
	cs.jump(t, -time.Hour)
	return cs
}

// set writes the offset file.
func (cs *clockServer) set(t *testing.T, d time.Duration) {
	t.Helper()
	if err := os.WriteFile(cs.file+".tmp", []byte(strconv.FormatInt(d.Milliseconds(), 10)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(cs.file+".tmp", cs.file); err != nil { // atomic: never a half-written offset
		t.Fatal(err)
	}
	cs.offset = d
}

// jump steps the server's wall clock by d and waits until it took effect
// (the shim reads the file at most once a millisecond).
func (cs *clockServer) jump(t *testing.T, d time.Duration) {
	t.Helper()
	cs.set(t, cs.offset+d)
	time.Sleep(5 * time.Millisecond)
}

// A jump of the server's wall clock, reproduced with an LD_PRELOAD shim:
// Redis stores every expiry as an absolute time (and coordhost's rwlock,
// semaphore and rate-limit scripts store deadlines read from TIME), so a
// step of the clock moves every lease with it.
//
// Forward 15 s: a lock granted for 10 s is gone at once; the holder's
// handle still says about 10 s left and keeps Done open (its estimate
// runs on the client's monotonic clock), a waiter is granted the lock
// within a few hundred milliseconds (Redis deletes the expired key and
// the invalidation wakes it), and only the fencing token tells the
// protected resource which holder is current. A semaphore permit and a
// write lease go the same way; a fixed-window rate limiter starts a new
// window and grants its limit again at once.
//
// Back 10 s: a lock granted for 1 s whose holder died stays for 11 s; its
// handle's Done closes after 1 s as it should (the estimate never follows
// the server's clock), and a waiter waits the whole 11 s.
func TestHazardServerClockJump(t *testing.T) {
	cs := startClockServer(t)
	ctx := xtest.Ctx(t, 30*time.Second)
	c := cs.Client(t)
	l, err := lock.New(c, lock.Options{Fencing: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	store := &fencedStore{}

	t.Run("forward", func(t *testing.T) {
		a, err := l.TryAcquire(ctx, "job", 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		granted := time.Now()
		if err := store.Write(a.FencingToken(), "a"); err != nil {
			t.Fatal(err)
		}
		// A waiter, asleep on the lock.
		var (
			wg      sync.WaitGroup
			waiter  *lock.Lock
			werr    error
			waitEnd time.Time
		)
		wg.Add(1)
		go func() {
			defer wg.Done()
			waiter, werr = l.Acquire(ctx, "job", 10*time.Second)
			waitEnd = time.Now()
		}()
		time.Sleep(200 * time.Millisecond)

		jumped := time.Now()
		cs.jump(t, 15*time.Second)
		wg.Wait()
		if werr != nil {
			t.Fatalf("the waiter: %v", werr)
		}
		defer waiter.Release(ctx)
		left := a.Remaining()
		t.Logf("a 10 s lock ended %v after its grant; the waiter was granted %v after the jump, while the first holder's handle said %v left, Done open: %v",
			jumped.Sub(granted).Round(time.Millisecond), waitEnd.Sub(jumped).Round(time.Millisecond), left.Round(time.Millisecond), !closed(a.Done()))
		if left < 8*time.Second || closed(a.Done()) {
			t.Errorf("the first holder's estimate followed the server's clock: %v left, Done closed %v", left, closed(a.Done()))
		}
		if waitEnd.Sub(jumped) > 3*time.Second {
			t.Errorf("the waiter took %v after the jump", waitEnd.Sub(jumped))
		}
		// The fencing token orders the two holders' writes.
		if err := store.Write(waiter.FencingToken(), "waiter"); err != nil {
			t.Fatalf("the new holder's write: %v", err)
		}
		err = store.Write(a.FencingToken(), "a, late")
		var stale errStale
		if !errors.As(err, &stale) {
			t.Fatalf("the old holder's write after the new holder's: %v, want a refusal", err)
		}
		t.Logf("the fenced resource: %v", err)
		if ok, err := a.Verify(ctx); ok || err != nil || !closed(a.Done()) {
			t.Fatalf("the first holder's Verify: %v %v, Done closed %v", ok, err, closed(a.Done()))
		}

		// A semaphore permit and a write lease, granted for 10 s: the
		// same jump again ends them.
		sem, err := semaphore.New(c, semaphore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer sem.Close()
		rw, err := rwlock.New(c, rwlock.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer rw.Close()
		p, err := sem.TryAcquire(ctx, "sem", 1, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		w, err := rw.TryAcquireWrite(ctx, "rw", 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		cs.jump(t, 15*time.Second)
		p2, perr := sem.TryAcquire(ctx, "sem", 1, 10*time.Second)
		w2, werr2 := rw.TryAcquireWrite(ctx, "rw", 10*time.Second)
		t.Logf("after a second jump: the semaphore's only permit granted again: %v (first holder's estimate %v); the write lease granted again: %v (first holder's estimate %v)",
			perr == nil, p.Remaining().Round(time.Second), werr2 == nil, w.Remaining().Round(time.Second))
		if perr != nil || werr2 != nil {
			t.Fatalf("semaphore %v, rwlock %v: want both granted again", perr, werr2)
		}
		p2.Release(ctx)
		w2.Release(ctx)

		// A fixed window of 5 per minute: 5 granted, the 6th refused; a
		// jump past the window grants 5 more at once.
		lims, err := ratelimit.New(c, ratelimit.Options{})
		if err != nil {
			t.Fatal(err)
		}
		fw, err := lims.FixedWindow("api", ratelimit.FixedWindowOptions{Limit: 5, Window: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		defer fw.Close()
		start := time.Now()
		granted5 := 0
		for range 6 {
			if fw.Allow(ctx) {
				granted5++
			}
		}
		cs.jump(t, 61*time.Second)
		for range 6 {
			if fw.Allow(ctx) {
				granted5++
			}
		}
		t.Logf("a limit of 5 a minute granted %d in %v of real time across a jump of 61 s", granted5, time.Since(start).Round(time.Millisecond))
		if granted5 != 10 {
			t.Fatalf("granted %d, want 10", granted5)
		}
	})

	t.Run("backward", func(t *testing.T) {
		b, err := l.TryAcquire(ctx, "crashed", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		// b's process dies now: nobody releases or renews.
		cs.jump(t, -10*time.Second)
		pttl, err := strconv.ParseInt(cs.MustCmd(t, "PTTL", "crashed"), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("a 1 s lock after the server's clock went back 10 s: PTTL %v", time.Duration(pttl)*time.Millisecond)
		if pttl < 9000 {
			t.Fatalf("PTTL %d ms, want about 11 s", pttl)
		}
		wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		_, err = l.Acquire(wctx, "crashed", time.Second)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a waiter on the lingering lock: %v, want to wait past its 3 s deadline", err)
		}
		if !closed(b.Done()) || b.Remaining() != 0 {
			t.Fatalf("the holder's estimate followed the server's clock back: %v left", b.Remaining())
		}
		t.Logf("a waiter gave up after 3 s on a lock granted for 1 s; the holder's handle closed Done at its 1 s estimate")
		b.Release(ctx)
	})
}
