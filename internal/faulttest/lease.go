package faulttest

import (
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// LeaseKind is the kind of a lease operation.
type LeaseKind uint8

const (
	// Acquire is one non-waiting acquisition attempt with a fresh token.
	Acquire LeaseKind = iota + 1
	// Release is one owner-checked release.
	Release
)

func (k LeaseKind) String() string {
	switch k {
	case Acquire:
		return "acquire"
	case Release:
		return "release"
	}
	return fmt.Sprintf("LeaseKind(%d)", int(k))
}

// LeaseInput is the Input of a lease Op.
type LeaseInput struct {
	Kind LeaseKind
	// Token is, for Release, the handle's token; for Acquire, the token the
	// attempt sent to the server, "" when none was sent. SettleLeases needs
	// it to match an unknown acquire with the grant log.
	Token string
}

// LeaseResult is the outcome of a lease operation.
type LeaseResult uint8

const (
	// Granted: the acquire got the lease (Token, Fence).
	Granted LeaseResult = iota + 1
	// NotGranted: the server answered that someone holds the lease.
	NotGranted
	// NoGrant: the acquire's outcome was unknown and the grant log shows
	// it granted nothing; it had no effect.
	NoGrant
	// Released: the release deleted the caller's lease.
	Released
	// AlreadyReleased: the release found the key absent.
	AlreadyReleased
	// NotOwned: the release found another owner.
	NotOwned
	// Unknown: a timeout or transport error hid the outcome.
	Unknown
)

func (r LeaseResult) String() string {
	return [...]string{"?", "granted", "not-granted", "no-grant", "released", "already-released", "not-owned", "unknown"}[min(int(r), 7)]
}

// LeaseOutput is the Output of a lease Op.
type LeaseOutput struct {
	Result LeaseResult
	Token  string // Granted: the owner token
	Fence  int64  // Granted: the fencing token (0 without fencing)
	// Settled marks a grant learnt from the grant log after the reply was
	// lost. Nobody holds a handle for it: the acquirer's best-effort
	// cleanup or the TTL ends it, unobserved, at any time after the grant.
	Settled bool
}

// Grant is one entry of a grant log.
type Grant struct {
	Token string
	Fence int64
}

// ParseGrants parses grant-log entries "token fence" (fence empty without
// fencing), in log order.
func ParseGrants(entries []string) ([]Grant, error) {
	out := make([]Grant, 0, len(entries))
	for i, e := range entries {
		tok, f, ok := strings.Cut(e, " ")
		if !ok || tok == "" {
			return nil, fmt.Errorf("faulttest: grant log entry %d %q is not \"token fence\"", i, e)
		}
		var fence int64
		if f != "" {
			var err error
			if fence, err = strconv.ParseInt(f, 10, 64); err != nil {
				return nil, fmt.Errorf("faulttest: grant log entry %d %q: %w", i, e, err)
			}
		}
		out = append(out, Grant{Token: tok, Fence: fence})
	}
	return out, nil
}

// Settlement counts what SettleLeases did.
type Settlement struct {
	Grants          int // entries in the grant log
	UnknownAcquires int // acquires whose outcome was unknown
	SettledGranted  int // ... that the grant log shows granted
	SettledNoGrant  int // ... that it shows granted nothing
	UnknownReleases int // releases whose outcome stays unknown
}

// SettleLeases resolves every acquire with an unknown outcome against the
// grant log (complete, read after every connection that could still carry
// an acquire has gone): an acquire whose token is in the log becomes
// Granted with that fence and Settled (its Return stays Infinity: the grant
// may have happened after the caller gave up); one whose token is absent, or
// that sent no token, becomes NoGrant with Return = Ended. It also checks
// the log against the history: tokens unique, fences strictly increasing in
// log order (when fencing), every known grant logged with its fence, and
// every logged grant sent by exactly one recorded acquire. It returns the
// settled copy of ops.
func SettleLeases(ops []Op, grants []Grant, fencing bool) ([]Op, Settlement, error) {
	st := Settlement{Grants: len(grants)}
	byToken := make(map[string]Grant, len(grants))
	for i, g := range grants {
		if _, dup := byToken[g.Token]; dup {
			return nil, st, fmt.Errorf("faulttest: grant log: token %q granted twice", g.Token)
		}
		if fencing && i > 0 && g.Fence <= grants[i-1].Fence {
			return nil, st, fmt.Errorf("faulttest: grant log: fence %d after %d (entry %d): fencing tokens not strictly increasing", g.Fence, grants[i-1].Fence, i)
		}
		byToken[g.Token] = g
	}
	used := make(map[string]bool, len(grants))
	out := slices.Clone(ops)
	var errs []error
	for i, op := range out {
		in, ok := op.Input.(LeaseInput)
		if !ok {
			return nil, st, fmt.Errorf("faulttest: op %d: input %T is not a LeaseInput", i, op.Input)
		}
		o, ok := op.Output.(LeaseOutput)
		if !ok {
			return nil, st, fmt.Errorf("faulttest: op %d: output %T is not a LeaseOutput", i, op.Output)
		}
		if in.Kind == Release {
			if o.Result == Unknown {
				st.UnknownReleases++
			}
			continue
		}
		switch o.Result {
		case Granted:
			g, logged := byToken[o.Token]
			switch {
			case !logged:
				errs = append(errs, fmt.Errorf("client %d acquire at %v: granted %q (fence %d) but the grant log lacks it", op.Client, op.Call, o.Token, o.Fence))
			case fencing && g.Fence != o.Fence:
				errs = append(errs, fmt.Errorf("client %d acquire at %v: granted %q with fence %d, grant log says %d", op.Client, op.Call, o.Token, o.Fence, g.Fence))
			case used[o.Token]:
				errs = append(errs, fmt.Errorf("token %q returned by two acquires", o.Token))
			}
			used[o.Token] = true
		case Unknown:
			st.UnknownAcquires++
			if g, logged := byToken[in.Token]; in.Token != "" && logged {
				if used[in.Token] {
					errs = append(errs, fmt.Errorf("token %q sent by two acquires", in.Token))
				}
				used[in.Token] = true
				out[i].Output = LeaseOutput{Result: Granted, Token: g.Token, Fence: g.Fence, Settled: true}
				st.SettledGranted++
			} else {
				out[i].Output = LeaseOutput{Result: NoGrant}
				out[i].Return = op.Ended
				st.SettledNoGrant++
			}
		}
	}
	for _, g := range grants {
		if !used[g.Token] {
			errs = append(errs, fmt.Errorf("grant log has %q (fence %d) that no recorded acquire sent", g.Token, g.Fence))
		}
	}
	if len(errs) > 0 {
		return nil, st, fmt.Errorf("faulttest: grant log and history disagree: %w", errors.Join(errs...))
	}
	return out, st, nil
}

// DefaultSlack is LeaseModel's default clock slack.
const DefaultSlack = 5 * time.Millisecond

// LeaseModel is a porcupine model of one lock key (or one lease) taken with
// non-waiting acquires and owner-checked releases. Its state is the holder
// (token), the highest fencing token granted, when the holder's acquire was
// called, and from when the holder may be gone unobserved.
//
// Rules, in the linearized order:
//   - Granted: the fence exceeds every earlier grant's (with Fencing; by
//     exactly one with Contiguous), and the lease is free or its holder
//     may be gone (below).
//   - NotGranted: someone holds the lease (holders never vanish
//     spontaneously in the model, so an expired-but-not-replaced holder
//     still explains a refusal; that is never wrong, only permissive).
//   - Released: only the current owner. AlreadyReleased: the lease is free,
//     or its holder may be gone. NotOwned: someone else holds it.
//   - NoGrant: no effect (left out of the check).
//
// A holder may be gone, unobserved, by an operation linearized at p when:
//   - it is a Settled grant (its acquirer's best-effort cleanup, or the
//     TTL, ends it at some unknown time after the grant): any p;
//   - one of its releases had an unknown outcome, called at c: p >= c (the
//     release may have run then, or never, the TTL ending the grant);
//   - its TTL can have run out: a grant to an acquire called at a cannot
//     expire before a+TTL (the server grants after the call and deletes
//     after grant+TTL), so p >= a+TTL-Slack.
//
// Linearization points p are not visible to a porcupine model, so the
// state carries a floor: choosing "gone" at an operation that returned at r
// needs the earliest such instant e <= r, and every operation linearized
// later must also have returned at or after e (points never go back). Slack
// absorbs the server's millisecond clock and the gap between Go's monotonic
// clock and the server's.
//
// Releases with an unknown outcome are folded into their acquire (the
// "unknown release" case above) instead of being checked as operations that
// return at infinity: a pending no-op operation doubles porcupine's search
// space at every backtracking point, and the fold is exact. All acquires
// must use the same TTL; renewals are not modelled.
type LeaseModel struct {
	TTL     time.Duration
	Slack   time.Duration // 0 means DefaultSlack
	Fencing bool
	// Contiguous (with Fencing) says the history holds every grant ever
	// made on the key, whose counter started at 0 (SettleLeases checks the
	// first half against the grant log): each grant's fence is then
	// exactly one more than the previous one's. Stronger, and it keeps a
	// settled grant from being tried anywhere but right after its
	// predecessor, which keeps the search small.
	Contiguous bool
}

const never = math.MaxInt64

type leaseStep struct {
	LeaseInput
	Call, Ret int64
	// VanishAfter (acquires): the holder may be gone, unobserved, from
	// this instant; never when only the TTL can end it.
	VanishAfter int64
}

type leaseState struct {
	Holder      string
	Since       int64 // call time of the holder's acquire
	VanishAfter int64
	Fence       int64
	Floor       int64 // every later linearization point is at or after this
}

func (m LeaseModel) step(st leaseState, in leaseStep, out LeaseOutput) (bool, leaseState) {
	if in.Ret < st.Floor {
		return false, st
	}
	slack := m.Slack
	if slack <= 0 {
		slack = DefaultSlack
	}
	// gone says whether the holder can have ended by this operation, and
	// the floor that choice imposes.
	gone := func() (bool, int64) {
		e := min(st.VanishAfter, st.Since+int64(m.TTL)-int64(slack))
		if e > in.Ret {
			return false, st.Floor
		}
		return true, max(st.Floor, e)
	}
	free := func(s leaseState) leaseState {
		s.Holder, s.Since, s.VanishAfter = "", 0, 0
		return s
	}
	switch in.Kind {
	case Acquire:
		switch out.Result {
		case Granted:
			if m.Fencing && (out.Fence <= st.Fence || m.Contiguous && out.Fence != st.Fence+1) {
				return false, st
			}
			if st.Holder != "" {
				ok, floor := gone()
				if !ok {
					return false, st
				}
				st.Floor = floor
			}
			st.Holder, st.Since, st.VanishAfter = out.Token, in.Call, in.VanishAfter
			if m.Fencing {
				st.Fence = out.Fence
			}
			return true, st
		case NotGranted:
			return st.Holder != "", st
		case NoGrant:
			return true, st
		}
	case Release:
		switch out.Result {
		case Released:
			if st.Holder != in.Token {
				return false, st
			}
			return true, free(st)
		case AlreadyReleased:
			if st.Holder == "" {
				return true, st
			}
			ok, floor := gone()
			if !ok {
				return false, st
			}
			st.Floor = floor
			return true, free(st)
		case NotOwned:
			return st.Holder != "" && st.Holder != in.Token, st
		}
	}
	return false, st
}

// Model returns the porcupine model. Inputs and outputs are those made by
// Operations.
func (m LeaseModel) Model() porcupine.Model {
	return porcupine.Model{
		Init: func() any { return leaseState{} },
		Step: func(state, input, output any) (bool, any) {
			return m.step(state.(leaseState), input.(leaseStep), output.(LeaseOutput))
		},
		Hash: func(state any) uint64 {
			s := state.(leaseState)
			h := fnv.New64a()
			h.Write([]byte(s.Holder))
			var b [32]byte
			binary.LittleEndian.PutUint64(b[0:], uint64(s.Since))
			binary.LittleEndian.PutUint64(b[8:], uint64(s.Fence))
			binary.LittleEndian.PutUint64(b[16:], uint64(s.Floor))
			binary.LittleEndian.PutUint64(b[24:], uint64(s.VanishAfter))
			h.Write(b[:])
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
				s += fmt.Sprintf(" %s fence %d", short(out.Token), out.Fence)
				if out.Settled {
					s += " (settled from the grant log)"
				}
			}
			return s
		},
		DescribeState: func(state any) string {
			s := state.(leaseState)
			h := "free"
			if s.Holder != "" {
				h = "held by " + short(s.Holder)
				if s.VanishAfter != never {
					h += fmt.Sprintf(" (may be gone from %v)", time.Duration(s.VanishAfter))
				}
			}
			return fmt.Sprintf("%s, fence %d", h, s.Fence)
		},
	}
}

