package wasm

import (
	"errors"
	"fmt"
	"slices"

	"github.com/coordhost/coordhost/policies"
)

// This file reads just enough of the WebAssembly binary format to refuse
// non-function imports with a clear error and to cap the module's memory at
// the page limit of its options, before wazero compiles the module.

const (
	secImport = 2
	secMemory = 5
)

var errTruncated = errors.New("truncated or malformed module")

// reader decodes the binary format's primitives.
type reader struct {
	b   []byte
	off int
}

func (r *reader) byte() (byte, error) {
	if r.off >= len(r.b) {
		return 0, errTruncated
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

// u32 reads an unsigned LEB128 of at most 32 bits.
func (r *reader) u32() (uint32, error) {
	var v uint32
	for shift := uint(0); shift < 35; shift += 7 {
		c, err := r.byte()
		if err != nil {
			return 0, err
		}
		if shift == 28 && c > 0x0f {
			return 0, errTruncated
		}
		v |= uint32(c&0x7f) << shift
		if c&0x80 == 0 {
			return v, nil
		}
	}
	return 0, errTruncated
}

func (r *reader) name() (string, error) {
	n, err := r.u32()
	if err != nil {
		return "", err
	}
	if uint64(n) > uint64(len(r.b)-r.off) {
		return "", errTruncated
	}
	s := string(r.b[r.off : r.off+int(n)])
	r.off += int(n)
	return s, nil
}

func appendU32(dst []byte, v uint32) []byte {
	for v >= 0x80 {
		dst = append(dst, byte(v)|0x80)
		v >>= 7
	}
	return append(dst, byte(v))
}

// importRef names one import of a module.
type importRef struct {
	module, name string
	kind         byte // 0 func, 1 table, 2 memory, 3 global, 4 tag
}

func (i importRef) String() string {
	kinds := [...]string{"function", "table", "memory", "global", "tag"}
	k := "unknown kind"
	if int(i.kind) < len(kinds) {
		k = kinds[i.kind]
	}
	// The names come from the module: escape them.
	return fmt.Sprintf("%s.%s (%s)", policies.EscapeText(i.module), policies.EscapeText(i.name), k)
}

// prepareBinary checks the import and memory sections of bin and returns
// the binary to compile: a copy of bin (wazero may keep references into
// it), with the memory maximum capped at limitPages (so memory.grow beyond
// it returns -1, as the specification says). Errors wrap ErrImport, ErrABI
// or ErrMemory; a binary too malformed to read is left to the compiler to
// report.
func prepareBinary(name string, bin []byte, limitPages uint32) ([]byte, error) {
	if len(bin) < 8 || string(bin[:4]) != "\x00asm" {
		return nil, loadErr(ErrABI, name, "not a WebAssembly binary")
	}
	r := &reader{b: bin, off: 8}
	for r.off < len(bin) {
		start := r.off
		id, err := r.byte()
		if err != nil {
			break
		}
		size, err := r.u32()
		if err != nil || uint64(size) > uint64(len(bin)-r.off) {
			break // let the compiler say what is wrong
		}
		body := &reader{b: bin[r.off : r.off+int(size)]}
		end := r.off + int(size)
		r.off = end
		switch id {
		case secImport:
			if err := readImports(name, body); err != nil {
				return nil, err
			}
		case secMemory:
			sec, err := capMemory(name, body, limitPages)
			if err != nil {
				return nil, err
			}
			if sec != nil {
				out := make([]byte, 0, len(bin)+8)
				out = append(out, bin[:start]...)
				out = append(out, secMemory)
				out = appendU32(out, uint32(len(sec)))
				out = append(out, sec...)
				return append(out, bin[end:]...), nil
			}
			return slices.Clone(bin), nil // the memory section is the last we need
		}
	}
	return slices.Clone(bin), nil
}

// readImports refuses non-function imports and imports from modules other
// than policy_host and WASI; names and signatures are checked after
// compilation (checkModule).
func readImports(name string, r *reader) error {
	n, err := r.u32()
	if err != nil {
		return nil
	}
	for i := uint32(0); i < n; i++ {
		var imp importRef
		if imp.module, err = r.name(); err != nil {
			return nil
		}
		if imp.name, err = r.name(); err != nil {
			return nil
		}
		if imp.kind, err = r.byte(); err != nil {
			return nil
		}
		if imp.kind != 0 {
			// Refuse at once: the rest of the section needs no reading.
			return loadErr(ErrImport, name, "%s: a policy module may import functions only, and must define its own memory", imp)
		}
		if !allowedImportModule(imp.module) {
			return loadErr(ErrImport, name, "%s: only %s.* and %s.* may be imported", imp, hostModuleName, wasiModuleName)
		}
		if _, err := r.u32(); err != nil { // type index
			return nil
		}
	}
	return nil
}

// capMemory returns a new memory section body with the maximum capped at
// limit, or nil when the section needs no change.
func capMemory(name string, r *reader, limit uint32) ([]byte, error) {
	n, err := r.u32()
	if err != nil || n == 0 {
		return nil, nil
	}
	if n > 1 {
		return nil, loadErr(ErrABI, name, "%d memories defined, want 1", n)
	}
	flags, err := r.byte()
	if err != nil {
		return nil, nil
	}
	if flags > 1 {
		return nil, loadErr(ErrABI, name, "shared or 64-bit memory (limits flags %#x) is not supported", flags)
	}
	minPages, err := r.u32()
	if err != nil {
		return nil, nil
	}
	maxPages := limit
	if flags == 1 {
		if maxPages, err = r.u32(); err != nil {
			return nil, nil
		}
		if maxPages <= limit {
			return nil, nil // already within the limit
		}
		maxPages = limit
	}
	if minPages > limit {
		return nil, loadErr(ErrMemory, name, "initial memory of %d pages is above the limit of %d pages", minPages, limit)
	}
	sec := appendU32(nil, 1)
	sec = append(sec, 1) // limits with a maximum
	sec = appendU32(sec, minPages)
	return appendU32(sec, maxPages), nil
}
