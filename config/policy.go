package config

import (
	"fmt"
	"slices"
	"strings"

	"github.com/coordhost/coordhost/policies"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

var (
	driverSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{{Name: "driver", Required: true}},
	}
	builtinSchemas = map[policies.Kind]*hcl.BodySchema{
		policies.KindRetry: {Attributes: []hcl.AttributeSchema{
			{Name: "driver", Required: true},
			{Name: "kind", Required: true},
			{Name: "base"},
			{Name: "max"},
			{Name: "delay"},
			{Name: "give_up_after"},
		}},
		policies.KindPartition: {Attributes: []hcl.AttributeSchema{
			{Name: "driver", Required: true},
			{Name: "template", Required: true},
		}},
		policies.KindStarvation: {Attributes: []hcl.AttributeSchema{
			{Name: "driver", Required: true},
			{Name: "bound", Required: true},
		}},
	}
	wasmSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{
			{Name: "driver", Required: true},
			{Name: "module", Required: true},
			{Name: "config"},
		},
		Blocks: []hcl.BlockHeaderSchema{{Type: "limits"}},
	}
	wasmLimitsSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{
			{Name: "memory_pages"},
			{Name: "call_timeout"},
		},
	}
	pluginSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{
			{Name: "driver", Required: true},
			{Name: "path", Required: true},
			{Name: "sha256", Required: true},
			{Name: "args"},
			{Name: "config"},
			{Name: "call_timeout"},
			{Name: "health_interval"},
		},
	}
)

// retryKindArgs lists the arguments each builtin retry kind takes besides
// driver and kind.
var retryKindArgs = map[RetryKind][]string{
	RetryExponential: {"base", "max", "give_up_after"},
	RetryConstant:    {"delay", "give_up_after"},
	RetryNone:        nil,
}

var allKinds = []string{string(policies.KindRetry), string(policies.KindPartition), string(policies.KindStarvation)}

// decodePolicy decodes a policy block and registers it (even when its body
// has mistakes, so references to it do not add "undeclared" errors).
func (d *decoder) decodePolicy(b *hcl.Block) {
	kind, name := policies.Kind(b.Labels[0]), b.Labels[1]
	ok := true
	if !kind.Valid() {
		d.add(&hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Unknown policy kind",
			Detail: fmt.Sprintf("%q is not a kind of policy; the kinds are %s.%s",
				kind, strings.Join(allKinds, ", "), didYouMean(string(kind), allKinds, "")),
			Subject: b.LabelRanges[0].Ptr(),
		})
		ok = false
	}
	if !hclsyntax.ValidIdentifier(name) {
		d.add(&hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Invalid policy name",
			Detail:   fmt.Sprintf("%q is not a valid name: policies are referenced as policy.KIND.NAME, so use letters, digits, underscores and dashes, starting with a letter.", name),
			Subject:  b.LabelRanges[1].Ptr(),
		})
		ok = false
	}
	if !ok {
		return
	}
	p := &Policy{Kind: kind, Name: name, Range: b.DefRange}
	key := policyKey{kind, name}
	if prev := d.cfg.policies[key]; prev != nil {
		d.duplicate(b.DefRange, "Duplicate policy",
			fmt.Sprintf("Policy %q %q was already declared at %s; names must be unique within a kind.", kind, name, where(prev.Range)))
		return
	}
	d.cfg.policies[key] = p
	d.cfg.Policies = append(d.cfg.Policies, p)

	dc, _, diags := b.Body.PartialContent(driverSchema)
	d.add(diags...)
	a := dc.Attributes["driver"]
	if a == nil {
		return
	}
	drv, ok := d.enum(a, string(DriverBuiltin), string(DriverWasm), string(DriverPlugin))
	if !ok {
		return // without a driver, the rest of the body has no schema
	}
	p.Driver = Driver(drv)
	switch p.Driver {
	case DriverBuiltin:
		p.Builtin = d.decodeBuiltin(b, kind)
	case DriverWasm:
		p.Wasm = d.decodeWasm(b)
	case DriverPlugin:
		p.Plugin = d.decodePlugin(b)
	}
}

