package config

import (
	"fmt"
	"time"

	"github.com/hashicorp/hcl/v2"
)

// Defaults of rwlock blocks.
const (
	// DefaultRWLockPrefix is an rwlock's prefix when not set.
	DefaultRWLockPrefix = "coordhost:rwlock:"
	// MinRWLockMarkerTTL is the smallest marker_ttl an rwlock accepts
	// (primitives/rwlock.MinMarkerTTL).
	MinRWLockMarkerTTL = 30 * time.Millisecond
)

// RWLock is an `rwlock "NAME"` block: a named read-write lease the host
// serves.
//
//	rwlock "NAME" {
//	  ttl        = "30s"                    # required, at least 1ms: the lease of reads and writes
//	  prefix     = "coordhost:rwlock:"      # default DefaultRWLockPrefix
//	  marker_ttl = "2s"                     # a waiting writer's entry lease; default 2s, at least 30ms
//	  starvation = policy.starvation.NAME   # optional; none means reader preference
//	  retry      = policy.retry.NAME        # optional
//	  partition  = policy.partition.NAME    # optional
//	  replicas        = 1                  # optional: see Replication
//	  replica_timeout = "100ms"            # optional, with replicas
//	}
type RWLock struct {
	Name string
	// TTL is the lease of every acquisition, read or write; at least
	// MinLockTTL.
	TTL time.Duration
	// Prefix is the key prefix (after redis.key_prefix);
	// DefaultRWLockPrefix when not set.
	Prefix string
	// MarkerTTL is how long a waiting writer's pending-writer entry lives
	// unrefreshed; 0 means the primitive's default.
	MarkerTTL time.Duration
	// Starvation, Retry and Partition name policies of their kind that the
	// Config declares; nil when not set. Without a starvation policy,
	// waiting writers never hold readers off (reader preference).
	Starvation *PolicyRef
	Retry      *PolicyRef
	Partition  *PolicyRef
	// Replication is the replicas and replica_timeout arguments: grants
	// and renewals confirmed by that many replicas; zero when not set.
	Replication
	// Range is the block header's range.
	Range hcl.Range
}

// RWLock returns the rwlock declared as `rwlock "NAME"`, or nil.
func (c *Config) RWLock(name string) *RWLock { return c.rwlocks[name] }

var rwlockSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "ttl", Required: true},
		{Name: "prefix"},
		{Name: "marker_ttl"},
		{Name: "starvation"},
		{Name: "retry"},
		{Name: "partition"},
		{Name: replicasAttr},
		{Name: replicaTimeoutAttr},
	},
}

func (d *decoder) decodeRWLock(b *hcl.Block) {
	name, ok := d.keyedName(b, "Rwlock")
	if !ok {
		return
	}
	if prev := d.cfg.rwlocks[name]; prev != nil {
		d.duplicate(b.DefRange, "Duplicate rwlock",
			fmt.Sprintf("Rwlock %q was already declared at %s; names must be unique.", name, where(prev.Range)))
		return
	}
	l := &RWLock{Name: name, Prefix: DefaultRWLockPrefix, Range: b.DefRange}
	d.cfg.rwlocks[name] = l
	d.cfg.RWLocks = append(d.cfg.RWLocks, l)

	content, diags := b.Body.Content(rwlockSchema)
	d.add(diags...)
	at := content.Attributes
	l.Replication = d.replication(at, "rwlock")
	if a := at["ttl"]; a != nil {
		if ttl, ok := d.duration(a); ok {
			if ttl < MinLockTTL {
				d.errorAt(a, "Invalid ttl", "An rwlock's ttl must be at least %v; got %v.", MinLockTTL, ttl)
			} else {
				l.TTL = ttl
			}
		}
	}
	d.warnReplicaTimeout(at, "rwlock", l.Replication, l.TTL)
	if a := at["prefix"]; a != nil {
		l.Prefix, _ = d.str(a)
	}
	if a := at["marker_ttl"]; a != nil {
		if v, ok := d.duration(a); ok {
			if v < MinRWLockMarkerTTL {
				d.errorAt(a, "Invalid marker_ttl", "An rwlock's marker_ttl must be at least %v (a waiting writer refreshes its entry every third of it); got %v.", MinRWLockMarkerTTL, v)
			} else {
				l.MarkerTTL = v
			}
		}
	}
	for _, slot := range []struct {
		name string
		dst  **PolicyRef
	}{{"starvation", &l.Starvation}, {"retry", &l.Retry}, {"partition", &l.Partition}} {
		if a := at[slot.name]; a != nil {
			*slot.dst = d.policyRefOf(a, "rwlock", name)
		}
	}
}

// policyRefOf is policyRef for an argument of block kind block (e.g.
// "rwlock") named name, so that reference errors name the block.
func (d *decoder) policyRefOf(a *hcl.Attribute, block, name string) *PolicyRef {
	ref := d.policyRef(a, name)
	if ref != nil {
		d.refs[len(d.refs)-1].block = block
	}
	return ref
}
