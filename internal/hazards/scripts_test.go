package hazards_test

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/lua"
)

// scriptCase is one of coordhost's scripts called with valid arguments on
// a state where it writes (or reads, for the read-only ones).
type scriptCase struct {
	name  string // the variable in package lua
	src   string
	keys  []string
	args  []string
	setup func(now int64, runID string) [][]string // commands run first; now is the server's ms
	// argsFor, when set, builds args from the server's run_id (redlock).
	argsFor func(runID string) []string
	// readOnly scripts write nothing whatever they answer; noErrors ones
	// answer every call (RWLockOwner says 0 for a key of another type).
	readOnly, noErrors bool
}

func eval(src string, keys []string, args ...string) []string {
	return append(append([]string{"EVAL", src, strconv.Itoa(len(keys))}, keys...), args...)
}

// ms formats n.
func ms(n int64) string { return strconv.FormatInt(n, 10) }

// scriptCases covers every script of package lua (the test checks that
// against lua's exported variables).
func scriptCases() []scriptCase {
	lockHeld := func(int64, string) [][]string { return [][]string{{"SET", "l", "tok", "PX", "600000"}} }
	latch := func(int64, string) [][]string {
		return [][]string{eval(lua.LatchSet, []string{"k"}, "create", "gen1", "2", "600000", "ch")}
	}
	// rwlock states hold an expired member too, which the scripts prune:
	// a prune followed by an error would be a partial write.
	readers := func(now int64, _ string) [][]string {
		return [][]string{
			{"ZADD", "h", ms(now + 600000), "r:other", "1", "r:expired"},
			{"PEXPIREAT", "h", ms(now + 600000)},
		}
	}
	mine := func(member string) func(int64, string) [][]string {
		return func(now int64, _ string) [][]string {
			return [][]string{
				{"ZADD", "h", ms(now + 600000), member, "1", "r:expired"},
				{"PEXPIREAT", "h", ms(now + 600000)},
			}
		}
	}
	waitingWriter := func(now int64, id string) [][]string {
		return append(mine("w:tok")(now, id),
			eval(lua.RWLockAcquireWrite, []string{"h2", "w"}, "tok2", "60000", "wid", "15000", "-1"))
	}
	permits := func(tok string) func(int64, string) [][]string {
		return func(now int64, _ string) [][]string {
			return [][]string{
				eval(lua.SemaphoreAcquire, []string{"s", "cap"}, tok, "3", "600000"),
				{"ZADD", "s", "1", "expired"},
			}
		}
	}
	session := func(int64, string) [][]string {
		return [][]string{
			eval(lua.SessionCreate, []string{"sess"}, "600000", "0", "label"),
			eval(lua.SessionAttach, []string{"sess"}, "label", "g:tok", "gid", "10"),
		}
	}
	return []scriptCase{
		{name: "LockAcquire", src: lua.LockAcquire, keys: []string{"l", "c"}, args: []string{"tok", "60000"},
			setup: func(int64, string) [][]string { return [][]string{{"SET", "c", "5"}} }},
		{name: "LockAcquire", src: lua.LockAcquire, keys: []string{"l", "c", "g"}, args: []string{"tok", "60000", "1"},
			setup: func(int64, string) [][]string { return [][]string{{"SET", "c", "5"}, {"RPUSH", "g", "x 5"}} }},
		{name: "LockRelease", src: lua.LockRelease, keys: []string{"l"}, args: []string{"tok", "ch"}, setup: lockHeld},
		{name: "LockRenew", src: lua.LockRenew, keys: []string{"l"}, args: []string{"tok", "60000"}, setup: lockHeld},
		{name: "LockAcquireFIFO", src: lua.LockAcquireFIFO, keys: []string{"l", "q", "qd", "c"}, args: []string{"tok", "60000", "7", "15000", "w"},
			setup: func(now int64, _ string) [][]string {
				return [][]string{{"SET", "c", "3"}, {"ZADD", "q", "1", "first", "0", "gone"}, {"ZADD", "qd", ms(now + 600000), "first", "1", "gone"}}
			}},
		{name: "LockLeaveFIFO", src: lua.LockLeaveFIFO, keys: []string{"l", "q", "qd"}, args: []string{"tok", "ch", "w"},
			setup: func(now int64, _ string) [][]string {
				return [][]string{{"SET", "l", "tok", "PX", "600000"}, {"ZADD", "q", "1", "w"}, {"ZADD", "qd", ms(now + 600000), "w"}}
			}},
		{name: "LeaseAcquire", src: lua.LeaseAcquire, keys: []string{"hl"}, args: []string{"f", "tok", "60000"},
			setup: func(int64, string) [][]string {
				return [][]string{eval(lua.LeaseAcquire, []string{"hl"}, "other", "tok0", "600000")}
			}},
		{name: "LeaseRenew", src: lua.LeaseRenew, keys: []string{"hl"}, args: []string{"f", "tok", "60000"},
			setup: func(int64, string) [][]string {
				return [][]string{eval(lua.LeaseAcquire, []string{"hl"}, "f", "tok", "600000")}
			}},
		{name: "LeaseRelease", src: lua.LeaseRelease, keys: []string{"hl"}, args: []string{"f", "tok", "ch"},
			setup: func(int64, string) [][]string {
				return [][]string{eval(lua.LeaseAcquire, []string{"hl"}, "f", "tok", "600000")}
			}},
		{name: "LatchSet", src: lua.LatchSet, keys: []string{"k"}, args: []string{"reset", "gen2", "3", "60000", "ch"}, setup: latch},
		{name: "LatchCountDown", src: lua.LatchCountDown, keys: []string{"k"}, args: []string{"gen1", "60000", "ch"}, setup: latch},
		{name: "LatchRead", src: lua.LatchRead, keys: []string{"k"}, setup: latch, readOnly: true},
		{name: "LatchDelete", src: lua.LatchDelete, keys: []string{"k"}, args: []string{"gen1", "ch"}, setup: latch},
		{name: "RWLockAcquireRead", src: lua.RWLockAcquireRead, keys: []string{"h", "w"}, args: []string{"tok", "60000"}, setup: readers},
		{name: "RWLockAcquireRead", src: lua.RWLockAcquireRead, keys: []string{"h", "w", "g"}, args: []string{"tok", "60000", "1"}, setup: readers},
		{name: "RWLockAcquireWrite", src: lua.RWLockAcquireWrite, keys: []string{"h", "w"}, args: []string{"tok", "60000", "wid", "15000", "-1"}, setup: readers},
		{name: "RWLockAcquireWrite", src: lua.RWLockAcquireWrite, keys: []string{"h2", "w"}, args: []string{"tok", "60000", "wid2", "15000", "500"}, setup: waitingWriter},
		{name: "RWLockRelease", src: lua.RWLockRelease, keys: []string{"h"}, args: []string{"r:tok", "ch"}, setup: mine("r:tok")},
		{name: "RWLockRenew", src: lua.RWLockRenew, keys: []string{"h"}, args: []string{"r:tok", "60000"}, setup: mine("r:tok")},
		{name: "RWLockOwner", src: lua.RWLockOwner, keys: []string{"h"}, args: []string{"r:tok"}, setup: mine("r:tok"), readOnly: true, noErrors: true},
		{name: "RWLockLeave", src: lua.RWLockLeave, keys: []string{"h2", "w"}, args: []string{"wid", "w:tok2", "ch"}, setup: waitingWriter},
		{name: "SemaphoreAcquire", src: lua.SemaphoreAcquire, keys: []string{"s", "cap"}, args: []string{"tok", "3", "60000"}, setup: permits("other")},
		{name: "SemaphoreAcquire", src: lua.SemaphoreAcquire, keys: []string{"s", "cap", "g"}, args: []string{"tok", "3", "none"}, setup: permits("other")},
		{name: "SemaphoreRelease", src: lua.SemaphoreRelease, keys: []string{"s", "cap"}, args: []string{"tok", "ch"}, setup: permits("tok")},
		{name: "SemaphoreRenew", src: lua.SemaphoreRenew, keys: []string{"s", "cap"}, args: []string{"tok", "60000"}, setup: permits("tok")},
		{name: "SemaphoreVerify", src: lua.SemaphoreVerify, keys: []string{"s"}, args: []string{"tok"}, setup: permits("tok"), readOnly: true},
		{name: "SessionCreate", src: lua.SessionCreate, keys: []string{"new"}, args: []string{"60000", "1", "label"}, setup: session},
		{name: "SessionRenew", src: lua.SessionRenew, keys: []string{"sess"}, args: []string{"label", "ka1"}, setup: session},
		{name: "SessionGet", src: lua.SessionGet, keys: []string{"sess"}, args: []string{"label"}, setup: session, readOnly: true},
		{name: "SessionAttach", src: lua.SessionAttach, keys: []string{"sess"}, args: []string{"label", "g:tok2", "gid2", "10"}, setup: session},
		{name: "SessionClose", src: lua.SessionClose, keys: []string{"sess"}, args: []string{"label", ""}, setup: session},
		{name: "SessionQuota", src: lua.SessionQuota, keys: []string{"quota"}, args: []string{"sid", "5", "60000"},
			setup: func(now int64, _ string) [][]string {
				return [][]string{{"ZADD", "quota", ms(now + 600000), "other", "1", "expired"}}
			}},
		{name: "RateLimitFixed", src: lua.RateLimitFixed, keys: []string{"rf"}, args: []string{"1", "1", "10", "60000"},
			setup: func(int64, string) [][]string {
				return [][]string{eval(lua.RateLimitFixed, []string{"rf"}, "1", "1", "10", "600000")}
			}},
		{name: "RateLimitSliding", src: lua.RateLimitSliding, keys: []string{"rs"}, args: []string{"1", "1", "10", "60000", "10"},
			setup: func(int64, string) [][]string {
				return [][]string{eval(lua.RateLimitSliding, []string{"rs"}, "1", "1", "10", "600000", "10"), {"HSET", "rs", "1000", "1"}}
			}},
		{name: "RateLimitBucket", src: lua.RateLimitBucket, keys: []string{"rb"}, args: []string{"1", "1", "10", "1", "1000"},
			setup: func(int64, string) [][]string {
				return [][]string{eval(lua.RateLimitBucket, []string{"rb"}, "1", "1", "10", "1", "600000")}
			}},
		{name: "RedlockAcquire", src: lua.RedlockAcquire, keys: []string{"rl"},
			argsFor: func(runID string) []string { return []string{"tok", "60000", runID} }},
	}
}

