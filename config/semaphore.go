package config

import (
	"fmt"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
)

// Semaphore defaults and limits (they match package primitives/semaphore,
// which config does not import; a host test keeps them equal).
const (
	// DefaultSemaphorePrefix is a semaphore's prefix when not set.
	DefaultSemaphorePrefix = "coordhost:semaphore:"
	// SemaphoreNoExpiry is Semaphore.TTL for ttl = "none": permits that
	// expire only when released (semaphore.NoExpiry).
	SemaphoreNoExpiry time.Duration = -1
	// MaxSemaphoreCapacity is the largest capacity (semaphore.MaxCapacity).
	MaxSemaphoreCapacity = 1_000_000_000
	// MinSemaphoreTTL and MaxSemaphoreTTL bound a finite ttl (100 years,
	// semaphore.MaxTTL).
	MinSemaphoreTTL = time.Millisecond
	MaxSemaphoreTTL = 3_153_600_000_000 * time.Millisecond
)

// Semaphore is a `semaphore "NAME"` block: a named counting semaphore the
// host serves, whose permits expire on their own (or never).
//
//	semaphore "NAME" {
//	  capacity  = 10                        # required, 1 to 1000000000
//	  ttl       = "30s"                     # required: a permit's lease, or "none"
//	  prefix    = "coordhost:semaphore:"    # default DefaultSemaphorePrefix
//	  retry     = policy.retry.NAME         # optional
//	  partition = policy.partition.NAME     # optional
//	  replicas        = 1                  # optional: see Replication
//	  replica_timeout = "100ms"            # optional, with replicas
//	}
type Semaphore struct {
	Name string
	// Capacity is how many permits may be live at once, in
	// [1, MaxSemaphoreCapacity]. Every contender on a key must use the
	// same one.
	Capacity int
	// TTL is every permit's lease, in [MinSemaphoreTTL, MaxSemaphoreTTL],
	// or SemaphoreNoExpiry for ttl = "none".
	TTL time.Duration
	// Prefix is the key prefix (after redis.key_prefix);
	// DefaultSemaphorePrefix when not set.
	Prefix string
	// Retry names the retry policy Acquire consults while it waits;
	// Partition names the partition policy whose key, after the name and
	// "/", is the Redis key. Nil when not set.
	Retry     *PolicyRef
	Partition *PolicyRef
	// Replication is the replicas and replica_timeout arguments: grants
	// and renewals confirmed by that many replicas; zero when not set.
	Replication
	// Range is the block header's range.
	Range hcl.Range
}

// Semaphore returns the semaphore declared as `semaphore "NAME"`, or nil.
func (c *Config) Semaphore(name string) *Semaphore { return c.semaphores[name] }

var semaphoreSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "capacity", Required: true},
		{Name: "ttl", Required: true},
		{Name: "prefix"},
		{Name: "retry"},
		{Name: "partition"},
		{Name: replicasAttr},
		{Name: replicaTimeoutAttr},
	},
}

func (d *decoder) decodeSemaphore(b *hcl.Block) {
	name, ok := d.keyedName(b, "Semaphore")
	if !ok {
		return
	}
	if prev := d.cfg.semaphores[name]; prev != nil {
		d.duplicate(b.DefRange, "Duplicate semaphore",
			fmt.Sprintf("Semaphore %q was already declared at %s; names must be unique.", name, where(prev.Range)))
		return
	}
	s := &Semaphore{Name: name, Prefix: DefaultSemaphorePrefix, Range: b.DefRange}
	d.cfg.semaphores[name] = s
	d.cfg.Semaphores = append(d.cfg.Semaphores, s)

	content, diags := b.Body.Content(semaphoreSchema)
	d.add(diags...)
	at := content.Attributes
	s.Replication = d.replication(at, "semaphore")
	if a := at["capacity"]; a != nil {
		d.semaphoreCapacity(a, s)
	}
	if a := at["ttl"]; a != nil {
		if v, ok := d.str(a); ok {
			if v == "none" {
				s.TTL = SemaphoreNoExpiry
			} else if ttl, ok := d.parseDuration(a, v, ` or "none"`); ok {
				if ttl < MinSemaphoreTTL || ttl > MaxSemaphoreTTL {
					d.errorAt(a, "Invalid ttl", "A semaphore's ttl must be from %v to 100 years, or \"none\" for permits that expire only when released; got %q.", MinSemaphoreTTL, v)
				} else {
					s.TTL = ttl
				}
			}
		}
	}
	if s.TTL != SemaphoreNoExpiry {
		d.warnReplicaTimeout(at, "semaphore", s.Replication, s.TTL)
	}
	if a := at["prefix"]; a != nil {
		s.Prefix, _ = d.str(a)
	}
	for _, slot := range []struct {
		name string
		dst  **PolicyRef
	}{{"retry", &s.Retry}, {"partition", &s.Partition}} {
		if a := at[slot.name]; a != nil {
			*slot.dst = d.policyRefOf(a, "semaphore", name)
		}
	}
}

// semaphoreCapacity decodes capacity: a whole number in
// [1, MaxSemaphoreCapacity].
func (d *decoder) semaphoreCapacity(a *hcl.Attribute, s *Semaphore) {
	v, ok := d.eval(a, cty.Number, true)
	if !ok {
		return
	}
	bf := v.AsBigFloat()
	n, acc := bf.Int64()
	if !bf.IsInt() || acc != 0 || n < 1 || n > MaxSemaphoreCapacity {
		d.errorAt(a, "Invalid capacity", "A semaphore's capacity is how many permits may be live at once: a whole number from 1 to %d; got %s.",
			MaxSemaphoreCapacity, bf.Text('f', -1))
		return
	}
	s.Capacity = int(n)
}