func (d *decoder) decodeBuiltin(b *hcl.Block, kind policies.Kind) *BuiltinPolicy {
	bp := &BuiltinPolicy{}
	content, diags := b.Body.Content(builtinSchemas[kind])
	d.add(diags...)
	at := content.Attributes
	switch kind {
	case policies.KindRetry:
		a := at["kind"]
		if a == nil {
			return bp
		}
		k, ok := d.enum(a, string(RetryExponential), string(RetryConstant), string(RetryNone))
		if !ok {
			return bp
		}
		bp.Retry = RetryKind(k)
		for _, name := range []string{"base", "max", "delay", "give_up_after"} {
			x := at[name]
			if x == nil {
				continue
			}
			if !slices.Contains(retryKindArgs[bp.Retry], name) {
				d.add(&hcl.Diagnostic{
					Severity: hcl.DiagError,
					Summary:  "Argument not valid for this kind",
					Detail:   fmt.Sprintf("Argument %q does not apply to kind = %q, which takes %s.", name, k, argList(retryKindArgs[bp.Retry])),
					Subject:  x.NameRange.Ptr(),
				})
				continue
			}
			v, ok := d.duration(x)
			if !ok {
				continue
			}
			switch name {
			case "base":
				bp.Base = v
			case "max":
				bp.Max = v
			case "delay":
				bp.Delay = v
			case "give_up_after":
				bp.GiveUpAfter = v
			}
		}
		if bp.Base > 0 && bp.Max > 0 && bp.Max < bp.Base {
			d.errorAt(at["max"], "Invalid backoff", "max (%v) must not be below base (%v).", bp.Max, bp.Base)
		}
	case policies.KindPartition:
		if a := at["template"]; a != nil && d.checkPlaceholders(a) {
			if s, ok := d.str(a); ok {
				if err := checkTemplate(s); err != nil {
					d.errorAt(a, "Invalid partition template", "Template %q: %v.", s, err)
				} else {
					bp.Template = s
				}
			}
		}
	case policies.KindStarvation:
		if a := at["bound"]; a != nil {
			if s, ok := d.str(a); ok && s == "unbounded" {
				bp.Bound = policies.Unbounded
			} else if ok {
				bp.Bound, _ = d.parseDuration(a, s, ` or "unbounded"`)
			}
		}
	}
	return bp
}

// checkPlaceholders reports HCL interpolations in a partition template
// that were meant as template placeholders: HCL reads "${tenant}" as a
// reference to a variable named tenant, so the placeholder must be written
// "$${tenant}". It returns false when it reported something.
func (d *decoder) checkPlaceholders(a *hcl.Attribute) bool {
	ok := true
	for _, tr := range a.Expr.Variables() {
		switch root := tr.RootName(); root {
		case "var", "path":
		default:
			d.add(&hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Unescaped template placeholder",
				Detail: fmt.Sprintf("HCL reads ${%s} as an interpolation of a variable named %q. Write $${%s} to pass the placeholder on to the partition template.",
					root, root, root),
				Subject: tr.SourceRange().Ptr(),
			})
			ok = false
		}
	}
	return ok
}

func (d *decoder) decodeWasm(b *hcl.Block) *WasmPolicy {
	w := &WasmPolicy{MemoryPages: DefaultWasmMemoryPages}
	content, diags := b.Body.Content(wasmSchema)
	d.add(diags...)
	at := content.Attributes
	if a := at["module"]; a != nil {
		w.Module, _ = d.wasmModule(a)
		w.ModuleRange = a.Expr.Range()
	}
	if a := at["config"]; a != nil {
		w.Config, _ = d.jsonObject(a)
	}
	var limits *hcl.Block
	for _, lb := range content.Blocks {
		if limits != nil {
			d.duplicate(lb.DefRange, "Duplicate limits block", "A policy has at most one limits block; the first is at "+where(limits.DefRange)+".")
			continue
		}
		limits = lb
		lc, diags := lb.Body.Content(wasmLimitsSchema)
		d.add(diags...)
		if a := lc.Attributes["memory_pages"]; a != nil {
			n, _ := d.integer(a, 1, MaxWasmMemoryPages)
			w.MemoryPages = uint32(n)
		}
		if a := lc.Attributes["call_timeout"]; a != nil {
			w.CallTimeout, _ = d.positiveDuration(a)
		}
	}
	return w
}

func (d *decoder) decodePlugin(b *hcl.Block) *PluginPolicy {
	pp := &PluginPolicy{}
	content, diags := b.Body.Content(pluginSchema)
	d.add(diags...)
	at := content.Attributes
	if a := at["sha256"]; a != nil {
		if s, ok := d.str(a); ok {
			if validSHA256(s) {
				pp.SHA256 = s
			} else {
				d.errorAt(a, "Invalid sha256", "Argument \"sha256\" must be 64 lowercase hex digits, as printed by sha256sum; got %q.", s)
			}
		}
	}
	if a := at["path"]; a != nil {
		pp.Path, _ = d.pluginBinary(a, pp.SHA256, at["sha256"])
	}
	if a := at["args"]; a != nil {
		pp.Args, _ = d.strList(a)
	}
	if a := at["config"]; a != nil {
		pp.Config, _ = d.jsonObject(a)
	}
	if a := at["call_timeout"]; a != nil {
		pp.CallTimeout, _ = d.positiveDuration(a)
	}
	if a := at["health_interval"]; a != nil {
		pp.HealthInterval, _ = d.positiveDuration(a)
	}
	return pp
}

// argList words a list of argument names.
func argList(names []string) string {
	if len(names) == 0 {
		return "no other arguments"
	}
	return strings.Join(names, ", ")
}