func short(tok string) string {
	if len(tok) > 8 {
		return tok[:8]
	}
	return tok
}

// Operations converts settled lease ops for porcupine: acquires whose
// grant logged nothing (NoGrant) are left out, and releases with an unknown
// outcome are folded into their token's acquire (see LeaseModel). It fails
// on an acquire whose outcome is still Unknown (run SettleLeases first).
func (m LeaseModel) Operations(ops []Op) ([]porcupine.Operation, error) {
	vanish := map[string]int64{} // token -> earliest unknown release call
	for i, op := range ops {
		in, ok := op.Input.(LeaseInput)
		if !ok {
			return nil, fmt.Errorf("faulttest: op %d: input %T is not a LeaseInput", i, op.Input)
		}
		o, ok := op.Output.(LeaseOutput)
		if !ok {
			return nil, fmt.Errorf("faulttest: op %d: output %T is not a LeaseOutput", i, op.Output)
		}
		if in.Kind == Acquire && o.Result == Unknown {
			return nil, fmt.Errorf("faulttest: op %d: acquire with an unknown outcome; settle it first", i)
		}
		if in.Kind == Release && o.Result == Unknown {
			if v, seen := vanish[in.Token]; !seen || int64(op.Call) < v {
				vanish[in.Token] = int64(op.Call)
			}
		}
	}
	out := make([]porcupine.Operation, 0, len(ops))
	folded := 0
	for _, op := range ops {
		in, o := op.Input.(LeaseInput), op.Output.(LeaseOutput)
		if o.Result == NoGrant || (in.Kind == Release && o.Result == Unknown) {
			continue
		}
		step := leaseStep{LeaseInput: in, Call: int64(op.Call), Ret: int64(op.Return), VanishAfter: never}
		if in.Kind == Acquire && o.Result == Granted {
			if o.Settled {
				step.VanishAfter = 0
			}
			if v, ok := vanish[o.Token]; ok {
				step.VanishAfter = min(step.VanishAfter, v)
				folded++
			}
		}
		out = append(out, porcupine.Operation{
			ClientId: op.Client,
			Input:    step,
			Call:     int64(op.Call),
			Output:   o,
			Return:   int64(op.Return),
		})
	}
	if folded != len(vanish) {
		return nil, fmt.Errorf("faulttest: %d tokens with an unknown release, %d of them granted in the history", len(vanish), folded)
	}
	return out, nil
}

