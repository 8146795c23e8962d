package latch_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/latch"
)

// Create with count 0 is a latch complete at once; MaxCount is exact.
func TestCountBounds(t *testing.T) {
	s := redistest.Start(t)
	ctx := xtest.Ctx(t, 10*time.Second)
	ls := newLatches(t, s.Client(t), latch.Options{})
	z, err := ls.Create(ctx, "zero", 0)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := z.Wait(ctx); !ok || err != nil {
		t.Fatalf("Wait on count 0 = %v, %v", ok, err)
	}
	if _, err := z.CountDown(ctx); !errors.Is(err, latch.ErrCompleted) {
		t.Fatalf("CountDown on count 0: %v", err)
	}
	m, err := ls.Create(ctx, "max", latch.MaxCount)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := m.CountDown(ctx); n != latch.MaxCount-1 || err != nil {
		t.Fatalf("CountDown from MaxCount = %d, %v", n, err)
	}
	if n, err := m.Count(ctx); n != latch.MaxCount-1 || err != nil {
		t.Fatalf("Count = %d, %v", n, err)
	}
	if got := s.MustCmd(t, "HGET", "max", "count"); got != strconv.FormatInt(latch.MaxCount-1, 10) {
		t.Fatalf("stored count %s", got)
	}
}

// Latch lifetime: every change sets the expiry to Options.TTL; reads do
// not; an expired latch's waiters return false (woken by their timer at
// the key's PTTL, not by the late expiry notification); NoExpiry persists.
func TestLatchTTL(t *testing.T) {
	s := redistest.Start(t)
	ctx := xtest.Ctx(t, 10*time.Second)
	c := s.Client(t)
	short := newLatches(t, c, latch.Options{TTL: 400 * time.Millisecond, RecheckInterval: time.Minute})
	l, err := short.Create(ctx, "short", 2)
	if err != nil {
		t.Fatal(err)
	}
	pttl := func() int64 { n, _ := strconv.ParseInt(s.MustCmd(t, "PTTL", "short"), 10, 64); return n }
	time.Sleep(150 * time.Millisecond)
	before := pttl()
	if _, err := l.Count(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := short.Join(ctx, "short"); err != nil {
		t.Fatal(err)
	}
	if after := pttl(); after > before {
		t.Fatalf("a read extended the latch: PTTL %d -> %d", before, after)
	}
	if _, err := l.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	if p := pttl(); p < 300 {
		t.Fatalf("CountDown did not refresh the expiry: PTTL %d", p)
	}
	w := waitAsync(ctx, l)
	start := time.Now()
	mustReturn(t, w, false, 2*time.Second)
	t.Logf("waiter of an expired latch returned %v after its last change", time.Since(start))
	if _, err := short.Join(ctx, "short"); !errors.Is(err, latch.ErrNotFound) {
		t.Fatalf("Join after expiry: %v", err)
	}

	forever := newLatches(t, c, latch.Options{TTL: latch.NoExpiry})
	f, err := forever.Create(ctx, "forever", 2)
	if err != nil {
		t.Fatal(err)
	}
	if p := s.MustCmd(t, "PTTL", "forever"); p != "-1" {
		t.Fatalf("NoExpiry latch has PTTL %s", p)
	}
	// A count-down by a Latches with a TTL sets one; by a NoExpiry one
	// removes it: the latest changer's setting holds.
	fs, err := short.Attach("forever", f.Generation())
	if err != nil {
		t.Fatal(err)
	}
	fs.CountDown(ctx)
	if p, _ := strconv.Atoi(s.MustCmd(t, "PTTL", "forever")); p <= 0 {
		t.Fatalf("PTTL %d after a count-down with a TTL", p)
	}
	f.CountDown(ctx)
	if p := s.MustCmd(t, "PTTL", "forever"); p != "-1" {
		t.Fatalf("PTTL %s after a NoExpiry count-down", p)
	}
}

// Close ends blocked waits with ErrClosed; handles keep counting down.
func TestCloseEndsWaits(t *testing.T) {
	s := redistest.Start(t)
	ctx := xtest.Ctx(t, 10*time.Second)
	c := s.Client(t)
	ls, err := latch.New(c, latch.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := ls.Create(ctx, "k", 1)
	if err != nil {
		t.Fatal(err)
	}
	w := waitAsync(ctx, l)
	mustWait(t, w)
	ls.Close()
	select {
	case r := <-w:
		if !errors.Is(r.err, primitives.ErrClosed) {
			t.Fatalf("Wait after Close: %v, %v", r.ok, r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wait did not end at Close")
	}
	if _, err := l.Wait(ctx); !errors.Is(err, primitives.ErrClosed) {
		t.Fatalf("new Wait after Close: %v", err)
	}
	if _, err := ls.Create(ctx, "x", 1); !errors.Is(err, primitives.ErrClosed) {
		t.Fatalf("Create after Close: %v", err)
	}
	if n, err := l.CountDown(ctx); n != 0 || err != nil {
		t.Fatalf("CountDown after Close = %d, %v", n, err)
	}
	if err := ls.Close(); err != nil {
		t.Fatal(err)
	}

	// A shared Waiter closing ends the waits too.
	wr, err := primitives.NewWaiter(c, primitives.WaiterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ls2 := newLatches(t, c, latch.Options{Waiter: wr})
	l2, err := ls2.Create(ctx, "k2", 1)
	if err != nil {
		t.Fatal(err)
	}
	w2 := waitAsync(ctx, l2)
	mustWait(t, w2)
	wr.Close()
	select {
	case r := <-w2:
		if !errors.Is(r.err, primitives.ErrClosed) {
			t.Fatalf("Wait after the Waiter closed: %v, %v", r.ok, r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wait did not end when the Waiter closed")
	}
}

// A cancelled Wait returns ctx's error and changes nothing.
func TestWaitCancelled(t *testing.T) {
	s := redistest.Start(t)
	ctx := xtest.Ctx(t, 10*time.Second)
	ls := newLatches(t, s.Client(t), latch.Options{})
	l, err := ls.Create(ctx, "k", 1)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	ok, err := l.Wait(wctx)
	if ok || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait = %v, %v", ok, err)
	}
	if got := s.MustCmd(t, "HGET", "k", "count"); got != "1" {
		t.Fatalf("count %s", got)
	}
}