// hostileArgs replace one argument at a time.
var hostileArgs = []string{"", "0", "-1", "1.5", "abc", "1e3", "0x10", " 5", "nan", "inf", "-inf",
	"99999999999999999999", "9223372036854775808", "3153600000001", "none", "\x00"}

// A Lua script is not a transaction: an error after a write leaves the
// write (the first test below shows it with a naive script). coordhost's
// scripts validate everything before their first write. This test calls
// every script in package lua on a state where it would write, with each
// argument replaced in turn by hostile values, with arguments missing,
// with each key holding a value of the wrong type and with keys that alias
// each other, and checks the one property that matters: whenever a
// script answers with an error, the data set is exactly as before (every
// key's type, value, expiry and hash-field expiries). The states hold
// entries the scripts prune (expired readers, permits, queue entries,
// sessions, segments), so a prune before a failing check would show. The
// read-only scripts must write nothing whatever they answer.
//
// It found two scripts that wrote before failing, fixed with it:
// lock_leave_fifo removed the waiter from the queue and then failed on a
// deadlines key of another type, and session_renew renewed the session
// and then failed on a missing keep-alive id.
func TestHazardScriptErrorsWriteNothing(t *testing.T) {
	kinds := []redistest.Kind{redistest.Redis80} // hash-field expiry, for the lease scripts
	if *long {
		kinds = redistest.Kinds()
	}
	covered := map[string]bool{}
	for _, sc := range scriptCases() {
		covered[sc.name] = true
	}
	for _, name := range luaScripts(t) {
		if !covered[name] {
			t.Errorf("lua.%s has no case in scriptCases", name)
		}
	}
	for _, k := range kinds {
		t.Run(k.String(), func(t *testing.T) {
			s := redistest.Start(t, redistest.WithKind(k))
			ctx := xtest.Ctx(t, 2*time.Minute)
			runID := infoField(t, s, "server", "run_id")
			total, errs := 0, 0
			for _, sc := range scriptCases() {
				args := sc.args
				if sc.argsFor != nil {
					args = sc.argsFor(runID)
				}
				n, e := hostileCalls(t, ctx, s, sc, args, runID)
				total, errs = total+n, errs+e
				if e == 0 && !sc.noErrors {
					t.Errorf("%s: no call answered with an error", sc.name)
				}
			}
			t.Logf("%s: %d calls, %d answered with an error, none of those wrote anything", k, total, errs)
		})
	}
}

