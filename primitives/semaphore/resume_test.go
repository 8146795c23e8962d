package semaphore_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/semaphore"
)

func TestResume(t *testing.T) {
	ctx := xtest.Ctx(t, 20*time.Second)
	srv := redistest.Start(t)
	c := srv.Client(t)
	first := newSems(t, c, semaphore.Options{Prefix: "p:"})
	other := newSems(t, c, semaphore.Options{Prefix: "p:"}) // as another process would
	for _, tc := range []struct {
		name string
		ttl  time.Duration
	}{{"finite", 10 * time.Second}, {"no expiry", semaphore.NoExpiry}} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := first.TryAcquire(ctx, "k", 1, tc.ttl)
			if err != nil {
				t.Fatal(err)
			}
			before := srv.MustCmd(t, "ZSCORE", "p:k", p.Token())
			r, err := other.Resume("k", p.Token(), p.Capacity(), p.NoExpiry())
			if err != nil {
				t.Fatal(err)
			}
			if r.Key() != "p:k" || r.Token() != p.Token() || r.Capacity() != 1 || r.NoExpiry() != (tc.ttl == semaphore.NoExpiry) {
				t.Fatalf("resumed %q %q capacity %d NoExpiry %v", r.Key(), r.Token(), r.Capacity(), r.NoExpiry())
			}
			if r.Remaining() != 0 {
				t.Fatalf("a resumed permit has no estimate, got %v", r.Remaining())
			}
			select {
			case <-r.Done():
				t.Fatal("Done closed on a resumed permit that is held")
			default:
			}
			if ok, err := r.Verify(ctx); !ok || err != nil {
				t.Fatalf("verify before the renewal: %v %v", ok, err)
			}
			if ok, err := r.Renew(ctx, time.Minute); !ok || err != nil {
				t.Fatalf("renew of a resumed permit: %v %v", ok, err)
			}
			after := ms(t, srv.MustCmd(t, "ZSCORE", "p:k", p.Token()))
			if tc.ttl == semaphore.NoExpiry {
				if before != "inf" || r.NoExpiry() {
					t.Fatalf("score before %s; NoExpiry after a renewal %v", before, r.NoExpiry())
				}
			} else if after-ms(t, before) < 49_000 {
				t.Fatalf("deadline moved by %dms with a renewal from 10s to 1m", after-ms(t, before))
			}
			if pttl := ms(t, srv.MustCmd(t, "PTTL", "p:k")); pttl <= 59_000 {
				t.Fatalf("PTTL after the resumed renewal: %d", pttl)
			}
			if rem := r.Remaining(); rem <= 59*time.Second {
				t.Fatalf("estimate after the first renewal: %v", rem)
			}
			if res, err := r.Release(ctx); res != primitives.Released || err != nil {
				t.Fatalf("release: %v %v", res, err)
			}
			// The original handle finds it gone.
			if ok, _ := p.Renew(ctx, time.Second); ok {
				t.Fatal("the original handle renewed a permit the resumed one released")
			}
			if n := srv.MustCmd(t, "EXISTS", "p:k"); n != "0" {
				t.Fatalf("EXISTS p:k %s after the release", n)
			}
		})
	}

	// A wrong token owns nothing: renew is refused, release finds the
	// semaphore full of another owner's permit and removes nothing.
	holder, err := first.TryAcquire(ctx, "k", 1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	forged, err := other.Resume("k", strings.Repeat("A", 26), 1, false)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := forged.Renew(ctx, time.Minute); ok || err != nil {
		t.Fatalf("forged renew: %v %v", ok, err)
	}
	forged, _ = other.Resume("k", strings.Repeat("A", 26), 1, false)
	if res, err := forged.Release(ctx); res != primitives.NotOwned || err != nil {
		t.Fatalf("forged release: %v %v", res, err)
	}
	if ok, err := holder.Verify(ctx); !ok || err != nil {
		t.Fatalf("the holder lost its permit to a forged release: %v %v", ok, err)
	}
	if n := srv.MustCmd(t, "ZCARD", "p:k"); n != "1" {
		t.Fatalf("ZCARD %s after the forged calls", n)
	}
}

func TestResumeBadInput(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	s := newSems(t, c, semaphore.Options{})
	var nilSems *semaphore.Semaphores
	for _, tc := range []struct {
		name     string
		s        *semaphore.Semaphores
		key      string
		token    string
		capacity int
		want     []error
	}{
		{"empty key", s, "", "T", 1, []error{primitives.ErrInvalidKey}},
		{"reserved key", s, "__coordhost:x", "T", 1, []error{primitives.ErrInvalidKey}},
		{"key without a slot for its capacity", s, "}{", "T", 1, []error{primitives.ErrInvalidKey}},
		{"empty token", s, "k", "", 1, []error{primitives.ErrInvalidToken}},
		{"token with space", s, "k", "a b", 1, []error{primitives.ErrInvalidToken}},
		{"token with newline", s, "k", "a\n", 1, []error{primitives.ErrInvalidToken}},
		{"token too long", s, "k", strings.Repeat("x", primitives.MaxTokenBytes+1), 1, []error{primitives.ErrInvalidToken}},
		{"capacity 0", s, "k", "T", 0, []error{semaphore.ErrInvalidCapacity, primitives.ErrInvalidOptions}},
		{"negative capacity", s, "k", "T", -1, []error{semaphore.ErrInvalidCapacity, primitives.ErrInvalidOptions}},
		{"capacity above MaxCapacity", s, "k", "T", semaphore.MaxCapacity + 1, []error{semaphore.ErrInvalidCapacity, primitives.ErrInvalidOptions}},
		{"nil Semaphores", nilSems, "k", "T", 1, []error{primitives.ErrInvalidOptions}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := tc.s.Resume(tc.key, tc.token, tc.capacity, false)
			if p != nil {
				t.Fatalf("got a permit with %v", err)
			}
			for _, want := range tc.want {
				if !errors.Is(err, want) {
					t.Fatalf("got %v, want %v", err, want)
				}
			}
		})
	}
	if n := srv.MustCmd(t, "DBSIZE"); n != "0" {
		t.Fatalf("bad resumes wrote %s keys", n)
	}
}
