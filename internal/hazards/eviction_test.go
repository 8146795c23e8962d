package hazards_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/latch"
	"github.com/coordhost/coordhost/primitives/lease"
	"github.com/coordhost/coordhost/primitives/lock"
	"github.com/coordhost/coordhost/primitives/ratelimit"
	"github.com/coordhost/coordhost/primitives/rwlock"
	"github.com/coordhost/coordhost/primitives/semaphore"
	"github.com/redis/rueidis"
)

// evictKind is one kind of key coordhost writes, found by a SCAN pattern.
type evictKind struct {
	name    string
	pattern string
	n       int // how many the test makes
}

// The keys the eviction test makes, one row per kind (the names are
// docs/hazards.md's).
var evictKinds = []evictKind{
	{"lock keys (TTL)", "L:k*", 100},
	{"fencing counters (no TTL)", "L:" + lock.ReservedPrefix + "fence:*", 100},
	{"lease hashes (field TTLs only)", "H:*", 30},
	{"rwlock holder sets (TTL)", "W:r*", 30},
	{"semaphores, expiring permits (TTL)", "S:e*", 30},
	{"semaphores, a permit without expiry (no TTL)", "S:n*", 30},
	{"latches (TTL, the 24h default)", "C:*", 30},
	{"rate-limit windows (TTL)", "R:*", 30},
}

// evictPolicies are the maxmemory-policy values of Redis 7.0 to 8.6 and
// Valkey 8.1 (allkeys-lrm and volatile-lrm are Redis 8.6's).
var evictPolicies = []string{"noeviction", "volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl",
	"allkeys-lru", "allkeys-lfu", "allkeys-random"}

// Eviction under maxmemory, per policy: the server holds coordhost's
// keys of every kind (held locks, their fencing counters at 3, leases,
// rwlocks, semaphores, latches, rate-limit windows), then application
// data without a TTL fills it past maxmemory. The test counts which of
// coordhost's keys each policy evicted, then what that does: a second
// holder of an evicted lock while the first holder's handle still runs,
// a fencing token back at 1 after its counter was evicted. Under
// noeviction nothing of coordhost's is evicted and an acquisition fails
// with OOM, writing nothing.
func TestHazardEviction(t *testing.T) {
	kinds := []redistest.Kind{redistest.Redis80}
	if *long {
		kinds = append(kinds, redistest.Redis70, redistest.Redis86, redistest.Valkey81)
	}
	for _, k := range kinds {
		policies := evictPolicies
		if k == redistest.Redis86 {
			policies = append(policies, "volatile-lrm", "allkeys-lrm")
		}
		for _, policy := range policies {
			t.Run(k.String()+"/"+policy, func(t *testing.T) {
				evictOnce(t, k, policy)
			})
		}
	}
}

// evicted is what one policy did.
type evicted struct {
	left          map[string]int // per evictKind name: keys left
	fillerOOM     int            // application writes refused with OOM
	secondHolders int            // evicted locks granted again while the first holder's estimate ran
	tokensReset   int            // of those, grants whose fencing token went back to 1
}

