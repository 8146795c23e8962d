package host

import (
	"strings"
	"testing"
)

// A policy the table does not know (a server newer than this code) gets
// the sentence of the worst case, any key evicted; none gets a sentence
// without maxmemory or under noeviction.
func TestEvictionHazardUnknownPolicy(t *testing.T) {
	got := evictionHazard("allkeys-future", "1000")
	for _, w := range []string{`maxmemory-policy is "allkeys-future"`, "any key (by a policy coordhost does not know)", "fencing tokens restart at 1"} {
		if !strings.Contains(got, w) {
			t.Errorf("%q does not say %q", got, w)
		}
	}
	for _, tc := range [][2]string{{"noeviction", "1000"}, {"allkeys-lru", "0"}, {"allkeys-lru", ""}} {
		if got := evictionHazard(tc[0], tc[1]); got != "" {
			t.Errorf("policy %s, maxmemory %q: %q, want none", tc[0], tc[1], got)
		}
	}
}
