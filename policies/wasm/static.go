package wasm

// This file reads what Check (and Load, before it instantiates anything)
// can learn about a compiled module's ABI without running any of its code:
// the value an export such as policy_abi_version returns when its body is a
// constant, and the module's initial memory.

const (
	secGlobal = 6
	secStart  = 8
	secCode   = 10
)

// layout is what staticLayout reads from a binary that wazero compiled (so
// it is well formed).
type layout struct {
	funcImports int
	// globals are the initial values of the module's own globals, by
	// index: ok is false for a mutable global, one that is not an i32 or
	// whose initializer is not a plain i32.const. Nil when the global
	// section could not be read.
	globals []constI32
	// code holds the bodies of the module's own functions, by index less
	// funcImports.
	code      [][]byte
	start     bool   // the module has a start function
	minPages  uint32 // its memory's initial size, in pages
	hasMemory bool
}

type constI32 struct {
	v  int32
	ok bool
}

// staticLayout reads bin's imports, globals, start and code sections. It
// reads what it can: a section it does not understand is left out.
func staticLayout(bin []byte) *layout {
	l := &layout{}
	r := &reader{b: bin, off: 8}
	for r.off < len(bin) {
		id, err := r.byte()
		if err != nil {
			break
		}
		size, err := r.u32()
		if err != nil || uint64(size) > uint64(len(bin)-r.off) {
			break
		}
		body := &reader{b: bin[r.off : r.off+int(size)]}
		r.off += int(size)
		switch id {
		case secImport:
			l.funcImports = countFuncImports(body)
		case secMemory:
			if n, err := body.u32(); err == nil && n == 1 {
				if _, err := body.byte(); err == nil {
					if p, err := body.u32(); err == nil {
						l.minPages, l.hasMemory = p, true
					}
				}
			}
		case secGlobal:
			l.globals = readGlobals(body)
		case secStart:
			l.start = true
		case secCode:
			l.code = readCode(body)
		}
	}
	return l
}

func countFuncImports(r *reader) int {
	n, err := r.u32()
	if err != nil {
		return 0
	}
	funcs := 0
	for i := uint32(0); i < n; i++ {
		if _, err := r.name(); err != nil {
			return funcs
		}
		if _, err := r.name(); err != nil {
			return funcs
		}
		kind, err := r.byte()
		if err != nil || kind != 0 {
			return funcs // prepareBinary refuses other kinds
		}
		if _, err := r.u32(); err != nil {
			return funcs
		}
		funcs++
	}
	return funcs
}

func readGlobals(r *reader) []constI32 {
	n, err := r.u32()
	if err != nil {
		return nil
	}
	var out []constI32
	for i := uint32(0); i < n; i++ {
		typ, err := r.byte()
		if err != nil {
			return nil
		}
		mut, err := r.byte()
		if err != nil {
			return nil
		}
		start := r.off
		if !skipConstExpr(r) {
			return nil // an initializer this reader does not know: stop here
		}
		g := constI32{}
		if typ == 0x7f && mut == 0 {
			g.v, g.ok = plainI32Const(r.b[start:r.off])
		}
		out = append(out, g)
	}
	return out
}

// skipConstExpr skips one constant expression, through its end (0x0b).
func skipConstExpr(r *reader) bool {
	for {
		op, err := r.byte()
		if err != nil {
			return false
		}
		switch op {
		case 0x0b: // end
			return true
		case 0x41: // i32.const
			if _, err := r.s32(); err != nil {
				return false
			}
		case 0x42: // i64.const
			if !r.skipLEB(10) {
				return false
			}
		case 0x43: // f32.const
			if !r.skip(4) {
				return false
			}
		case 0x44: // f64.const
			if !r.skip(8) {
				return false
			}
		case 0x23, 0xd2: // global.get, ref.func
			if _, err := r.u32(); err != nil {
				return false
			}
		case 0xd0: // ref.null t
			if _, err := r.byte(); err != nil {
				return false
			}
		case 0x6a, 0x6b, 0x6c, 0x7c, 0x7d, 0x7e: // extended constant arithmetic
		default:
			return false
		}
	}
}

func readCode(r *reader) [][]byte {
	n, err := r.u32()
	if err != nil {
		return nil
	}
	out := make([][]byte, 0, min(n, 1<<16))
	for i := uint32(0); i < n; i++ {
		size, err := r.u32()
		if err != nil || uint64(size) > uint64(len(r.b)-r.off) {
			return out
		}
		out = append(out, r.b[r.off:r.off+int(size)])
		r.off += int(size)
	}
	return out
}

// constResult returns the i32 that function index fn (in the module's
// function index space) returns when its body is exactly `i32.const N` or
// `global.get G` of an immutable global initialised with `i32.const N`;
// ok is false for any other body (which only running it could tell).
func (l *layout) constResult(fn uint32) (int32, bool) {
	if int(fn) < l.funcImports || int(fn)-l.funcImports >= len(l.code) {
		return 0, false
	}
	r := &reader{b: l.code[int(fn)-l.funcImports]}
	decls, err := r.u32()
	if err != nil {
		return 0, false
	}
	for i := uint32(0); i < decls; i++ {
		if _, err := r.u32(); err != nil {
			return 0, false
		}
		if _, err := r.byte(); err != nil {
			return 0, false
		}
	}
	expr := r.b[r.off:]
	if v, ok := plainI32Const(expr); ok {
		return v, true
	}
	if len(expr) < 3 || expr[0] != 0x23 {
		return 0, false
	}
	g := &reader{b: expr[1:]}
	idx, err := g.u32()
	if err != nil || g.off != len(g.b)-1 || g.b[g.off] != 0x0b || int(idx) >= len(l.globals) {
		return 0, false
	}
	return l.globals[idx].v, l.globals[idx].ok
}

// plainI32Const decodes an expression that is exactly `i32.const N end`.
func plainI32Const(expr []byte) (int32, bool) {
	if len(expr) < 3 || expr[0] != 0x41 {
		return 0, false
	}
	r := &reader{b: expr, off: 1}
	v, err := r.s32()
	if err != nil || r.off != len(expr)-1 || expr[r.off] != 0x0b {
		return 0, false
	}
	return v, true
}

// s32 reads a signed LEB128 of at most 32 bits.
func (r *reader) s32() (int32, error) {
	var v int64
	var shift uint
	for {
		c, err := r.byte()
		if err != nil {
			return 0, err
		}
		if shift == 28 && c&0x80 != 0 {
			return 0, errTruncated
		}
		v |= int64(c&0x7f) << shift
		shift += 7
		if c&0x80 == 0 {
			if shift < 64 && c&0x40 != 0 {
				v |= -1 << shift
			}
			if v < -1<<31 || v > 1<<31-1 {
				return 0, errTruncated
			}
			return int32(v), nil
		}
	}
}

func (r *reader) skip(n int) bool {
	if len(r.b)-r.off < n {
		return false
	}
	r.off += n
	return true
}

func (r *reader) skipLEB(maxBytes int) bool {
	for i := 0; i < maxBytes; i++ {
		c, err := r.byte()
		if err != nil {
			return false
		}
		if c&0x80 == 0 {
			return true
		}
	}
	return false
}
