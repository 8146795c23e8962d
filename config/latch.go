package config

import (
	"fmt"
	"time"

	"github.com/hashicorp/hcl/v2"
)

// Latch defaults and limits (they match package primitives/latch, which
// config does not import; a host test keeps them equal).
const (
	// DefaultLatchPrefix is a latch's prefix when not set.
	DefaultLatchPrefix = "coordhost:latch:"
	// LatchNoExpiry is Latch.TTL for ttl = "none": latches never expire.
	LatchNoExpiry time.Duration = -1
	// MinLatchTTL and MaxLatchTTL bound a latch's ttl (100 years).
	MinLatchTTL = time.Millisecond
	MaxLatchTTL = 3_153_600_000_000 * time.Millisecond
	// MinLatchRecheck is the smallest recheck a latch accepts.
	MinLatchRecheck = 10 * time.Millisecond
)

// Latch is a `latch "NAME"` block: a named countdown latch the host
// serves. Zero durations mean the primitive's defaults (package latch:
// a TTL of 24 hours, a re-read every 2 s).
type Latch struct {
	Name string
	// TTL is how long a latch outlives its last change (create, reset,
	// count-down); 0 when not set (the default, 24 hours), LatchNoExpiry
	// for "none", else in [MinLatchTTL, MaxLatchTTL].
	TTL time.Duration
	// Recheck bounds how long a waiter goes without re-reading the latch
	// when no notification arrives; 0 when not set, else at least
	// MinLatchRecheck.
	Recheck time.Duration
	// Prefix is the latch's key prefix (after redis.key_prefix);
	// DefaultLatchPrefix when not set.
	Prefix string
	// Retry names the retry policy that decides how reads (join, count,
	// a waiter's re-reads) retry after a transient error; latch writes are
	// never retried. Partition names the partition policy whose key, after
	// the latch's name and "/", is the Redis key. Nil when not set.
	Retry     *PolicyRef
	Partition *PolicyRef
	// Range is the block header's range.
	Range hcl.Range
}

// Latch returns the latch declared as `latch "NAME"`, or nil.
func (c *Config) Latch(name string) *Latch { return c.latches[name] }

var latchSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "ttl"},
		{Name: "recheck"},
		{Name: "prefix"},
		{Name: "retry"},
		{Name: "partition"},
	},
}

func (d *decoder) decodeLatch(b *hcl.Block) {
	name, ok := d.keyedName(b, "Latch")
	if !ok {
		return
	}
	if prev := d.cfg.latches[name]; prev != nil {
		d.duplicate(b.DefRange, "Duplicate latch",
			fmt.Sprintf("Latch %q was already declared at %s; names must be unique.", name, where(prev.Range)))
		return
	}
	l := &Latch{Name: name, Prefix: DefaultLatchPrefix, Range: b.DefRange}
	d.cfg.latches[name] = l
	d.cfg.Latches = append(d.cfg.Latches, l)

	content, diags := b.Body.Content(latchSchema)
	d.add(diags...)
	at := content.Attributes
	if a := at["ttl"]; a != nil {
		if s, ok := d.str(a); ok {
			if s == "none" {
				l.TTL = LatchNoExpiry
			} else if ttl, ok := d.parseDuration(a, s, ` or "none"`); ok {
				if ttl < MinLatchTTL || ttl > MaxLatchTTL {
					d.errorAt(a, "Invalid ttl", "A latch's ttl must be from %v to 100 years, or \"none\" for latches that never expire; got %q. Omit it for the default, 24h.", MinLatchTTL, s)
				} else {
					l.TTL = ttl
				}
			}
		}
	}
	if a := at["recheck"]; a != nil {
		if r, ok := d.duration(a); ok {
			if r < MinLatchRecheck {
				d.errorAt(a, "Invalid recheck", "A latch's recheck must be at least %v (each waiting process reads the latch once per interval); got %v. Omit it for the default, 2s.", MinLatchRecheck, r)
			} else {
				l.Recheck = r
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
			n := len(d.refs)
			*slot.dst = d.policyRef(a, name)
			if len(d.refs) > n {
				d.refs[len(d.refs)-1].block = "latch"
			}
		}
	}
}
