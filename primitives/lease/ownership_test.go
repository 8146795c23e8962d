package lease_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/internal/clock"
	"github.com/coordhost/coordhost/primitives/lease"
)

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Verify on a field deleted from outside (or a whole hash deleted) answers
// false without an error and closes Done.
func TestLeaseVerifyAfterOutsideDelete(t *testing.T) {
	for _, tg := range targets() {
		t.Run(tg.name, func(t *testing.T) {
			c, cmd := tg.client(t)
			ctx := xtest.Ctx(t, 10*time.Second)
			ls := newLeases(t, c, lease.Options{})
			for _, how := range [][]string{{"HDEL", "h", "f"}, {"DEL", "h"}} {
				l, err := ls.TryAcquire(ctx, "h", "f", time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				done := l.Done()
				cmd(how...)
				ok, err := l.Verify(ctx)
				if ok || err != nil {
					t.Fatalf("after %v: Verify = %v, %v; want false, nil", how, ok, err)
				}
				if !isClosed(done) || l.Remaining() != 0 {
					t.Fatalf("after %v: Done open or Remaining %v", how, l.Remaining())
				}
			}
		})
	}
}

// A key-level TTL added to the hash after the grant would end the lease
// with the hash: Renew refuses (nothing renewed), fails closed and says
// why; Verify answers false. Before the fix Renew said true and Remaining
// said seconds while the hash expired in milliseconds, and a second owner
// was then granted the field while the first handle's Done was open.
func TestLeaseKeyTTLAfterGrantFailsClosed(t *testing.T) {
	for _, tg := range targets() {
		t.Run(tg.name, func(t *testing.T) {
			c, cmd := tg.client(t)
			ctx := xtest.Ctx(t, 10*time.Second)
			ls := newLeases(t, c, lease.Options{})
			l, err := ls.TryAcquire(ctx, "kt", "f", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			done := l.Done()
			cmd("PEXPIRE", "kt", "5000")
			fieldTTL := cmd("HPTTL", "kt", "FIELDS", "1", "f")
			ok, err := l.Renew(ctx, time.Hour)
			if ok || !errors.Is(err, lease.ErrHashHasTTL) {
				t.Fatalf("Renew = %v, %v; want false, ErrHashHasTTL", ok, err)
			}
			if strings.Count(err.Error(), "key-level TTL") != 1 {
				t.Errorf("error says it twice (or not at all): %q", err)
			}
			if !isClosed(done) || l.Remaining() != 0 {
				t.Fatalf("Done open or Remaining %v after the refused renewal", l.Remaining())
			}
			if after := cmd("HPTTL", "kt", "FIELDS", "1", "f"); millis(after) > millis(fieldTTL) {
				t.Fatalf("the refused renewal extended the field: HPTTL %s -> %s", fieldTTL, after)
			}

			m, err := ls.TryAcquire(ctx, "kt", "g", time.Minute)
			if !errors.Is(err, lease.ErrHashHasTTL) || m != nil {
				t.Fatalf("acquire on a hash with a key TTL: %v", err)
			}
			// Verify of another grant on the hash sees it too.
			cmd("PERSIST", "kt")
			v, err := ls.TryAcquire(ctx, "kt", "v", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			cmd("PEXPIRE", "kt", "5000")
			if ok, err := v.Verify(ctx); ok || err != nil {
				t.Fatalf("Verify with a key-level TTL = %v, %v; want false, nil", ok, err)
			}
		})
	}
}

// The largest TTL is accepted; a refused one writes nothing, so no field is
// left without an expiry or owner.
func TestLeaseMaxTTL(t *testing.T) {
	s := redistest.Start(t, redistest.Version(8))
	c := s.Client(t)
	ctx := xtest.Ctx(t, 10*time.Second)
	ls := newLeases(t, c, lease.Options{})
	l, err := ls.TryAcquire(ctx, "long", "f", lease.MaxTTL)
	if err != nil {
		t.Fatalf("TryAcquire(MaxTTL): %v", err)
	}
	pttl, _ := strconv.ParseInt(s.MustCmd(t, "HPTTL", "long", "FIELDS", "1", "f"), 10, 64)
	if want := lease.MaxTTL.Milliseconds(); pttl > want || pttl < want-10_000 {
		t.Fatalf("HPTTL %d, want about %d", pttl, want)
	}
	if ok, err := l.Renew(ctx, lease.MaxTTL); !ok || err != nil {
		t.Fatalf("Renew(MaxTTL): %v %v", ok, err)
	}
	if r, err := l.Release(ctx); r != primitives.Released || err != nil {
		t.Fatalf("Release: %v %v", r, err)
	}
	if _, err := ls.TryAcquire(ctx, "long", "f", lease.MaxTTL+time.Millisecond); !errors.Is(err, primitives.ErrInvalidTTL) {
		t.Fatalf("MaxTTL+1ms: %v", err)
	}
	if got := s.MustCmd(t, "EXISTS", "long"); got != "0" {
		t.Fatalf("a refused acquire left the hash behind")
	}
}

// millis reads an HPTTL reply as printed by either target ("123" or "[123]").
func millis(s string) int64 {
	n, err := strconv.ParseInt(strings.Trim(s, "[] \n"), 10, 64)
	if err != nil {
		panic("not a number of milliseconds: " + s)
	}
	return n
}

// The local estimate runs on the Leases' clock: on a fake one, Done closes
// when the clock passes the lease's end and a renewal then sends nothing,
// with no sleep in the test.
func TestLeaseEstimateOnFakeClock(t *testing.T) {
	s := redistest.Start(t, redistest.Version(8))
	ctx := xtest.Ctx(t, 10*time.Second)
	ls := newLeases(t, s.Client(t), lease.Options{})
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	lease.SetClock(ls, clk)
	l, err := ls.TryAcquire(ctx, "fake", "f", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	done := l.Done()
	if r := l.Remaining(); r != time.Minute {
		t.Fatalf("Remaining %v on a clock that stands still, want 1m", r)
	}
	clk.Advance(59 * time.Second)
	if isClosed(done) || l.Remaining() != time.Second {
		t.Fatalf("after 59s: Done closed %v, Remaining %v", isClosed(done), l.Remaining())
	}
	if ok, err := l.Renew(ctx, time.Minute); !ok || err != nil {
		t.Fatalf("Renew: %v %v", ok, err)
	}
	clk.Advance(time.Minute)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Done stayed open after the fake clock passed the lease's end")
	}
	s.MustCmd(t, "CONFIG", "RESETSTAT")
	if ok, err := l.Renew(ctx, time.Minute); ok || err != nil {
		t.Fatalf("Renew after the estimate ran out: %v %v", ok, err)
	}
	if stats := s.MustCmd(t, "INFO", "commandstats"); strings.Contains(stats, "cmdstat_evalsha") {
		t.Fatalf("a renewal after the estimate ran out was sent:\n%s", stats)
	}
}
