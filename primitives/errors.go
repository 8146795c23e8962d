package primitives

import "github.com/coordhost/coordhost/primitives/internal/base"

// MaxTokenBytes is the longest ownership token a Resume accepts. Tokens the
// primitives make are 26 characters (crypto/rand.Text).
const MaxTokenBytes = base.MaxTokenBytes

// Sentinel errors shared by all primitives. Errors returned by the primitive
// packages wrap these with details; match them with errors.Is.
var (
	// ErrNotAcquired means the resource is held by someone else and the call
	// was not allowed to wait (TryAcquire) or gave up by policy.
	ErrNotAcquired = base.ErrNotAcquired

	// ErrInvalidOptions is wrapped by constructors whose options fail
	// validation, and by calls on a nil receiver or with a nil context.
	ErrInvalidOptions = base.ErrInvalidOptions

	// ErrInvalidKey means a key is empty, enters the reserved namespace, or
	// cannot be placed in one cluster slot with the keys derived from it.
	ErrInvalidKey = base.ErrInvalidKey

	// ErrInvalidTTL means a lease duration is zero, negative, below one
	// millisecond, or above the primitive's MaxTTL.
	ErrInvalidTTL = base.ErrInvalidTTL

	// ErrInvalidToken means an ownership token given to a Resume is empty,
	// longer than MaxTokenBytes, or holds a byte outside printable ASCII.
	// Nothing was sent.
	ErrInvalidToken = base.ErrInvalidToken

	// ErrWrongType means the key already holds a value of a type the
	// primitive does not manage (Redis WRONGTYPE). Nothing was written.
	ErrWrongType = base.ErrWrongType

	// ErrCorruptCounter means a fencing counter exists but is not a plain
	// non-negative decimal integer, has a TTL, or would overflow int64.
	// Nothing was written.
	ErrCorruptCounter = base.ErrCorruptCounter

	// ErrClosed means the primitive (not the client) has been closed.
	ErrClosed = base.ErrClosed

	// ErrLost means a renewal was refused: the lease expired, or the key
	// was deleted or taken by another owner. The handle's Done is closed.
	ErrLost = base.ErrLost

	// ErrUncertain means the outcome of a command is unknown: its reply was
	// lost, it timed out, or the caller's context ended after it was sent.
	// An acquire with this error holds nothing: it was settled (released
	// best effort, or fenced and released), unless the error also says it
	// could not be settled (and matches why, e.g. ErrNoPermission): a
	// grant may then stay held by no handle until its TTL. A renew or
	// release with it closed the handle (Done), and a later Release settles
	// it.
	ErrUncertain = base.ErrUncertain

	// ErrUnsupported means the server lacks a command or feature the call
	// needs (e.g. hash-field expiry before Redis 7.4). Nothing was written;
	// the error names the feature and the server's version.
	ErrUnsupported = base.ErrUnsupported

	// ErrNoPermission means the server refused, by ACL, a command the call
	// needs (e.g. CLIENT INFO and CLIENT KILL to fence an uncertain
	// outcome); the error names the rules to grant.
	ErrNoPermission = base.ErrNoPermission

	// ErrNotReplicated means a write the primary applied was not
	// acknowledged by as many replicas as the primitive's Replicas option
	// asks for within its ReplicaTimeout (WAIT answered fewer, or failed),
	// so a failover could lose it. An acquire with this error holds
	// nothing: the grant was released (owner-checked) before the error
	// came back; a fencing token it drew is skipped, never reissued to
	// anyone on this primary. A renewal with this error lost the handle
	// (Done is closed, later renewals return false); Release still deletes
	// the lease if it is ours. See docs/failover.md.
	ErrNotReplicated = base.ErrNotReplicated

	// ErrUnavailable means the server refused a command without running
	// it, and kept refusing for about a second of resending: a cluster
	// slot migrating with the keys of one call split between two masters
	// (TRYAGAIN), a cluster without a master for a slot or without a
	// quorum during a failover (CLUSTERDOWN), or a server loading its data
	// (LOADING). Nothing was written; trying again later is safe. Waiting
	// calls (Acquire) retry by themselves, as after any certain error
	// their retry policy allows.
	ErrUnavailable = base.ErrUnavailable
)

// Limits and default of the Replicas and ReplicaTimeout options of the
// primitives that have them (lock, rwlock, semaphore, lease).
//
// Replicas = N (0 to MaxReplicas; 0, the default, is off) makes every
// grant, renewal and fencing increment wait, after the script that made
// it and on the same connection, for WAIT N ReplicaTimeout: the write
// counts only once N replicas acknowledge it. ReplicaTimeout is rounded up
// to whole milliseconds, at most MaxReplicaTimeout; 0 means
// DefaultReplicaTimeout (1s). Other values fail the constructor with an
// error matching ErrInvalidOptions.
const (
	DefaultReplicaTimeout = base.DefaultReplicaTimeout
	MaxReplicas           = base.MaxReplicas
	MaxReplicaTimeout     = base.MaxReplicaTimeout
)

// NotReplicated is the error behind ErrNotReplicated: what was not
// confirmed (Name, Op "acquire" or "renew"), how many replicas were asked
// for (Want) and acknowledged within Timeout (Acked), what was done about
// it (Settled), and WAIT's own error when it gave no count (Err, e.g.
// "WAIT cannot be used with replica instances"). Match it with errors.As.
type NotReplicated = base.NotReplicated
