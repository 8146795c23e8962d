package lua

import (
	"regexp"
	"strconv"
	"testing"
)

// MaxTTLMillis and args.lua's MAX_TTL_MS must agree: the Go side refuses
// longer TTLs before sending, the scripts refuse them before writing.
func TestMaxTTLMatchesScripts(t *testing.T) {
	m := regexp.MustCompile(`(?m)^local MAX_TTL_MS = ([0-9]+)$`).FindStringSubmatch(args)
	if m == nil {
		t.Fatal("args.lua has no MAX_TTL_MS line")
	}
	if n, _ := strconv.ParseInt(m[1], 10, 64); n != MaxTTLMillis {
		t.Fatalf("args.lua MAX_TTL_MS = %d, MaxTTLMillis = %d", n, int64(MaxTTLMillis))
	}
	// Exact in a Lua double, and far inside hash-field expiry (2^48 ms
	// since the epoch) for centuries to come.
	if MaxTTLMillis >= 1<<53 || MaxTTLMillis >= 1<<47 {
		t.Fatalf("MaxTTLMillis %d is too large for the scripts", int64(MaxTTLMillis))
	}
}

// MaxCount and ratelimit_lib.lua's MAX_COUNT must agree, and sums of two
// counts must stay exact in a Lua double.
func TestMaxCountMatchesScripts(t *testing.T) {
	m := regexp.MustCompile(`(?m)^local MAX_COUNT = ([0-9]+)$`).FindStringSubmatch(ratelimitLib)
	if m == nil {
		t.Fatal("ratelimit_lib.lua has no MAX_COUNT line")
	}
	if n, _ := strconv.ParseInt(m[1], 10, 64); n != MaxCount {
		t.Fatalf("ratelimit_lib.lua MAX_COUNT = %d, MaxCount = %d", n, int64(MaxCount))
	}
	if 2*MaxCount >= 1<<53 {
		t.Fatalf("MaxCount %d is too large for the scripts", int64(MaxCount))
	}
}

// ratelimit_lib.lua's MAX_TTL_MS is args.lua's.
func TestRateLimitMaxTTLMatches(t *testing.T) {
	m := regexp.MustCompile(`(?m)^local MAX_TTL_MS = ([0-9]+)$`).FindStringSubmatch(ratelimitLib)
	if m == nil {
		t.Fatal("ratelimit_lib.lua has no MAX_TTL_MS line")
	}
	if n, _ := strconv.ParseInt(m[1], 10, 64); n != MaxTTLMillis {
		t.Fatalf("ratelimit_lib.lua MAX_TTL_MS = %d, MaxTTLMillis = %d", n, int64(MaxTTLMillis))
	}
}
