package ratelimit_test

import (
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives/ratelimit"
)

func TestMain(m *testing.M) { xtest.Main(m, xtest.ExampleServer(8, &exampleAddr)) }

var exampleAddr string

func TestSmoke(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client(t)
	ls, err := ratelimit.New(c, ratelimit.Options{Prefix: "t:"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := xtest.Ctx(t, 10*time.Second)
	fw, _ := ls.FixedWindow("fw", ratelimit.FixedWindowOptions{Limit: 3, Window: 200 * time.Millisecond})
	sw, _ := ls.SlidingWindow("sw", ratelimit.SlidingWindowOptions{Limit: 3, Window: 200 * time.Millisecond, Segments: 4})
	tb, err := ls.TokenBucket("tb", ratelimit.TokenBucketOptions{Limit: 3, TokensPerPeriod: 1, Period: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []*ratelimit.Limiter{fw, sw, tb} {
		for i := 0; i < 5; i++ {
			res, err := l.TryAcquire(ctx, 1)
			t.Logf("%s %d: %+v %v", l.Key(), i, res, err)
		}
		res, err := l.Acquire(ctx, 1)
		t.Logf("%s queue0: %+v %v", l.Key(), res, err)
		if err := l.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s stats %+v", l.Key(), l.Statistics())
	}
	t.Log(ls.FastPath())
}