func evictOnce(t *testing.T, k redistest.Kind, policy string) {
	t.Helper()
	s := redistest.Start(t, redistest.WithKind(k), redistest.Args("--maxmemory-policy", policy))
	c := s.Client(t)
	ctx := xtest.Ctx(t, 60*time.Second)
	held := populate(t, ctx, c, k)

	used := infoInt(t, s, "memory", "used_memory")
	s.MustCmd(t, "CONFIG", "SET", "maxmemory", strconv.FormatInt(used+256<<10, 10))
	var ev evicted
	ev.left = map[string]int{}
	value := strings.Repeat("x", 1024)
	for batch := 0; batch < 20; batch++ { // 2 MB of application data without TTL
		cmds := make(rueidis.Commands, 0, 100)
		for i := range 100 {
			cmds = append(cmds, c.B().Set().Key(fmt.Sprintf("app:%d:%d", batch, i)).Value(value).Build())
		}
		for _, r := range c.DoMulti(ctx, cmds...) {
			if err := r.Error(); err != nil {
				if !strings.Contains(err.Error(), "OOM") {
					t.Fatalf("filler: %v", err)
				}
				ev.fillerOOM++
			}
		}
	}
	var table strings.Builder
	for _, kind := range evictKinds {
		if kind.pattern == "H:*" && !k.Has(redistest.HashFieldExpiry) {
			continue
		}
		ev.left[kind.name] = countKeys(t, ctx, c, kind.pattern)
		fmt.Fprintf(&table, "\n  %-46s %3d of %3d evicted", kind.name, kind.n-ev.left[kind.name], kind.n)
	}

	// What an acquisition, a renewal and a release do on the full server.
	l, err := lock.New(c, lock.Options{Prefix: "L:", Fencing: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if policy == "noeviction" {
		// Full again right now: client buffers freed since the fill can
		// leave a few KB of room, and the acquisition would fit.
		for i := 0; i < 10000; i++ {
			err := c.Do(ctx, c.B().Set().Key(fmt.Sprintf("app:top:%d", i)).Value(value).Build()).Error()
			if err != nil && strings.Contains(err.Error(), "OOM") {
				break
			} else if err != nil {
				t.Fatalf("filler: %v", err)
			}
		}
	}
	_, oomErr := l.TryAcquire(ctx, "fresh", time.Minute)
	var renewErr, releaseErr error
	if policy == "noeviction" {
		if ok, err := held[0].Renew(ctx, time.Minute); !ok || err != nil {
			renewErr = fmt.Errorf("renew: %v %w", ok, err)
		}
		if r, err := held[1].Release(ctx); r != primitives.Released || err != nil {
			releaseErr = fmt.Errorf("release: %v %w", r, err)
		}
		held = held[2:]
	}

	// What eviction did to the holders: room again, then another owner
	// tries every held lock.
	s.MustCmd(t, "CONFIG", "SET", "maxmemory", "0")
	for _, h := range held {
		other, err := l.TryAcquire(ctx, strings.TrimPrefix(h.Key(), "L:"), time.Minute)
		if err != nil {
			continue
		}
		if h.Remaining() > 0 {
			ev.secondHolders++
			if other.FencingToken() == 1 {
				ev.tokensReset++
			}
		}
		other.Release(ctx)
	}
	t.Logf("%s, %s: %d application writes refused (OOM); an acquisition on the full server: %v%s\n  second holders of a held lock: %d of %d, %d of them with fencing token 1 (the old counter was 3)",
		k, policy, ev.fillerOOM, errOrOK(oomErr), table.String(), ev.secondHolders, len(held), ev.tokensReset)

	counters := "fencing counters (no TTL)"
	locks := "lock keys (TTL)"
	switch {
	case policy == "noeviction":
		for name, n := range ev.left {
			if want := kindN(name); n != want {
				t.Errorf("noeviction evicted %d %s", want-n, name)
			}
		}
		if oomErr == nil || !strings.Contains(oomErr.Error(), "OOM") {
			t.Errorf("an acquisition on a full noeviction server: %v, want OOM", oomErr)
		}
		if n := countKeys(t, ctx, c, "L:*fresh*"); n != 0 {
			t.Errorf("the refused acquisition wrote %d keys", n)
		}
		if renewErr != nil || releaseErr != nil {
			t.Errorf("a holder on a full noeviction server: %v; %v", renewErr, releaseErr)
		}
		if ev.fillerOOM == 0 || ev.secondHolders != 0 {
			t.Errorf("noeviction: %d refused writes, %d second holders", ev.fillerOOM, ev.secondHolders)
		}
	case strings.HasPrefix(policy, "volatile-"):
		if ev.left[counters] != kindN(counters) {
			t.Errorf("%s evicted %d fencing counters (they have no TTL)", policy, kindN(counters)-ev.left[counters])
		}
		if ev.left[locks] == kindN(locks) || ev.secondHolders == 0 {
			t.Errorf("%s evicted no held lock (%d left, %d second holders)", policy, ev.left[locks], ev.secondHolders)
		}
		if ev.tokensReset != 0 {
			t.Errorf("%s: %d fencing tokens reset", policy, ev.tokensReset)
		}
	default: // allkeys-*: any key, whatever its TTL
		if ev.left[locks] == kindN(locks) || ev.secondHolders == 0 {
			t.Errorf("%s evicted no held lock (%d left, %d second holders)", policy, ev.left[locks], ev.secondHolders)
		}
		if policy != "allkeys-lfu" && ev.left[counters] == kindN(counters) {
			// allkeys-lfu keeps keys used more often than the filler,
			// and a counter incremented three times a moment ago is.
			t.Errorf("%s evicted no fencing counter", policy)
		}
		if policy != "allkeys-lfu" && ev.tokensReset == 0 {
			t.Errorf("%s: no fencing token back at 1 (%d counters evicted)", policy, kindN(counters)-ev.left[counters])
		}
	}
}

func kindN(name string) int {
	for _, k := range evictKinds {
		if k.name == name {
			return k.n
		}
	}
	return -1
}

func errOrOK(err error) string {
	if err == nil {
		return "granted"
	}
	return err.Error()
}

// populate makes the keys of evictKinds and returns the held locks.
func populate(t *testing.T, ctx context.Context, c rueidis.Client, k redistest.Kind) []*lock.Lock {
	t.Helper()
	l, err := lock.New(c, lock.Options{Prefix: "L:", Fencing: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	var held []*lock.Lock
	for i := range evictKinds[0].n {
		key := fmt.Sprintf("k%d", i)
		for range 2 { // the counter reaches 3 with the held grant
			a, err := l.TryAcquire(ctx, key, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			a.Release(ctx)
		}
		a, err := l.TryAcquire(ctx, key, time.Minute)
		if err != nil || a.FencingToken() != 3 {
			t.Fatalf("lock %s: %v %v", key, a, err)
		}
		held = append(held, a)
	}
	if k.Has(redistest.HashFieldExpiry) {
		ls, err := lease.New(c, lease.Options{Prefix: "H:"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ls.Close() })
		for i := range 30 {
			if _, err := ls.TryAcquire(ctx, fmt.Sprintf("h%d", i), "f", time.Minute); err != nil {
				t.Fatal(err)
			}
		}
	}
	rw, err := rwlock.New(c, rwlock.Options{Prefix: "W:"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rw.Close() })
	sem, err := semaphore.New(c, semaphore.Options{Prefix: "S:"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sem.Close() })
	lat, err := latch.New(c, latch.Options{Prefix: "C:"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lat.Close() })
	lim, err := ratelimit.New(c, ratelimit.Options{Prefix: "R:"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		if _, err := rw.TryAcquireRead(ctx, fmt.Sprintf("r%d", i), time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, err := sem.TryAcquire(ctx, fmt.Sprintf("e%d", i), 3, time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, err := sem.TryAcquire(ctx, fmt.Sprintf("n%d", i), 3, semaphore.NoExpiry); err != nil {
			t.Fatal(err)
		}
		if _, err := lat.Create(ctx, fmt.Sprintf("c%d", i), 2); err != nil {
			t.Fatal(err)
		}
		fw, err := lim.FixedWindow(fmt.Sprintf("f%d", i), ratelimit.FixedWindowOptions{Limit: 10, Window: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if !fw.Allow(ctx) {
			t.Fatal("rate limiter refused its first permit")
		}
		fw.Close()
	}
	return held
}

// countKeys counts the keys matching pattern.
func countKeys(t *testing.T, ctx context.Context, c rueidis.Client, pattern string) int {
	t.Helper()
	n := 0
	var cursor uint64
	for {
		e, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Match(pattern).Count(1000).Build()).AsScanEntry()
		if err != nil {
			t.Fatal(err)
		}
		n += len(e.Elements)
		if cursor = e.Cursor; cursor == 0 {
			return n
		}
	}
}

// infoInt reads name from INFO section (infoField) as an integer.
func infoInt(t *testing.T, s *redistest.Server, section, name string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(infoField(t, s, section, name), 10, 64)
	if err != nil {
		t.Fatalf("INFO %s: %s: %v", section, name, err)
	}
	return n
}
