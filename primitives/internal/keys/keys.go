// Package keys builds the Redis keys and channels of a primitive from a
// caller's prefix and key: the reserved namespace for derived keys, cluster
// hash slots, and placing derived keys in the same slot as their key.
package keys

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Reserved is the namespace, right after a primitive's prefix, that holds
// keys coordhost derives (fencing counters, queues) and channel names.
// Caller keys may not start with it.
const Reserved = "__coordhost:"

// Errors returned by this package; callers wrap them in their sentinels.
var (
	ErrEmpty    = errors.New("key is empty")
	ErrReserved = errors.New("key enters the reserved namespace " + strconv.Quote(Reserved))
	ErrSlot     = errors.New("derived key cannot share the key's cluster slot")
)

// Space joins a prefix with caller keys. The zero value has no prefix.
type Space struct {
	Prefix string
}

// Key validates a caller key and returns it with the prefix applied.
// The returned string is a fresh copy, safe to keep after the caller reuses
// its buffer.
func (s Space) Key(key string) (string, error) {
	if key == "" {
		return "", ErrEmpty
	}
	if strings.HasPrefix(key, Reserved) {
		return "", fmt.Errorf("%w: %q", ErrReserved, key)
	}
	return strings.Clone(s.Prefix + key), nil
}

// Derived returns the key of kind (e.g. "fence") that belongs to the caller
// key (without prefix), placed in the same cluster slot as s.Key(key). It
// tries the plain form first, which keeps a hash tag the prefix or key
// already carries, then wraps the full key in a hash tag. It fails with
// ErrSlot when neither form lands in the key's slot (a key with a '}' but no
// usable hash tag).
//
// Distinct keys get distinct derived keys. The wrapped form always starts
// base+"{", so in the plain form a key that starts with '{' (or with the
// escape '!') is written base+"!"+key: without it, "{K}" in the plain form
// and "K" wrapped would both be base+"{K}", and two unrelated primitives
// would share a fencing counter, a FIFO queue or a capacity.
func (s Space) Derived(kind, key string) (string, error) {
	full := s.Prefix + key
	want := Slot(full)
	base := s.Prefix + Reserved + kind + ":"
	plain := key
	if strings.HasPrefix(key, "{") || strings.HasPrefix(key, "!") {
		plain = "!" + key
	}
	if c := base + plain; Slot(c) == want {
		return c, nil
	}
	if c := base + "{" + full + "}"; Slot(c) == want {
		return c, nil
	}
	return "", fmt.Errorf("%w: %q (use a hash tag such as {name})", ErrSlot, full)
}

// Channel returns the pub/sub channel of kind for the caller key.
// Channels have no slots (coordhost uses non-sharded PUBLISH).
func (s Space) Channel(kind, key string) string {
	return s.Prefix + Reserved + kind + ":" + key
}

// Slot returns the Redis Cluster hash slot of key (CRC16/XMODEM of the hash
// tag, or of the whole key, modulo 16384).
func Slot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return crc16(key) & 16383
}

func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
