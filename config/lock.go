package config

import (
	"fmt"
	"sort"

	"github.com/coordhost/coordhost/policies"
	"github.com/hashicorp/hcl/v2"
)

var lockSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "ttl", Required: true},
		{Name: "fencing"},
		{Name: "fifo"},
		{Name: "prefix"},
		{Name: "retry"},
		{Name: "partition"},
		{Name: replicasAttr},
		{Name: replicaTimeoutAttr},
	},
}

func (d *decoder) decodeLock(b *hcl.Block) {
	name, ok := d.keyedName(b, "Lock")
	if !ok {
		return
	}
	if prev := d.cfg.locks[name]; prev != nil {
		d.duplicate(b.DefRange, "Duplicate lock",
			fmt.Sprintf("Lock %q was already declared at %s; names must be unique.", name, where(prev.Range)))
		return
	}
	l := &Lock{Name: name, Prefix: DefaultLockPrefix, Range: b.DefRange}
	d.cfg.locks[name] = l
	d.cfg.Locks = append(d.cfg.Locks, l)

	content, diags := b.Body.Content(lockSchema)
	d.add(diags...)
	at := content.Attributes
	l.Replication = d.replication(at, "lock")
	if a := at["ttl"]; a != nil {
		if ttl, ok := d.duration(a); ok {
			if ttl < MinLockTTL {
				d.errorAt(a, "Invalid ttl", "A lock's ttl must be at least %v; got %v.", MinLockTTL, ttl)
			} else {
				l.TTL = ttl
			}
		}
	}
	d.warnReplicaTimeout(at, "lock", l.Replication, l.TTL)
	if a := at["fencing"]; a != nil {
		l.Fencing, _ = d.boolean(a)
	}
	if a := at["fifo"]; a != nil {
		l.FIFO, _ = d.boolean(a)
	}
	if a := at["prefix"]; a != nil {
		l.Prefix, _ = d.str(a)
	}
	if a := at["retry"]; a != nil {
		l.Retry = d.policyRef(a, name)
	}
	if a := at["partition"]; a != nil {
		l.Partition = d.policyRef(a, name)
	}
}

// policyRef decodes a policy.KIND.NAME reference in argument a of lock
// lockName. The argument's name is the kind of policy the slot takes. The
// reference is checked against the declared policies by resolveRefs.
func (d *decoder) policyRef(a *hcl.Attribute, lockName string) *PolicyRef {
	want := policies.Kind(a.Name)
	tr, diags := hcl.AbsTraversalForExpr(a.Expr)
	shapeOK := !diags.HasErrors() && len(tr) == 3 && tr.RootName() == "policy"
	var kindStep, nameStep hcl.TraverseAttr
	if shapeOK {
		var ok1, ok2 bool
		kindStep, ok1 = tr[1].(hcl.TraverseAttr)
		nameStep, ok2 = tr[2].(hcl.TraverseAttr)
		shapeOK = ok1 && ok2
	}
	if !shapeOK {
		d.add(&hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Invalid policy reference",
			Detail: fmt.Sprintf("Argument %q takes a reference to a %s policy, written policy.%s.NAME without quotes: not a string or any other expression.",
				a.Name, want, want),
			Subject: a.Expr.Range().Ptr(),
		})
		return nil
	}
	kind := policies.Kind(kindStep.Name)
	if !kind.Valid() {
		d.add(&hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Unknown policy kind",
			Detail: fmt.Sprintf("%q is not a kind of policy; the kinds are retry, partition, starvation. Argument %q takes policy.%s.NAME.",
				kind, a.Name, want),
			Subject: kindStep.SrcRange.Ptr(),
		})
		return nil
	}
	ref := &PolicyRef{Kind: kind, Name: nameStep.Name, Range: tr.SourceRange()}
	d.refs = append(d.refs, pendingRef{ref: ref, slot: a.Name, lock: lockName})
	return ref
}

// resolveRefs checks every policy reference against the declared policies.
func (d *decoder) resolveRefs() {
	for _, pr := range d.refs {
		ref, want := pr.ref, policies.Kind(pr.slot)
		block := pr.block
		if block == "" {
			block = "lock"
		}
		if ref.Kind != want {
			block := pr.block
			if block == "" {
				block = "lock"
			}
			d.add(&hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Wrong kind of policy",
				Detail: fmt.Sprintf("Argument %q of %s %q takes a %s policy, but %s is a %s policy.",
					pr.slot, block, pr.lock, want, ref, ref.Kind),
				Subject: ref.Range.Ptr(),
			})
			continue
		}
		if d.cfg.Policy(ref.Kind, ref.Name) != nil {
			continue
		}
		var names []string
		for _, p := range d.cfg.Policies {
			if p.Kind == ref.Kind {
				names = append(names, p.Name)
			}
		}
		sort.Strings(names)
		detail := fmt.Sprintf("No policy %q %q is declared.", ref.Kind, ref.Name)
		if s := didYouMean(ref.Name, names, "policy."+string(ref.Kind)+"."); s != "" {
			detail += s
		} else if len(names) > 0 {
			detail += fmt.Sprintf(" The %s policies are: %s.", ref.Kind, argList(names))
		}
		d.add(&hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Reference to undeclared policy",
			Detail:   detail,
			Subject:  ref.Range.Ptr(),
		})
	}
}
