package redlock_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/redlock"
)

// untilPhase sleeps until the wall clock's fractional second is ph.
func untilPhase(ph time.Duration) {
	now := time.Now()
	frac := time.Duration(now.Nanosecond())
	d := ph - frac
	if d < 50*time.Millisecond {
		d += time.Second
	}
	time.Sleep(d)
}

// Found by a hostile review: INFO's uptime_in_seconds is
// floor(now) - floor(start), which can overstate the real uptime by up to
// ~1s. A restart just before a wall-clock second boundary made a node 10ms
// old report uptime 1, so with MaxTTL 1s the guard lasted 12ms and a
// second Group got a majority while the first holder held.
func TestRestartGuardCoversUptimeRounding(t *testing.T) {
	f := startFleet(t, 3)
	aged(t, f.servers...)
	ctx := xtest.Ctx(t, 30*time.Second)
	opts := redlock.Options{NodeTimeout: faultTimeout, MaxTTL: guardMaxTTL}
	a := newGuardedGroup(t, f.clients, opts)
	// warm up a's identification
	if l, err := a.Acquire(ctx, "warm", time.Second); err == nil {
		l.Release(ctx)
	} else {
		t.Fatal(err)
	}
	untilPhase(700 * time.Millisecond)
	// A blocker on node 2 until the restart (no expiry: it must still be
	// there when the holder's TryAcquire reaches it): the holder gets
	// nodes 0 and 1.
	f.servers[2].MustCmd(t, "SET", "k", "blocker")
	holder, err := a.TryAcquire(ctx, "k", guardMaxTTL)
	if err != nil {
		t.Fatal(err)
	}
	restartAt := time.Now()
	f.servers[0].Restart(t)
	t.Logf("restart took %v (wall phase at start %v)", time.Since(restartAt), time.Duration(restartAt.Nanosecond()))
	f.servers[2].MustCmd(t, "DEL", "k")
	// wait until the second boundary has passed
	for time.Now().Nanosecond() > 500_000_000 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(30 * time.Millisecond)
	fresh := newGuardedGroup(t, f.newClients(t), opts)
	info := f.servers[0].MustCmd(t, "INFO", "server")
	i := strings.Index(info, "uptime_in_seconds:")
	t.Logf("node 0 real uptime <= %v, INFO says %q", time.Since(restartAt), strings.SplitN(info[i:], "\r\n", 2)[0])
	for holder.Remaining() > 0 {
		l, err := fresh.TryAcquire(ctx, "k", time.Second)
		if err == nil {
			if holder.Remaining() > 0 {
				t.Errorf("DOUBLE HOLDER: fresh Group got %q on a majority while the first holder has %v left (node0 restarted %v ago); keys %q",
					l.Token(), holder.Remaining(), time.Since(restartAt), f.get(t, "k"))
			}
			l.Release(ctx)
			return
		}
		t.Logf("refused: %v", err)
		time.Sleep(20 * time.Millisecond)
	}
	t.Log("no double holder")
}

// Found by a hostile review: Drift near math.MaxInt64 overflowed the
// validity arithmetic into a lock that never expired on the client.
func TestNewRefusesDriftAboveMaxTTL(t *testing.T) {
	f := startFleet(t, 3)
	for _, d := range []time.Duration{math.MaxInt64, math.MaxInt64 / 2, redlock.DefaultMaxTTL + time.Millisecond} {
		if g, err := redlock.New(f.clients, redlock.Options{Drift: d}); !errors.Is(err, primitives.ErrInvalidOptions) {
			if g != nil {
				g.Close()
			}
			t.Errorf("Drift %v: New = %v, want ErrInvalidOptions", d, err)
		}
	}
}
