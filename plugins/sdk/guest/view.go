package guest

import "encoding/binary"

// PartitionView is a zero-copy view of a partition_key request in the I/O
// area: reading it allocates nothing, which keeps the guest's garbage
// collector out of the hot path. Its slices alias the I/O area: they are
// valid until Output or Error overwrite it (build the key with a
// KeyBuilder) and until the call returns.
type PartitionView struct {
	kind, name []byte
	attrs      []byte // the key/value pairs
	count      uint32
}

// ViewPartition checks the partition_key input of n bytes (see
// DecodePartition for the encoding) and returns a view of it.
func ViewPartition(n int32) (PartitionView, error) {
	return viewPartition(Input(n))
}

func viewPartition(b []byte) (PartitionView, error) {
	var v PartitionView
	var ok bool
	if v.kind, b, ok = rawField(b); !ok {
		return v, ErrMalformed
	}
	if v.name, b, ok = rawField(b); !ok {
		return v, ErrMalformed
	}
	if len(b) < 4 {
		return v, ErrMalformed
	}
	v.count = binary.LittleEndian.Uint32(b)
	b = b[4:]
	v.attrs = b
	for i := uint32(0); i < 2*v.count; i++ {
		if _, b, ok = rawField(b); !ok {
			return v, ErrMalformed
		}
	}
	if len(b) != 0 {
		return v, ErrMalformed
	}
	return v, nil
}

func rawField(b []byte) ([]byte, []byte, bool) {
	if len(b) < 4 {
		return nil, b, false
	}
	n := binary.LittleEndian.Uint32(b)
	if uint64(n) > uint64(len(b)-4) {
		return nil, b, false
	}
	return b[4 : 4+n], b[4+n:], true
}

// Kind returns the primitive asking ("lock", "rate_limit", ...).
func (v *PartitionView) Kind() []byte { return v.kind }

// Name returns the configured name of the resource.
func (v *PartitionView) Name() []byte { return v.name }

// NumAttrs returns the number of attributes.
func (v *PartitionView) NumAttrs() int { return int(v.count) }

// Attr returns the value of the attribute key and whether it is present.
func (v *PartitionView) Attr(key string) ([]byte, bool) {
	b := v.attrs
	for i := uint32(0); i < v.count; i++ {
		var k, val []byte
		k, b, _ = rawField(b)
		val, b, _ = rawField(b)
		if string(k) == key { // no allocation: the compiler compares in place
			return val, true
		}
	}
	return nil, false
}

// scratch holds the key while a KeyBuilder assembles it.
var scratch [IOCap]byte

// KeyBuilder assembles a partition key in a scratch buffer, so the request
// in the I/O area stays readable meanwhile; Output copies it into the I/O
// area. The zero value is an empty key. Only one KeyBuilder may be in use
// at a time (they share the buffer).
type KeyBuilder struct {
	n        int
	overflow bool
}

// WriteString appends s.
func (k *KeyBuilder) WriteString(s string) {
	if len(s) > IOCap-k.n {
		k.overflow = true
		return
	}
	k.n += copy(scratch[k.n:], s)
}

// Write appends b.
func (k *KeyBuilder) Write(b []byte) {
	if len(b) > IOCap-k.n {
		k.overflow = true
		return
	}
	k.n += copy(scratch[k.n:], b)
}

// Output writes the key into the I/O area and returns the partition_key
// result: its length, or an error result if it overflowed the I/O area.
func (k *KeyBuilder) Output() int32 {
	if k.overflow {
		return Error("partition key longer than the I/O area")
	}
	return int32(copy(area[:], scratch[:k.n]))
}
