package latch_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/policies/builtin"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/latch"
)

// keyspace dumps every key with its type, value and whether it expires,
// so a test can check that a refused call changed nothing at all.
func keyspace(t *testing.T, s *redistest.Server) string {
	t.Helper()
	ks := strings.Split(s.MustCmd(t, "KEYS", "*"), "\n")
	slices.Sort(ks)
	var b strings.Builder
	for _, k := range ks {
		if k == "" {
			continue
		}
		typ := s.MustCmd(t, "TYPE", k)
		b.WriteString(k + " " + typ + " ")
		switch typ {
		case "string":
			b.WriteString(s.MustCmd(t, "GET", k))
		case "hash":
			f := strings.Split(s.MustCmd(t, "HGETALL", k), "\n")
			var pairs []string
			for i := 0; i+1 < len(f); i += 2 {
				pairs = append(pairs, f[i]+"="+f[i+1])
			}
			slices.Sort(pairs)
			b.WriteString(strings.Join(pairs, ","))
		}
		if s.MustCmd(t, "PTTL", k) != "-1" {
			b.WriteString(" (expires)")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// badFixture is a server holding a latch, a string, a foreign hash and
// two malformed latches, and Latches (open and closed) on it.
type badFixture struct {
	s            *redistest.Server
	ls, closed   *latch.Latches
	live         *latch.Latch
	ok, canceled context.Context
}

func newBadFixture(t *testing.T) *badFixture {
	s := redistest.Start(t)
	c := s.Client(t)
	f := &badFixture{s: s, ls: newLatches(t, c, latch.Options{Prefix: "p:"}), closed: newLatches(t, c, latch.Options{Prefix: "p:"})}
	f.closed.Close()
	f.ok = xtest.Ctx(t, 20*time.Second)
	var cancel func()
	f.canceled, cancel = context.WithCancel(context.Background())
	cancel()
	var err error
	if f.live, err = f.ls.Create(f.ok, "live", 3); err != nil {
		t.Fatal(err)
	}
	s.MustCmd(t, "SET", "p:str", "x")
	s.MustCmd(t, "HSET", "p:foreign", "a", "b")
	s.MustCmd(t, "HSET", "p:badcount", "gen", "g", "count", "-1")
	s.MustCmd(t, "HSET", "p:nogen", "gen", "", "count", "2")
	return f
}

// refuse runs call, expects an error matching want, and checks that the
// keyspace did not change.
func (f *badFixture) refuse(t *testing.T, want error, call func() error) {
	t.Helper()
	before := keyspace(t, f.s)
	err := call()
	if !errors.Is(err, want) {
		t.Fatalf("got %v; want %v", err, want)
	}
	if err.Error() == "" {
		t.Fatal("empty error")
	}
	if after := keyspace(t, f.s); after != before {
		t.Fatalf("keyspace changed:\n%s->\n%s", before, after)
	}
}

func TestNewBadOptions(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client(t)
	other := s.Client(t)
	otherWaiter, err := primitives.NewWaiter(other, primitives.WaiterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer otherWaiter.Close()
	closedWaiter, _ := primitives.NewWaiter(c, primitives.WaiterOptions{})
	closedWaiter.Close()
	cases := []struct {
		name string
		o    latch.Options
		want error
	}{
		{"negative TTL", latch.Options{TTL: -2 * time.Millisecond}, primitives.ErrInvalidTTL},
		{"sub-ms TTL", latch.Options{TTL: time.Microsecond}, primitives.ErrInvalidTTL},
		{"TTL above MaxTTL", latch.Options{TTL: latch.MaxTTL + time.Millisecond}, primitives.ErrInvalidTTL},
		{"MaxInt64 TTL", latch.Options{TTL: math.MaxInt64}, primitives.ErrInvalidTTL},
		{"short recheck", latch.Options{RecheckInterval: time.Millisecond}, primitives.ErrInvalidOptions},
		{"negative recheck", latch.Options{RecheckInterval: -time.Second}, primitives.ErrInvalidOptions},
		{"invalid retry policy", latch.Options{Retry: builtin.Exponential{Base: -1}}, primitives.ErrInvalidOptions},
		{"another client's Waiter", latch.Options{Waiter: otherWaiter}, primitives.ErrInvalidOptions},
		{"closed Waiter", latch.Options{Waiter: closedWaiter}, primitives.ErrInvalidOptions},
		{"zero Waiter", latch.Options{Waiter: &primitives.Waiter{}}, primitives.ErrInvalidOptions},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ls, err := latch.New(c, tc.o)
			if !errors.Is(err, tc.want) || !errors.Is(err, primitives.ErrInvalidOptions) || ls != nil {
				t.Fatalf("got %v, %v; want %v", ls, err, tc.want)
			}
		})
	}
	if _, err := latch.New(nil, latch.Options{}); !errors.Is(err, primitives.ErrInvalidOptions) {
		t.Fatalf("nil client: %v", err)
	}
	if n := s.MustCmd(t, "DBSIZE"); n != "0" {
		t.Fatalf("DBSIZE %s", n)
	}
}

// Create, Reset and Join refuse bad input with a clear error and write
// nothing.
func TestSetBadInputsWriteNothing(t *testing.T) {
	f := newBadFixture(t)
	var nilLatches *latch.Latches
	type call struct {
		name string
		fn   func(*latch.Latches, context.Context, string, int64) error
	}
	calls := []call{
		{"Create", func(ls *latch.Latches, ctx context.Context, k string, n int64) error {
			_, err := ls.Create(ctx, k, n)
			return err
		}},
		{"Reset", func(ls *latch.Latches, ctx context.Context, k string, n int64) error {
			_, err := ls.Reset(ctx, k, n)
			return err
		}},
		{"Join", func(ls *latch.Latches, ctx context.Context, k string, _ int64) error {
			_, err := ls.Join(ctx, k)
			return err
		}},
	}
	cases := []struct {
		name  string
		ls    *latch.Latches
		ctx   context.Context
		key   string
		count int64
		want  error
		join  bool // applies to Join (which takes no count)
	}{
		{"nil Latches", nilLatches, f.ok, "k", 1, primitives.ErrInvalidOptions, true},
		{"nil ctx", f.ls, nil, "k", 1, primitives.ErrInvalidOptions, true},
		{"cancelled ctx", f.ls, f.canceled, "k", 1, context.Canceled, true},
		{"empty key", f.ls, f.ok, "", 1, primitives.ErrInvalidKey, true},
		{"reserved key", f.ls, f.ok, "__coordhost:x", 1, primitives.ErrInvalidKey, true},
		{"closed", f.closed, f.ok, "k", 1, primitives.ErrClosed, true},
		{"wrong type", f.ls, f.ok, "str", 1, primitives.ErrWrongType, true},
		{"foreign hash", f.ls, f.ok, "foreign", 1, primitives.ErrWrongType, true},
		{"malformed count", f.ls, f.ok, "badcount", 1, primitives.ErrWrongType, true},
		{"empty generation", f.ls, f.ok, "nogen", 1, primitives.ErrWrongType, true},
		{"negative count", f.ls, f.ok, "k", -1, latch.ErrInvalidCount, false},
		{"MinInt64 count", f.ls, f.ok, "k", math.MinInt64, latch.ErrInvalidCount, false},
		{"count above MaxCount", f.ls, f.ok, "k", latch.MaxCount + 1, latch.ErrInvalidCount, false},
		{"MaxInt64 count", f.ls, f.ok, "k", math.MaxInt64, latch.ErrInvalidCount, false},
	}
	for _, c := range calls {
		for _, tc := range cases {
			if c.name == "Join" && !tc.join {
				continue
			}
			t.Run(c.name+"/"+tc.name, func(t *testing.T) {
				f.refuse(t, tc.want, func() error { return c.fn(tc.ls, tc.ctx, tc.key, tc.count) })
			})
		}
	}
	t.Run("Create/exists", func(t *testing.T) {
		f.refuse(t, latch.ErrExists, func() error { _, err := f.ls.Create(f.ok, "live", 1); return err })
	})
	t.Run("Join/missing", func(t *testing.T) {
		f.refuse(t, latch.ErrNotFound, func() error { _, err := f.ls.Join(f.ok, "missing"); return err })
	})
}

func TestAttachBadInputs(t *testing.T) {
	f := newBadFixture(t)
	var nilLatches *latch.Latches
	for _, tc := range []struct {
		name     string
		ls       *latch.Latches
		key, gen string
		want     error
	}{
		{"nil Latches", nilLatches, "k", "g", primitives.ErrInvalidOptions},
		{"empty key", f.ls, "", "g", primitives.ErrInvalidKey},
		{"reserved key", f.ls, "__coordhost:x", "g", primitives.ErrInvalidKey},
		{"empty generation", f.ls, "k", "", latch.ErrInvalidGeneration},
		{"closed", f.closed, "k", "g", primitives.ErrClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.refuse(t, tc.want, func() error {
				l, err := tc.ls.Attach(tc.key, tc.gen)
				if l != nil {
					t.Errorf("handle %v with error %v", l, err)
				}
				return err
			})
		})
	}
}

// The handle's calls refuse bad input and write nothing; on a key that
// holds something else they fail with ErrWrongType, also writing nothing.
func TestHandleBadInputsWriteNothing(t *testing.T) {
	f := newBadFixture(t)
	attach := func(key string) *latch.Latch {
		l, err := f.ls.Attach(key, "g")
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	var nilLatch *latch.Latch
	calls := map[string]func(*latch.Latch, context.Context) error{
		"CountDown": func(l *latch.Latch, ctx context.Context) error { _, err := l.CountDown(ctx); return err },
		"Wait":      func(l *latch.Latch, ctx context.Context) error { _, err := l.Wait(ctx); return err },
		"Count":     func(l *latch.Latch, ctx context.Context) error { _, err := l.Count(ctx); return err },
		"Delete":    func(l *latch.Latch, ctx context.Context) error { _, err := l.Delete(ctx); return err },
	}
	cases := []struct {
		name string
		l    *latch.Latch
		ctx  context.Context
		want error
	}{
		{"nil handle", nilLatch, f.ok, primitives.ErrInvalidOptions},
		{"zero handle", &latch.Latch{}, f.ok, primitives.ErrInvalidOptions},
		{"nil ctx", f.live, nil, primitives.ErrInvalidOptions},
		{"cancelled ctx", f.live, f.canceled, context.Canceled},
		{"wrong type", attach("str"), f.ok, primitives.ErrWrongType},
		{"foreign hash", attach("foreign"), f.ok, primitives.ErrWrongType},
		{"malformed count", attach("badcount"), f.ok, primitives.ErrWrongType},
		{"empty generation", attach("nogen"), f.ok, primitives.ErrWrongType},
	}
	for name, fn := range calls {
		for _, tc := range cases {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				f.refuse(t, tc.want, func() error { return fn(tc.l, tc.ctx) })
			})
		}
	}
	if n, err := f.live.Count(f.ok); n != 3 || err != nil {
		t.Fatalf("the refused calls disturbed the latch: %d, %v", n, err)
	}
	if nilLatch.Key() != "" || nilLatch.Generation() != "" {
		t.Fatal("nil handle has a key or generation")
	}
}
