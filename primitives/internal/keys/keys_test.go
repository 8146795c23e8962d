package keys

import (
	"errors"
	"testing"
)

func TestSlotKnownValues(t *testing.T) {
	// Values from the Redis Cluster specification and CLUSTER KEYSLOT.
	for key, want := range map[string]uint16{
		"123456789":     12739,
		"foo":           12182,
		"{user1000}.a":  Slot("user1000"),
		"foo{}{bar}":    Slot("foo{}{bar}"),
		"foo{{bar}}zap": Slot("{bar"),
		"foo{bar}{zap}": Slot("bar"),
		"":              0,
	} {
		if got := Slot(key); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
}

func TestDerivedSharesSlot(t *testing.T) {
	for _, tc := range []struct{ prefix, key string }{
		{"", "invoice"},
		{"app:", "invoice"},
		{"{app}:", "invoice"},
		{"app:", "{tenant}:invoice"},
		{"", "bin\x00ary\xff"},
	} {
		s := Space{Prefix: tc.prefix}
		full, err := s.Key(tc.key)
		if err != nil {
			t.Fatal(err)
		}
		d, err := s.Derived("fence", tc.key)
		if err != nil {
			t.Fatalf("Derived(%q,%q): %v", tc.prefix, tc.key, err)
		}
		if Slot(d) != Slot(full) {
			t.Errorf("Derived(%q,%q) = %q slot %d, key slot %d", tc.prefix, tc.key, d, Slot(d), Slot(full))
		}
		if d == full {
			t.Errorf("derived key equals the key %q", d)
		}
	}
}

func TestDerivedRejectsUnplaceable(t *testing.T) {
	// "a}b" has no valid tag; wrapping it makes the tag "a".
	for _, tc := range []struct{ prefix, key string }{{"", "a}b"}, {"a{", "b"}} {
		if _, err := (Space{Prefix: tc.prefix}).Derived("fence", tc.key); !errors.Is(err, ErrSlot) {
			t.Errorf("Derived(%q,%q): got %v, want ErrSlot", tc.prefix, tc.key, err)
		}
	}
}

func TestKeyRejects(t *testing.T) {
	s := Space{Prefix: "p:"}
	if _, err := s.Key(""); !errors.Is(err, ErrEmpty) {
		t.Errorf("empty: %v", err)
	}
	if _, err := s.Key(Reserved + "x"); !errors.Is(err, ErrReserved) {
		t.Errorf("reserved: %v", err)
	}
	if k, err := s.Key("x"); err != nil || k != "p:x" {
		t.Errorf("Key(x) = %q, %v", k, err)
	}
}

// Distinct keys never share a derived key: "K" wrapped and "{K}" plain
// both used to be base+"{K}", so a semaphore "invoice" and a semaphore
// "{invoice}" shared one capacity key.
func TestDerivedIsOneToOne(t *testing.T) {
	atoms := []string{"", "{", "}", "!", "K", "a", "{K}", "{{}", "a{", "{a{}", "!{K}", "{!K}", "x{y}z", "}{"}
	var keys []string
	for _, a := range atoms {
		for _, b := range atoms {
			keys = append(keys, a+b)
		}
	}
	for _, prefix := range []string{"", "app:", "{app}:", "{", "a}"} {
		s := Space{Prefix: prefix}
		owner := map[string]string{}
		for _, k := range keys {
			if k == "" {
				continue
			}
			d, err := s.Derived("capacity", k)
			if err != nil {
				continue
			}
			if prev, ok := owner[d]; ok && prev != k {
				t.Errorf("prefix %q: keys %q and %q both derive %q", prefix, prev, k, d)
			}
			owner[d] = k
			full, _ := s.Key(k)
			if Slot(d) != Slot(full) {
				t.Errorf("prefix %q: Derived(%q) = %q is in slot %d, the key in %d", prefix, k, d, Slot(d), Slot(full))
			}
		}
	}
}

// The plain form keeps its old name for keys that start with neither '{'
// nor '!', so existing fencing counters of those keys stay where they were.
func TestDerivedKeepsPlainNames(t *testing.T) {
	s := Space{Prefix: "app:"}
	for key, want := range map[string]string{
		"invoice":       "app:" + Reserved + "fence:{app:invoice}",
		"t{acme}:job":   "app:" + Reserved + "fence:t{acme}:job",
		"{acme}:job":    "app:" + Reserved + "fence:!{acme}:job",
		"!{acme}:job":   "app:" + Reserved + "fence:!!{acme}:job",
		"{app:invoice}": "app:" + Reserved + "fence:!{app:invoice}", // not the wrapped form of "invoice"
	} {
		got, err := s.Derived("fence", key)
		if err != nil || got != want {
			t.Errorf("Derived(fence, %q) = %q, %v; want %q", key, got, err, want)
		}
	}
}
