package latch_test

import (
	"errors"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/faulttest"
	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/policies/builtin"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/latch"
	"github.com/redis/rueidis"
)

// One reply lost at a time: reads are retried per Options.Retry; writes
// never are (a retry could apply them twice), and their errors say the
// outcome is unknown.
func TestLostRepliesAndRetries(t *testing.T) {
	s := redistest.Start(t)
	ctx := xtest.Ctx(t, 20*time.Second)
	setup := func(t *testing.T, o latch.Options) (*faulttest.Proxy, *latch.Latches) {
		p := faulttest.New(t)
		c := s.Client(t, p.Option(), func(o *rueidis.ClientOption) {
			o.DisableRetry = true
			o.PipelineMultiplex = -1 // one connection: the lost reply is ours
		})
		ls := newLatches(t, c, o)
		// Load the scripts, so that the lost reply is not a NOSCRIPT.
		w, err := ls.Reset(ctx, "warm-up", 1)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.CountDown(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Count(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Delete(ctx); err != nil {
			t.Fatal(err)
		}
		return p, ls
	}
	retry := latch.Options{Retry: builtin.Constant{Delay: 10 * time.Millisecond, GiveUpAfter: 5 * time.Second}}

	t.Run("join and count retried", func(t *testing.T) {
		p, ls := setup(t, retry)
		l, err := ls.Create(ctx, "j", 3)
		if err != nil {
			t.Fatal(err)
		}
		p.DropReplies(1)
		j, err := ls.Join(ctx, "j")
		if err != nil || j.Generation() != l.Generation() {
			t.Fatalf("Join with a lost reply and a retry policy: %v", err)
		}
		p.DropReplies(1)
		if n, err := l.Count(ctx); n != 3 || err != nil {
			t.Fatalf("Count with a lost reply and a retry policy: %d, %v", n, err)
		}
		if d := p.Stats().DroppedReplies; d != 2 {
			t.Fatalf("dropped %d replies", d)
		}
	})
	t.Run("create not retried", func(t *testing.T) {
		p, ls := setup(t, retry)
		p.DropReplies(1)
		_, err := ls.Create(ctx, "c2", 3)
		if !errors.Is(err, primitives.ErrUncertain) {
			t.Fatalf("Create with a lost reply: %v", err)
		}
		t.Logf("lost Create: %v", err)
		j, err := ls.Join(ctx, "c2")
		if err != nil {
			t.Fatalf("the Create whose reply was lost ran, but Join: %v", err)
		}
		if n, _ := j.Count(ctx); n != 3 {
			t.Fatalf("count %d", n)
		}
	})
	t.Run("count down never retried", func(t *testing.T) {
		p, ls := setup(t, retry)
		l, err := ls.Create(ctx, "d", 3)
		if err != nil {
			t.Fatal(err)
		}
		p.DropReplies(1)
		_, err = l.CountDown(ctx)
		if !errors.Is(err, primitives.ErrUncertain) {
			t.Fatalf("CountDown with a lost reply: %v", err)
		}
		t.Logf("lost CountDown: %v", err)
		if n := s.MustCmd(t, "HGET", "d", "count"); n != "2" {
			t.Fatalf("count %s after one lost count-down: it ran %s times", n, map[string]string{"3": "0", "1": "2"}[n])
		}
		if n, err := l.CountDown(ctx); n != 1 || err != nil {
			t.Fatalf("next CountDown = %d, %v", n, err)
		}
	})
	t.Run("wait reads through lost replies", func(t *testing.T) {
		p, ls := setup(t, latch.Options{RecheckInterval: 50 * time.Millisecond})
		l, err := ls.Create(ctx, "w", 1)
		if err != nil {
			t.Fatal(err)
		}
		ch := waitAsync(ctx, l)
		mustWait(t, ch)
		p.DropRepliesFor(300 * time.Millisecond)
		s.MustCmd(t, "HSET", "w", "count", "0")
		mustReturn(t, ch, true, 5*time.Second)
	})
	t.Run("delete not retried", func(t *testing.T) {
		p, ls := setup(t, retry)
		l, err := ls.Create(ctx, "del", 3)
		if err != nil {
			t.Fatal(err)
		}
		p.DropReplies(1)
		if _, err := l.Delete(ctx); !errors.Is(err, primitives.ErrUncertain) {
			t.Fatalf("Delete with a lost reply: %v", err)
		}
		if n := s.MustCmd(t, "EXISTS", "del"); n != "0" {
			t.Fatal("the Delete whose reply was lost did not run")
		}
	})
	t.Run("retry policy gives up", func(t *testing.T) {
		p, ls := setup(t, latch.Options{Retry: builtin.Constant{Delay: 10 * time.Millisecond, GiveUpAfter: 200 * time.Millisecond}})
		p.Close() // every dial fails at once from now on
		start := time.Now()
		_, err := ls.Join(ctx, "c1")
		took := time.Since(start)
		if err == nil || errors.Is(err, latch.ErrNotFound) || ctx.Err() != nil {
			t.Fatalf("Join without a server: %v", err)
		}
		t.Logf("Join without a server gave up after %v: %v", took, err)
		if took < 200*time.Millisecond || took > 3*time.Second {
			t.Fatalf("gave up after %v; the policy says 200ms", took)
		}
	})
}
