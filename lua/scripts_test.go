package lua_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/lua"
)

// Every script refuses bad arguments with COORDHOST_BADARG before its first
// write: the Go side validates first, but a script must never be the place
// where a half-written state (HSET without its HPEXPIRE, a key deleted by a
// negative PEXPIRE) can come from.
func TestScriptsValidateBeforeWriting(t *testing.T) {
	s := redistest.Start(t, redistest.Version(8)) // has HPEXPIRE for the lease scripts
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	eval := func(src string, keys, args []string) error {
		cmd := append([]string{"EVAL", src, strconv.Itoa(len(keys))}, keys...)
		return s.Do(ctx, append(cmd, args...)...).Error()
	}
	badMs := []string{"", "0", "-1", "-9223372036854775808", "1.5", "1e3", " 5", "0x10", "abc",
		"3153600000001", "9223372036854775807", "99999999999999999999"}

	type script struct {
		name     string
		src      string
		keys     []string
		args     func(ms string) []string // the other arguments valid
		minMs    string                   // ms below which the script refuses ("1" for leases)
		setup    [][]string
		emptyArg []int // argument positions (0-based) that must not be empty
	}
	scripts := []script{
		{"lock_acquire", lua.LockAcquire, []string{"l"}, func(ms string) []string { return []string{"tok", ms} }, "1", nil, []int{0}},
		{"lock_acquire fenced", lua.LockAcquire, []string{"l", "c"}, func(ms string) []string { return []string{"tok", ms} }, "1", nil, []int{0}},
		{"lock_renew", lua.LockRenew, []string{"held"}, func(ms string) []string { return []string{"tok", ms} }, "1",
			[][]string{{"SET", "held", "tok", "PX", "600000"}}, []int{0}},
		{"lock_acquire_fifo", lua.LockAcquireFIFO, []string{"l", "q", "qd"}, func(ms string) []string { return []string{"tok", ms, "7", "15000", "w"} }, "1", nil, []int{0, 4}},
		{"lock_acquire_fifo waiter lease", lua.LockAcquireFIFO, []string{"l", "q", "qd"}, func(ms string) []string { return []string{"tok", "1000", "7", ms, "w"} }, "0", nil, nil},
		{"lock_leave_fifo", lua.LockLeaveFIFO, []string{"held", "q", "qd"}, func(string) []string { return []string{"tok", "ch", "w"} }, "",
			[][]string{{"SET", "held", "tok", "PX", "600000"}, {"ZADD", "q", "1", "w"}, {"ZADD", "qd", "1", "w"}}, []int{0, 2}},
		{"lease_acquire", lua.LeaseAcquire, []string{"h"}, func(ms string) []string { return []string{"f", "tok", ms} }, "1", nil, []int{0, 1}},
		{"lease_renew", lua.LeaseRenew, []string{"hh"}, func(ms string) []string { return []string{"f", "tok", ms} }, "1",
			[][]string{{"HSET", "hh", "f", "tok"}, {"HPEXPIRE", "hh", "600000", "FIELDS", "1", "f"}}, []int{0, 1}},
	}
	for _, sc := range scripts {
		t.Run(sc.name, func(t *testing.T) {
			s.Do(ctx, "FLUSHALL")
			for _, c := range sc.setup {
				if err := s.Do(ctx, c...).Error(); err != nil {
					t.Fatalf("%v: %v", c, err)
				}
			}
			before := snapshot(t, s)
			check := func(what string, args []string) {
				t.Helper()
				err := eval(sc.src, sc.keys, args)
				if err == nil || !strings.Contains(err.Error(), "COORDHOST_BADARG") {
					t.Errorf("%s %q: got %v, want COORDHOST_BADARG", what, args, err)
				}
				if after := snapshot(t, s); after != before {
					t.Errorf("%s %q wrote:\nbefore %s\nafter  %s", what, args, before, after)
				}
			}
			if sc.minMs != "" {
				for _, ms := range badMs {
					if ms == "0" && sc.minMs == "0" {
						continue
					}
					check("ms", sc.args(ms))
				}
			}
			for _, i := range sc.emptyArg {
				args := sc.args("1000")
				args[i] = ""
				check("empty", args)
			}
		})
	}
}

