package faulttest

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// LatchKind is the kind of a countdown-latch operation.
type LatchKind uint8

// The latch operations (package latch's calls).
const (
	LatchCreate LatchKind = iota + 1
	LatchReset
	LatchJoin
	LatchCountDown
	LatchCount
	LatchWait
	LatchDelete
)

func (k LatchKind) String() string {
	switch k {
	case LatchCreate:
		return "Create"
	case LatchReset:
		return "Reset"
	case LatchJoin:
		return "Join"
	case LatchCountDown:
		return "CountDown"
	case LatchCount:
		return "Count"
	case LatchWait:
		return "Wait"
	case LatchDelete:
		return "Delete"
	}
	return fmt.Sprintf("LatchKind(%d)", int(k))
}

// LatchInput is the Input of a latch Op.
type LatchInput struct {
	Kind LatchKind
	Key  string
	// Gen is the generation the operation acts on (CountDown, Count, Wait,
	// Delete) or sets (Create, Reset: the token the call sent; "" when it
	// sent none).
	Gen string
	// Count is the count Create and Reset set.
	Count int64
}

// LatchOutput is the Output of a latch Op.
type LatchOutput struct {
	// Unknown: a write whose outcome is unknown (its Return is Infinity:
	// it may have taken effect at any time after its call, or never).
	Unknown bool
	// Exists: Create refused, a latch was there. NotFound: Join found none.
	Exists, NotFound bool
	// Completed: CountDown refused, the generation's count was 0.
	Completed bool
	// Gen is the generation Join found.
	Gen string
	// N is what CountDown (remaining, or -1) and Count (count, 0 for a
	// completed generation, or -1) returned.
	N int64
	// OK is Wait's and Delete's boolean result.
	OK bool
}

// LatchModel is a porcupine model of countdown latches, partitioned by
// key. Its state per key is the latch as package latch stores it (current
// generation and count, and done: the most recent replaced generation that
// had completed) plus the set of every generation whose count ever
// reached zero.
//
// Rules, in the linearized order:
//   - Create: Exists iff a latch is there; else it sets the generation.
//   - Reset: sets the generation; done becomes the replaced generation if
//     its count was 0, else carries over (nothing when there was no latch).
//   - CountDown(g): -1 when g is not current (no change); Completed when
//     its count is 0 (no change); else the count drops by one and the
//     result is the new count.
//   - Count(g): the count when g is current, 0 when g is done, else -1.
//   - Join: NotFound iff no latch; else the current generation.
//   - Delete(g): true (and the latch is gone) iff g is current.
//   - Wait(g) true: g's count reached zero at or before this point. This
//     is the safety property: no Wait returns true before the count
//     reached zero.
//   - Wait(g) false: g is neither current nor done.
//
// Writes with an unknown outcome apply their effect wherever porcupine
// places them after their call (an effect that never happened is the same
// as one placed after every other operation). Reads whose outcome is
// unknown (a Wait that timed out) constrain nothing and are left out.
// Expiry is not modelled: a fault run must use TTLs longer than the run.
type LatchModel struct{}

type latchState struct {
	Gen   string // "" when there is no latch
	Count int64
	Done  string
	// Completed is every generation whose count reached zero, sorted.
	Completed string // joined by ","
}

func (s latchState) completed(g string) bool {
	for c := range strings.SplitSeq(s.Completed, ",") {
		if c == g {
			return true
		}
	}
	return false
}

func (s latchState) complete(g string) latchState {
	if s.completed(g) {
		return s
	}
	cs := []string{g}
	if s.Completed != "" {
		cs = append(cs, strings.Split(s.Completed, ",")...)
	}
	slices.Sort(cs)
	s.Completed = strings.Join(cs, ",")
	return s
}

// set is Create's and Reset's effect.
func (s latchState) set(g string, n int64) latchState {
	switch {
	case s.Gen == "":
		s.Done = ""
	case s.Count == 0:
		s.Done = s.Gen
	}
	s.Gen, s.Count = g, n
	if n == 0 {
		s = s.complete(g)
	}
	return s
}

