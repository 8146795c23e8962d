package rwlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/rwlock"
	"github.com/redis/rueidis"
)

func TestMain(m *testing.M) { xtest.Main(m, xtest.ExampleServer(7, &exampleAddr)) }

// exampleAddr is the server the runnable example talks to.
var exampleAddr string

// fleet is one server kind a behaviour test runs against.
type fleet struct {
	name  string
	start func(t *testing.T) *target
}

// target is a running server (or cluster): a shared client, a way to make
// more clients, and a way to run a command on the server(s).
type target struct {
	cluster bool
	c       rueidis.Client
	client  func(t testing.TB, opts ...func(*rueidis.ClientOption)) rueidis.Client
	cmd     func(args ...string) string
}

func standalone(k redistest.Kind) fleet {
	return fleet{name: k.String(), start: func(t *testing.T) *target {
		s := redistest.Start(t, redistest.WithKind(k))
		return &target{c: s.Client(t), client: s.Client, cmd: func(args ...string) string { return s.MustCmd(t, args...) }}
	}}
}

func cluster() fleet {
	return fleet{name: "cluster", start: func(t *testing.T) *target {
		c := redistest.StartCluster(t, 3)
		cl := c.Client(t)
		return &target{cluster: true, c: cl, client: c.Client, cmd: func(args ...string) string {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			v, err := cl.Do(ctx, cl.B().Arbitrary(args...).Build()).ToAny()
			if err != nil && !rueidis.IsRedisNil(err) {
				t.Fatalf("%v: %v", args, err)
			}
			switch v := v.(type) {
			case []any:
				parts := make([]string, len(v))
				for i, p := range v {
					parts[i] = fmt.Sprint(p)
				}
				return strings.Join(parts, "\n")
			case map[string]any: // RESP3 map (HGETALL): "field\nvalue\n..." in field order
				fields := make([]string, 0, len(v))
				for k := range v {
					fields = append(fields, k)
				}
				slices.Sort(fields)
				var parts []string
				for _, k := range fields {
					parts = append(parts, k, fmt.Sprint(v[k]))
				}
				return strings.Join(parts, "\n")
			case nil:
				return ""
			}
			return fmt.Sprint(v)
		}}
	}}
}

// fleets is every server kind standalone (Redis 7.0, 8.0, 8.6, Valkey 8.1)
// and a 3-master Redis 7.0 cluster.
func fleets() []fleet {
	var fs []fleet
	for _, k := range redistest.Kinds() {
		fs = append(fs, standalone(k))
	}
	return append(fs, cluster())
}

