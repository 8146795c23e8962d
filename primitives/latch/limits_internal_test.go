package latch

import (
	"regexp"
	"strconv"
	"testing"

	"github.com/coordhost/coordhost/lua"
)

// MaxCount and latch_lib.lua's MAX_COUNT must agree: Go refuses larger
// counts before sending, the scripts before writing.
func TestMaxCountMatchesScripts(t *testing.T) {
	m := regexp.MustCompile(`(?m)^local MAX_COUNT = ([0-9]+)$`).FindStringSubmatch(lua.LatchSet)
	if m == nil {
		t.Fatal("latch_lib.lua has no MAX_COUNT line")
	}
	if n, _ := strconv.ParseInt(m[1], 10, 64); n != MaxCount {
		t.Fatalf("MAX_COUNT = %d, MaxCount = %d", n, int64(MaxCount))
	}
	if MaxCount >= 1<<53 {
		t.Fatal("MaxCount is not exact in a Lua number")
	}
}