// Check runs porcupine on settled ops with a timeout. A result other than
// porcupine.Ok (Illegal, or Unknown on timeout) is a failed check.
func (m LeaseModel) Check(ops []Op, timeout time.Duration) (porcupine.CheckResult, error) {
	pops, err := m.Operations(ops)
	return checkOps(m.Model(), pops, err, timeout)
}

// Visualize checks again, computing the partial linearizations, and writes
// porcupine's HTML visualization to a new file in dir (os.TempDir when
// empty). It returns the file's path.
func (m LeaseModel) Visualize(ops []Op, timeout time.Duration, dir string) (string, error) {
	pops, err := m.Operations(ops)
	return visualizeOps(m.Model(), pops, err, timeout, dir, "lease")
}

// Overlap is two grants whose holders certainly held the lease at once.
type Overlap struct {
	A, B Op // the two Granted acquires
	// From, To bound the common interval (history time).
	From, To time.Duration
}

func (o Overlap) String() string {
	a, b := o.A.Output.(LeaseOutput), o.B.Output.(LeaseOutput)
	return fmt.Sprintf("client %d (%s, fence %d) and client %d (%s, fence %d) both held the lease from %v to %v",
		o.A.Client, short(a.Token), a.Fence, o.B.Client, short(b.Token), b.Fence, o.From, o.To)
}

