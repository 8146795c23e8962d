package faulttest_test

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/coordhost/coordhost/internal/faulttest"
)

// lop is a latch op called at call and returned at ret (ms); ret < 0
// means an unknown outcome.
func lop(client int, call, ret time.Duration, in faulttest.LatchInput, out faulttest.LatchOutput) faulttest.Op {
	r := ret * ms
	if ret < 0 {
		r, out.Unknown = faulttest.Infinity, true
	}
	return faulttest.Op{Client: client, Call: call * ms, Return: r, Ended: max(call, ret) * ms, Input: in, Output: out}
}

func lcreate(c int, call, ret time.Duration, g string, n int64, exists bool) faulttest.Op {
	return lop(c, call, ret, faulttest.LatchInput{Kind: faulttest.LatchCreate, Key: "k", Gen: g, Count: n}, faulttest.LatchOutput{Exists: exists})
}

func lreset(c int, call, ret time.Duration, g string, n int64) faulttest.Op {
	return lop(c, call, ret, faulttest.LatchInput{Kind: faulttest.LatchReset, Key: "k", Gen: g, Count: n}, faulttest.LatchOutput{})
}

func ldown(c int, call, ret time.Duration, g string, n int64) faulttest.Op {
	return lop(c, call, ret, faulttest.LatchInput{Kind: faulttest.LatchCountDown, Key: "k", Gen: g}, faulttest.LatchOutput{N: n})
}

func ldownCompleted(c int, call, ret time.Duration, g string) faulttest.Op {
	return lop(c, call, ret, faulttest.LatchInput{Kind: faulttest.LatchCountDown, Key: "k", Gen: g}, faulttest.LatchOutput{Completed: true})
}

func lwait(c int, call, ret time.Duration, g string, ok bool) faulttest.Op {
	return lop(c, call, ret, faulttest.LatchInput{Kind: faulttest.LatchWait, Key: "k", Gen: g}, faulttest.LatchOutput{OK: ok})
}

func lcount(c int, call, ret time.Duration, g string, n int64) faulttest.Op {
	return lop(c, call, ret, faulttest.LatchInput{Kind: faulttest.LatchCount, Key: "k", Gen: g}, faulttest.LatchOutput{N: n})
}

func ljoin(c int, call, ret time.Duration, g string) faulttest.Op {
	out := faulttest.LatchOutput{Gen: g, NotFound: g == ""}
	return lop(c, call, ret, faulttest.LatchInput{Kind: faulttest.LatchJoin, Key: "k"}, out)
}

func ldelete(c int, call, ret time.Duration, g string, ok bool) faulttest.Op {
	return lop(c, call, ret, faulttest.LatchInput{Kind: faulttest.LatchDelete, Key: "k", Gen: g}, faulttest.LatchOutput{OK: ok})
}

