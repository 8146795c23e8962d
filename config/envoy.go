package config

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
)

// Bounds of envoy_rate_limit blocks.
const (
	// MaxEnvoyEntries is the most entries a descriptor block lists (and
	// the most a request's descriptor may carry to match one).
	MaxEnvoyEntries = 16
)

// EnvoyRateLimit is an `envoy_rate_limit "NAME"` block: the descriptors of
// one Envoy rate-limit domain, each mapped to a configured rate_limit. The
// host serves them as envoy.service.ratelimit.v3.RateLimitService.
//
//	envoy_rate_limit "edge" {
//	  domain = "edge"                 # default: the block's label; unique
//	  descriptor {
//	    entries    = [{ key = "remote_address" }]   # value left out: any value
//	    rate_limit = "per_ip"         # a rate_limit block's name (any algorithm)
//	  }
//	  descriptor {
//	    entries    = [{ key = "generic_key", value = "checkout" }, { key = "user" }]
//	    rate_limit = "checkout_per_user"
//	  }
//	}
//
// Matching follows envoyproxy/ratelimit's descriptor tree, written flat:
// each descriptor block is one path from the root of that tree to a node
// with a rate_limit. A request's descriptor matches a block when it has
// exactly the block's keys, in the block's order, and every value the
// block gives is equal (a block entry without a value matches any value).
// Where several blocks could match, the choice is made entry by entry from
// the first, as envoyproxy/ratelimit walks its tree: a block giving the
// request's value at that position beats one without a value, and a block
// that loses at some position is never chosen, even when the more specific
// one fails later (then nothing matches, as in envoyproxy/ratelimit).
// One difference: only blocks with exactly as many entries as the
// request's descriptor take part, so a shorter block that is a prefix of
// the request (key1 = "x") does not shadow a longer one (key1, key2), as
// its tree node would in envoyproxy/ratelimit.
//
// Left out from envoyproxy/ratelimit's configuration: value wildcards
// ("foo*"), shadow_mode, unlimited, replaces, detailed_metric and per-
// descriptor names; a descriptor's own rate limit in the request
// (limit override) is ignored.
type EnvoyRateLimit struct {
	Name        string
	Domain      string
	Descriptors []*EnvoyDescriptor
	// Range is the block header's range.
	Range hcl.Range
}

// EnvoyDescriptor is a descriptor block of an envoy_rate_limit.
type EnvoyDescriptor struct {
	// Entries are the keys, in order, and the values (empty: any value)
	// a request's descriptor must have; 1 to MaxEnvoyEntries, keys
	// non-empty.
	Entries []EnvoyEntry
	// RateLimit names the rate_limit block that decides.
	RateLimit string
	// Range is the block header's range.
	Range hcl.Range
}

// EnvoyEntry is one entry of a descriptor block: a key and its value,
// "" for any value.
type EnvoyEntry struct {
	Key   string
	Value string
}

// EnvoyDomain returns the envoy_rate_limit block serving domain, or nil.
func (c *Config) EnvoyDomain(domain string) *EnvoyRateLimit { return c.envoyDomains[domain] }

var (
	envoyRateLimitSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{{Name: "domain"}},
		Blocks:     []hcl.BlockHeaderSchema{{Type: "descriptor"}},
	}
	envoyDescriptorSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{
			{Name: "entries", Required: true},
			{Name: "rate_limit", Required: true},
		},
	}
)

// pendingEnvoyRef is a descriptor's rate_limit, checked once every
// rate_limit block is known.
type pendingEnvoyRef struct {
	desc *EnvoyDescriptor
	attr *hcl.Attribute
	blk  string
}

func (d *decoder) decodeEnvoyRateLimit(b *hcl.Block) {
	name := b.Labels[0]
	if prev := d.cfg.envoyNames[name]; prev != nil {
		d.duplicate(b.DefRange, "Duplicate envoy_rate_limit",
			fmt.Sprintf("envoy_rate_limit %q was already declared at %s; names must be unique.", name, where(prev.Range)))
		return
	}
	e := &EnvoyRateLimit{Name: name, Domain: name, Range: b.DefRange}
	d.cfg.envoyNames[name] = e
	content, diags := b.Body.Content(envoyRateLimitSchema)
	d.add(diags...)
	domainAt := b.LabelRanges[0]
	if a := content.Attributes["domain"]; a != nil {
		if s, ok := d.str(a); ok {
			e.Domain = s
			domainAt = a.Expr.Range()
		}
	}
	if e.Domain == "" {
		d.add(&hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid domain",
			Detail: "An envoy_rate_limit's domain must not be empty (Envoy's rate limit filter requires one).", Subject: domainAt.Ptr()})
		return
	}
	if prev := d.cfg.envoyDomains[e.Domain]; prev != nil {
		d.duplicate(domainAt, "Duplicate domain",
			fmt.Sprintf("Domain %q is already served by envoy_rate_limit %q at %s; a domain has one block.", e.Domain, prev.Name, where(prev.Range)))
		return
	}
	d.cfg.envoyDomains[e.Domain] = e
	d.cfg.EnvoyRateLimits = append(d.cfg.EnvoyRateLimits, e)
	if len(content.Blocks) == 0 {
		d.add(&hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Missing descriptor block",
			Detail: fmt.Sprintf("envoy_rate_limit %q needs at least one descriptor block.", name), Subject: b.DefRange.Ptr()})
	}
	seen := map[string]*EnvoyDescriptor{}
	for _, db := range content.Blocks {
		dc, diags := db.Body.Content(envoyDescriptorSchema)
		d.add(diags...)
		desc := &EnvoyDescriptor{Range: db.DefRange}
		ok := true
		if a := dc.Attributes["entries"]; a != nil {
			desc.Entries, ok = d.envoyEntries(a)
			if ok {
				sig := entriesSig(desc.Entries)
				if prev := seen[sig]; prev != nil {
					d.errorAt(a, "Duplicate descriptor", "These entries are already matched by the descriptor at %s.", where(prev.Range))
					ok = false
				} else {
					seen[sig] = desc
				}
			}
		} else {
			ok = false
		}
		if a := dc.Attributes["rate_limit"]; a != nil {
			if s, sok := d.str(a); sok {
				desc.RateLimit = s
				d.envoyRefs = append(d.envoyRefs, pendingEnvoyRef{desc: desc, attr: a, blk: name})
			}
		}
		if ok {
			e.Descriptors = append(e.Descriptors, desc)
		}
	}
}