// DefiniteOverlaps is a check independent of porcupine: a holder whose
// acquire returned Granted at r and whose release later answered Released
// (called at c) held the lease during all of [r, c], since its token was
// written once and was still there at c. Two such intervals that
// intersect are a mutual-exclusion violation whatever the linearization.
func DefiniteOverlaps(ops []Op) []Overlap {
	type span struct {
		acq      Op
		from, to time.Duration
	}
	released := map[string]time.Duration{}
	for _, op := range ops {
		in, _ := op.Input.(LeaseInput)
		out, _ := op.Output.(LeaseOutput)
		if in.Kind == Release && out.Result == Released && op.Return != Infinity {
			released[in.Token] = op.Call
		}
	}
	var spans []span
	for _, op := range ops {
		in, _ := op.Input.(LeaseInput)
		out, _ := op.Output.(LeaseOutput)
		if in.Kind != Acquire || out.Result != Granted || op.Return == Infinity {
			continue
		}
		if c, ok := released[out.Token]; ok && c > op.Return {
			spans = append(spans, span{acq: op, from: op.Return, to: c})
		}
	}
	slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.from, b.from) })
	var out []Overlap
	for i := range spans {
		for j := i + 1; j < len(spans) && spans[j].from < spans[i].to; j++ {
			out = append(out, Overlap{A: spans[i].acq, B: spans[j].acq, From: spans[j].from, To: min(spans[i].to, spans[j].to)})
		}
	}
	return out
}

