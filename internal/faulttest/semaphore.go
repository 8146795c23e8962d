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

// MaxSemaphoreCapacity is the largest capacity SemaphoreModel checks.
const MaxSemaphoreCapacity = 8

// SemaphoreModel is a porcupine model of one semaphore key of a fixed
// capacity, taken with non-waiting acquires (fresh tokens) and
// owner-checked releases, recorded with LeaseInput and LeaseOutput and
// settled with SettleLeases (no fencing). Its state is the set of
// holders, each with when its acquire was called and from when it may be
// gone unobserved (the rules of LeaseModel), and a floor for later
// linearization points.
//
// Rules, in the linearized order:
//   - Granted: fewer than Capacity holders remain once holders that may be
//     gone by the operation's return are dropped (as few as needed, every
//     choice tried). This is the invariant: live permits never exceed the
//     capacity.
//   - NotGranted: at least Capacity holders (holders never vanish
//     spontaneously, so an expired-but-not-pruned holder still explains a
//     refusal: permissive, never wrong).
//   - Released: the token is a holder. AlreadyReleased: it is not, or it
//     may be gone. NotOwned: it is not (or may be gone) and at least
//     Capacity other holders remain (the semaphore's release answers -1
//     only when it is full of others).
//   - NoGrant: no effect. An acquire whose outcome was unknown and that the
//     grant log shows granted counts as granted (Settled: it holds a place
//     from some time after its call until its cleanup or ttl ends it at an
//     unknown time); one the log does not show had no effect.
type SemaphoreModel struct {
	Capacity int
	TTL      time.Duration
	Slack    time.Duration // 0 means DefaultSlack
}

type semHolder struct {
	Token       string
	Since       int64
	VanishAfter int64
}

type semState struct {
	N       int
	Holders [MaxSemaphoreCapacity]semHolder // [0:N], sorted by token
	Floor   int64
}

func (s semState) list() []semHolder { return s.Holders[:s.N] }

func (s semState) with(hs []semHolder) semState {
	slices.SortFunc(hs, func(a, b semHolder) int { return cmp.Compare(a.Token, b.Token) })
	out := semState{N: len(hs), Floor: s.Floor}
	copy(out.Holders[:], hs)
	return out
}

// goneAt is the earliest instant from which h may be gone.
func (m SemaphoreModel) goneAt(h semHolder) int64 {
	slack := m.Slack
	if slack <= 0 {
		slack = DefaultSlack
	}
	return min(h.VanishAfter, h.Since+int64(m.TTL)-int64(slack))
}

// drops returns every state with exactly k holders dropped among those
// that may be gone by ret (k <= 0: s itself), and never the holder except.
func (m SemaphoreModel) drops(s semState, k int, ret int64, except string) []semState {
	if k <= 0 {
		return []semState{s}
	}
	var can []int
	for i, h := range s.list() {
		if h.Token != except && m.goneAt(h) <= ret {
			can = append(can, i)
		}
	}
	var out []semState
	var pick func(from int, chosen []int)
	pick = func(from int, chosen []int) {
		if len(chosen) == k {
			floor := s.Floor
			drop := map[int]bool{}
			for _, i := range chosen {
				drop[i] = true
				floor = max(floor, m.goneAt(s.Holders[i]))
			}
			var keep []semHolder
			for i, h := range s.list() {
				if !drop[i] {
					keep = append(keep, h)
				}
			}
			ns := s.with(keep)
			ns.Floor = floor
			out = append(out, ns)
			return
		}
		for j := from; j < len(can); j++ {
			pick(j+1, append(chosen, can[j]))
		}
	}
	pick(0, nil)
	return out
}

func (m SemaphoreModel) step(s semState, in leaseStep, out LeaseOutput) []semState {
	if in.Ret < s.Floor {
		return nil
	}
	idx := -1
	for i, h := range s.list() {
		if h.Token == in.Token && in.Kind == Release {
			idx = i
		}
	}
	switch in.Kind {
	case Acquire:
		switch out.Result {
		case Granted:
			var res []semState
			for _, ns := range m.drops(s, s.N-m.Capacity+1, in.Ret, "") {
				hs := append(slices.Clone(ns.list()), semHolder{Token: out.Token, Since: in.Call, VanishAfter: in.VanishAfter})
				res = append(res, ns.with(hs))
			}
			return res
		case NotGranted:
			if s.N >= m.Capacity {
				return []semState{s}
			}
			return nil
		case NoGrant:
			return []semState{s}
		}
	case Release:
		without := func() (semState, bool) {
			if idx < 0 {
				return s, true
			}
			h := s.Holders[idx]
			if m.goneAt(h) > in.Ret {
				return s, false
			}
			hs := slices.Delete(slices.Clone(s.list()), idx, idx+1)
			ns := s.with(hs)
			ns.Floor = max(s.Floor, m.goneAt(h))
			return ns, true
		}
		switch out.Result {
		case Released:
			if idx < 0 {
				return nil
			}
			return []semState{s.with(slices.Delete(slices.Clone(s.list()), idx, idx+1))}
		case AlreadyReleased:
			if ns, ok := without(); ok {
				return []semState{ns}
			}
		case NotOwned:
			if ns, ok := without(); ok && ns.N >= m.Capacity {
				return []semState{ns}
			}
		}
	}
	return nil
}

