package lease_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/lease"
)

func TestResume(t *testing.T) {
	ctx := xtest.Ctx(t, 20*time.Second)
	s := redistest.Start(t, redistest.Version(8))
	c := s.Client(t)
	first := newLeases(t, c, lease.Options{Prefix: "p:"})
	other := newLeases(t, c, lease.Options{Prefix: "p:"}) // as another process would
	hpttl := func(field string) int64 { return millis(s.MustCmd(t, "HPTTL", "p:h", "FIELDS", "1", field)) }
	l, err := first.TryAcquire(ctx, "h", "f", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	sibling, err := first.TryAcquire(ctx, "h", "g", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r, err := other.Resume("h", "f", l.Token())
	if err != nil {
		t.Fatal(err)
	}
	if r.Key() != "p:h" || r.Field() != "f" || r.Token() != l.Token() {
		t.Fatalf("resumed %q %q %q", r.Key(), r.Field(), r.Token())
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
	if p := hpttl("f"); p <= 59_000 {
		t.Fatalf("HPTTL after the resumed renewal: %d", p)
	}
	if p := hpttl("g"); p > 10_000 {
		t.Fatalf("the sibling field's HPTTL moved to %d", p)
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
	// The original handle finds it gone; the sibling field is untouched.
	if ok, _ := l.Renew(ctx, time.Second); ok {
		t.Fatal("the original handle renewed a lease the resumed one released")
	}
	if ok, err := sibling.Verify(ctx); !ok || err != nil {
		t.Fatalf("the sibling field: %v %v", ok, err)
	}

	// A wrong token owns nothing: renew is refused, release finds another
	// owner and deletes nothing.
	holder, err := first.TryAcquire(ctx, "h", "f", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	forged, err := other.Resume("h", "f", strings.Repeat("A", 26))
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := forged.Renew(ctx, time.Minute); ok || err != nil {
		t.Fatalf("forged renew: %v %v", ok, err)
	}
	forged, _ = other.Resume("h", "f", strings.Repeat("A", 26))
	if res, err := forged.Release(ctx); res != primitives.NotOwned || err != nil {
		t.Fatalf("forged release: %v %v", res, err)
	}
	if ok, err := holder.Verify(ctx); !ok || err != nil {
		t.Fatalf("the holder lost its lease to a forged release: %v %v", ok, err)
	}
}

func TestResumeBadInput(t *testing.T) {
	s := redistest.Start(t, redistest.Version(8))
	c := s.Client(t)
	ls := newLeases(t, c, lease.Options{})
	var nilLeases *lease.Leases
	for _, tc := range []struct {
		name        string
		ls          *lease.Leases
		hash, field string
		token       string
		want        error
	}{
		{"empty hash", ls, "", "f", "T", primitives.ErrInvalidKey},
		{"reserved hash", ls, "__coordhost:x", "f", "T", primitives.ErrInvalidKey},
		{"empty field", ls, "h", "", "T", primitives.ErrInvalidKey},
		{"empty token", ls, "h", "f", "", primitives.ErrInvalidToken},
		{"token with space", ls, "h", "f", "a b", primitives.ErrInvalidToken},
		{"token with newline", ls, "h", "f", "a\n", primitives.ErrInvalidToken},
		{"token too long", ls, "h", "f", strings.Repeat("x", primitives.MaxTokenBytes+1), primitives.ErrInvalidToken},
		{"nil Leases", nilLeases, "h", "f", "T", primitives.ErrInvalidOptions},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if l, err := tc.ls.Resume(tc.hash, tc.field, tc.token); !errors.Is(err, tc.want) || l != nil {
				t.Fatalf("got %v, %v; want %v", l, err, tc.want)
			}
		})
	}
	if n := s.MustCmd(t, "DBSIZE"); n != "0" {
		t.Fatalf("bad resumes wrote %s keys", n)
	}
}