// leaseFile is the JSON form of a lease history and its model.
type leaseFile struct {
	Model LeaseModel
	Ops   []leaseFileOp
}

type leaseFileOp struct {
	Client              int
	Call, Return, Ended time.Duration
	Input               LeaseInput
	Output              LeaseOutput
	Err                 string `json:",omitempty"`
}

// WriteHistory writes m and a lease history as JSON, so a failed check can
// be re-run and studied away from the run that produced it
// (ReadLeaseHistory).
func (m LeaseModel) WriteHistory(w io.Writer, ops []Op) error {
	f := leaseFile{Model: m, Ops: make([]leaseFileOp, len(ops))}
	for i, op := range ops {
		in, _ := op.Input.(LeaseInput)
		out, _ := op.Output.(LeaseOutput)
		f.Ops[i] = leaseFileOp{Client: op.Client, Call: op.Call, Return: op.Return, Ended: op.Ended, Input: in, Output: out}
		if op.Err != nil {
			f.Ops[i].Err = op.Err.Error()
		}
	}
	return json.NewEncoder(w).Encode(f)
}

// ReadLeaseHistory reads what WriteHistory wrote.
func ReadLeaseHistory(r io.Reader) (LeaseModel, []Op, error) {
	var f leaseFile
	if err := json.NewDecoder(r).Decode(&f); err != nil {
		return LeaseModel{}, nil, fmt.Errorf("faulttest: reading a lease history: %w", err)
	}
	ops := make([]Op, len(f.Ops))
	for i, o := range f.Ops {
		ops[i] = Op{Client: o.Client, Call: o.Call, Return: o.Return, Ended: o.Ended, Input: o.Input, Output: o.Output}
		if o.Err != "" {
			ops[i].Err = errors.New(o.Err)
		}
	}
	return f.Model, ops, nil
}