// hostileCalls makes every hostile call of sc and returns how many it made
// and how many answered with an error.
func hostileCalls(t *testing.T, ctx context.Context, s *redistest.Server, sc scriptCase, args []string, runID string) (calls, errs int) {
	t.Helper()
	type call struct {
		what       string
		keys, args []string
		after      [][]string // run after the setup
	}
	var cs []call
	for i := range args {
		for _, v := range hostileArgs {
			a := slices.Clone(args)
			a[i] = v
			cs = append(cs, call{what: fmt.Sprintf("ARGV[%d]=%q", i+1, v), keys: sc.keys, args: a})
		}
		cs = append(cs, call{what: fmt.Sprintf("only %d arguments", i), keys: sc.keys, args: args[:i]})
	}
	for i, key := range sc.keys {
		for _, wrong := range [][]string{{"SET", key, "x"}, {"HSET", key, "f", "v"}, {"ZADD", key, "1", "m"}, {"RPUSH", key, "x"}} {
			cs = append(cs, call{what: fmt.Sprintf("KEYS[%d] a %s", i+1, wrong[0]), keys: sc.keys, args: args,
				after: [][]string{{"DEL", key}, wrong}})
		}
		for j := i + 1; j < len(sc.keys); j++ {
			k := slices.Clone(sc.keys)
			k[j] = k[i]
			cs = append(cs, call{what: fmt.Sprintf("KEYS[%d] is KEYS[%d]", j+1, i+1), keys: k, args: args})
		}
	}
	for _, c := range cs {
		if err := s.Do(ctx, "FLUSHALL").Error(); err != nil {
			t.Fatal(err)
		}
		now := serverMillis(t, ctx, s)
		var setup [][]string
		if sc.setup != nil {
			setup = sc.setup(now, runID)
		}
		for _, cmd := range append(setup, c.after...) {
			// WRONGTYPE: the hostile key breaks a setup script;
			// UNSUPPORTED: a lease on a server without hash-field
			// expiry (the calls must then fail writing nothing).
			if err := s.Do(ctx, cmd...).Error(); err != nil && !strings.Contains(err.Error(), "WRONGTYPE") && !strings.Contains(err.Error(), "COORDHOST_UNSUPPORTED") {
				t.Fatalf("%s: setup %q: %v", sc.name, cmd[:min(len(cmd), 3)], err)
			}
		}
		before := dataSet(t, ctx, s)
		err := s.Do(ctx, eval(sc.src, c.keys, c.args...)...).Error()
		calls++
		if err != nil {
			errs++
		} else if !sc.readOnly {
			continue
		}
		if after := dataSet(t, ctx, s); after != before {
			t.Errorf("%s with %s: answered %v after writing:\nbefore %s\nafter  %s", sc.name, c.what, err, before, after)
		}
	}
	return calls, errs
}

