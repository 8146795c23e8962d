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

// The read-write lease scripts refuse bad arguments, aliasing keys and
// foreign values before their first write (as TestScriptsValidateBeforeWriting
// and TestScriptsRefuseHostileKeys check for the others). The setup leaves
// state a script would write to (an expired reader to prune, a dead
// pending-writer entry), so a write before the check would show.
func TestRWLockScriptsValidateBeforeWriting(t *testing.T) {
	s := redistest.Start(t, redistest.Version(8)) // snapshot reads field expiry
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	setup := [][]string{
		{"ZADD", "h", "1", "r:old", "99999999999999", "r:live"},
		{"HSET", "wq", "dead", "1 0 2"},
		{"SET", "str", "x"},
		{"HSET", "hash", "f", "v"},
	}
	badMs := []string{"", "0", "-1", "1.5", "1e3", " 5", "abc", "3153600000001", "99999999999999999999"}
	type tc struct {
		name string
		src  string
		keys []string
		args []string
		want string
	}
	var cases []tc
	read := func(ms string) []string { return []string{"tok", ms} }
	write := func(ms string) []string { return []string{"tok", ms, "wid", "1000", "0"} }
	for _, ms := range badMs {
		cases = append(cases,
			tc{"read lease " + ms, lua.RWLockAcquireRead, []string{"h", "wq"}, read(ms), "COORDHOST_BADARG"},
			tc{"write lease " + ms, lua.RWLockAcquireWrite, []string{"h", "wq"}, write(ms), "COORDHOST_BADARG"},
			tc{"renew " + ms, lua.RWLockRenew, []string{"h"}, []string{"r:live", ms}, "COORDHOST_BADARG"},
		)
		if ms != "0" { // 0: register no entry
			cases = append(cases, tc{"write entry lease " + ms, lua.RWLockAcquireWrite, []string{"h", "wq"}, []string{"tok", "1000", "wid", ms, "0"}, "COORDHOST_BADARG"})
		}
		if ms != "-1" && ms != "0" { // -1: unbounded; 0: strict
			cases = append(cases, tc{"write bound " + ms, lua.RWLockAcquireWrite, []string{"h", "wq"}, []string{"tok", "1000", "wid", "1000", ms}, "COORDHOST_BADARG"})
		}
	}
	cases = append(cases,
		tc{"read: empty token", lua.RWLockAcquireRead, []string{"h", "wq"}, []string{"", "1000"}, "COORDHOST_BADARG"},
		tc{"read: no waiting-writers key", lua.RWLockAcquireRead, []string{"h"}, read("1000"), "COORDHOST_BADARG"},
		tc{"read: keys alias", lua.RWLockAcquireRead, []string{"h", "h"}, read("1000"), "COORDHOST_BADARG"},
		tc{"read: grant log without a key", lua.RWLockAcquireRead, []string{"h", "wq"}, []string{"tok", "1000", "1"}, "COORDHOST_BADARG"},
		tc{"read: grant log of another type", lua.RWLockAcquireRead, []string{"h", "wq", "str"}, []string{"tok", "1000", "1"}, "WRONGTYPE"},
		tc{"read: holders of another type", lua.RWLockAcquireRead, []string{"str", "wq"}, read("1000"), "WRONGTYPE"},
		tc{"read: waiting writers of another type", lua.RWLockAcquireRead, []string{"h", "str"}, read("1000"), "WRONGTYPE"},
		tc{"write: empty writer id with an entry", lua.RWLockAcquireWrite, []string{"h", "wq"}, []string{"tok", "1000", "", "1000", "0"}, "COORDHOST_BADARG"},
		tc{"write: keys alias", lua.RWLockAcquireWrite, []string{"wq", "wq"}, write("1000"), "COORDHOST_BADARG"},
		tc{"write: waiting writers of another type", lua.RWLockAcquireWrite, []string{"h", "str"}, write("1000"), "WRONGTYPE"},
		tc{"write: holders of another type", lua.RWLockAcquireWrite, []string{"hash", "wq"}, write("1000"), "WRONGTYPE"},
		tc{"renew: empty member", lua.RWLockRenew, []string{"h"}, []string{"", "1000"}, "COORDHOST_BADARG"},
		tc{"renew: another type", lua.RWLockRenew, []string{"str"}, []string{"r:live", "1000"}, "WRONGTYPE"},
		tc{"release: empty member", lua.RWLockRelease, []string{"h"}, []string{"", "ch"}, "COORDHOST_BADARG"},
		tc{"release: another type", lua.RWLockRelease, []string{"str"}, []string{"r:live", "ch"}, "WRONGTYPE"},
		tc{"leave: empty writer id", lua.RWLockLeave, []string{"h", "wq"}, []string{"", "w:tok", "ch"}, "COORDHOST_BADARG"},
		tc{"leave: empty member", lua.RWLockLeave, []string{"h", "wq"}, []string{"wid", "", "ch"}, "COORDHOST_BADARG"},
		tc{"leave: keys alias", lua.RWLockLeave, []string{"h", "h"}, []string{"dead", "r:live", "ch"}, "COORDHOST_BADARG"},
		tc{"leave: waiting writers of another type", lua.RWLockLeave, []string{"h", "str"}, []string{"dead", "r:live", "ch"}, "WRONGTYPE"},
	)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s.Do(ctx, "FLUSHALL")
			for _, cmd := range setup {
				if err := s.Do(ctx, cmd...).Error(); err != nil {
					t.Fatalf("%v: %v", cmd, err)
				}
			}
			before := snapshot(t, s)
			cmd := append(append([]string{"EVAL", c.src, strconv.Itoa(len(c.keys))}, c.keys...), c.args...)
			err := s.Do(ctx, cmd...).Error()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want an error with %s", err, c.want)
			}
			if after := snapshot(t, s); after != before {
				t.Errorf("wrote:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}
