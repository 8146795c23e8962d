package redlock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/redlock"
	"github.com/redis/rueidis"
)

func TestResume(t *testing.T) {
	ctx := xtest.Ctx(t, 30*time.Second)
	f := startFleet(t, 3)
	first := newGroup(t, f.clients, redlock.Options{Prefix: "p:"})
	other := newGroup(t, f.clients, redlock.Options{Prefix: "p:"}) // as another process would
	l, err := first.TryAcquire(ctx, "k", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r, err := other.Resume("k", l.Token())
	if err != nil {
		t.Fatal(err)
	}
	if r.Key() != "p:k" || r.Token() != l.Token() {
		t.Fatalf("resumed %q %q", r.Key(), r.Token())
	}
	if r.Remaining() != 0 {
		t.Fatalf("a resumed lock has no validity estimate, got %v", r.Remaining())
	}
	select {
	case <-r.Done():
		t.Fatal("Done closed on a resumed lock that is held")
	default:
	}
	if ok, err := r.Renew(ctx, time.Minute); !ok || err != nil {
		t.Fatalf("renew of a resumed lock: %v %v", ok, err)
	}
	xtest.Eventually(t, time.Second, "the renewal on every node", func() bool {
		for i := range f.servers {
			if f.pttl(t, i, "p:k") <= 59*time.Second {
				return false
			}
		}
		return true
	})
	drift := other.Drift(time.Minute)
	if rem := r.Remaining(); rem <= 59*time.Second-drift || rem > time.Minute-drift {
		t.Fatalf("validity after the first renewal: %v, want in (%v, %v]", rem, 59*time.Second-drift, time.Minute-drift)
	}
	if ok, err := r.Verify(ctx); !ok || err != nil {
		t.Fatalf("verify: %v %v", ok, err)
	}
	if res, err := r.Release(ctx); res != primitives.Released || err != nil {
		t.Fatalf("release: %v %v", res, err)
	}
	if got := f.get(t, "p:k"); count(got, "") != len(f.servers) {
		t.Fatalf("after the release: %q", got)
	}
	// The original handle finds it gone.
	if ok, _ := l.Renew(ctx, time.Second); ok {
		t.Fatal("the original handle renewed a lock the resumed one released")
	}

	// A wrong token owns nothing: renew is refused (and its cleanup
	// removes nothing of the holder's), release finds another owner on a
	// majority and deletes nothing.
	holder, err := first.TryAcquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	xtest.Eventually(t, time.Second, "the holder's token on every node", func() bool {
		return count(f.get(t, "p:k"), holder.Token()) == len(f.servers)
	})
	forged, err := other.Resume("k", strings.Repeat("A", 26))
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := forged.Renew(ctx, time.Minute); ok || err != nil {
		t.Fatalf("forged renew: %v %v", ok, err)
	}
	forged, _ = other.Resume("k", strings.Repeat("A", 26))
	if res, err := forged.Release(ctx); res != primitives.NotOwned || err != nil {
		t.Fatalf("forged release: %v %v", res, err)
	}
	if ok, err := holder.Verify(ctx); !ok || err != nil {
		t.Fatalf("the holder lost its lock to a forged release: %v %v", ok, err)
	}
	if got := f.get(t, "p:k"); count(got, holder.Token()) != len(f.servers) {
		t.Fatalf("the holder's token after the forged calls: %q", got)
	}
}

func TestResumeBadInput(t *testing.T) {
	f := startFleet(t, 3)
	g := newGroup(t, f.clients, redlock.Options{})
	var nilGroup *redlock.Group
	for _, tc := range []struct {
		name  string
		g     *redlock.Group
		key   string
		token string
		want  error
	}{
		{"empty key", g, "", "T", primitives.ErrInvalidKey},
		{"reserved key", g, redlock.ReservedPrefix + "x", "T", primitives.ErrInvalidKey},
		{"empty token", g, "k", "", primitives.ErrInvalidToken},
		{"token with space", g, "k", "a b", primitives.ErrInvalidToken},
		{"token with newline", g, "k", "a\n", primitives.ErrInvalidToken},
		{"token too long", g, "k", strings.Repeat("x", primitives.MaxTokenBytes+1), primitives.ErrInvalidToken},
		{"nil Group", nilGroup, "k", "T", primitives.ErrInvalidOptions},
		{"zero Group", new(redlock.Group), "k", "T", primitives.ErrInvalidOptions},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if l, err := tc.g.Resume(tc.key, tc.token); !errors.Is(err, tc.want) || l != nil {
				t.Fatalf("got %v, %v; want %v", l, err, tc.want)
			}
		})
	}
	// A Group that found two of its clients reach one server refuses
	// Resume as it refuses every call.
	alias := f.servers[0].Client(t, func(o *rueidis.ClientOption) {
		o.InitAddress = []string{strings.Replace(f.servers[0].Addr, "127.0.0.1", "localhost", 1)}
	})
	dup := newGroup(t, []rueidis.Client{f.clients[0], f.clients[1], alias}, redlock.Options{})
	if _, err := dup.TryAcquire(xtest.Ctx(t, 10*time.Second), "k", time.Second); !errors.Is(err, redlock.ErrDuplicateNode) {
		t.Fatalf("TryAcquire on a Group with a duplicate node: %v", err)
	}
	if l, err := dup.Resume("k", "T"); !errors.Is(err, redlock.ErrDuplicateNode) || l != nil {
		t.Fatalf("Resume on a Group with a duplicate node: %v, %v", l, err)
	}
	for i, s := range f.servers {
		if n := s.MustCmd(t, "DBSIZE"); n != "0" {
			t.Fatalf("node %d: bad resumes wrote %s keys", i, n)
		}
	}
}
