// Package base is the leaf every primitive and every internal helper
// shares: the sentinel errors, ReleaseResult and the outcome names the
// handles report. Package primitives re-exports all of it, so internal
// helpers return the final, public errors and nothing passes a sentinel
// around as a value. It imports the standard library only.
package base

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors shared by all primitives (re-exported by package
// primitives, whose documentation is the reference).
var (
	ErrNotAcquired    = errors.New("coordhost: not acquired")
	ErrInvalidOptions = errors.New("coordhost: invalid options")
	ErrInvalidKey     = errors.New("coordhost: invalid key")
	ErrInvalidTTL     = errors.New("coordhost: invalid ttl")
	ErrInvalidToken   = errors.New("coordhost: invalid ownership token")
	ErrWrongType      = errors.New("coordhost: key holds a value of the wrong type")
	ErrCorruptCounter = errors.New("coordhost: fencing counter is unusable")
	ErrClosed         = errors.New("coordhost: closed")
	ErrLost           = errors.New("coordhost: lease lost")
	ErrUncertain      = errors.New("coordhost: outcome unknown")
	ErrUnsupported    = errors.New("coordhost: the server lacks a feature this needs")
	ErrNoPermission   = errors.New("coordhost: the server refused a command this needs (ACL)")
	ErrNotReplicated  = errors.New("coordhost: not confirmed by enough replicas")
	ErrUnavailable    = errors.New("coordhost: the server refused the command for now (cluster slot migrating, failover, loading); nothing ran")
)

// MaxTokenBytes is the longest ownership token CheckToken accepts.
const MaxTokenBytes = 256

// CheckToken checks an ownership token handed back to a primitive (a
// Resume): 1 to MaxTokenBytes bytes of printable ASCII without spaces, as
// the primitives make them. It fails with an error matching
// ErrInvalidToken.
func CheckToken(token string) error {
	if token == "" {
		return fmt.Errorf("%w: empty", ErrInvalidToken)
	}
	if len(token) > MaxTokenBytes {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrInvalidToken, len(token), MaxTokenBytes)
	}
	for i := 0; i < len(token); i++ {
		if c := token[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("%w: byte %d is %#x, not printable ASCII", ErrInvalidToken, i, c)
		}
	}
	return nil
}

// Uncertain is an operation whose command may or may not have run: its
// reply was lost, it timed out, or the caller's context ended after it was
// sent. It matches ErrUncertain and the cause with errors.Is.
type Uncertain struct {
	Name    string // what it was about, e.g. `lock "k"`
	Op      string // "acquire", "renew", "release"
	Settled string // what was done about it, e.g. "released best effort"; may be empty
	Err     error  // the cause
	// Unsettled, when not nil, is why the outcome could not be settled (an
	// acquire may then have left a grant that no handle holds until its
	// TTL); the error matches it too.
	Unsettled error
}

func (e *Uncertain) Error() string {
	switch {
	case e.Unsettled != nil:
		return fmt.Sprintf("%s: %s outcome unknown and not settled (%v): %v", e.Name, e.Op, e.Unsettled, e.Err)
	case e.Settled == "":
		return fmt.Sprintf("%s: %s outcome unknown: %v", e.Name, e.Op, e.Err)
	}
	return fmt.Sprintf("%s: %s outcome unknown (%s): %v", e.Name, e.Op, e.Settled, e.Err)
}

// Unwrap returns ErrUncertain, the cause, and what kept it from being
// settled.
func (e *Uncertain) Unwrap() []error {
	if e.Unsettled != nil {
		return []error{ErrUncertain, e.Err, e.Unsettled}
	}
	return []error{ErrUncertain, e.Err}
}

// LateGrant is a grant whose reply came after the whole lease had run out
// locally: not acquired (the grant is released). It matches
// ErrNotAcquired.
type LateGrant struct{ Name string }

func (e *LateGrant) Error() string {
	return fmt.Sprintf("%s: grant arrived after the lease ran out locally", e.Name)
}

// Unwrap returns ErrNotAcquired.
func (e *LateGrant) Unwrap() error { return ErrNotAcquired }

// Limits and default of the primitives' Replicas and ReplicaTimeout
// options (package primitives documents them).
const (
	DefaultReplicaTimeout = time.Second
	MaxReplicas           = 64
	MaxReplicaTimeout     = time.Minute
)

