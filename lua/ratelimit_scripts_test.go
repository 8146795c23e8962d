package lua_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/lua"
)

// The rate-limit scripts refuse bad arguments, and keys holding state they
// did not write, before their first write; and a peek (consume 0) writes
// nothing.
func TestRateLimitScriptsValidateBeforeWriting(t *testing.T) {
	s := redistest.Start(t, redistest.Version(8))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range [][]string{
		{"SET", "count", "2"},
		{"PEXPIRE", "count", "600000"},
		{"SET", "text", "abc"},
		{"SET", "negative", "-1"},
		{"HSET", "window", "1", "1"},
		{"HSET", "foreign", "x", "1"},
		{"HSET", "badcount", "1", "-5"},
		{"HSET", "bucket", "tokens", "1", "at", "1"},
		{"HSET", "otherhash", "a", "b"},
		{"HSET", "badbucket", "tokens", "1.5", "at", "1"},
	} {
		if err := s.Do(ctx, c...).Error(); err != nil {
			t.Fatalf("%v: %v", c, err)
		}
	}
	before := snapshot(t, s)
	fixed := func(key string, args ...string) []string {
		return append([]string{"EVAL", lua.RateLimitFixed, "1", key}, args...)
	}
	sliding := func(key string, args ...string) []string {
		return append([]string{"EVAL", lua.RateLimitSliding, "1", key}, args...)
	}
	bucket := func(key string, args ...string) []string {
		return append([]string{"EVAL", lua.RateLimitBucket, "1", key}, args...)
	}
	cases := []struct {
		name string
		cmd  []string
		want string
	}{
		{"fixed: negative permits", fixed("new", "-1", "1", "5", "1000"), "COORDHOST_BADARG"},
		{"fixed: need 0", fixed("new", "0", "0", "5", "1000"), "COORDHOST_BADARG"},
		{"fixed: need below permits", fixed("new", "3", "2", "5", "1000"), "COORDHOST_BADARG"},
		{"fixed: need above limit", fixed("new", "6", "6", "5", "1000"), "COORDHOST_BADARG"},
		{"fixed: limit 0", fixed("new", "1", "1", "0", "1000"), "COORDHOST_BADARG"},
		{"fixed: limit above MAX_COUNT", fixed("new", "1", "1", "1000000000000001", "1000"), "COORDHOST_BADARG"},
		{"fixed: float limit", fixed("new", "1", "1", "5.5", "1000"), "COORDHOST_BADARG"},
		{"fixed: window 0", fixed("new", "1", "1", "5", "0"), "COORDHOST_BADARG"},
		{"fixed: window too long", fixed("new", "1", "1", "5", "3153600000001"), "COORDHOST_BADARG"},
		{"fixed: missing window", fixed("new", "1", "1", "5"), "COORDHOST_BADARG"},
		{"fixed: text counter", fixed("text", "1", "1", "5", "1000"), "COORDHOST_WRONGKIND"},
		{"fixed: negative counter", fixed("negative", "1", "1", "5", "1000"), "COORDHOST_WRONGKIND"},
		{"fixed: hash key", fixed("window", "1", "1", "5", "1000"), "WRONGTYPE"},
		{"sliding: segments 0", sliding("new", "1", "1", "5", "1000", "0"), "COORDHOST_BADARG"},
		{"sliding: segments above window ms", sliding("new", "1", "1", "5", "10", "11"), "COORDHOST_BADARG"},
		{"sliding: foreign field", sliding("foreign", "1", "1", "5", "1000", "10"), "COORDHOST_WRONGKIND"},
		{"sliding: negative count", sliding("badcount", "1", "1", "5", "1000", "10"), "COORDHOST_WRONGKIND"},
		{"sliding: bucket state", sliding("bucket", "1", "1", "5", "1000", "10"), "COORDHOST_WRONGKIND"},
		{"sliding: string key", sliding("count", "1", "1", "5", "1000", "10"), "WRONGTYPE"},
		{"bucket: per 0", bucket("new", "1", "1", "5", "0", "1000"), "COORDHOST_BADARG"},
		{"bucket: per above limit", bucket("new", "1", "1", "5", "6", "1000"), "COORDHOST_BADARG"},
		{"bucket: period 0", bucket("new", "1", "1", "5", "1", "0"), "COORDHOST_BADARG"},
		{"bucket: fill beyond MAX_TTL", bucket("new", "1", "1", "1000000000000000", "1", "3153600000000"), "COORDHOST_BADARG"},
		{"bucket: other hash", bucket("otherhash", "1", "1", "5", "1", "1000"), "COORDHOST_WRONGKIND"},
		{"bucket: fractional tokens", bucket("badbucket", "1", "1", "5", "1", "1000"), "COORDHOST_WRONGKIND"},
		{"bucket: window state", bucket("window", "1", "1", "5", "1", "1000"), "COORDHOST_WRONGKIND"},
		{"bucket: string key", bucket("count", "1", "1", "5", "1", "1000"), "WRONGTYPE"},
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
	// Peeks decide without writing, also on missing keys.
	for _, tc := range []struct {
		name string
		cmd  []string
	}{
		{"fixed peek", fixed("count", "0", "3", "5", "1000")},
		{"fixed peek missing", fixed("new", "0", "1", "5", "1000")},
		{"sliding peek", sliding("window", "0", "1", "5", "1000", "10")},
		{"sliding peek missing", sliding("new", "0", "5", "5", "1000", "10")},
		{"bucket peek", bucket("bucket", "0", "1", "5", "1", "1000")},
		{"bucket peek missing", bucket("new", "0", "5", "5", "1", "1000")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := s.Do(ctx, tc.cmd...).ToArray()
			if err != nil || len(v) != 5 {
				t.Fatalf("got %v, %v", v, err)
			}
			if after := snapshot(t, s); after != before {
				t.Errorf("wrote:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}
