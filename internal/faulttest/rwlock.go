package faulttest

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// RWMode is the mode of a read-write lease operation.
type RWMode uint8

const (
	// RWRead is a shared read lease.
	RWRead RWMode = iota + 1
	// RWWrite is the exclusive write lease.
	RWWrite
)

func (m RWMode) String() string {
	switch m {
	case RWRead:
		return "read"
	case RWWrite:
		return "write"
	}
	return fmt.Sprintf("RWMode(%d)", int(m))
}

// Member is the grant-log entry of a grant of token in mode m: "r:<token>"
// or "w:<token>", as the rwlock scripts log it.
func (m RWMode) Member(token string) string {
	if m == RWWrite {
		return "w:" + token
	}
	return "r:" + token
}

// RWInput is the Input of a read-write lease Op.
type RWInput struct {
	// Kind is Acquire (one non-waiting attempt with a fresh token) or
	// Release (one owner-checked release).
	Kind LeaseKind
	Mode RWMode
	// Token is, for Release, the lease's token; for Acquire, the token the
	// attempt sent, "" when none was sent (SettleRW needs it).
	Token string
}

// RWOutput is the Output of a read-write lease Op. Result takes the
// LeaseResult values: Granted, NotGranted, NoGrant (after settling),
// Released, AlreadyReleased, NotOwned, Unknown.
type RWOutput struct {
	Result LeaseResult
	Token  string // Granted: the owner token
	// Settled marks a grant learnt from the grant log after the reply was
	// lost: nobody holds a handle for it, so it ends, unobserved, at any
	// time after the grant.
	Settled bool
}

// RWModel is a porcupine model of one read-write lock key taken with
// non-waiting acquires of both modes and owner-checked releases, all with
// one TTL and no renewals, and no waiting writers (so nothing but a
// holding writer refuses a reader). Its state is the writer (if any) and
// the readers holding, each with the call time of its acquire and from
// when it may be gone unobserved, and a floor for linearization points (see
// LeaseModel, whose rules for expiry, settled grants and unknown releases
// it shares).
//
// Rules, in the linearized order:
//   - read Granted: no writer holds, or the writer may be gone.
//   - read NotGranted: a writer holds.
//   - write Granted: no holder at all, or every holder may be gone.
//   - write NotGranted: someone holds.
//   - Released: only the token's own live lease (of its mode).
//   - AlreadyReleased: the token's lease is gone (or may be) and so is
//     every other holder (or may be): the release script answers 0 only on
//     a lock with no live member.
//   - NotOwned: the token's lease is gone (or may be) while another
//     holder is there: the release script answers -1.
//   - NoGrant: no effect.
//
// Holders never vanish spontaneously in the model (a lease past its TTL
// still explains a refusal; permissive, never wrong), and vanish when an
// operation needs them gone only if they may be gone by then.
type RWModel struct {
	TTL   time.Duration
	Slack time.Duration // 0 means DefaultSlack
}

type rwStep struct {
	RWInput
	Call, Ret   int64
	VanishAfter int64 // acquires: as leaseStep.VanishAfter
}

type rwHolder struct {
	Token       string
	Since       int64
	VanishAfter int64
}

type rwState struct {
	Writer  rwHolder   // Token "" when none
	Readers []rwHolder // sorted by token; never modified in place
	Floor   int64
}

func (m RWModel) slack() int64 {
	if m.Slack <= 0 {
		return int64(DefaultSlack)
	}
	return int64(m.Slack)
}

// gone says whether h can have ended by an operation returning at ret, and
// from when.
func (m RWModel) gone(h rwHolder, ret int64) (bool, int64) {
	e := min(h.VanishAfter, h.Since+int64(m.TTL)-m.slack())
	return e <= ret, e
}

