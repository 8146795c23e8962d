package faulttest_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/coordhost/coordhost/internal/faulttest"
)

const ms = time.Millisecond

// op builders for hand-written histories (times in ms).
func acq(client int, call, ret time.Duration, out faulttest.LeaseOutput) faulttest.Op {
	return faulttest.Op{Client: client, Call: call * ms, Return: ret * ms, Ended: ret * ms,
		Input: faulttest.LeaseInput{Kind: faulttest.Acquire, Token: out.Token}, Output: out}
}

func granted(tok string, fence int64) faulttest.LeaseOutput {
	return faulttest.LeaseOutput{Result: faulttest.Granted, Token: tok, Fence: fence}
}

func settled(client int, call time.Duration, tok string, fence int64) faulttest.Op {
	return faulttest.Op{Client: client, Call: call * ms, Return: faulttest.Infinity, Ended: call * ms,
		Input:  faulttest.LeaseInput{Kind: faulttest.Acquire, Token: tok},
		Output: faulttest.LeaseOutput{Result: faulttest.Granted, Token: tok, Fence: fence, Settled: true}}
}

func refused(client int, call, ret time.Duration) faulttest.Op {
	return faulttest.Op{Client: client, Call: call * ms, Return: ret * ms, Ended: ret * ms,
		Input: faulttest.LeaseInput{Kind: faulttest.Acquire}, Output: faulttest.LeaseOutput{Result: faulttest.NotGranted}}
}

func rel(client int, call, ret time.Duration, tok string, res faulttest.LeaseResult) faulttest.Op {
	r := ret * ms
	if res == faulttest.Unknown {
		r = faulttest.Infinity
	}
	return faulttest.Op{Client: client, Call: call * ms, Return: r, Ended: ret * ms,
		Input: faulttest.LeaseInput{Kind: faulttest.Release, Token: tok}, Output: faulttest.LeaseOutput{Result: res}}
}

