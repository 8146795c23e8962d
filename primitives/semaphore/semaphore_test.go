package semaphore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/semaphore"
	"github.com/redis/rueidis"
)

func TestMain(m *testing.M) { xtest.Main(m, xtest.ExampleServer(8, &exampleAddr)) }

// exampleAddr is the server the runnable example talks to.
var exampleAddr string

func newSems(t *testing.T, c rueidis.Client, o semaphore.Options) *semaphore.Semaphores {
	t.Helper()
	s, err := semaphore.New(c, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

type target struct {
	name   string
	client func(t *testing.T) (rueidis.Client, func(...string) string)
}

// targets is every server kind standalone, and a 3-master Redis 8.0
// cluster.
func targets() []target {
	var ts []target
	for _, k := range redistest.Kinds() {
		ts = append(ts, target{k.String(), func(t *testing.T) (rueidis.Client, func(...string) string) {
			s := redistest.Start(t, redistest.WithKind(k))
			return s.Client(t), func(a ...string) string { return s.MustCmd(t, a...) }
		}})
	}
	return append(ts, target{"cluster-8.0", func(t *testing.T) (rueidis.Client, func(...string) string) {
		cl := redistest.StartCluster(t, 3, redistest.Version(8))
		c := cl.Client(t)
		return c, func(a ...string) string {
			v, err := c.Do(context.Background(), c.B().Arbitrary(a...).Build()).ToAny()
			if err != nil && !rueidis.IsRedisNil(err) {
				t.Fatalf("%v: %v", a, err)
			}
			return fmt.Sprint(v)
		}
	}})
}

func ms(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		t.Fatalf("not a number: %q", s)
	}
	return n
}

// capKey is the companion key of "jobs" under prefix "app:".
const capKey = "app:__coordhost:semaphore-capacity:{app:jobs}"

func TestLifecycle(t *testing.T) {
	for _, tg := range targets() {
		t.Run(tg.name, func(t *testing.T) {
			c, cmd := tg.client(t)
			ctx := xtest.Ctx(t, 20*time.Second)
			s := newSems(t, c, semaphore.Options{Prefix: "app:"})
			a, err := s.TryAcquire(ctx, "jobs", 2, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if a.Key() != "app:jobs" || a.Capacity() != 2 || a.NoExpiry() {
				t.Fatal(a.Key(), a.Capacity(), a.NoExpiry())
			}
			// A shorter permit after a longer one must not shorten the set.
			b, err := s.TryAcquire(ctx, "jobs", 2, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if pttl := ms(t, cmd("PTTL", "app:jobs")); pttl < 9000 || pttl > 10000 {
				t.Fatalf("set PTTL %dms after a 10s and a 1s permit; want the 10s one's", pttl)
			}
			if pttl := ms(t, cmd("PTTL", capKey)); pttl < 9000 || pttl > 10000 {
				t.Fatalf("capacity key PTTL %dms; want the set's", pttl)
			}
			if v := cmd("GET", capKey); v != "2" {
				t.Fatalf("capacity key holds %q", v)
			}
			_, err = s.TryAcquire(ctx, "jobs", 2, time.Second)
			if !errors.Is(err, primitives.ErrNotAcquired) {
				t.Fatalf("a third permit of 2: %v", err)
			}
			t.Log(err)
			for _, p := range []*semaphore.Permit{a, b} {
				if ok, err := p.Verify(ctx); !ok || err != nil {
					t.Fatalf("Verify: %v %v", ok, err)
				}
			}
			if ok, err := b.Renew(ctx, 20*time.Second); !ok || err != nil {
				t.Fatalf("Renew: %v %v", ok, err)
			}
			if pttl := ms(t, cmd("PTTL", "app:jobs")); pttl < 19000 {
				t.Fatalf("set PTTL %dms after renewing to 20s", pttl)
			}
			if r, err := a.Release(ctx); r != primitives.Released || err != nil {
				t.Fatal(r, err)
			}
			// The released place can be taken again.
			d, err := s.TryAcquire(ctx, "jobs", 2, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range []*semaphore.Permit{b, d} {
				if r, err := p.Release(ctx); r != primitives.Released || err != nil {
					t.Fatal(r, err)
				}
			}
			if n := cmd("EXISTS", "app:jobs", capKey); n != "0" {
				t.Fatalf("%s keys left after every permit was released", n)
			}
		})
	}
}