// snapshot is every key with its type, value and TTLs, as one string.
func snapshot(t *testing.T, s *redistest.Server) string {
	t.Helper()
	var b strings.Builder
	keys := strings.Fields(s.MustCmd(t, "KEYS", "*"))
	slices.Sort(keys)
	for _, k := range keys {
		typ := s.MustCmd(t, "TYPE", k)
		b.WriteString(k + ":" + typ + "=")
		switch typ {
		case "string":
			b.WriteString(s.MustCmd(t, "GET", k))
		case "hash":
			b.WriteString(strings.ReplaceAll(s.MustCmd(t, "HGETALL", k), "\n", ","))
			b.WriteString(" fieldttl=" + strings.ReplaceAll(s.MustCmd(t, "HPEXPIRETIME", k, "FIELDS", "1", "f"), "\n", ","))
		case "zset":
			b.WriteString(strings.ReplaceAll(s.MustCmd(t, "ZRANGE", k, "0", "-1", "WITHSCORES"), "\n", ","))
		}
		b.WriteString(" expire=" + s.MustCmd(t, "PEXPIRETIME", k) + "; ")
	}
	return b.String()
}

// Keys that alias each other, or hold a value of another type, are refused
// before any write too; so is an empty token in the release scripts (an
// empty token would match an empty value).
func TestScriptsRefuseHostileKeys(t *testing.T) {
	s := redistest.Start(t, redistest.Version(8))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cases := []struct {
		name  string
		src   string
		keys  []string
		args  []string
		setup [][]string
		want  string // in the error
	}{
		{"grant log without a key of its own", lua.LockAcquire, []string{"l"}, []string{"tok", "1000", "1"}, nil, "COORDHOST_BADARG"},
		{"counter is the lock key", lua.LockAcquire, []string{"l", "l"}, []string{"tok", "1000"}, nil, "COORDHOST_BADARG"},
		{"grant log of another type", lua.LockAcquire, []string{"l", "g"}, []string{"tok", "1000", "1"}, [][]string{{"SET", "g", "x"}}, "WRONGTYPE"},
		{"fenced, grant log of another type", lua.LockAcquire, []string{"l", "c", "g"}, []string{"tok", "1000", "1"}, [][]string{{"HSET", "g", "f", "v"}}, "WRONGTYPE"},
		{"FIFO queue is the lock key", lua.LockAcquireFIFO, []string{"l", "l", "qd"}, []string{"tok", "1000", "1", "15000", "w"}, nil, "COORDHOST_BADARG"},
		{"FIFO counter is the queue", lua.LockAcquireFIFO, []string{"l", "q", "qd", "q"}, []string{"tok", "1000", "1", "15000", "w"}, nil, "COORDHOST_BADARG"},
		{"leave: lock key of another type", lua.LockLeaveFIFO, []string{"z", "q", "qd"}, []string{"tok", "ch", "w"},
			[][]string{{"ZADD", "z", "1", "w"}, {"ZADD", "q", "1", "w"}, {"ZADD", "qd", "1", "w"}}, "WRONGTYPE"},
		{"leave: queue is the lock key", lua.LockLeaveFIFO, []string{"q", "q", "qd"}, []string{"tok", "ch", "w"},
			[][]string{{"ZADD", "q", "1", "w"}}, "COORDHOST_BADARG"},
		{"release: empty token", lua.LockRelease, []string{"empty"}, []string{"", "ch"}, [][]string{{"SET", "empty", ""}}, "COORDHOST_BADARG"},
		{"lease release: empty token", lua.LeaseRelease, []string{"h"}, []string{"f", "", "ch"}, [][]string{{"HSET", "h", "f", ""}}, "COORDHOST_BADARG"},
		{"lease release: empty field", lua.LeaseRelease, []string{"h"}, []string{"", "tok", "ch"}, [][]string{{"HSET", "h", "", "tok"}}, "COORDHOST_BADARG"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s.Do(ctx, "FLUSHALL")
			for _, c := range tc.setup {
				if err := s.Do(ctx, c...).Error(); err != nil {
					t.Fatalf("%v: %v", c, err)
				}
			}
			before := snapshot(t, s)
			cmd := append(append([]string{"EVAL", tc.src, strconv.Itoa(len(tc.keys))}, tc.keys...), tc.args...)
			err := s.Do(ctx, cmd...).Error()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error with %s", err, tc.want)
			}
			if after := snapshot(t, s); after != before {
				t.Errorf("wrote:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}
