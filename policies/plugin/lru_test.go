package plugin

import (
	"bytes"
	"testing"

	"github.com/coordhost/coordhost/policies"
)

func TestLRU(t *testing.T) {
	c := newLRU(2)
	k := func(s string) []byte { return []byte(s) }
	c.add(k("a"), "1")
	c.add(k("b"), "2")
	if v, ok := c.get(k("a")); !ok || v != "1" {
		t.Fatalf("get a = %q, %v", v, ok)
	}
	c.add(k("c"), "3") // evicts b, the least recent
	if _, ok := c.get(k("b")); ok {
		t.Fatal("b survived eviction")
	}
	for key, want := range map[string]string{"a": "1", "c": "3"} {
		if v, ok := c.get(k(key)); !ok || v != want {
			t.Fatalf("get %s = %q, %v", key, v, ok)
		}
	}
	c.add(k("a"), "1'") // update moves a to the front
	c.add(k("d"), "4")  // evicts c
	if _, ok := c.get(k("c")); ok {
		t.Fatal("c survived eviction")
	}
	if v, _ := c.get(k("a")); v != "1'" {
		t.Fatalf("a = %q after update", v)
	}
	if c.len() != 2 {
		t.Fatalf("len = %d", c.len())
	}
	c.clear()
	if _, ok := c.get(k("a")); ok || c.len() != 0 {
		t.Fatal("clear left entries")
	}
	c.add(k("e"), "5")
	if v, ok := c.get(k("e")); !ok || v != "5" {
		t.Fatal("add after clear")
	}
}

func TestPartitionCacheKeyUnambiguous(t *testing.T) {
	reqs := []policies.PartitionRequest{
		{},
		{Kind: "ab", Name: "c"},
		{Kind: "a", Name: "bc"},
		{Name: "x", Attributes: map[string]string{"k": "v"}},
		{Name: "x", Attributes: map[string]string{"kv": ""}},
		{Name: "x", Attributes: map[string]string{"k": "v", "a": "b"}},
		{Name: "x", Attributes: map[string]string{"k": "va", "": "b"}},
	}
	seen := map[string]int{}
	for i, r := range reqs {
		key := string(appendPartitionKey(nil, r))
		if j, dup := seen[key]; dup {
			t.Fatalf("requests %d and %d share a cache key", j, i)
		}
		seen[key] = i
	}
	a := appendPartitionKey(nil, policies.PartitionRequest{Name: "x", Attributes: map[string]string{"a": "1", "b": "2", "c": "3"}})
	b := appendPartitionKey(nil, policies.PartitionRequest{Name: "x", Attributes: map[string]string{"c": "3", "a": "1", "b": "2"}})
	if !bytes.Equal(a, b) {
		t.Fatal("attribute order changes the cache key")
	}
}
