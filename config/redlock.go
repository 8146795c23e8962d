package config

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// Defaults of a redlock block. They match primitives/redlock's
// DefaultMaxTTL, DefaultDrift and DefaultDriftFactor (a host test checks).
const (
	// DefaultRedlockPrefix is a redlock's key prefix when not set.
	DefaultRedlockPrefix = "coordhost:redlock:"
	// DefaultRedlockMaxTTL is max_ttl when not set.
	DefaultRedlockMaxTTL = time.Minute
	// DefaultRedlockDrift and DefaultRedlockDriftFactor make the
	// clock-drift allowance when drift and drift_factor are not set.
	DefaultRedlockDrift       = 2 * time.Millisecond
	DefaultRedlockDriftFactor = 0.01
	// MinRedlockNodes is the fewest addresses a redlock takes.
	MinRedlockNodes = 3
)

// Redlock is a `redlock "NAME"` block: a lock the host holds on a majority
// of independent servers, each reached by a client of its own.
type Redlock struct {
	Name string
	// Addresses are the nodes, one independent standalone server each
	// ("host:port" or a unix socket path): an odd number, at least
	// MinRedlockNodes, no two alike. (Two addresses of one server, such
	// as localhost and 127.0.0.1, are found by the host at first use.)
	Addresses []string
	// Username and Password authenticate to every node; empty means the
	// redis block's (if any). The redis block's tls applies to the nodes.
	Username, Password string
	// TTL is the lease of an acquisition: at least MinLockTTL, at most
	// MaxTTL, and longer than the drift allowance and NodeTimeout.
	TTL time.Duration
	// MaxTTL bounds every lease and is how long a node found restarted sits
	// out of quorums; DefaultRedlockMaxTTL when not set.
	MaxTTL time.Duration
	// NodeTimeout bounds each node's part of a call; 0 means the
	// primitive's default.
	NodeTimeout time.Duration
	// Drift and DriftFactor make the clock-drift allowance, Drift +
	// DriftFactor·ttl; 0 means the defaults above.
	Drift       time.Duration
	DriftFactor float64
	// Prefix is the key prefix (after redis.key_prefix) on every node;
	// DefaultRedlockPrefix when not set.
	Prefix string
	// Retry and Partition name declared policies; nil when not set.
	Retry     *PolicyRef
	Partition *PolicyRef
	// Range is the block header's range.
	Range hcl.Range
}

// Redlock returns the redlock declared as `redlock "NAME"`, or nil.
func (c *Config) Redlock(name string) *Redlock {
	for _, r := range c.Redlocks {
		if r.Name == name {
			return r
		}
	}
	return nil
}

var redlockSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "addresses", Required: true},
		{Name: "ttl", Required: true},
		{Name: "max_ttl"},
		{Name: "node_timeout"},
		{Name: "drift"},
		{Name: "drift_factor"},
		{Name: "username"},
		{Name: "password"},
		{Name: "prefix"},
		{Name: "retry"},
		{Name: "partition"},
	},
}

func (d *decoder) decodeRedlock(b *hcl.Block) {
	name, ok := d.keyedName(b, "Redlock")
	if !ok {
		return
	}
	if prev := d.cfg.Redlock(name); prev != nil {
		d.duplicate(b.DefRange, "Duplicate redlock",
			fmt.Sprintf("Redlock %q was already declared at %s; names must be unique.", name, where(prev.Range)))
		return
	}
	r := &Redlock{Name: name, Prefix: DefaultRedlockPrefix, MaxTTL: DefaultRedlockMaxTTL, Range: b.DefRange}
	d.cfg.Redlocks = append(d.cfg.Redlocks, r)

	content, diags := b.Body.Content(redlockSchema)
	d.add(diags...)
	at := content.Attributes
	if a := at["addresses"]; a != nil {
		d.redlockAddresses(r, a)
	}
	if a := at["max_ttl"]; a != nil {
		if v, ok := d.positiveDuration(a); ok {
			r.MaxTTL = v
		}
	}
	if a := at["node_timeout"]; a != nil {
		r.NodeTimeout, _ = d.positiveDuration(a)
	}
	if a := at["drift"]; a != nil {
		r.Drift, _ = d.positiveDuration(a)
	}
	if a := at["drift_factor"]; a != nil {
		if v, ok := d.eval(a, cty.Number, true); ok {
			f, _ := v.AsBigFloat().Float64()
			if f <= 0 || f >= 0.5 || math.IsNaN(f) {
				d.errorAt(a, "Invalid drift_factor", "Argument \"drift_factor\" is the share of the ttl allowed for clock drift: above 0 and below 0.5 (default %v); got %v.", DefaultRedlockDriftFactor, f)
			} else {
				r.DriftFactor = f
			}
		}
	}
	if a := at["ttl"]; a != nil {
		if ttl, ok := d.duration(a); ok {
			d.redlockTTL(r, a, ttl)
		}
	}
	if a := at["username"]; a != nil {
		r.Username, _ = d.str(a)
	}
	if a := at["password"]; a != nil {
		r.Password, _ = d.str(a)
	}
	if a := at["prefix"]; a != nil {
		r.Prefix, _ = d.str(a)
	}
	if a := at["retry"]; a != nil {
		r.Retry = d.policyRefOf(a, "redlock", name)
	}
	if a := at["partition"]; a != nil {
		r.Partition = d.policyRefOf(a, "redlock", name)
	}
}