// luaScripts lists the exported string variables of package lua: its
// scripts.
func luaScripts(t *testing.T) []string {
	t.Helper()
	dir := filepath.Join("..", "..", "lua")
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pkgs {
		for path, f := range p.Files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			for _, d := range f.Decls {
				g, ok := d.(*ast.GenDecl)
				if !ok || g.Tok != token.VAR {
					continue
				}
				for _, spec := range g.Specs {
					for _, n := range spec.(*ast.ValueSpec).Names {
						if n.IsExported() {
							names = append(names, n.Name)
						}
					}
				}
			}
		}
	}
	if len(names) < 30 {
		t.Fatalf("found only %d scripts in %s: %v", len(names), dir, names)
	}
	slices.Sort(names)
	return names
}

// dataSet is every key with its type, DUMP, expiry and, for hashes on a
// server with hash-field expiry, every field's expiry: one string.
func dataSet(t *testing.T, ctx context.Context, s *redistest.Server) string {
	t.Helper()
	keys, err := s.Do(ctx, "KEYS", "*").AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		typ, _ := s.Do(ctx, "TYPE", k).ToString()
		dump, _ := s.Do(ctx, "DUMP", k).ToString()
		exp, _ := s.Do(ctx, "PEXPIRETIME", k).AsInt64()
		fmt.Fprintf(&b, "%s(%s) %q expires %d", k, typ, dump, exp)
		if typ == "hash" && s.Has(redistest.HashFieldExpiry) {
			fields, _ := s.Do(ctx, "HKEYS", k).AsStrSlice()
			slices.Sort(fields)
			for _, f := range fields {
				fe, _ := s.Do(ctx, "HPEXPIRETIME", k, "FIELDS", "1", f).ToAny()
				fmt.Fprintf(&b, " %s@%v", f, fe)
			}
		}
		b.WriteString("; ")
	}
	return b.String()
}

// serverMillis is the server's TIME in ms.
func serverMillis(t *testing.T, ctx context.Context, s *redistest.Server) int64 {
	t.Helper()
	v, err := s.Do(ctx, "TIME").AsStrSlice()
	if err != nil || len(v) != 2 {
		t.Fatalf("TIME: %v %v", v, err)
	}
	sec, _ := strconv.ParseInt(v[0], 10, 64)
	usec, _ := strconv.ParseInt(v[1], 10, 64)
	return sec*1000 + usec/1000
}

