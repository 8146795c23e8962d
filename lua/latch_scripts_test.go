package lua_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/lua"
)

// The latch scripts refuse bad arguments, and hashes that are not latches,
// before their first write.
func TestLatchScriptsValidateBeforeWriting(t *testing.T) {
	s := redistest.Start(t, redistest.Version(8)) // snapshot reads HPEXPIRETIME
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	setup := [][]string{
		{"HSET", "live", "gen", "g", "count", "2"},
		{"PEXPIRE", "live", "600000"},
		{"HSET", "done", "gen", "g", "count", "0"},
		{"SET", "str", "x"},
		{"HSET", "foreign", "a", "b"},
		{"HSET", "neg", "gen", "g", "count", "-1"},
		{"HSET", "zeros", "gen", "g", "count", "007"},
		{"HSET", "huge", "gen", "g", "count", "9007199254740992"},
		{"HSET", "nogen", "gen", "", "count", "1"},
		{"HSET", "nocount", "gen", "g"},
	}
	for _, c := range setup {
		if err := s.Do(ctx, c...).Error(); err != nil {
			t.Fatalf("%v: %v", c, err)
		}
	}
	before := snapshot(t, s)
	set := func(key string, args ...string) []string {
		return append([]string{"EVAL", lua.LatchSet, "1", key}, args...)
	}
	down := func(key string, args ...string) []string {
		return append([]string{"EVAL", lua.LatchCountDown, "1", key}, args...)
	}
	cases := []struct {
		name string
		cmd  []string
		want string
	}{
		{"set: bad mode", set("new", "replace", "t", "1", "1000", "ch"), "COORDHOST_BADARG"},
		{"set: empty token", set("new", "create", "", "1", "1000", "ch"), "COORDHOST_BADARG"},
		{"set: negative count", set("new", "create", "t", "-1", "1000", "ch"), "COORDHOST_BADARG"},
		{"set: leading zero", set("new", "create", "t", "01", "1000", "ch"), "COORDHOST_BADARG"},
		{"set: count above MAX_COUNT", set("new", "create", "t", "9007199254740992", "1000", "ch"), "COORDHOST_BADARG"},
		{"set: huge count", set("new", "reset", "t", "99999999999999999999", "1000", "ch"), "COORDHOST_BADARG"},
		{"set: fractional count", set("new", "create", "t", "1.5", "1000", "ch"), "COORDHOST_BADARG"},
		{"set: empty count", set("new", "create", "t", "", "1000", "ch"), "COORDHOST_BADARG"},
		{"set: negative ttl", set("new", "create", "t", "1", "-1", "ch"), "COORDHOST_BADARG"},
		{"set: ttl above MAX_TTL_MS", set("new", "create", "t", "1", "3153600000001", "ch"), "COORDHOST_BADARG"},
		{"set: empty ttl", set("new", "create", "t", "1", "", "ch"), "COORDHOST_BADARG"},
		{"reset: string key", set("str", "reset", "t", "1", "1000", "ch"), "WRONGTYPE"},
		{"reset: foreign hash", set("foreign", "reset", "t", "1", "1000", "ch"), "COORDHOST_NOTLATCH"},
		{"reset: negative stored count", set("neg", "reset", "t", "1", "1000", "ch"), "COORDHOST_NOTLATCH"},
		{"reset: stored count with zeros", set("zeros", "reset", "t", "1", "1000", "ch"), "COORDHOST_NOTLATCH"},
		{"reset: stored count too big", set("huge", "reset", "t", "1", "1000", "ch"), "COORDHOST_NOTLATCH"},
		{"reset: empty stored generation", set("nogen", "reset", "t", "1", "1000", "ch"), "COORDHOST_NOTLATCH"},
		{"reset: no stored count", set("nocount", "reset", "t", "1", "1000", "ch"), "COORDHOST_NOTLATCH"},
		{"count down: empty token", down("live", "", "1000", "ch"), "COORDHOST_BADARG"},
		{"count down: bad ttl", down("live", "g", "0x10", "ch"), "COORDHOST_BADARG"},
		{"count down: string key", down("str", "g", "1000", "ch"), "WRONGTYPE"},
		{"count down: stored count with zeros", down("zeros", "g", "1000", "ch"), "COORDHOST_NOTLATCH"},
		{"count down: negative stored count", down("neg", "g", "1000", "ch"), "COORDHOST_NOTLATCH"},
		{"delete: empty token", []string{"EVAL", lua.LatchDelete, "1", "live", "", "ch"}, "COORDHOST_BADARG"},
		{"delete: foreign hash", []string{"EVAL", lua.LatchDelete, "1", "foreign", "a", "ch"}, "COORDHOST_NOTLATCH"},
		{"read: string key", []string{"EVAL", lua.LatchRead, "1", "str"}, "WRONGTYPE"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := s.Do(ctx, tc.cmd...).Error()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error with %s", err, tc.want)
			}
			if after := snapshot(t, s); after != before {
				t.Errorf("wrote:\nbefore %s\nafter  %s", before, after)
			}
		})
	}

	// Answers that write nothing: a count-down of a completed or another
	// generation, a create where a latch is, a delete of another
	// generation.
	for _, tc := range []struct {
		name string
		cmd  []string
		want string
	}{
		{"count down completed", down("done", "g", "1000", "ch"), "-2"},
		{"count down other generation", down("live", "h", "1000", "ch"), "-1"},
		{"count down missing", down("missing", "g", "1000", "ch"), "-1"},
		{"create over a latch", set("live", "create", "t", "5", "1000", "ch"), "0 g 2"},
		{"delete other generation", []string{"EVAL", lua.LatchDelete, "1", "live", "h", "ch"}, "0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := s.Do(ctx, tc.cmd...).ToAny()
			if err != nil {
				t.Fatal(err)
			}
			if got := fmtAny(v); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
			if after := snapshot(t, s); after != before {
				t.Errorf("wrote:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

func fmtAny(v any) string {
	switch x := v.(type) {
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = fmtAny(e)
		}
		return strings.Join(parts, " ")
	case int64:
		return strconv.FormatInt(x, 10)
	case string:
		return x
	}
	return "?"
}
