package semaphore_test

import (
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/semaphore"
)

// abandons collects OnAbandon reports.
type abandons struct {
	mu  sync.Mutex
	got []semaphore.Abandon
	ch  chan struct{}
}

func newAbandons() *abandons { return &abandons{ch: make(chan struct{}, 16)} }

func (a *abandons) hook(x semaphore.Abandon) {
	a.mu.Lock()
	a.got = append(a.got, x)
	a.mu.Unlock()
	a.ch <- struct{}{}
}

func (a *abandons) list() []semaphore.Abandon {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]semaphore.Abandon(nil), a.got...)
}

// Permit.Close on a server that does not answer waits its bound, returns an
// uncertain error and retries in the background; the retries give up after
// their span (short limits stand in for one second and one minute) and say
// so through OnAbandon (stage "release", reason "timeout") and a slog
// warning.
func TestCloseBackgroundGivesUp(t *testing.T) {
	srv := redistest.Start(t)
	ctx := xtest.Ctx(t, 20*time.Second)
	var logs xtest.SyncBuffer
	ab := newAbandons()
	s := newSems(t, srv.Client(t), semaphore.Options{
		Logger: slog.New(slog.NewTextHandler(&logs, nil)), OnAbandon: ab.hook,
	})
	semaphore.SetCleanupLimits(s, 100*time.Millisecond, 600*time.Millisecond, 20*time.Millisecond, 100*time.Millisecond)
	p, err := s.TryAcquire(ctx, "k", 1, semaphore.NoExpiry)
	if err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume()
		}
	}()
	start := time.Now()
	err = p.Close()
	took := time.Since(start)
	if !errors.Is(err, primitives.ErrUncertain) {
		t.Fatalf("Close on a paused server: %v; want an error matching ErrUncertain", err)
	}
	t.Logf("Close returned after %v: %v", took, err)
	if took > time.Second {
		t.Fatalf("Close waited %v with a 100ms bound", took)
	}
	if n := semaphore.PendingCleanups(s); n != 1 {
		t.Fatalf("%d background cleanups, want 1", n)
	}
	select {
	case <-ab.ch:
	case <-time.After(5 * time.Second):
		t.Fatal("the background release did not give up")
	}
	gaveUp := time.Since(start)
	srv.Resume()
	resumed = true
	got := ab.list()
	if len(got) != 1 || got[0].Stage != "release" || got[0].Reason != "timeout" || got[0].Key != "k" || got[0].Token != p.Token() || got[0].Attempts < 2 || got[0].Err == nil {
		t.Fatalf("abandon reports %+v", got)
	}
	t.Logf("gave up after %v: %+v", gaveUp, got[0])
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "stage=release") || !strings.Contains(logs.String(), "reason=timeout") {
		t.Fatalf("no warning logged: %s", logs.String())
	}
	xtest.Eventually(t, time.Second, "background cleanups end", func() bool { return semaphore.PendingCleanups(s) == 0 })
	// The permit (NoExpiry) is still there: that is what abandoned means.
	if n := srv.MustCmd(t, "ZCARD", "k"); n != "1" {
		t.Fatalf("ZCARD %s", n)
	}
}

// A background release that reaches the server once it answers again
// settles the permit and reports nothing.
func TestCloseBackgroundSucceeds(t *testing.T) {
	srv := redistest.Start(t)
	ctx := xtest.Ctx(t, 20*time.Second)
	ab := newAbandons()
	s := newSems(t, srv.Client(t), semaphore.Options{OnAbandon: ab.hook})
	semaphore.SetCleanupLimits(s, 100*time.Millisecond, 10*time.Second, 20*time.Millisecond, 100*time.Millisecond)
	p, err := s.TryAcquire(ctx, "k", 1, semaphore.NoExpiry)
	if err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	if err := p.Close(); !errors.Is(err, primitives.ErrUncertain) {
		srv.Resume()
		t.Fatalf("Close: %v", err)
	}
	time.Sleep(300 * time.Millisecond)
	srv.Resume()
	xtest.Eventually(t, 5*time.Second, "background cleanups end", func() bool { return semaphore.PendingCleanups(s) == 0 })
	if n := srv.MustCmd(t, "EXISTS", "k"); n != "0" {
		t.Fatalf("the background release did not remove the permit")
	}
	if r, err := p.Release(ctx); r != primitives.AlreadyReleased || err != nil {
		t.Fatalf("Release after the background one: %v %v", r, err)
	}
	if got := ab.list(); len(got) != 0 {
		t.Fatalf("abandon reports %+v", got)
	}
	// Close again: idempotent.
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

// Semaphores.Close cancels background releases: each makes one last
// attempt and, failing, is reported with reason "closed"; Close returns
// only once they ended (goleak in TestMain checks none is left).
func TestSemaphoresCloseCancelsCleanups(t *testing.T) {
	srv := redistest.Start(t)
	ctx := xtest.Ctx(t, 20*time.Second)
	ab := newAbandons()
	s, err := semaphore.New(srv.Client(t), semaphore.Options{OnAbandon: ab.hook})
	if err != nil {
		t.Fatal(err)
	}
	semaphore.SetCleanupLimits(s, 100*time.Millisecond, time.Minute, 20*time.Millisecond, 100*time.Millisecond)
	var ps []*semaphore.Permit
	for range 3 {
		p, err := s.TryAcquire(ctx, "k", 3, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	srv.Pause()
	for _, p := range ps {
		if err := p.Close(); !errors.Is(err, primitives.ErrUncertain) {
			srv.Resume()
			t.Fatalf("Close: %v", err)
		}
	}
	start := time.Now()
	s.Close()
	took := time.Since(start)
	srv.Resume()
	t.Logf("Semaphores.Close took %v with 3 cleanups pending", took)
	if n := semaphore.PendingCleanups(s); n != 0 {
		t.Fatalf("%d cleanups still running after Close", n)
	}
	got := ab.list()
	if len(got) != 3 {
		t.Fatalf("abandon reports %+v", got)
	}
	for _, a := range got {
		if a.Reason != "closed" || a.Stage != "release" {
			t.Fatalf("abandon report %+v", a)
		}
	}
	// A permit closed after the Semaphores: one attempt, no background.
	s2 := newSems(t, srv.Client(t), semaphore.Options{OnAbandon: ab.hook})
	semaphore.SetCleanupLimits(s2, 100*time.Millisecond, time.Minute, 20*time.Millisecond, 100*time.Millisecond)
	p, err := s2.TryAcquire(ctx, "k2", 1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	s2.Close()
	if err := p.Close(); err != nil {
		t.Fatalf("Close of a permit after its Semaphores closed: %v", err)
	}
	if n := srv.MustCmd(t, "EXISTS", "k2"); n != "0" {
		t.Fatal("not released")
	}
}
