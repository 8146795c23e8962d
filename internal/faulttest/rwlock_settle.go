package faulttest

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// SettleRW resolves every acquire with an unknown outcome against the
// grant log (the members granted, in log order; complete, read once no
// connection can still carry an acquire), as SettleLeases does for leases:
// a logged token becomes a Settled Granted (Return stays Infinity), any
// other a NoGrant with Return = Ended. It checks the log against the
// history: members unique, every known grant logged in its mode, every
// logged grant sent by exactly one recorded acquire of that mode.
func SettleRW(ops []Op, grants []string) ([]Op, Settlement, error) {
	st := Settlement{Grants: len(grants)}
	logged := make(map[string]bool, len(grants))
	for _, g := range grants {
		if !strings.HasPrefix(g, "r:") && !strings.HasPrefix(g, "w:") || len(g) < 3 {
			return nil, st, fmt.Errorf("faulttest: grant log entry %q is not r:<token> or w:<token>", g)
		}
		if logged[g] {
			return nil, st, fmt.Errorf("faulttest: grant log: %q granted twice", g)
		}
		logged[g] = true
	}
	used := make(map[string]bool, len(grants))
	out := slices.Clone(ops)
	var errs []error
	for i, op := range out {
		in, ok := op.Input.(RWInput)
		if !ok {
			return nil, st, fmt.Errorf("faulttest: op %d: input %T is not an RWInput", i, op.Input)
		}
		o, ok := op.Output.(RWOutput)
		if !ok {
			return nil, st, fmt.Errorf("faulttest: op %d: output %T is not an RWOutput", i, op.Output)
		}
		if in.Kind == Release {
			if o.Result == Unknown {
				st.UnknownReleases++
			}
			continue
		}
		switch o.Result {
		case Granted:
			m := in.Mode.Member(o.Token)
			switch {
			case !logged[m]:
				errs = append(errs, fmt.Errorf("client %d %s acquire at %v: granted %q but the grant log lacks it", op.Client, in.Mode, op.Call, m))
			case used[m]:
				errs = append(errs, fmt.Errorf("%q returned by two acquires", m))
			}
			used[m] = true
		case Unknown:
			st.UnknownAcquires++
			if m := in.Mode.Member(in.Token); in.Token != "" && logged[m] {
				if used[m] {
					errs = append(errs, fmt.Errorf("%q sent by two acquires", m))
				}
				used[m] = true
				out[i].Output = RWOutput{Result: Granted, Token: in.Token, Settled: true}
				st.SettledGranted++
			} else {
				out[i].Output = RWOutput{Result: NoGrant}
				out[i].Return = op.Ended
				st.SettledNoGrant++
			}
		}
	}
	for _, g := range grants {
		if !used[g] {
			errs = append(errs, fmt.Errorf("grant log has %q that no recorded acquire sent", g))
		}
	}
	if len(errs) > 0 {
		return nil, st, fmt.Errorf("faulttest: grant log and history disagree: %w", errors.Join(errs...))
	}
	return out, st, nil
}

// RWOverlap is a writer and another holder that certainly held at once.
type RWOverlap struct {
	Writer, Other Op // the two Granted acquires
	From, To      time.Duration
}

func (o RWOverlap) String() string {
	w, x := o.Writer.Input.(RWInput), o.Other.Input.(RWInput)
	return fmt.Sprintf("client %d (%s %s) and client %d (%s %s) both held from %v to %v",
		o.Writer.Client, w.Mode, short(o.Writer.Output.(RWOutput).Token),
		o.Other.Client, x.Mode, short(o.Other.Output.(RWOutput).Token), o.From, o.To)
}

// RWDefiniteOverlaps is a check independent of porcupine: a lease whose
// acquire returned Granted at r and whose release later answered Released
// (called at c) held during all of [r, c]. A writer's interval meeting any
// other holder's is a violation whatever the linearization.
func RWDefiniteOverlaps(ops []Op) []RWOverlap {
	type span struct {
		acq      Op
		write    bool
		from, to time.Duration
	}
	released := map[string]time.Duration{}
	for _, op := range ops {
		in, _ := op.Input.(RWInput)
		out, _ := op.Output.(RWOutput)
		if in.Kind == Release && out.Result == Released && op.Return != Infinity {
			released[in.Mode.Member(in.Token)] = op.Call
		}
	}
	var spans []span
	for _, op := range ops {
		in, _ := op.Input.(RWInput)
		out, _ := op.Output.(RWOutput)
		if in.Kind != Acquire || out.Result != Granted || op.Return == Infinity {
			continue
		}
		if c, ok := released[in.Mode.Member(out.Token)]; ok && c > op.Return {
			spans = append(spans, span{acq: op, write: in.Mode == RWWrite, from: op.Return, to: c})
		}
	}
	slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.from, b.from) })
	var out []RWOverlap
	for i := range spans {
		for j := i + 1; j < len(spans) && spans[j].from < spans[i].to; j++ {
			a, b := spans[i], spans[j]
			if !a.write && !b.write {
				continue // readers share
			}
			if !a.write {
				a, b = b, a
			}
			out = append(out, RWOverlap{Writer: a.acq, Other: b.acq, From: spans[j].from, To: min(spans[i].to, spans[j].to)})
		}
	}
	return out
}