func newLocker(t *testing.T, c rueidis.Client, o rwlock.Options) *rwlock.Locker {
	t.Helper()
	l, err := rwlock.New(c, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// members returns the holders' members (without scores), in score order.
func members(cmd func(...string) string, key string) []string {
	out := cmd("ZRANGE", key, "0", "-1")
	if out == "" {
		return nil
	}
	return strings.Split(out, "\n")
}

func pttl(t *testing.T, cmd func(...string) string, key string) time.Duration {
	t.Helper()
	ms, err := strconv.ParseInt(cmd("PTTL", key), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return time.Duration(ms) * time.Millisecond
}

// TestBehaviour runs the behaviour tests on every server kind and a
// cluster, one server (or cluster) per kind shared by the subtests, each on
// keys of its own.
func TestBehaviour(t *testing.T) {
	for _, f := range fleets() {
		t.Run(f.name, func(t *testing.T) {
			tg := f.start(t)
			for _, tc := range behaviours {
				t.Run(tc.name, func(t *testing.T) { tc.run(t, tg) })
			}
		})
	}
}

type behaviour struct {
	name string
	run  func(t *testing.T, tg *target)
}

var behaviours = []behaviour{
	{"lifecycle", testLifecycle},
	{"key expires at the latest deadline", testKeyExpiresAtLatestDeadline},
	{"expired holders are pruned", testExpiredHoldersArePruned},
	{"reader waits for the writer", testReaderWaitsForWriter},
	{"writer waits for the readers", testWriterWaitsForReaders},
	{"bound 0 holds new readers off", testStrictWriterPreference},
	{"bound not yet reached admits readers", testBoundNotReached},
	{"writer that gives up removes its entry", testWriterGivesUp},
	{"closing the Locker removes the entry", testCloseRemovesEntry},
	{"policy sees the contention", testPolicyInputs},
	{"a granted writer restarts the others' wait", testGrantResetsArrival},
	{"a crashed writer holds readers off for its marker TTL", testCrashedWriter},
	{"waiters sleep until a deadline or a notification", testNoBlindPolling},
	{"binary-safe keys", testBinaryKeys},
}

func testLifecycle(t *testing.T, tg *target) {
	c, cmd := tg.c, tg.cmd
	ctx := xtest.Ctx(t, 20*time.Second)
	l := newLocker(t, c, rwlock.Options{Prefix: "app:"})

	r1, err := l.TryAcquireRead(ctx, "{acct}:rw", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := l.AcquireRead(ctx, "{acct}:rw", 5*time.Second)
	if err != nil {
		t.Fatal("a second reader:", err)
	}
	if r1.Key() != "app:{acct}:rw" || r1.Mode() != rwlock.Read || r1.Token() == "" || r1.Token() == r2.Token() {
		t.Fatalf("key %q mode %v tokens %q %q", r1.Key(), r1.Mode(), r1.Token(), r2.Token())
	}
	if d := time.Since(r1.GrantedAt()); d < -time.Second || d > 10*time.Second {
		t.Fatalf("GrantedAt %v is %v from now", r1.GrantedAt(), d)
	}
	got := members(cmd, "app:{acct}:rw")
	if len(got) != 2 || got[0] != "r:"+r2.Token() || got[1] != "r:"+r1.Token() {
		t.Fatalf("members %q", got)
	}
	if _, err := l.TryAcquireWrite(ctx, "{acct}:rw", time.Second); !errors.Is(err, primitives.ErrNotAcquired) || !strings.Contains(err.Error(), "2 reader(s)") {
		t.Fatalf("write while read-held: %v", err)
	}
	if ok, err := r2.Renew(ctx, 20*time.Second); !ok || err != nil {
		t.Fatal("renew:", ok, err)
	}
	if ok, err := r1.Verify(ctx); !ok || err != nil {
		t.Fatal("verify:", ok, err)
	}
	for _, r := range []*rwlock.Lease{r1, r2} {
		if res, err := r.Release(ctx); res != primitives.Released || err != nil {
			t.Fatal(res, err)
		}
	}
	if n := cmd("EXISTS", "app:{acct}:rw"); n != "0" {
		t.Fatalf("the key outlives its last holder: EXISTS %s", n)
	}

	w, err := l.AcquireWrite(ctx, "{acct}:rw", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if w.Mode() != rwlock.Write || members(cmd, "app:{acct}:rw")[0] != "w:"+w.Token() {
		t.Fatalf("mode %v, members %q", w.Mode(), members(cmd, "app:{acct}:rw"))
	}
	if n := cmd("EXISTS", "app:__coordhost:rw-writers:!{acct}:rw"); n != "0" {
		t.Fatalf("a granted writer left its pending-writer entry (EXISTS %s)", n)
	}
	if _, err := l.TryAcquireRead(ctx, "{acct}:rw", time.Second); !errors.Is(err, primitives.ErrNotAcquired) || !strings.Contains(err.Error(), "held by a writer") {
		t.Fatalf("read while write-held: %v", err)
	}
	if _, err := l.TryAcquireWrite(ctx, "{acct}:rw", time.Second); !errors.Is(err, primitives.ErrNotAcquired) {
		t.Fatalf("second writer: %v", err)
	}
	if d := pttl(t, cmd, "app:{acct}:rw"); d <= 9*time.Second || d > 10*time.Second {
		t.Fatalf("PTTL %v of a 10s write lease", d)
	}
	if res, err := w.Release(ctx); res != primitives.Released || err != nil {
		t.Fatal(res, err)
	}
	if res, err := w.Release(ctx); res != primitives.AlreadyReleased || err != nil {
		t.Fatal(res, err)
	}
	if n := cmd("EXISTS", "app:{acct}:rw", "app:__coordhost:rw-writers:!{acct}:rw"); n != "0" {
		t.Fatalf("EXISTS %s after every lease was released", n)
	}
}

// The key expires at the latest deadline of its members: a short reader
// after a long one does not shorten the set's life, nor does a renewal to a
// shorter lease or the release of the longest lease below another live one.
func testKeyExpiresAtLatestDeadline(t *testing.T, tg *target) {
	c, cmd := tg.c, tg.cmd
	ctx := xtest.Ctx(t, 20*time.Second)
	l := newLocker(t, c, rwlock.Options{})
	long, err := l.TryAcquireRead(ctx, "expiry", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	short, err := l.TryAcquireRead(ctx, "expiry", 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if d := pttl(t, cmd, "expiry"); d <= 9*time.Second {
		t.Fatalf("PTTL %v after a 100ms reader joined a 10s one: the short lease shortened the set's life", d)
	}
	<-short.Done()
	time.Sleep(150 * time.Millisecond) // past the server's deadline too
	if ok, err := long.Verify(ctx); !ok || err != nil {
		t.Fatalf("the long reader after the short one expired: %v, %v", ok, err)
	}
	if _, err := l.TryAcquireWrite(ctx, "expiry", time.Second); !errors.Is(err, primitives.ErrNotAcquired) {
		t.Fatalf("a writer while the long reader holds: %v", err)
	}
	if ms := members(cmd, "expiry"); len(ms) != 1 || ms[0] != "r:"+long.Token() {
		t.Fatalf("members %q: the expired reader was not pruned", ms)
	}
	// A renewal to a shorter lease brings the expiry forward, but
	// never below another live member's deadline.
	mid, err := l.TryAcquireRead(ctx, "expiry", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := long.Renew(ctx, 200*time.Millisecond); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if d := pttl(t, cmd, "expiry"); d <= 4*time.Second || d > 5*time.Second {
		t.Fatalf("PTTL %v after the 10s reader renewed to 200ms next to a 5s one", d)
	}
	if ok, err := long.Renew(ctx, 8*time.Second); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if res, err := long.Release(ctx); res != primitives.Released || err != nil {
		t.Fatal(res, err)
	}
	if d := pttl(t, cmd, "expiry"); d <= 4*time.Second || d > 5*time.Second {
		t.Fatalf("PTTL %v after the latest lease was released next to a 5s one", d)
	}
	mid.Release(ctx)
}

// A reader that never releases stops blocking at its deadline: the next
// acquisition prunes it, and a waiting writer wakes at that deadline.
func testExpiredHoldersArePruned(t *testing.T, tg *target) {
	c, cmd := tg.c, tg.cmd
	ctx := xtest.Ctx(t, 20*time.Second)
	l := newLocker(t, c, rwlock.Options{})
	// From before the first reader's request: its deadline is at least
	// 300 ms after this however slowly the calls run (less a millisecond
	// of the server's rounding).
	start := time.Now()
	a, err := l.TryAcquireRead(ctx, "prune", 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.TryAcquireRead(ctx, "prune", 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	w, err := l.AcquireWrite(ctx, "prune", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if took < 298*time.Millisecond {
		t.Fatalf("the writer was granted %v after the first reader's request, before the 300ms reader's deadline", took)
	}
	t.Logf("writer granted %v after the first of two readers that never released (300ms lease) asked", took)
	if ms := members(cmd, "prune"); len(ms) != 1 || ms[0] != "w:"+w.Token() {
		t.Fatalf("members %q", ms)
	}
	for _, r := range []*rwlock.Lease{a, b} {
		if ok, err := r.Verify(ctx); ok || err != nil {
			t.Fatalf("an expired reader verifies: %v, %v", ok, err)
		}
		if res, err := r.Release(ctx); res != primitives.NotOwned || err != nil {
			t.Fatalf("release of an expired reader while a writer holds: %v, %v", res, err)
		}
	}
	w.Release(ctx)
}
