package ratelimit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives/ratelimit"
	"github.com/redis/rueidis"
)

func TestMain(m *testing.M) { xtest.Main(m, xtest.ExampleServer(8, &exampleAddr)) }

// exampleAddr is the server the runnable examples talk to.
var exampleAddr string

func newLimiters(t testing.TB, c rueidis.Client, prefix string) *ratelimit.Limiters {
	t.Helper()
	ls, err := ratelimit.New(c, ratelimit.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return ls
}

// kind makes one limiter of an algorithm on a key; every algorithm's
// test table runs through these.
type kind struct {
	name string
	make func(ls *ratelimit.Limiters, key string, limit int64, window time.Duration, q int64, o ratelimit.QueueOrder) (*ratelimit.Limiter, error)
}

var kinds = []kind{
	{"fixed", func(ls *ratelimit.Limiters, key string, limit int64, w time.Duration, q int64, o ratelimit.QueueOrder) (*ratelimit.Limiter, error) {
		return ls.FixedWindow(key, ratelimit.FixedWindowOptions{Limit: limit, Window: w, QueueLimit: q, QueueOrder: o})
	}},
	{"sliding", func(ls *ratelimit.Limiters, key string, limit int64, w time.Duration, q int64, o ratelimit.QueueOrder) (*ratelimit.Limiter, error) {
		return ls.SlidingWindow(key, ratelimit.SlidingWindowOptions{Limit: limit, Window: w, Segments: 10, QueueLimit: q, QueueOrder: o})
	}},
	// A bucket of limit tokens refilled whole once per window: the same
	// long-run rate as the windows.
	{"bucket", func(ls *ratelimit.Limiters, key string, limit int64, w time.Duration, q int64, o ratelimit.QueueOrder) (*ratelimit.Limiter, error) {
		return ls.TokenBucket(key, ratelimit.TokenBucketOptions{Limit: limit, TokensPerPeriod: limit, Period: w, QueueLimit: q, QueueOrder: o})
	}},
}

// must returns a function that fails t on an error and closes the
// limiter when t ends: must(t)(ls.FixedWindow(...)).
func must(t testing.TB) func(*ratelimit.Limiter, error) *ratelimit.Limiter {
	return func(l *ratelimit.Limiter, err error) *ratelimit.Limiter {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
}

func try(t testing.TB, ctx context.Context, l *ratelimit.Limiter, n int64) ratelimit.Result {
	t.Helper()
	res, err := l.TryAcquire(ctx, n)
	if err != nil {
		t.Fatalf("TryAcquire(%d): %v", n, err)
	}
	return res
}

// targets is every standalone server kind and a 3-master cluster.
func targets() []struct {
	name   string
	client func(t *testing.T) rueidis.Client
} {
	var ts []struct {
		name   string
		client func(t *testing.T) rueidis.Client
	}
	for _, k := range redistest.Kinds() {
		ts = append(ts, struct {
			name   string
			client func(t *testing.T) rueidis.Client
		}{k.String(), func(t *testing.T) rueidis.Client { return redistest.Start(t, redistest.WithKind(k)).Client(t) }})
	}
	return append(ts, struct {
		name   string
		client func(t *testing.T) rueidis.Client
	}{"cluster-8.0", func(t *testing.T) rueidis.Client { return redistest.StartCluster(t, 3, redistest.Version(8)).Client(t) }})
}

// Every algorithm on every server: a burst takes the limit, the next call
// is refused with a RetryAfter inside the window, n = 0 peeks, more than
// the limit is refused without RetryAfter, and the permits come back.
func TestAlgorithmsEveryServer(t *testing.T) {
	for _, tg := range targets() {
		t.Run(tg.name, func(t *testing.T) {
			c := tg.client(t)
			ls := newLimiters(t, c, "a:")
			ctx := xtest.Ctx(t, 20*time.Second)
			for _, k := range kinds {
				t.Run(k.name, func(t *testing.T) {
					const window = 300 * time.Millisecond
					l := must(t)(k.make(ls, "{user}:"+k.name, 5, window, 0, ratelimit.OldestFirst))
					if r := try(t, ctx, l, 0); !r.Acquired || r.Remaining != 5 {
						t.Fatalf("peek on a fresh limiter: %+v", r)
					}
					r := try(t, ctx, l, 2)
					if !r.Acquired || r.Remaining != 3 || r.Limit != 5 || r.ServerTime.IsZero() {
						t.Fatalf("first grant: %+v", r)
					}
					if d := time.Since(r.ServerTime); d < -time.Minute || d > time.Minute {
						t.Fatalf("ServerTime %v is not the server's clock", r.ServerTime)
					}
					if r = try(t, ctx, l, 3); !r.Acquired || r.Remaining != 0 {
						t.Fatalf("grant to the limit: %+v", r)
					}
					r = try(t, ctx, l, 1)
					if r.Acquired || r.RetryAfter <= 0 || r.RetryAfter > window+window/10+time.Millisecond {
						t.Fatalf("over the limit: %+v", r)
					}
					if p := try(t, ctx, l, 0); p.Acquired {
						t.Fatalf("peek at the limit: %+v", p)
					}
					if never := try(t, ctx, l, 6); never.Acquired || never.RetryAfter != 0 {
						t.Fatalf("more than the limit: %+v", never)
					}
					time.Sleep(r.RetryAfter + 5*time.Millisecond)
					if again := try(t, ctx, l, 1); !again.Acquired {
						t.Fatalf("after RetryAfter %v: %+v", r.RetryAfter, again)
					}
					st := l.Statistics()
					if st.Granted != 4 || st.Rejected != 3 { // peeks count too
						t.Fatalf("statistics %+v", st)
					}
				})
			}
		})
	}
}

// describe prints a Result for failure messages.
func describe(r ratelimit.Result) string {
	return fmt.Sprintf("acquired=%v remaining=%d retry=%v reset=%v", r.Acquired, r.Remaining, r.RetryAfter, r.ResetAfter)
}