// infoField reads name from INFO section.
func infoField(t *testing.T, s *redistest.Server, section, name string) string {
	t.Helper()
	for line := range strings.Lines(s.MustCmd(t, "INFO", section)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	t.Fatalf("INFO %s has no %s", section, name)
	return ""
}

// What a naive script does, next to coordhost's, on the same call: each
// naive one writes, then fails (or "succeeds" destructively), and Redis
// keeps the write, since a script is not a transaction.
//
//   - a hash-field lease taken with HSET then HPEXPIRE: a bad lease, or a
//     Redis 7.0 without HPEXPIRE, leaves a field that never expires, a
//     lease nobody can take again;
//   - a fenced grant with INCR then SET NX PX: a bad lease burns a
//     fencing token and grants nothing;
//   - a renewal with PEXPIRE and a negative lease (a duration that
//     overflowed): Redis deletes the key and answers 1, so the "renewal"
//     frees the lock and reports success.
//
// coordhost's scripts answer COORDHOST_BADARG or COORDHOST_UNSUPPORTED
// and write nothing.
func TestHazardNaiveScriptLeavesPartialWrite(t *testing.T) {
	const (
		naiveLease = `redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('HPEXPIRE', KEYS[1], ARGV[3], 'FIELDS', 1, ARGV[1])
return 1`
		naiveFenced = `local fence = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
return fence`
		naiveRenew = `if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0`
	)
	cases := []struct {
		name         string
		kind         redistest.Kind
		setup        [][]string
		naive, ours  string
		keys, args   []string
		naiveErr     bool   // the naive script answers an error
		wantNaive    string // the naive script's data set contains this
		counter      string // or, when set, leaves this in the counter c
		oursErrorHas string
	}{
		{"lease with a bad ttl", redistest.Redis80, nil, naiveLease, lua.LeaseAcquire,
			[]string{"h"}, []string{"f", "tok", "abc"}, true, `f@[-1]`, "", "COORDHOST_BADARG"},
		{"lease on Redis 7.0 (no HPEXPIRE)", redistest.Redis70, nil, naiveLease, lua.LeaseAcquire,
			[]string{"h"}, []string{"f", "tok", "60000"}, true, `h(hash)`, "", "COORDHOST_UNSUPPORTED"},
		{"fenced grant with a bad lease", redistest.Redis70, [][]string{{"SET", "c", "41"}}, naiveFenced, lua.LockAcquire,
			[]string{"l", "c"}, []string{"tok", "-5"}, true, `c(string)`, "42", "COORDHOST_BADARG"},
		{"renewal with a negative lease", redistest.Redis70, [][]string{{"SET", "l", "tok", "PX", "60000"}}, naiveRenew, lua.LockRenew,
			[]string{"l"}, []string{"tok", "-1"}, false, ``, "", "COORDHOST_BADARG"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := redistest.Start(t, redistest.WithKind(tc.kind))
			ctx := xtest.Ctx(t, 10*time.Second)
			run := func(src string) (before, after string, reply any, err error) {
				if err := s.Do(ctx, "FLUSHALL").Error(); err != nil {
					t.Fatal(err)
				}
				for _, c := range tc.setup {
					s.MustCmd(t, c...)
				}
				before = dataSet(t, ctx, s)
				reply, err = s.Do(ctx, eval(src, tc.keys, tc.args...)...).ToAny()
				return before, dataSet(t, ctx, s), reply, err
			}
			before, after, reply, err := run(tc.naive)
			t.Logf("naive: answered %v %v\n  before %s\n  after  %s", reply, err, before, after)
			if (err != nil) != tc.naiveErr || after == before || !strings.Contains(after, tc.wantNaive) {
				t.Errorf("the naive script did not show the hazard")
			}
			if tc.counter != "" && s.MustCmd(t, "GET", "c") != tc.counter {
				t.Errorf("the naive fenced grant left the counter at %s, want %s", s.MustCmd(t, "GET", "c"), tc.counter)
			}
			if !tc.naiveErr && (reply != int64(1) || strings.Contains(after, "l(string)")) {
				t.Errorf("the naive renewal: %v, keys %s; want 1 and the lock gone", reply, after)
			}
			before, after, reply, err = run(tc.ours)
			t.Logf("coordhost's: answered %v %v", reply, err)
			if err == nil || !strings.Contains(err.Error(), tc.oursErrorHas) || after != before {
				t.Errorf("coordhost's script: %v %v\n  before %s\n  after  %s", reply, err, before, after)
			}
		})
	}
}