// NotReplicated is a write the primary applied (a grant, a renewal or a
// fencing increment) that fewer replicas than asked acknowledged within
// the timeout, so a failover could lose it. It matches ErrNotReplicated
// (and Err, when WAIT itself failed) with errors.Is.
type NotReplicated struct {
	Name    string        // what it was about, e.g. `lock "k"`
	Op      string        // "acquire" or "renew"
	Want    int64         // replicas asked for
	Acked   int64         // replicas that acknowledged (0 when WAIT failed)
	Timeout time.Duration // how long WAIT waited
	Settled string        // what was done about it, e.g. "released"; may be empty
	Err     error         // WAIT's error reply, when it gave no count
}

func (e *NotReplicated) Error() string {
	var what string
	if e.Err != nil {
		what = fmt.Sprintf("WAIT failed: %v", e.Err)
	} else {
		what = fmt.Sprintf("%d of %d replica(s) acknowledged within %v", e.Acked, e.Want, e.Timeout)
	}
	if e.Settled != "" {
		return fmt.Sprintf("%s: %s not confirmed by replicas (%s): %s", e.Name, e.Op, e.Settled, what)
	}
	return fmt.Sprintf("%s: %s not confirmed by replicas: %s", e.Name, e.Op, what)
}

// Unwrap returns ErrNotReplicated and WAIT's error, if any.
func (e *NotReplicated) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrNotReplicated, e.Err}
	}
	return []error{ErrNotReplicated}
}

// ReleaseResult says what an owner-checked release found on the server.
type ReleaseResult int

// The release results.
const (
	Released ReleaseResult = iota + 1
	AlreadyReleased
	NotOwned
)

// String returns the result's name.
func (r ReleaseResult) String() string {
	switch r {
	case Released:
		return "Released"
	case AlreadyReleased:
		return "AlreadyReleased"
	case NotOwned:
		return "NotOwned"
	}
	return "ReleaseResult(0)"
}

// ReleaseResultOf maps a release script's answer: 1 released, 0 absent,
// anything else another owner's.
func ReleaseResultOf(n int64) ReleaseResult {
	switch n {
	case 1:
		return Released
	case 0:
		return AlreadyReleased
	}
	return NotOwned
}

// AcquireOutcome classifies one acquisition for an observer.
type AcquireOutcome uint8

// The acquisition outcomes.
const (
	AcquireAcquired AcquireOutcome = iota
	AcquireNotAcquired
	AcquireGaveUp
	AcquireCancelled
	AcquireDeadlineExceeded
	AcquireClosed
	AcquireError
)

// String returns the outcome's name, suitable as a metric label:
// "acquired", "not_acquired", "gave_up", "cancelled", "deadline_exceeded",
// "closed" or "error".
func (o AcquireOutcome) String() string {
	switch o {
	case AcquireAcquired:
		return "acquired"
	case AcquireNotAcquired:
		return "not_acquired"
	case AcquireGaveUp:
		return "gave_up"
	case AcquireCancelled:
		return "cancelled"
	case AcquireDeadlineExceeded:
		return "deadline_exceeded"
	case AcquireClosed:
		return "closed"
	}
	return "error"
}

// RenewOutcome classifies one renewal for an observer.
type RenewOutcome uint8

// The renewal outcomes.
const (
	RenewRenewed RenewOutcome = iota
	RenewLost
	RenewError
)

// String returns "renewed", "lost" or "error".
func (o RenewOutcome) String() string {
	switch o {
	case RenewRenewed:
		return "renewed"
	case RenewLost:
		return "lost"
	}
	return "error"
}

// LostReason says how a handle found its ownership gone.
type LostReason uint8

// The reasons, in the order a handle can find them.
const (
	LostRenewRefused LostReason = iota
	LostRenewUncertain
	LostVerify
	LostExpired
	LostReleaseNotOwned
	LostReleaseAbsent
)

// String returns the reason's name, suitable as a metric label:
// "renew_refused", "renew_uncertain", "verify", "expired",
// "release_not_owned" or "release_absent".
func (r LostReason) String() string {
	switch r {
	case LostRenewRefused:
		return "renew_refused"
	case LostRenewUncertain:
		return "renew_uncertain"
	case LostVerify:
		return "verify"
	case LostExpired:
		return "expired"
	case LostReleaseNotOwned:
		return "release_not_owned"
	}
	return "release_absent"
}
