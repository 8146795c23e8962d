package lock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/lock"
)

func TestResume(t *testing.T) {
	ctx := context.Background()
	s := redistest.Start(t)
	c := s.Client(t)
	first := newLocker(t, c, lock.Options{Prefix: "p:", Fencing: true})
	other := newLocker(t, c, lock.Options{Prefix: "p:", Fencing: true}) // as another process would
	lk, err := first.TryAcquire(ctx, "k", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r, err := other.Resume("k", lk.Token(), lk.FencingToken())
	if err != nil {
		t.Fatal(err)
	}
	if r.Key() != "p:k" || r.Token() != lk.Token() || r.FencingToken() != lk.FencingToken() {
		t.Fatalf("resumed %q %q %d", r.Key(), r.Token(), r.FencingToken())
	}
	if r.Remaining() != 0 {
		t.Fatalf("a resumed lock has no estimate, got %v", r.Remaining())
	}
	select {
	case <-r.Done():
		t.Fatal("Done closed on a resumed lock that is held")
	default:
	}
	if ok, err := r.Renew(ctx, time.Minute); !ok || err != nil {
		t.Fatalf("renew of a resumed lock: %v %v", ok, err)
	}
	if pttl := s.MustCmd(t, "PTTL", "p:k"); pttl < "59000" || len(pttl) != 5 {
		t.Fatalf("PTTL after the resumed renewal: %s", pttl)
	}
	if rem := r.Remaining(); rem <= 59*time.Second {
		t.Fatalf("estimate after the first renewal: %v", rem)
	}
	if res, err := r.Release(ctx); res != primitives.Released || err != nil {
		t.Fatalf("release: %v %v", res, err)
	}
	// The original handle finds it gone.
	if ok, _ := lk.Renew(ctx, time.Second); ok {
		t.Fatal("the original handle renewed a lock the resumed one released")
	}

	// A wrong token owns nothing: renew is refused, release finds another
	// owner and deletes nothing.
	lk2, err := first.TryAcquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	forged, err := other.Resume("k", strings.Repeat("A", 26), 0)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := forged.Renew(ctx, time.Minute); ok || err != nil {
		t.Fatalf("forged renew: %v %v", ok, err)
	}
	forged, _ = other.Resume("k", strings.Repeat("A", 26), 0)
	if res, err := forged.Release(ctx); res != primitives.NotOwned || err != nil {
		t.Fatalf("forged release: %v %v", res, err)
	}
	if ok, err := lk2.Verify(ctx); !ok || err != nil {
		t.Fatalf("the holder lost its lock to a forged release: %v %v", ok, err)
	}
}

func TestResumeBadInput(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client(t)
	fenced := newLocker(t, c, lock.Options{Fencing: true})
	plain := newLocker(t, c, lock.Options{})
	var nilLocker *lock.Locker
	for _, tc := range []struct {
		name  string
		l     *lock.Locker
		key   string
		token string
		fence int64
		want  error
	}{
		{"empty key", plain, "", "T", 0, primitives.ErrInvalidKey},
		{"reserved key", plain, lock.ReservedPrefix + "x", "T", 0, primitives.ErrInvalidKey},
		{"empty token", plain, "k", "", 0, primitives.ErrInvalidToken},
		{"token with space", plain, "k", "a b", 0, primitives.ErrInvalidToken},
		{"token with newline", plain, "k", "a\n", 0, primitives.ErrInvalidToken},
		{"token too long", plain, "k", strings.Repeat("x", primitives.MaxTokenBytes+1), 0, primitives.ErrInvalidToken},
		{"negative fence", fenced, "k", "T", -1, primitives.ErrInvalidOptions},
		{"fence without fencing", plain, "k", "T", 3, primitives.ErrInvalidOptions},
		{"nil locker", nilLocker, "k", "T", 0, primitives.ErrInvalidOptions},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.l.Resume(tc.key, tc.token, tc.fence); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	if n := s.MustCmd(t, "DBSIZE"); n != "0" {
		t.Fatalf("bad resumes wrote %s keys", n)
	}
}
