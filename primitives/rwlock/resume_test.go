package rwlock_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/rwlock"
)

func TestResume(t *testing.T) {
	ctx := xtest.Ctx(t, 20*time.Second)
	s := redistest.Start(t)
	c := s.Client(t)
	first := newLocker(t, c, rwlock.Options{Prefix: "p:"})
	other := newLocker(t, c, rwlock.Options{Prefix: "p:"}) // as another process would
	score := func(member string) int64 {
		t.Helper()
		v, err := strconv.ParseInt(s.MustCmd(t, "ZSCORE", "p:k", member), 10, 64)
		if err != nil {
			t.Fatalf("ZSCORE p:k %s: %v", member, err)
		}
		return v
	}
	for _, mode := range []rwlock.Mode{rwlock.Read, rwlock.Write} {
		t.Run(mode.String(), func(t *testing.T) {
			try := first.TryAcquireRead
			if mode == rwlock.Write {
				try = first.TryAcquireWrite
			}
			ls, err := try(ctx, "k", 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			member := mode.String()[:1] + ":" + ls.Token()
			before := score(member)
			r, err := other.Resume("k", ls.Token(), mode)
			if err != nil {
				t.Fatal(err)
			}
			if r.Key() != "p:k" || r.Token() != ls.Token() || r.Mode() != mode || !r.GrantedAt().IsZero() {
				t.Fatalf("resumed %q %q %v %v", r.Key(), r.Token(), r.Mode(), r.GrantedAt())
			}
			if r.Remaining() != 0 {
				t.Fatalf("a resumed lease has no estimate, got %v", r.Remaining())
			}
			select {
			case <-r.Done():
				t.Fatal("Done closed on a resumed lease that is held")
			default:
			}
			if ok, err := r.Renew(ctx, time.Minute); !ok || err != nil {
				t.Fatalf("renew of a resumed lease: %v %v", ok, err)
			}
			if after := score(member); after-before < 49_000 {
				t.Fatalf("deadline moved by %dms with a renewal from 10s to 1m", after-before)
			}
			if pttl, _ := strconv.ParseInt(s.MustCmd(t, "PTTL", "p:k"), 10, 64); pttl <= 59_000 {
				t.Fatalf("PTTL after the resumed renewal: %d", pttl)
			}
			if rem := r.Remaining(); rem <= 59*time.Second {
				t.Fatalf("estimate after the first renewal: %v", rem)
			}
			if ok, err := r.Verify(ctx); !ok || err != nil {
				t.Fatalf("verify: %v %v", ok, err)
			}
			if res, err := r.Release(ctx); res != primitives.Released || err != nil {
				t.Fatalf("release: %v %v", res, err)
			}
			// The original handle finds it gone.
			if ok, _ := ls.Renew(ctx, time.Second); ok {
				t.Fatal("the original handle renewed a lease the resumed one released")
			}
			if n := s.MustCmd(t, "EXISTS", "p:k"); n != "0" {
				t.Fatalf("EXISTS p:k %s after the release", n)
			}
		})
	}

	// A wrong token, or the holder's token in the other mode, owns
	// nothing: renew is refused, release finds another owner and deletes
	// nothing.
	holder, err := first.TryAcquireWrite(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for name, forge := range map[string]struct {
		token string
		mode  rwlock.Mode
	}{
		"forged token": {strings.Repeat("A", 26), rwlock.Write},
		"wrong mode":   {holder.Token(), rwlock.Read},
	} {
		t.Run(name, func(t *testing.T) {
			forged, err := other.Resume("k", forge.token, forge.mode)
			if err != nil {
				t.Fatal(err)
			}
			if ok, err := forged.Renew(ctx, time.Minute); ok || err != nil {
				t.Fatalf("forged renew: %v %v", ok, err)
			}
			forged, _ = other.Resume("k", forge.token, forge.mode)
			if res, err := forged.Release(ctx); res != primitives.NotOwned || err != nil {
				t.Fatalf("forged release: %v %v", res, err)
			}
			if ok, err := holder.Verify(ctx); !ok || err != nil {
				t.Fatalf("the holder lost its lease to a forged release: %v %v", ok, err)
			}
		})
	}
}

func TestResumeBadInput(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client(t)
	l := newLocker(t, c, rwlock.Options{})
	var nilLocker *rwlock.Locker
	for _, tc := range []struct {
		name  string
		l     *rwlock.Locker
		key   string
		token string
		mode  rwlock.Mode
		want  error
	}{
		{"empty key", l, "", "T", rwlock.Read, primitives.ErrInvalidKey},
		{"reserved key", l, rwlock.ReservedPrefix + "x", "T", rwlock.Read, primitives.ErrInvalidKey},
		{"key without a usable hash tag", l, "a{}b{", "T", rwlock.Write, primitives.ErrInvalidKey},
		{"empty token", l, "k", "", rwlock.Read, primitives.ErrInvalidToken},
		{"token with space", l, "k", "a b", rwlock.Read, primitives.ErrInvalidToken},
		{"token with newline", l, "k", "a\n", rwlock.Write, primitives.ErrInvalidToken},
		{"token too long", l, "k", strings.Repeat("x", primitives.MaxTokenBytes+1), rwlock.Read, primitives.ErrInvalidToken},
		{"zero mode", l, "k", "T", 0, primitives.ErrInvalidOptions},
		{"unknown mode", l, "k", "T", rwlock.Write + 1, primitives.ErrInvalidOptions},
		{"nil locker", nilLocker, "k", "T", rwlock.Read, primitives.ErrInvalidOptions},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if ls, err := tc.l.Resume(tc.key, tc.token, tc.mode); !errors.Is(err, tc.want) || ls != nil {
				t.Fatalf("got %v, %v; want %v", ls, err, tc.want)
			}
		})
	}
	if n := s.MustCmd(t, "DBSIZE"); n != "0" {
		t.Fatalf("bad resumes wrote %s keys", n)
	}
}