func (LatchModel) step(s latchState, in LatchInput, out LatchOutput) (bool, latchState) {
	switch in.Kind {
	case LatchCreate:
		switch {
		case out.Unknown:
			if s.Gen == "" {
				return true, s.set(in.Gen, in.Count)
			}
			return true, s
		case out.Exists:
			return s.Gen != "", s
		}
		return s.Gen == "", s.set(in.Gen, in.Count)
	case LatchReset:
		return true, s.set(in.Gen, in.Count)
	case LatchCountDown:
		var n int64
		completed := false
		next := s
		switch {
		case s.Gen != in.Gen:
			n = -1
		case s.Count == 0:
			completed = true
		default:
			next.Count--
			n = next.Count
			if n == 0 {
				next = next.complete(in.Gen)
			}
		}
		if out.Unknown {
			return true, next
		}
		return out.Completed == completed && (completed || out.N == n), next
	case LatchCount:
		want := int64(-1)
		switch {
		case s.Gen == in.Gen:
			want = s.Count
		case s.Gen != "" && s.Done == in.Gen:
			want = 0
		}
		return out.N == want, s
	case LatchJoin:
		if s.Gen == "" {
			return out.NotFound, s
		}
		return !out.NotFound && out.Gen == s.Gen, s
	case LatchDelete:
		deletes := s.Gen == in.Gen
		next := s
		if deletes {
			next = latchState{Completed: s.Completed}
		}
		if out.Unknown {
			return true, next
		}
		return out.OK == deletes, next
	case LatchWait:
		if out.OK {
			return s.completed(in.Gen), s
		}
		return s.Gen != in.Gen && s.Done != in.Gen, s
	}
	return false, s
}

// Model returns the porcupine model. Inputs and outputs are those made by
// Operations.
func (m LatchModel) Model() porcupine.Model {
	return porcupine.Model{
		Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
			byKey := map[string][]porcupine.Operation{}
			var keys []string
			for _, op := range history {
				k := op.Input.(LatchInput).Key
				if _, ok := byKey[k]; !ok {
					keys = append(keys, k)
				}
				byKey[k] = append(byKey[k], op)
			}
			slices.Sort(keys)
			out := make([][]porcupine.Operation, 0, len(keys))
			for _, k := range keys {
				out = append(out, byKey[k])
			}
			return out
		},
		Init: func() any { return latchState{} },
		Step: func(state, input, output any) (bool, any) {
			return m.step(state.(latchState), input.(LatchInput), output.(LatchOutput))
		},
		Hash: func(state any) uint64 {
			s := state.(latchState)
			h := fnv.New64a()
			h.Write([]byte(s.Gen + "\x00" + s.Done + "\x00" + s.Completed))
			var b [8]byte
			binary.LittleEndian.PutUint64(b[:], uint64(s.Count))
			h.Write(b[:])
			return h.Sum64()
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(LatchInput), output.(LatchOutput)
			s := fmt.Sprintf("%s %s", in.Kind, in.Key)
			switch in.Kind {
			case LatchCreate, LatchReset:
				s += fmt.Sprintf(" %s=%d", short(in.Gen), in.Count)
			case LatchJoin:
			default:
				s += " " + short(in.Gen)
			}
			s += " → "
			switch {
			case out.Unknown:
				s += "unknown"
			case out.Exists:
				s += "exists"
			case out.NotFound:
				s += "not found"
			case out.Completed:
				s += "completed"
			case in.Kind == LatchJoin:
				s += short(out.Gen)
			case in.Kind == LatchCountDown || in.Kind == LatchCount:
				s += fmt.Sprint(out.N)
			case in.Kind == LatchWait || in.Kind == LatchDelete:
				s += fmt.Sprint(out.OK)
			default:
				s += "ok"
			}
			return s
		},
		DescribeState: func(state any) string {
			s := state.(latchState)
			if s.Gen == "" {
				return "no latch"
			}
			d := fmt.Sprintf("%s=%d", short(s.Gen), s.Count)
			if s.Done != "" {
				d += " done " + short(s.Done)
			}
			return d
		},
	}
}