// redlockTTL checks the ttl against max_ttl, the drift allowance and
// node_timeout (decoded before it).
func (d *decoder) redlockTTL(r *Redlock, a *hcl.Attribute, ttl time.Duration) {
	drift, factor := r.Drift, r.DriftFactor
	if drift == 0 {
		drift = DefaultRedlockDrift
	}
	if factor == 0 {
		factor = DefaultRedlockDriftFactor
	}
	allowance := drift + time.Duration(float64(ttl)*factor)
	switch {
	case ttl < MinLockTTL:
		d.errorAt(a, "Invalid ttl", "A redlock's ttl must be at least %v; got %v.", MinLockTTL, ttl)
	case ttl > r.MaxTTL:
		d.errorAt(a, "Invalid ttl", "A redlock's ttl (%v) must not exceed its max_ttl (%v), which bounds every lease and how long a restarted node sits out.", ttl, r.MaxTTL)
	case ttl <= allowance:
		d.errorAt(a, "Invalid ttl", "A redlock's ttl (%v) must exceed its clock-drift allowance (drift + drift_factor·ttl = %v), or no grant has any validity.", ttl, allowance)
	case r.NodeTimeout > 0 && ttl <= r.NodeTimeout:
		d.errorAt(a, "Invalid ttl", "A redlock's ttl (%v) must exceed its node_timeout (%v): an attempt that waits for a slow node would have no validity left.", ttl, r.NodeTimeout)
	default:
		r.TTL = ttl
	}
}

// redlockAddresses decodes and checks the node addresses: an odd number,
// at least MinRedlockNodes, each valid, no two alike. Mistakes in one
// element point at that element when the list is written literally.
func (d *decoder) redlockAddresses(r *Redlock, a *hcl.Attribute) {
	addrs, ok := d.strList(a)
	if !ok {
		return
	}
	elem := func(i int) *hcl.Range {
		if tup, ok := a.Expr.(*hclsyntax.TupleConsExpr); ok && i < len(tup.Exprs) {
			return tup.Exprs[i].Range().Ptr()
		}
		return a.Expr.Range().Ptr()
	}
	diag := func(subject *hcl.Range, summary, detail string, args ...any) {
		d.add(&hcl.Diagnostic{Severity: hcl.DiagError, Summary: summary, Detail: fmt.Sprintf(detail, args...), Subject: subject})
	}
	valid := true
	seen := map[string]int{}
	for i, addr := range addrs {
		if err := checkAddress(addr, false); err != nil {
			diag(elem(i), "Invalid redlock node address", "Element %d of \"addresses\", %q, %v.", i, addr, err)
			valid = false
			continue
		}
		k := normalAddress(addr)
		if j, dup := seen[k]; dup {
			diag(elem(i), "Duplicate redlock node", "Element %d of \"addresses\", %q, is the same node as element %d, %q: each node must be a different, independent server (a node counted twice can give two holders a majority).", i, addr, j, addrs[j])
			valid = false
			continue
		}
		seen[k] = i
	}
	switch n := len(addrs); {
	case n < MinRedlockNodes:
		diag(a.Expr.Range().Ptr(), "Too few redlock nodes", "Argument \"addresses\" lists %d node(s); Redlock needs an odd number of at least %d independent servers.", n, MinRedlockNodes)
		valid = false
	case n%2 == 0:
		diag(a.Expr.Range().Ptr(), "Even number of redlock nodes", "Argument \"addresses\" lists %d nodes; use an odd number (%d or %d): an even count needs as large a majority as the next odd one and tolerates no more failures.", n, n-1, n+1)
		valid = false
	}
	if valid {
		r.Addresses = addrs
	}
}

// normalAddress is addr with its host in lower case (host names are
// case-insensitive; a unix socket path is kept as it is).
func normalAddress(addr string) string {
	if strings.HasPrefix(addr, "/") {
		return addr
	}
	i := strings.LastIndex(addr, ":")
	return strings.ToLower(addr[:i]) + addr[i:]
}
