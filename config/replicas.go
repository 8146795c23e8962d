package config

import (
	"fmt"
	"time"

	"github.com/hashicorp/hcl/v2"
)

// Limits of the replicas and replica_timeout arguments of lock, rwlock,
// semaphore and lease blocks (they match primitives.MaxReplicas and
// primitives.MaxReplicaTimeout, which config does not import; a host test
// keeps them equal).
const (
	MaxReplicas          = 64
	MinReplicaTimeout    = time.Millisecond
	MaxReplicaTimeout    = time.Minute
	replicasAttr         = "replicas"
	replicaTimeoutAttr   = "replica_timeout"
	replicaTimeoutDetail = "how long a grant or renewal waits for the replicas to acknowledge it"
)

// Replication is what the replicas and replica_timeout arguments of a
// lock, rwlock, semaphore or lease block ask for:
//
//	replicas        = 1       # 0 to 64; default 0: grants are not confirmed
//	replica_timeout = "100ms" # 1ms to 1m; default 1s; only with replicas
//
// With replicas = N, every grant, renewal and fencing increment counts
// only once N replicas acknowledged it (WAIT N timeout); one they do not
// confirm in time is released and the call fails (the primitives'
// Options.Replicas). The zero value is off.
type Replication struct {
	// Replicas is N, in [0, MaxReplicas]; 0 is off.
	Replicas int
	// ReplicaTimeout bounds the wait, in [MinReplicaTimeout,
	// MaxReplicaTimeout]; 0 means the primitives' default (1s). Set only
	// with Replicas above 0.
	ReplicaTimeout time.Duration
}

// replication decodes the replicas and replica_timeout arguments of a
// block of kind block (e.g. "lock"); every mistake is a diagnostic on the
// argument's expression.
func (d *decoder) replication(at hcl.Attributes, block string) Replication {
	var r Replication
	replicasOK := true
	if a := at[replicasAttr]; a != nil {
		n, ok := d.integer(a, 0, MaxReplicas)
		r.Replicas, replicasOK = int(n), ok
	}
	a := at[replicaTimeoutAttr]
	if a == nil {
		return r
	}
	v, ok := d.duration(a)
	switch {
	case !ok, !replicasOK:
	case v < MinReplicaTimeout || v > MaxReplicaTimeout:
		d.errorAt(a, "Invalid replica_timeout", "A %s's replica_timeout (%s) must be from %v to %v; got %v.", block, replicaTimeoutDetail, MinReplicaTimeout, MaxReplicaTimeout, v)
	case r.Replicas == 0:
		detail := fmt.Sprintf("A %s's replica_timeout is %s, and it waits for none without replicas = N (N from 1 to %d); set replicas or remove replica_timeout.", block, replicaTimeoutDetail, MaxReplicas)
		if at[replicasAttr] != nil {
			detail = fmt.Sprintf("A %s's replica_timeout is %s, and replicas = 0 waits for none; set replicas to 1 or more, or remove replica_timeout.", block, replicaTimeoutDetail)
		}
		d.add(&hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "replica_timeout without replicas",
			Detail:   detail,
			Subject:  a.Expr.Range().Ptr(),
		})
	default:
		r.ReplicaTimeout = v
	}
	return r
}

// defaultReplicaTimeout is the primitives' default (primitives.
// DefaultReplicaTimeout, which config does not import).
const defaultReplicaTimeout = time.Second

// warnReplicaTimeout warns when a block with replicas waits for them as
// long as its ttl or longer: a grant the replicas are slow to confirm
// could expire while the acquire still waits, so WAIT should take a small
// part of the ttl.
func (d *decoder) warnReplicaTimeout(at hcl.Attributes, block string, r Replication, ttl time.Duration) {
	if r.Replicas == 0 || ttl <= 0 {
		return
	}
	timeout, a, said := r.ReplicaTimeout, at[replicaTimeoutAttr], "replica_timeout"
	if timeout == 0 {
		timeout, a, said = defaultReplicaTimeout, at[replicasAttr], "the default replica_timeout"
	}
	if timeout < ttl || a == nil {
		return
	}
	d.add(&hcl.Diagnostic{
		Severity: hcl.DiagWarning,
		Summary:  "replica_timeout not below ttl",
		Detail: fmt.Sprintf("This %s waits up to %v (%s) for its replicas, and its ttl is %v: a grant they are slow to confirm can expire before the acquire returns. Keep replica_timeout a small part of the ttl.",
			block, timeout, said, ttl),
		Subject: a.Expr.Range().Ptr(),
	})
}