// Model returns the porcupine model (nondeterministic: which holders are
// gone is a choice). Inputs and outputs are those made by Operations.
func (m SemaphoreModel) Model() porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Init: func() []any { return []any{semState{}} },
		Step: func(state, input, output any) []any {
			var out []any
			for _, ns := range m.step(state.(semState), input.(leaseStep), output.(LeaseOutput)) {
				out = append(out, ns)
			}
			return out
		},
		Hash: func(state any) uint64 {
			s := state.(semState)
			h := fnv.New64a()
			var b [16]byte
			for _, x := range s.list() {
				h.Write([]byte(x.Token))
				binary.LittleEndian.PutUint64(b[0:], uint64(x.Since))
				binary.LittleEndian.PutUint64(b[8:], uint64(x.VanishAfter))
				h.Write(b[:])
			}
			binary.LittleEndian.PutUint64(b[0:], uint64(s.Floor))
			h.Write(b[:8])
			return h.Sum64()
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(leaseStep), output.(LeaseOutput)
			s := in.Kind.String()
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
			s := state.(semState)
			var names []string
			for _, h := range s.list() {
				names = append(names, short(h.Token))
			}
			return fmt.Sprintf("%d/%d held: %s", s.N, m.Capacity, strings.Join(names, ", "))
		},
	}
	return nm.ToModel()
}

// Operations converts settled ops for porcupine, as LeaseModel.Operations
// does (NoGrant left out, unknown releases folded into their grant).
func (m SemaphoreModel) Operations(ops []Op) ([]porcupine.Operation, error) {
	if m.Capacity < 1 || m.Capacity > MaxSemaphoreCapacity {
		return nil, fmt.Errorf("faulttest: semaphore capacity %d outside [1, %d]", m.Capacity, MaxSemaphoreCapacity)
	}
	return LeaseModel{TTL: m.TTL, Slack: m.Slack}.Operations(ops)
}

// Check runs porcupine on settled ops with a timeout. A result other than
// porcupine.Ok is a failed check.
func (m SemaphoreModel) Check(ops []Op, timeout time.Duration) (porcupine.CheckResult, error) {
	pops, err := m.Operations(ops)
	return checkOps(m.Model(), pops, err, timeout)
}

// DefiniteExcess is a check independent of porcupine: a holder whose
// acquire returned Granted at r and whose release later answered Released
// (called at c) held a permit during all of [r, c]. It returns the
// instants (history time) at which more than capacity such spans overlap,
// one per excess episode; none means no definite violation.
func DefiniteExcess(ops []Op, capacity int) []time.Duration {
	released := map[string]time.Duration{}
	for _, op := range ops {
		in, _ := op.Input.(LeaseInput)
		out, _ := op.Output.(LeaseOutput)
		if in.Kind == Release && out.Result == Released && op.Return != Infinity {
			released[in.Token] = op.Call
		}
	}
	type ev struct {
		at    time.Duration
		delta int
	}
	var evs []ev
	for _, op := range ops {
		in, _ := op.Input.(LeaseInput)
		out, _ := op.Output.(LeaseOutput)
		if in.Kind != Acquire || out.Result != Granted || op.Return == Infinity {
			continue
		}
		if c, ok := released[out.Token]; ok && c > op.Return {
			evs = append(evs, ev{op.Return, 1}, ev{c, -1})
		}
	}
	// Ends before starts at the same instant: touching spans do not overlap.
	slices.SortFunc(evs, func(a, b ev) int {
		if a.at != b.at {
			return cmp.Compare(a.at, b.at)
		}
		return cmp.Compare(a.delta, b.delta)
	})
	var out []time.Duration
	n, over := 0, false
	for _, e := range evs {
		n += e.delta
		switch {
		case n > capacity && !over:
			out, over = append(out, e.at), true
		case n <= capacity:
			over = false
		}
	}
	return out
}
