package config

import (
	"fmt"
	"time"

	"github.com/hashicorp/hcl/v2"
)

// Lease defaults and limits (they match package primitives/lease, which
// config does not import; a host test keeps them equal).
const (
	// DefaultLeasePrefix is a lease block's prefix when not set.
	DefaultLeasePrefix = "coordhost:lease:"
	// MinLeaseTTL and MaxLeaseTTL bound ttl and max_ttl (100 years,
	// lease.MaxTTL).
	MinLeaseTTL = time.Millisecond
	MaxLeaseTTL = 3_153_600_000_000 * time.Millisecond
)

// Lease is a `lease "NAME"` block: named hash-field leases the host serves.
// The block's hash (its name, or name "/" partition key) holds one field
// per lease, each with its own expiry, so a caller names the field it
// leases, and may ask for its own ttl up to max_ttl. Serving it needs
// hash-field expiry (Redis 7.4 or newer, Valkey 9.0 or newer); config does
// not check the server.
//
//	lease "NAME" {
//	  ttl       = "30s"                 # required: the lease a request gets when it names none
//	  max_ttl   = "5m"                  # the longest lease a request may ask for; default ttl
//	  prefix    = "coordhost:lease:"    # default DefaultLeasePrefix
//	  retry     = policy.retry.NAME     # optional
//	  partition = policy.partition.NAME # optional: chooses the hash
//	  replicas        = 1                  # optional: see Replication
//	  replica_timeout = "100ms"            # optional, with replicas
//	}
type Lease struct {
	Name string
	// TTL is the lease of a request that names none: whole milliseconds
	// in [MinLeaseTTL, MaxLeaseTTL].
	TTL time.Duration
	// MaxTTL is the longest lease a request may ask for: whole
	// milliseconds in [TTL, MaxLeaseTTL]; TTL when not set (requests may
	// then ask for shorter leases only).
	MaxTTL time.Duration
	// Prefix is the key prefix of the hash (after redis.key_prefix);
	// DefaultLeasePrefix when not set.
	Prefix string
	// Retry names the retry policy Acquire consults while it waits;
	// Partition names the partition policy whose key, after the name and
	// "/", chooses the hash. Nil when not set.
	Retry     *PolicyRef
	Partition *PolicyRef
	// Replication is the replicas and replica_timeout arguments: grants
	// and renewals confirmed by that many replicas; zero when not set.
	Replication
	// Range is the block header's range.
	Range hcl.Range
}

// Lease returns the lease block declared as `lease "NAME"`, or nil.
func (c *Config) Lease(name string) *Lease { return c.leases[name] }

var leaseSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "ttl", Required: true},
		{Name: "max_ttl"},
		{Name: "prefix"},
		{Name: "retry"},
		{Name: "partition"},
		{Name: replicasAttr},
		{Name: replicaTimeoutAttr},
	},
}

func (d *decoder) decodeLease(b *hcl.Block) {
	name, ok := d.keyedName(b, "Lease")
	if !ok {
		return
	}
	if prev := d.cfg.leases[name]; prev != nil {
		d.duplicate(b.DefRange, "Duplicate lease",
			fmt.Sprintf("Lease %q was already declared at %s; names must be unique.", name, where(prev.Range)))
		return
	}
	l := &Lease{Name: name, Prefix: DefaultLeasePrefix, Range: b.DefRange}
	d.cfg.leases[name] = l
	d.cfg.Leases = append(d.cfg.Leases, l)

	content, diags := b.Body.Content(leaseSchema)
	d.add(diags...)
	at := content.Attributes
	l.Replication = d.replication(at, "lease")
	ttlOK := false
	if a := at["ttl"]; a != nil {
		l.TTL, ttlOK = d.leaseDuration(a)
	}
	if ttlOK {
		d.warnReplicaTimeout(at, "lease", l.Replication, l.TTL)
	}
	l.MaxTTL = l.TTL
	if a := at["max_ttl"]; a != nil {
		if v, ok := d.leaseDuration(a); ok {
			if ttlOK && v < l.TTL {
				d.errorAt(a, "Invalid max_ttl", "A lease's max_ttl, the longest lease a request may ask for, must be at least its ttl (%v); got %v.", l.TTL, v)
			} else {
				l.MaxTTL = v
			}
		}
	}
	if a := at["prefix"]; a != nil {
		l.Prefix, _ = d.str(a)
	}
	for _, slot := range []struct {
		name string
		dst  **PolicyRef
	}{{"retry", &l.Retry}, {"partition", &l.Partition}} {
		if a := at[slot.name]; a != nil {
			*slot.dst = d.policyRefOf(a, "lease", name)
		}
	}
}

// leaseDuration decodes ttl or max_ttl: whole milliseconds (field expiry
// counts in milliseconds, so a request of exactly max_ttl is never rounded
// above it) in [MinLeaseTTL, MaxLeaseTTL].
func (d *decoder) leaseDuration(a *hcl.Attribute) (time.Duration, bool) {
	v, ok := d.duration(a)
	if !ok {
		return 0, false
	}
	switch {
	case v < MinLeaseTTL || v > MaxLeaseTTL:
		d.errorAt(a, "Invalid "+a.Name, "A lease's %s must be from %v to 100 years; got %v.", a.Name, MinLeaseTTL, v)
	case v%time.Millisecond != 0:
		d.errorAt(a, "Invalid "+a.Name, "A lease's %s must be a whole number of milliseconds; got %v.", a.Name, v)
	default:
		return v, true
	}
	return 0, false
}