// entriesSig is a descriptor's entries as one comparable string.
func entriesSig(es []EnvoyEntry) string {
	var b strings.Builder
	for _, e := range es {
		fmt.Fprintf(&b, "%q=%q;", e.Key, e.Value)
	}
	return b.String()
}

// envoyEntries decodes a descriptor's entries: a list of objects with a
// key and an optional value.
func (d *decoder) envoyEntries(a *hcl.Attribute) ([]EnvoyEntry, bool) {
	v, ok := d.eval(a, cty.DynamicPseudoType, true)
	if !ok {
		return nil, false
	}
	const want = `a list of objects such as [{ key = "remote_address" }, { key = "path", value = "/login" }]`
	if t := v.Type(); !t.IsListType() && !t.IsTupleType() {
		d.errorAt(a, "Invalid entries", "A descriptor's entries are %s, in the order Envoy sends them (a map has no order).", want)
		return nil, false
	}
	n := v.LengthInt()
	if n == 0 || n > MaxEnvoyEntries {
		d.errorAt(a, "Invalid entries", "A descriptor has 1 to %d entries; got %d.", MaxEnvoyEntries, n)
		return nil, false
	}
	out := make([]EnvoyEntry, 0, n)
	keys := map[string]bool{}
	for i, el := range v.AsValueSlice() {
		t := el.Type()
		if el.IsNull() || (!t.IsObjectType() && !t.IsMapType()) {
			d.errorAt(a, "Invalid entries", "Entry %d is not an object: entries are %s.", i, want)
			return nil, false
		}
		var e EnvoyEntry
		hasKey := false
		for k, fv := range el.AsValueMap() {
			if k != "key" && k != "value" {
				d.errorAt(a, "Invalid entries", "Entry %d has %q: an entry has only key and value.", i, k)
				return nil, false
			}
			if fv.IsNull() || fv.Type() != cty.String {
				d.errorAt(a, "Invalid entries", "Entry %d's %s must be a string.", i, k)
				return nil, false
			}
			if k == "key" {
				e.Key, hasKey = fv.AsString(), true
			} else if e.Value = fv.AsString(); e.Value == "" {
				// "" would silently mean any value (the same as no value).
				d.errorAt(a, "Invalid entries", "Entry %d has an empty value: leave value out to match any value.", i)
				return nil, false
			}
		}
		if !hasKey || e.Key == "" {
			d.errorAt(a, "Invalid entries", "Entry %d needs a non-empty key.", i)
			return nil, false
		}
		if keys[e.Key] {
			// envoyproxy/ratelimit allows it; a repeated key is almost
			// always a mistake, and would make the partition key ambiguous.
			d.errorAt(a, "Invalid entries", "Key %q appears twice in one descriptor.", e.Key)
			return nil, false
		}
		keys[e.Key] = true
		out = append(out, e)
	}
	return out, true
}

// resolveEnvoyRefs checks every descriptor's rate_limit against the
// declared rate limits.
func (d *decoder) resolveEnvoyRefs() {
	for _, r := range d.envoyRefs {
		if d.cfg.rateLimits[r.desc.RateLimit] != nil {
			continue
		}
		names := make([]string, 0, len(d.cfg.rateLimits))
		for n := range d.cfg.rateLimits {
			names = append(names, n)
		}
		sort.Strings(names)
		detail := fmt.Sprintf("envoy_rate_limit %q names rate_limit %q, which is not declared.", r.blk, r.desc.RateLimit)
		if s := didYouMean(r.desc.RateLimit, names, ""); s != "" {
			detail += s
		} else if len(names) > 0 {
			detail += fmt.Sprintf(" The rate limits are: %s.", argList(names))
		}
		d.errorAt(r.attr, "Reference to undeclared rate_limit", "%s", detail)
	}
}

// Match returns the descriptor block that a request's descriptor with
// these keys and values matches (see EnvoyRateLimit), or nil.
// keys and values have the same length.
func (e *EnvoyRateLimit) Match(keys, values []string) *EnvoyDescriptor {
	if len(keys) == 0 || len(keys) != len(values) || len(keys) > MaxEnvoyEntries {
		return nil
	}
	cands := make([]*EnvoyDescriptor, 0, len(e.Descriptors))
	for _, d := range e.Descriptors {
		if len(d.Entries) == len(keys) {
			cands = append(cands, d)
		}
	}
	for i := range keys {
		// Value-specific entries win over any-value ones at each position,
		// as envoyproxy/ratelimit's tree walk prefers "key_value" to "key".
		exact := slices.ContainsFunc(cands, func(d *EnvoyDescriptor) bool {
			return d.Entries[i].Key == keys[i] && d.Entries[i].Value != "" && d.Entries[i].Value == values[i]
		})
		cands = slices.DeleteFunc(cands, func(d *EnvoyDescriptor) bool {
			en := d.Entries[i]
			if en.Key != keys[i] {
				return true
			}
			if exact {
				return en.Value != values[i]
			}
			return en.Value != ""
		})
		if len(cands) == 0 {
			return nil
		}
	}
	return cands[0]
}
