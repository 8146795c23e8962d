package wasm

import "github.com/tetratelabs/wazero/experimental"

// memoryAllocator creates the linear memory of one instance (wazero calls
// Allocate once, while instantiating) and keeps it, so that newInstance can
// link it to the instance's context.
type memoryAllocator struct {
	mem *linearMemory
}

func (a *memoryAllocator) Allocate(capBytes, maxBytes uint64) experimental.LinearMemory {
	a.mem = &linearMemory{max: maxBytes, buf: make([]byte, 0, min(capBytes, maxBytes))}
	return a.mem
}

// linearMemory backs an instance's memory with a Go slice, as wazero's own
// does, with one difference: once done is closed (the call's deadline fired
// or its caller gave up: the instance's context is cancelled), it refuses
// to grow, so memory.grow returns -1 at once instead of allocating.
// wazero stops a call only at its next termination check (a loop header, a
// function entry); a memory.grow in between is one Go allocation and copy,
// which the memory limit bounds (DefaultMemoryLimitPages: 32 MiB, a few
// milliseconds) and done keeps from being repeated after the deadline.
//
// Only the goroutine running the instance calls Reallocate.
type linearMemory struct {
	buf  []byte
	max  uint64
	done <-chan struct{} // the instance's context; nil: no deadline
}

func (m *linearMemory) Reallocate(size uint64) []byte {
	if size > m.max {
		return nil
	}
	if m.done != nil && size > uint64(len(m.buf)) {
		select {
		case <-m.done:
			return nil
		default:
		}
	}
	if size <= uint64(cap(m.buf)) {
		// Memory never shrinks, so the bytes past len were never used and
		// are still zero.
		m.buf = m.buf[:size]
		return m.buf
	}
	// Double the capacity (up to the maximum) so that growing one page at a
	// time copies O(size) bytes in all.
	c := max(size, min(2*uint64(cap(m.buf)), m.max))
	b := make([]byte, size, c)
	copy(b, m.buf)
	m.buf = b
	return b
}

func (m *linearMemory) Free() { m.buf = nil }