func TestHistoryLatchModel(t *testing.T) {
	m := faulttest.LatchModel{}
	for _, tc := range []struct {
		name string
		ok   bool
		ops  []faulttest.Op
	}{
		{"sequential", true, []faulttest.Op{
			lcreate(0, 0, 1, "a", 2, false), lwait(1, 2, 20, "a", true), ldown(0, 3, 4, "a", 1), lcount(0, 5, 6, "a", 1),
			ldown(2, 7, 8, "a", 0), ldownCompleted(0, 9, 10, "a"), ljoin(0, 21, 22, "a"), lcreate(0, 23, 24, "b", 1, true)}},
		{"wait true before zero", false, []faulttest.Op{
			lcreate(0, 0, 1, "a", 2, false), lwait(1, 2, 5, "a", true), ldown(0, 3, 4, "a", 1), ldown(0, 6, 7, "a", 0)}},
		{"wait true overlapping the last count-down", true, []faulttest.Op{
			lcreate(0, 0, 1, "a", 1, false), lwait(1, 2, 5, "a", true), ldown(0, 4, 6, "a", 0)}},
		{"wait true explained by an unknown count-down", true, []faulttest.Op{
			lcreate(0, 0, 1, "a", 1, false), ldown(0, 2, -1, "a", 0), lwait(1, 3, 5, "a", true)}},
		{"unknown count-down that never ran", true, []faulttest.Op{
			lcreate(0, 0, 1, "a", 2, false), ldown(0, 2, -1, "a", 0), lcount(1, 3, 4, "a", 2)}},
		{"duplicate remaining count", false, []faulttest.Op{
			lcreate(0, 0, 1, "a", 3, false), ldown(0, 2, 5, "a", 2), ldown(1, 2, 5, "a", 2)}},
		{"count below zero", false, []faulttest.Op{
			lcreate(0, 0, 1, "a", 1, false), ldown(0, 2, 3, "a", 0), ldown(0, 4, 5, "a", -1)}},
		{"old generation counts down the new", false, []faulttest.Op{
			lcreate(0, 0, 1, "a", 2, false), lreset(1, 2, 3, "b", 2), ldown(0, 4, 5, "a", 1)}},
		{"old generation refused", true, []faulttest.Op{
			lcreate(0, 0, 1, "a", 2, false), lreset(1, 2, 3, "b", 2), ldown(0, 4, 5, "a", -1), lwait(2, 1, 6, "a", false), lcount(1, 7, 8, "b", 2)}},
		{"replaced waiter says true", false, []faulttest.Op{
			lcreate(0, 0, 1, "a", 2, false), lreset(1, 2, 3, "b", 2), lwait(2, 4, 5, "a", true)}},
		{"completed then replaced: done", true, []faulttest.Op{
			lcreate(0, 0, 1, "a", 1, false), ldown(0, 2, 3, "a", 0), lreset(1, 4, 5, "b", 2), lcount(2, 6, 7, "a", 0), lwait(2, 8, 9, "a", true)}},
		{"completed then replaced: false is wrong", false, []faulttest.Op{
			lcreate(0, 0, 1, "a", 1, false), ldown(0, 2, 3, "a", 0), lreset(1, 4, 5, "b", 2), lwait(2, 6, 7, "a", false)}},
		{"an incomplete replaced generation keeps the last completion", true, []faulttest.Op{
			lcreate(0, 0, 1, "a", 1, false), ldown(0, 2, 3, "a", 0), lreset(1, 4, 5, "b", 2), lreset(1, 6, 7, "c", 2),
			lwait(2, 8, 9, "a", true), lcount(2, 10, 11, "a", 0), lwait(2, 12, 13, "b", false)}},
		{"a newer completion replaces the last one", true, []faulttest.Op{
			lcreate(0, 0, 1, "a", 1, false), ldown(0, 2, 3, "a", 0), lreset(1, 4, 5, "b", 1), ldown(0, 6, 7, "b", 0),
			lreset(1, 8, 9, "c", 2), lwait(2, 10, 11, "a", false), lcount(2, 12, 13, "a", -1), lcount(2, 12, 13, "b", 0),
			lwait(3, 14, 15, "a", true)}},
		{"join finds a replaced generation", false, []faulttest.Op{
			lcreate(0, 0, 1, "a", 1, false), lreset(1, 2, 3, "b", 1), ljoin(2, 4, 5, "a")}},
		{"create over a latch", false, []faulttest.Op{
			lcreate(0, 0, 1, "a", 1, false), lcreate(1, 2, 3, "b", 1, false)}},
		{"unknown create explains a join", true, []faulttest.Op{
			lcreate(0, 0, -1, "a", 3, false), ljoin(1, 5, 6, "a")}},
		{"delete", true, []faulttest.Op{
			lcreate(0, 0, 1, "a", 2, false), ldelete(0, 2, 3, "a", true), ljoin(1, 4, 5, ""), ldown(0, 6, 7, "a", -1),
			lwait(1, 8, 9, "a", false), ldelete(0, 10, 11, "a", false), lcreate(1, 12, 13, "b", 1, false)}},
		{"deleted latch counted down", false, []faulttest.Op{
			lcreate(0, 0, 1, "a", 2, false), ldelete(0, 2, 3, "a", true), ldown(0, 4, 5, "a", 1)}},
		{"wait true for a generation created complete", true, []faulttest.Op{
			lreset(0, 0, 1, "a", 0), lwait(1, 2, 3, "a", true), ldownCompleted(0, 4, 5, "a")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := m.Check(tc.ops, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if want := map[bool]porcupine.CheckResult{true: porcupine.Ok, false: porcupine.Illegal}[tc.ok]; res != want {
				t.Fatalf("got %v, want %v", res, want)
			}
		})
	}
}

func TestEarlyWakes(t *testing.T) {
	ops := []faulttest.Op{
		lcreate(0, 0, 1, "a", 2, false),
		ldown(0, 2, 3, "a", 1),
		lwait(1, 2, 4, "a", true), // one of two count-downs called
		ldown(0, 5, -1, "a", 0),
		lwait(1, 6, 7, "a", true), // the unknown one counts
		lwait(1, 6, 7, "b", true), // unknown generation: skipped
	}
	early := faulttest.EarlyWakes(ops)
	if len(early) != 1 || early[0].Wait.Return != 4*ms {
		t.Fatalf("early wakes %v", early)
	}
	t.Log(early[0])
}

func TestLatchOperationsLeaveOutUnknownReads(t *testing.T) {
	ops := []faulttest.Op{
		lcreate(0, 0, 1, "a", 2, false),
		lcreate(1, 0, -1, "", 2, false), // sent nothing
		lwait(1, 2, -1, "a", false),     // timed out
		lcount(1, 2, -1, "a", 0),
		ldown(0, 3, -1, "a", 0),
	}
	pops, err := faulttest.LatchModel{}.Operations(ops)
	if err != nil {
		t.Fatal(err)
	}
	if len(pops) != 2 {
		t.Fatalf("%d operations kept, want the create and the unknown count-down", len(pops))
	}
}
