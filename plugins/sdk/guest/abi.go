package guest

import (
	"encoding/binary"
	"errors"
	"math"
	"sort"
)

// ABIVersion is the coordpol ABI version this package implements; a
// module's policy_abi_version export must return it.
const ABIVersion int32 = 1

// IOCap is the size in bytes of the I/O area this package provides. The
// config and partition requests must fit in it.
const IOCap = 64 << 10

// Retry reasons, as passed to retry_decide (the values of
// policies.RetryReason).
const (
	ReasonContended int32 = 1 // another owner holds the resource
	ReasonError     int32 = 2 // the attempt failed with a transient error
)

// Action is a retry action, as in policies.RetryAction.
type Action int

// The retry actions.
const (
	ActionWaitForWake Action = iota // sleep until a wake-up, at most the delay
	ActionRetryAfter                // sleep the delay, then retry
	ActionGiveUp                    // stop waiting
)

// MaxDelayMS is the largest delay a retry decision can carry: the largest
// number of milliseconds a Go time.Duration holds. The host treats a larger
// delay as a bad result.
const MaxDelayMS int64 = math.MaxInt64 / 1_000_000

// Unbounded is the starvation_bound result meaning "never hold readers
// off" (any negative result means the same).
const Unbounded int64 = -1

// EncodeRetry encodes a retry decision as the i64 result of retry_decide:
//
//	r >= 0   wait for a wake-up, at most r ms (0: no bound of its own)
//	r == -1  give up
//	r <= -2  retry after exactly -r-2 ms (-2: retry at once)
//
// A negative delay counts as 0, one above MaxDelayMS as MaxDelayMS.
func EncodeRetry(a Action, delayMS int64) int64 {
	delayMS = min(max(delayMS, 0), MaxDelayMS)
	switch a {
	case ActionGiveUp:
		return -1
	case ActionRetryAfter:
		return -2 - delayMS
	default:
		return delayMS
	}
}

// DecodeRetry is the inverse of EncodeRetry. ok is false for a delay above
// MaxDelayMS, which the host refuses.
func DecodeRetry(r int64) (a Action, delayMS int64, ok bool) {
	switch {
	case r >= 0:
		return ActionWaitForWake, r, r <= MaxDelayMS
	case r == -1:
		return ActionGiveUp, 0, true
	default:
		d := -(r + 2)
		return ActionRetryAfter, d, d >= 0 && d <= MaxDelayMS
	}
}

// WaitForWake returns the retry_decide result "wait for a wake-up, at most
// delayMS milliseconds" (0: until the holder's expiry).
func WaitForWake(delayMS int64) int64 { return EncodeRetry(ActionWaitForWake, delayMS) }

// RetryAfter returns the retry_decide result "retry after delayMS
// milliseconds, ignoring wake-ups".
func RetryAfter(delayMS int64) int64 { return EncodeRetry(ActionRetryAfter, delayMS) }

// GiveUp returns the retry_decide result "stop waiting".
func GiveUp() int64 { return -1 }

// ErrorResult is the result of policy_configure or partition_key that
// reports an error whose UTF-8 message of msgLen bytes starts the I/O area:
// -1-msgLen (so -1 is an error without a message). Error writes the message
// and returns this value.
func ErrorResult(msgLen int) int32 { return int32(-1 - msgLen) }

// Attr is one attribute of a partition request.
type Attr struct {
	Key, Value string
}

// PartitionRequest is the decoded input of partition_key.
type PartitionRequest struct {
	// Kind is the primitive asking ("lock", "rate_limit", ...).
	Kind string
	// Name is the configured name of the resource.
	Name string
	// Attrs are the caller's attributes, sorted by key.
	Attrs []Attr
}

// Attr returns the value of the attribute key and whether it is present.
func (r *PartitionRequest) Attr(key string) (string, bool) {
	for _, a := range r.Attrs {
		if a.Key == key {
			return a.Value, true
		}
	}
	return "", false
}

// ErrMalformed is returned by DecodePartition for input that does not
// follow the encoding.
var ErrMalformed = errors.New("guest: malformed partition input")

// DecodePartition decodes the partition_key input. Every field is a u32
// little-endian length followed by that many bytes:
//
//	kind, name, count (a bare u32), then count pairs of key, value
//
// with the keys sorted and unique. The strings are copies; b may be reused.
func DecodePartition(b []byte) (PartitionRequest, error) {
	var r PartitionRequest
	var ok bool
	if r.Kind, b, ok = field(b); !ok {
		return r, ErrMalformed
	}
	if r.Name, b, ok = field(b); !ok {
		return r, ErrMalformed
	}
	if len(b) < 4 {
		return r, ErrMalformed
	}
	n := binary.LittleEndian.Uint32(b)
	b = b[4:]
	if uint64(n)*8 > uint64(len(b)) { // each pair needs at least 8 bytes
		return r, ErrMalformed
	}
	r.Attrs = make([]Attr, n)
	for i := range r.Attrs {
		a := &r.Attrs[i]
		if a.Key, b, ok = field(b); !ok {
			return r, ErrMalformed
		}
		if a.Value, b, ok = field(b); !ok {
			return r, ErrMalformed
		}
	}
	if len(b) != 0 {
		return r, ErrMalformed
	}
	return r, nil
}

func field(b []byte) (string, []byte, bool) {
	if len(b) < 4 {
		return "", b, false
	}
	n := binary.LittleEndian.Uint32(b)
	if uint64(n) > uint64(len(b)-4) {
		return "", b, false
	}
	return string(b[4 : 4+n]), b[4+n:], true
}

// AppendPartition appends the encoding DecodePartition reads to dst, with
// the attributes sorted by key. The host has its own encoder; this one is
// for tests and tools.
func AppendPartition(dst []byte, kind, name string, attrs map[string]string) []byte {
	keys := make([]string, 0, len(attrs))
	for k := range attrs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	dst = appendField(dst, kind)
	dst = appendField(dst, name)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(keys)))
	for _, k := range keys {
		dst = appendField(dst, k)
		dst = appendField(dst, attrs[k])
	}
	return dst
}

func appendField(dst []byte, s string) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(s)))
	return append(dst, s...)
}