func TestHistoryLeaseModel(t *testing.T) {
	m := faulttest.LeaseModel{TTL: 100 * ms, Fencing: true, Contiguous: true}
	R, AR, NO, UNK := faulttest.Released, faulttest.AlreadyReleased, faulttest.NotOwned, faulttest.Unknown
	for _, tc := range []struct {
		name string
		ok   bool
		ops  []faulttest.Op
	}{
		{"sequential", true, []faulttest.Op{
			acq(0, 0, 1, granted("a", 1)), rel(0, 2, 3, "a", R), acq(1, 4, 5, granted("b", 2)), rel(1, 6, 7, "b", R)}},
		{"two holders", false, []faulttest.Op{
			acq(0, 0, 1, granted("a", 1)), acq(1, 2, 3, granted("b", 2)), rel(0, 4, 5, "a", R)}},
		{"fence goes back", false, []faulttest.Op{
			acq(0, 0, 1, granted("a", 2)), rel(0, 2, 3, "a", R), acq(1, 4, 5, granted("b", 1))}},
		{"fence repeats", false, []faulttest.Op{
			acq(0, 0, 1, granted("a", 1)), rel(0, 2, 3, "a", R), acq(1, 4, 5, granted("b", 1))}},
		{"fence gap (a grant missing from the history)", false, []faulttest.Op{
			acq(0, 0, 1, granted("a", 1)), rel(0, 2, 3, "a", R), acq(1, 4, 5, granted("b", 3))}},
		{"settled grant between its neighbours", true, []faulttest.Op{
			acq(0, 0, 1, granted("a", 1)), settled(1, 0, "b", 2), rel(0, 2, 3, "a", R), refused(2, 4, 5), acq(2, 6, 7, granted("c", 3))}},
		{"fence order decides the linearization", true, []faulttest.Op{
			acq(0, 0, 10, granted("a", 2)), rel(0, 11, 12, "a", R), acq(1, 1, 5, granted("b", 1)), rel(1, 6, 7, "b", R)}},
		{"regrant after TTL", true, []faulttest.Op{
			acq(0, 0, 1, granted("a", 1)), acq(1, 150, 151, granted("b", 2)), rel(0, 160, 161, "a", NO), rel(1, 170, 171, "b", R)}},
		{"regrant before TTL", false, []faulttest.Op{
			acq(0, 0, 1, granted("a", 1)), acq(1, 50, 51, granted("b", 2))}},
		{"expiry moves time forward", false, []faulttest.Op{
			// b's grant (unknown return) can only replace a after 95ms,
			// so c (fence 3, returned at 60ms) cannot come after it.
			acq(0, 0, 1, granted("a", 1)), settled(1, 10, "b", 2), acq(2, 50, 60, granted("c", 3))}},
		{"settled grant vanishes", true, []faulttest.Op{
			settled(0, 0, "a", 1), acq(1, 10, 11, granted("b", 2)), rel(1, 12, 13, "b", R)}},
		{"settled grant explains a refusal", true, []faulttest.Op{
			settled(0, 0, "a", 1), refused(1, 10, 11)}},
		{"refused while free", false, []faulttest.Op{
			acq(0, 0, 1, granted("a", 1)), rel(0, 2, 3, "a", R), refused(1, 4, 5)}},
		{"released by a non-owner", false, []faulttest.Op{
			acq(0, 0, 1, granted("a", 1)), rel(1, 2, 3, "b", R)}},
		{"not owned while owning", false, []faulttest.Op{
			acq(0, 0, 1, granted("a", 1)), rel(0, 2, 3, "a", NO)}},
		{"unknown release frees", true, []faulttest.Op{
			acq(0, 0, 1, granted("a", 1)), rel(0, 2, 3, "a", UNK), acq(1, 4, 5, granted("b", 2)), refused(2, 6, 7)}},
		{"unknown release may not have run", true, []faulttest.Op{
			acq(0, 0, 1, granted("a", 1)), rel(0, 2, 3, "a", UNK), refused(1, 4, 5), rel(0, 6, 7, "a", R), acq(1, 8, 9, granted("b", 2))}},
		{"unknown release takes effect only after its call", false, []faulttest.Op{
			acq(0, 0, 1, granted("a", 1)), rel(0, 50, 51, "a", UNK), acq(1, 10, 20, granted("b", 2))}},
		{"unknown release then already released", true, []faulttest.Op{
			acq(0, 0, 1, granted("a", 1)), rel(0, 2, 3, "a", UNK), rel(0, 5, 6, "a", AR), acq(1, 7, 8, granted("b", 2))}},
		{"unknown release moves time forward", false, []faulttest.Op{
			acq(0, 0, 1, granted("a", 1)), rel(0, 50, 51, "a", UNK), acq(1, 10, 60, granted("b", 2)),
			rel(1, 61, 62, "b", R), acq(2, 20, 40, granted("c", 3))}},
		{"vanished within TTL", false, []faulttest.Op{
			acq(0, 0, 1, granted("a", 1)), rel(0, 2, 3, "a", AR)}},
		{"expired after TTL", true, []faulttest.Op{
			acq(0, 0, 1, granted("a", 1)), rel(0, 200, 201, "a", AR), acq(1, 210, 211, granted("b", 2))}},
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

func TestHistorySettleLeases(t *testing.T) {
	unknown := func(client int, call, ended time.Duration, tok string) faulttest.Op {
		return faulttest.Op{Client: client, Call: call * ms, Return: faulttest.Infinity, Ended: ended * ms,
			Input: faulttest.LeaseInput{Kind: faulttest.Acquire, Token: tok}, Output: faulttest.LeaseOutput{Result: faulttest.Unknown}}
	}
	ops := []faulttest.Op{
		acq(0, 0, 1, granted("a", 1)),
		unknown(1, 2, 5, "b"),
		unknown(2, 3, 6, "c"),
		unknown(3, 4, 7, ""),
		rel(0, 8, 9, "a", faulttest.Unknown),
	}
	grants, err := faulttest.ParseGrants([]string{"a 1", "b 2"})
	if err != nil {
		t.Fatal(err)
	}
	out, st, err := faulttest.SettleLeases(ops, grants, true)
	if err != nil {
		t.Fatal(err)
	}
	if st != (faulttest.Settlement{Grants: 2, UnknownAcquires: 3, SettledGranted: 1, SettledNoGrant: 2, UnknownReleases: 1}) {
		t.Fatalf("settlement %+v", st)
	}
	if o := out[1].Output.(faulttest.LeaseOutput); o != (faulttest.LeaseOutput{Result: faulttest.Granted, Token: "b", Fence: 2, Settled: true}) || out[1].Return != faulttest.Infinity {
		t.Fatalf("b settled as %+v, return %v", o, out[1].Return)
	}
	for _, i := range []int{2, 3} {
		if o := out[i].Output.(faulttest.LeaseOutput); o.Result != faulttest.NoGrant || out[i].Return != out[i].Ended {
			t.Fatalf("op %d settled as %+v, return %v", i, o, out[i].Return)
		}
	}
	if ops[1].Output.(faulttest.LeaseOutput).Result != faulttest.Unknown {
		t.Fatal("SettleLeases changed its input")
	}
	if res, err := (faulttest.LeaseModel{TTL: time.Second, Fencing: true}).Check(out, 10*time.Second); err != nil || res != porcupine.Ok {
		t.Fatalf("check: %v, %v", res, err)
	}
	if _, err := (faulttest.LeaseModel{TTL: time.Second}).Check(ops, time.Second); err == nil {
		t.Fatal("an unsettled acquire was checked")
	}

	for _, tc := range []struct {
		name, want string
		log        []string
	}{
		{"known grant missing", "lacks", []string{"b 2"}},
		{"fence mismatch", "grant log says", []string{"a 3", "b 4"}},
		{"foreign grant", "no recorded acquire", []string{"a 1", "b 2", "z 3"}},
		{"fence order", "strictly increasing", []string{"b 2", "a 1"}},
		{"duplicate", "twice", []string{"a 1", "a 2"}},
	} {
		grants, err := faulttest.ParseGrants(tc.log)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := faulttest.SettleLeases(ops, grants, true); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
	if _, err := faulttest.ParseGrants([]string{"nospace"}); err == nil {
		t.Error("ParseGrants accepted an entry without a fence field")
	}
}

func TestHistoryDefiniteOverlaps(t *testing.T) {
	R := faulttest.Released
	clean := []faulttest.Op{acq(0, 0, 1, granted("a", 1)), rel(0, 5, 6, "a", R), acq(1, 2, 7, granted("b", 2)), rel(1, 8, 9, "b", R)}
	if o := faulttest.DefiniteOverlaps(clean); len(o) != 0 {
		t.Fatalf("clean history: %v", o)
	}
	bad := []faulttest.Op{acq(0, 0, 1, granted("a", 1)), acq(1, 2, 3, granted("b", 2)), rel(0, 5, 6, "a", R), rel(1, 8, 9, "b", R)}
	o := faulttest.DefiniteOverlaps(bad)
	if len(o) != 1 || o[0].From != 3*ms || o[0].To != 5*ms {
		t.Fatalf("overlaps %v", o)
	}
	t.Log(o[0])
}

func TestHistoryRecorder(t *testing.T) {
	h := faulttest.NewHistory()
	p := h.Begin(1, "in")
	time.Sleep(time.Millisecond)
	p.SetInput("in2")
	p.Return("out")
	q := h.Begin(2, "x")
	q.Unknown(nil, context0{})
	ops := h.Ops()
	if len(ops) != 2 || h.Len() != 2 {
		t.Fatalf("%d ops", len(ops))
	}
	if ops[0].Input != "in2" || ops[0].Output != "out" || ops[0].Return <= ops[0].Call || ops[0].Unknown() {
		t.Fatalf("op 0 %+v", ops[0])
	}
	if !ops[1].Unknown() || ops[1].Ended < ops[1].Call || ops[1].Err == nil {
		t.Fatalf("op 1 %+v", ops[1])
	}
}

type context0 struct{}

func (context0) Error() string { return "lost" }

// TestHistoryFile round-trips a history through WriteHistory and
// ReadLeaseHistory; with $COORDHOST_FAULT_HISTORY set to a file a failed run
// wrote, it re-checks that history (for study, e.g. with a longer timeout).
func TestHistoryFile(t *testing.T) {
	m := faulttest.LeaseModel{TTL: 100 * ms, Fencing: true, Contiguous: true}
	ops := []faulttest.Op{acq(0, 0, 1, granted("a", 1)), settled(1, 0, "b", 2), rel(0, 2, 3, "a", faulttest.Unknown)}
	ops[2].Err = context0{}
	var buf strings.Builder
	if err := m.WriteHistory(&buf, ops); err != nil {
		t.Fatal(err)
	}
	m2, ops2, err := faulttest.ReadLeaseHistory(strings.NewReader(buf.String()))
	if err != nil {
		t.Fatal(err)
	}
	if m2 != m || len(ops2) != len(ops) || ops2[1].Return != faulttest.Infinity || ops2[1].Output != ops[1].Output || ops2[2].Err.Error() != "lost" {
		t.Fatalf("round trip: %+v %+v", m2, ops2)
	}
	path := os.Getenv("COORDHOST_FAULT_HISTORY")
	if path == "" {
		return
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, ops, err = faulttest.ReadLeaseHistory(f)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	res, err := m.Check(ops, 10*time.Minute)
	t.Logf("%s: %d ops, model %+v: %v in %v (%v)", path, len(ops), m, res, time.Since(start), err)
}
