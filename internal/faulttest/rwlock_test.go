package faulttest_test

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/coordhost/coordhost/internal/faulttest"
)

// rw op builders for hand-written histories (times in ms).
func rwAcq(client int, mode faulttest.RWMode, call, ret time.Duration, tok string) faulttest.Op {
	return faulttest.Op{Client: client, Call: call * ms, Return: ret * ms, Ended: ret * ms,
		Input:  faulttest.RWInput{Kind: faulttest.Acquire, Mode: mode, Token: tok},
		Output: faulttest.RWOutput{Result: faulttest.Granted, Token: tok}}
}

func rwRefused(client int, mode faulttest.RWMode, call, ret time.Duration) faulttest.Op {
	return faulttest.Op{Client: client, Call: call * ms, Return: ret * ms, Ended: ret * ms,
		Input: faulttest.RWInput{Kind: faulttest.Acquire, Mode: mode}, Output: faulttest.RWOutput{Result: faulttest.NotGranted}}
}

func rwSettled(client int, mode faulttest.RWMode, call time.Duration, tok string) faulttest.Op {
	return faulttest.Op{Client: client, Call: call * ms, Return: faulttest.Infinity, Ended: call * ms,
		Input:  faulttest.RWInput{Kind: faulttest.Acquire, Mode: mode, Token: tok},
		Output: faulttest.RWOutput{Result: faulttest.Granted, Token: tok, Settled: true}}
}

func rwRel(client int, mode faulttest.RWMode, call, ret time.Duration, tok string, res faulttest.LeaseResult) faulttest.Op {
	r := ret * ms
	if res == faulttest.Unknown {
		r = faulttest.Infinity
	}
	return faulttest.Op{Client: client, Call: call * ms, Return: r, Ended: ret * ms,
		Input: faulttest.RWInput{Kind: faulttest.Release, Mode: mode, Token: tok}, Output: faulttest.RWOutput{Result: res}}
}