func (m RWModel) step(st rwState, in rwStep, out RWOutput) (bool, rwState) {
	if in.Ret < st.Floor {
		return false, st
	}
	// drop removes every holder but keep (a token; "" keeps none) if each
	// may be gone by this operation, raising the floor.
	drop := func(s rwState, keep string) (bool, rwState) {
		if s.Writer.Token != "" && s.Writer.Token != keep {
			ok, e := m.gone(s.Writer, in.Ret)
			if !ok {
				return false, s
			}
			s.Floor, s.Writer = max(s.Floor, e), rwHolder{}
		}
		var kept []rwHolder
		for _, r := range s.Readers {
			if r.Token == keep {
				kept = append(kept, r)
				continue
			}
			ok, e := m.gone(r, in.Ret)
			if !ok {
				return false, s
			}
			s.Floor = max(s.Floor, e)
		}
		s.Readers = kept
		return true, s
	}
	holder := rwHolder{Token: out.Token, Since: in.Call, VanishAfter: in.VanishAfter}
	switch in.Kind {
	case Acquire:
		switch out.Result {
		case Granted:
			if in.Mode == RWWrite {
				ok, s := drop(st, "")
				if !ok {
					return false, st
				}
				s.Writer = holder
				return true, s
			}
			if st.Writer.Token != "" {
				ok, e := m.gone(st.Writer, in.Ret)
				if !ok {
					return false, st
				}
				st.Floor, st.Writer = max(st.Floor, e), rwHolder{}
			}
			st.Readers = insertReader(st.Readers, holder)
			return true, st
		case NotGranted:
			if in.Mode == RWWrite {
				return st.Writer.Token != "" || len(st.Readers) > 0, st
			}
			return st.Writer.Token != "", st
		case NoGrant:
			return true, st
		}
	case Release:
		own := -1 // index in Readers, or len(Readers) for the writer
		if in.Mode == RWWrite && st.Writer.Token == in.Token && in.Token != "" {
			own = len(st.Readers)
		} else if in.Mode == RWRead {
			own = slices.IndexFunc(st.Readers, func(r rwHolder) bool { return r.Token == in.Token })
		}
		// without removes the token's own lease, if it may be gone.
		without := func(s rwState) (bool, rwState) {
			switch {
			case own < 0:
				return true, s
			case own == len(s.Readers):
				ok, e := m.gone(s.Writer, in.Ret)
				if !ok {
					return false, s
				}
				s.Floor, s.Writer = max(s.Floor, e), rwHolder{}
			default:
				ok, e := m.gone(s.Readers[own], in.Ret)
				if !ok {
					return false, s
				}
				s.Floor = max(s.Floor, e)
				s.Readers = slices.Delete(slices.Clone(s.Readers), own, own+1)
			}
			return true, s
		}
		switch out.Result {
		case Released:
			switch {
			case own < 0:
				return false, st
			case own == len(st.Readers):
				st.Writer = rwHolder{}
			default:
				st.Readers = slices.Delete(slices.Clone(st.Readers), own, own+1)
			}
			return true, st
		case AlreadyReleased:
			ok, s := without(st)
			if !ok {
				return false, st
			}
			if ok, s = drop(s, ""); !ok {
				return false, st
			}
			return true, s
		case NotOwned:
			ok, s := without(st)
			if !ok || s.Writer.Token == "" && len(s.Readers) == 0 {
				return false, st
			}
			return true, s
		}
	}
	return false, st
}

// insertReader returns a copy of rs with h added in token order.
func insertReader(rs []rwHolder, h rwHolder) []rwHolder {
	i, _ := slices.BinarySearchFunc(rs, h.Token, func(r rwHolder, tok string) int { return cmp.Compare(r.Token, tok) })
	out := make([]rwHolder, 0, len(rs)+1)
	out = append(out, rs[:i]...)
	out = append(out, h)
	return append(out, rs[i:]...)
}