// Operations converts latch ops for porcupine: reads with an unknown
// outcome and writes that sent nothing (Create or Reset without a token)
// are left out.
func (m LatchModel) Operations(ops []Op) ([]porcupine.Operation, error) {
	out := make([]porcupine.Operation, 0, len(ops))
	for i, op := range ops {
		in, ok := op.Input.(LatchInput)
		if !ok {
			return nil, fmt.Errorf("faulttest: op %d: input %T is not a LatchInput", i, op.Input)
		}
		o, ok := op.Output.(LatchOutput)
		if !ok {
			return nil, fmt.Errorf("faulttest: op %d: output %T is not a LatchOutput", i, op.Output)
		}
		if op.Unknown() != o.Unknown {
			return nil, fmt.Errorf("faulttest: op %d: Return %v and Unknown %v disagree", i, op.Return, o.Unknown)
		}
		if o.Unknown {
			switch in.Kind {
			case LatchJoin, LatchCount, LatchWait:
				continue // a read that returned nothing
			case LatchCreate, LatchReset:
				if in.Gen == "" {
					continue // nothing was sent
				}
			}
		}
		out = append(out, porcupine.Operation{ClientId: op.Client, Input: in, Call: int64(op.Call), Output: o, Return: int64(op.Return)})
	}
	return out, nil
}

// Check runs porcupine on ops with a timeout. A result other than
// porcupine.Ok (Illegal, or Unknown on timeout) is a failed check.
func (m LatchModel) Check(ops []Op, timeout time.Duration) (porcupine.CheckResult, error) {
	pops, err := m.Operations(ops)
	return checkOps(m.Model(), pops, err, timeout)
}

// Visualize checks again, computing the partial linearizations, and writes
// porcupine's HTML visualization to a new file in dir ("" for the system's
// temporary directory); it returns the file's path.
func (m LatchModel) Visualize(ops []Op, timeout time.Duration, dir string) (string, error) {
	pops, err := m.Operations(ops)
	return visualizeOps(m.Model(), pops, err, timeout, dir, "latch")
}

// EarlyWake is a Wait that returned true for a generation before enough
// count-downs of it can have run.
type EarlyWake struct {
	Wait        Op
	Initial     int64 // the generation's count
	CountDowns  int   // count-downs of it that can have run before Wait returned
	Description string
}

func (e EarlyWake) String() string { return e.Description }

// EarlyWakes is a check independent of porcupine: for every Wait(g) that
// returned true, the count-downs of g that were called before it returned
// (succeeded, or with an unknown outcome) must number at least g's count
// (from the Create or Reset that set it, known or unknown). Generations
// whose Create or Reset is not in ops are skipped.
func EarlyWakes(ops []Op) []EarlyWake {
	initial := map[string]int64{}
	downs := map[string][]time.Duration{} // call times of count-downs that can have counted
	for _, op := range ops {
		in, _ := op.Input.(LatchInput)
		out, _ := op.Output.(LatchOutput)
		switch in.Kind {
		case LatchCreate, LatchReset:
			if in.Gen != "" && !out.Exists {
				initial[in.Gen] = in.Count
			}
		case LatchCountDown:
			if out.Unknown || (!out.Completed && out.N >= 0) {
				downs[in.Gen] = append(downs[in.Gen], op.Call)
			}
		}
	}
	var early []EarlyWake
	for _, op := range ops {
		in, _ := op.Input.(LatchInput)
		out, _ := op.Output.(LatchOutput)
		if in.Kind != LatchWait || out.Unknown || !out.OK {
			continue
		}
		n, ok := initial[in.Gen]
		if !ok {
			continue
		}
		c := 0
		for _, call := range downs[in.Gen] {
			if call <= op.Return {
				c++
			}
		}
		if int64(c) < n {
			early = append(early, EarlyWake{Wait: op, Initial: n, CountDowns: c,
				Description: fmt.Sprintf("Wait %s %s returned true at %v with %d of %d count-downs called", in.Key, short(in.Gen), op.Return, c, n)})
		}
	}
	return early
}