func TestHistoryRWModel(t *testing.T) {
	m := faulttest.RWModel{TTL: 100 * ms}
	R, W := faulttest.RWRead, faulttest.RWWrite
	REL, AR, NO, UNK := faulttest.Released, faulttest.AlreadyReleased, faulttest.NotOwned, faulttest.Unknown
	for _, tc := range []struct {
		name string
		ok   bool
		ops  []faulttest.Op
	}{
		{"readers share", true, []faulttest.Op{
			rwAcq(0, R, 0, 1, "a"), rwAcq(1, R, 2, 3, "b"), rwRel(0, R, 4, 5, "a", REL), rwRel(1, R, 6, 7, "b", REL)}},
		{"writer after readers", true, []faulttest.Op{
			rwAcq(0, R, 0, 1, "a"), rwRel(0, R, 2, 3, "a", REL), rwAcq(1, W, 4, 5, "w"), rwRel(1, W, 6, 7, "w", REL)}},
		{"reader while a writer holds", false, []faulttest.Op{
			rwAcq(0, W, 0, 1, "w"), rwAcq(1, R, 2, 3, "a"), rwRel(0, W, 4, 5, "w", REL)}},
		{"writer while a reader holds", false, []faulttest.Op{
			rwAcq(0, R, 0, 1, "a"), rwAcq(1, W, 2, 3, "w"), rwRel(0, R, 4, 5, "a", REL)}},
		{"two writers", false, []faulttest.Op{
			rwAcq(0, W, 0, 1, "w"), rwAcq(1, W, 2, 3, "x")}},
		{"reader refused while free", false, []faulttest.Op{
			rwAcq(0, W, 0, 1, "w"), rwRel(0, W, 2, 3, "w", REL), rwRefused(1, R, 4, 5)}},
		{"reader refused by a writer", true, []faulttest.Op{
			rwAcq(0, W, 0, 1, "w"), rwRefused(1, R, 2, 3), rwRel(0, W, 4, 5, "w", REL)}},
		{"writer refused by a reader", true, []faulttest.Op{
			rwAcq(0, R, 0, 1, "a"), rwRefused(1, W, 2, 3), rwRel(0, R, 4, 5, "a", REL)}},
		{"writer refused while free", false, []faulttest.Op{
			rwAcq(0, R, 0, 1, "a"), rwRel(0, R, 2, 3, "a", REL), rwRefused(1, W, 4, 5)}},
		{"overlapping calls linearize", true, []faulttest.Op{
			rwAcq(0, W, 0, 10, "w"), rwRel(0, W, 11, 12, "w", REL), rwAcq(1, R, 1, 5, "a"), rwRel(1, R, 6, 7, "a", REL)}},
		{"writer after the readers' TTL", true, []faulttest.Op{
			rwAcq(0, R, 0, 1, "a"), rwAcq(1, R, 10, 11, "b"), rwAcq(2, W, 150, 151, "w"), rwRel(0, R, 160, 161, "a", NO)}},
		{"writer before the last reader's TTL", false, []faulttest.Op{
			rwAcq(0, R, 0, 1, "a"), rwAcq(1, R, 60, 61, "b"), rwAcq(2, W, 120, 121, "w")}},
		{"settled reader vanishes for a writer", true, []faulttest.Op{
			rwSettled(0, R, 0, "a"), rwAcq(1, W, 10, 11, "w"), rwRel(1, W, 12, 13, "w", REL)}},
		{"settled writer explains a refused reader", true, []faulttest.Op{
			rwSettled(0, W, 0, "w"), rwRefused(1, R, 10, 11)}},
		{"unknown release frees", true, []faulttest.Op{
			rwAcq(0, W, 0, 1, "w"), rwRel(0, W, 2, 3, "w", UNK), rwAcq(1, R, 4, 5, "a")}},
		{"unknown release takes effect only after its call", false, []faulttest.Op{
			rwAcq(0, W, 0, 1, "w"), rwRel(0, W, 50, 51, "w", UNK), rwAcq(1, R, 10, 20, "a")}},
		{"already released: nobody else holds", true, []faulttest.Op{
			rwAcq(0, R, 0, 1, "a"), rwRel(0, R, 200, 201, "a", AR)}},
		{"already released within the TTL", false, []faulttest.Op{
			rwAcq(0, R, 0, 1, "a"), rwRel(0, R, 2, 3, "a", AR)}},
		{"already released while another reader holds", false, []faulttest.Op{
			rwAcq(0, R, 0, 1, "a"), rwAcq(1, R, 150, 151, "b"), rwRel(0, R, 200, 201, "a", AR)}},
		{"not owned: expired, another reader holds", true, []faulttest.Op{
			rwAcq(0, R, 0, 1, "a"), rwAcq(1, R, 150, 151, "b"), rwRel(0, R, 200, 201, "a", NO)}},
		{"not owned while owning", false, []faulttest.Op{
			rwAcq(0, R, 0, 1, "a"), rwAcq(1, R, 2, 3, "b"), rwRel(0, R, 4, 5, "a", NO)}},
		{"not owned with nobody else", false, []faulttest.Op{
			rwAcq(0, R, 0, 1, "a"), rwRel(0, R, 200, 201, "a", NO)}},
		{"released by a stranger", false, []faulttest.Op{
			rwAcq(0, R, 0, 1, "a"), rwRel(1, R, 2, 3, "b", REL)}},
		{"release in the wrong mode", false, []faulttest.Op{
			rwAcq(0, R, 0, 1, "a"), rwRel(0, W, 2, 3, "a", REL)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := m.Check(tc.ops, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			want := porcupine.Illegal
			if tc.ok {
				want = porcupine.Ok
			}
			if res != want {
				t.Fatalf("check = %v, want %v", res, want)
			}
		})
	}
}

func TestHistorySettleRW(t *testing.T) {
	unknown := func(client int, mode faulttest.RWMode, call, ended time.Duration, tok string) faulttest.Op {
		return faulttest.Op{Client: client, Call: call * ms, Return: faulttest.Infinity, Ended: ended * ms,
			Input: faulttest.RWInput{Kind: faulttest.Acquire, Mode: mode, Token: tok}, Output: faulttest.RWOutput{Result: faulttest.Unknown}}
	}
	R, W := faulttest.RWRead, faulttest.RWWrite
	ops := []faulttest.Op{
		rwAcq(0, R, 0, 1, "a"),
		unknown(1, W, 2, 5, "b"),
		unknown(2, R, 3, 6, "c"),
		unknown(3, R, 4, 7, ""),
		rwRel(0, R, 8, 9, "a", faulttest.Unknown),
	}
	out, st, err := faulttest.SettleRW(ops, []string{"r:a", "w:b"})
	if err != nil {
		t.Fatal(err)
	}
	if st != (faulttest.Settlement{Grants: 2, UnknownAcquires: 3, SettledGranted: 1, SettledNoGrant: 2, UnknownReleases: 1}) {
		t.Fatalf("settlement %+v", st)
	}
	if o := out[1].Output.(faulttest.RWOutput); o != (faulttest.RWOutput{Result: faulttest.Granted, Token: "b", Settled: true}) || out[1].Return != faulttest.Infinity {
		t.Fatalf("b settled as %+v, return %v", o, out[1].Return)
	}
	for _, i := range []int{2, 3} {
		if o := out[i].Output.(faulttest.RWOutput); o.Result != faulttest.NoGrant || out[i].Return != out[i].Ended {
			t.Fatalf("op %d settled as %+v", i, o)
		}
	}
	// Disagreements are errors: a grant in the wrong mode, a logged grant
	// nobody sent, a known grant missing from the log, a duplicate.
	for name, grants := range map[string][]string{
		"wrong mode":       {"r:a", "r:b"},
		"unknown sender":   {"r:a", "w:b", "w:zz"},
		"known grant lost": {"w:b"},
		"duplicate":        {"r:a", "r:a", "w:b"},
		"not a member":     {"a", "w:b"},
	} {
		if _, _, err := faulttest.SettleRW(ops, grants); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestRWDefiniteOverlaps(t *testing.T) {
	R, W, REL := faulttest.RWRead, faulttest.RWWrite, faulttest.Released
	ops := []faulttest.Op{
		rwAcq(0, R, 0, 1, "a"), rwAcq(1, R, 2, 3, "b"), // readers share: fine
		rwAcq(2, W, 4, 5, "w"), // overlaps a and b
		rwRel(0, R, 10, 11, "a", REL), rwRel(1, R, 12, 13, "b", REL), rwRel(2, W, 14, 15, "w", REL),
	}
	if got := faulttest.RWDefiniteOverlaps(ops); len(got) != 2 {
		t.Fatalf("%d overlaps, want 2: %v", len(got), got)
	}
}