// Model returns the porcupine model; inputs and outputs are those made by
// Operations.
func (m RWModel) Model() porcupine.Model {
	return porcupine.Model{
		Init: func() any { return rwState{} },
		Step: func(state, input, output any) (bool, any) {
			return m.step(state.(rwState), input.(rwStep), output.(RWOutput))
		},
		Equal: func(a, b any) bool {
			x, y := a.(rwState), b.(rwState)
			return x.Writer == y.Writer && x.Floor == y.Floor && slices.Equal(x.Readers, y.Readers)
		},
		Hash: func(state any) uint64 {
			s := state.(rwState)
			h := fnv.New64a()
			var b [24]byte
			put := func(x rwHolder) {
				h.Write([]byte(x.Token))
				binary.LittleEndian.PutUint64(b[0:], uint64(x.Since))
				binary.LittleEndian.PutUint64(b[8:], uint64(x.VanishAfter))
				h.Write(b[:16])
			}
			put(s.Writer)
			for _, r := range s.Readers {
				put(r)
			}
			binary.LittleEndian.PutUint64(b[16:], uint64(s.Floor))
			h.Write(b[16:])
			return h.Sum64()
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(rwStep), output.(RWOutput)
			s := in.Mode.String() + " " + in.Kind.String()
			if in.Kind == Release {
				s += " " + short(in.Token)
			}
			s += " → " + out.Result.String()
			if out.Result == Granted {
				s += " " + short(out.Token)
				if out.Settled {
					s += " (settled from the grant log)"
				}
			}
			return s
		},
		DescribeState: func(state any) string {
			s := state.(rwState)
			var parts []string
			if s.Writer.Token != "" {
				parts = append(parts, "writer "+short(s.Writer.Token))
			}
			for _, r := range s.Readers {
				parts = append(parts, "reader "+short(r.Token))
			}
			if len(parts) == 0 {
				return "free"
			}
			return strings.Join(parts, ", ")
		},
	}
}

// Operations converts settled read-write ops for porcupine, as
// LeaseModel.Operations does: NoGrant acquires are left out and releases
// with an unknown outcome are folded into their token's acquire. It fails
// on an acquire whose outcome is still Unknown (run SettleRW first).
func (m RWModel) Operations(ops []Op) ([]porcupine.Operation, error) {
	vanish := map[string]int64{} // member -> earliest unknown release call
	for i, op := range ops {
		in, ok := op.Input.(RWInput)
		if !ok {
			return nil, fmt.Errorf("faulttest: op %d: input %T is not an RWInput", i, op.Input)
		}
		o, ok := op.Output.(RWOutput)
		if !ok {
			return nil, fmt.Errorf("faulttest: op %d: output %T is not an RWOutput", i, op.Output)
		}
		if in.Kind == Acquire && o.Result == Unknown {
			return nil, fmt.Errorf("faulttest: op %d: acquire with an unknown outcome; settle it first", i)
		}
		if in.Kind == Release && o.Result == Unknown {
			k := in.Mode.Member(in.Token)
			if v, seen := vanish[k]; !seen || int64(op.Call) < v {
				vanish[k] = int64(op.Call)
			}
		}
	}
	out := make([]porcupine.Operation, 0, len(ops))
	folded := 0
	for _, op := range ops {
		in, o := op.Input.(RWInput), op.Output.(RWOutput)
		if o.Result == NoGrant || (in.Kind == Release && o.Result == Unknown) {
			continue
		}
		step := rwStep{RWInput: in, Call: int64(op.Call), Ret: int64(op.Return), VanishAfter: never}
		if in.Kind == Acquire && o.Result == Granted {
			if o.Settled {
				step.VanishAfter = 0
			}
			if v, ok := vanish[in.Mode.Member(o.Token)]; ok {
				step.VanishAfter = min(step.VanishAfter, v)
				folded++
			}
		}
		out = append(out, porcupine.Operation{ClientId: op.Client, Input: step, Call: int64(op.Call), Output: o, Return: int64(op.Return)})
	}
	if folded != len(vanish) {
		return nil, fmt.Errorf("faulttest: %d leases with an unknown release, %d of them granted in the history", len(vanish), folded)
	}
	return out, nil
}

// Check runs porcupine on settled ops with a timeout. A result other than
// porcupine.Ok (Illegal, or Unknown on timeout) is a failed check.
func (m RWModel) Check(ops []Op, timeout time.Duration) (porcupine.CheckResult, error) {
	pops, err := m.Operations(ops)
	return checkOps(m.Model(), pops, err, timeout)
}

// Visualize checks again, computing the partial linearizations, and writes
// porcupine's HTML visualization to a new file in dir (os.TempDir when
// empty). It returns the file's path.
func (m RWModel) Visualize(ops []Op, timeout time.Duration, dir string) (string, error) {
	pops, err := m.Operations(ops)
	return visualizeOps(m.Model(), pops, err, timeout, dir, "rwlock")
}
