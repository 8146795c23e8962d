package main

import (
	"testing"

	"github.com/coordhost/coordhost/plugins/sdk/guest"
)

// call runs partition_key natively against the SDK's I/O area.
func call(s settings, kind, name string, attrs map[string]string) (string, bool) {
	in := guest.AppendPartition(nil, kind, name, attrs)
	copy(guest.Input(int32(len(in))), in)
	cfg = s
	n := partitionKey(int32(len(in)))
	if n < 0 {
		return string(guest.Input(-n - 1)), false
	}
	return string(guest.Input(n)), true
}

func TestPartitionKey(t *testing.T) {
	def, _ := parse(nil)
	if key, ok := call(def, "lock", "invoice", map[string]string{"tenant": "acme", "a": "b"}); !ok || key != "tenant:acme" {
		t.Errorf("got %q %v", key, ok)
	}
	if msg, ok := call(def, "lock", "invoice", map[string]string{"tenant": ""}); ok || msg != "gotenant: lock invoice: missing attribute tenant" {
		t.Errorf("empty tenant: %q %v", msg, ok)
	}
	s, err := parse([]byte(`{"attr": "region", "prefix": "{"}`))
	if err != nil {
		t.Fatal(err)
	}
	if key, ok := call(s, "rate_limit", "x", map[string]string{"region": "eu-west"}); !ok || key != "{eu-west" {
		t.Errorf("configured: %q %v", key, ok)
	}
	if _, err := parse([]byte(`{"attr": ""}`)); err == nil {
		t.Error("empty attr accepted")
	}
}
