package wasm

import (
	"bytes"
	"errors"
	"testing"
)

// module returns a binary made of the header and the given sections.
func module(sections ...[]byte) []byte {
	b := []byte("\x00asm\x01\x00\x00\x00")
	for _, s := range sections {
		b = append(b, s[0])
		b = appendU32(b, uint32(len(s)-1))
		b = append(b, s[1:]...)
	}
	return b
}

func TestPrepareBinaryCapsMemory(t *testing.T) {
	custom := []byte{0, 3, 'a', 'b', 'c'}
	for _, c := range []struct {
		name    string
		memory  []byte // section body, without the id
		want    []byte // nil: unchanged
		wantErr error
	}{
		{"no max", []byte{1, 0, 2}, []byte{1, 1, 2, 10}, nil},
		{"max above", []byte{1, 1, 2, 0x80, 0x01}, []byte{1, 1, 2, 10}, nil}, // max 128 (LEB128)
		{"max within", []byte{1, 1, 2, 5}, nil, nil},
		{"max at limit", []byte{1, 1, 10, 10}, nil, nil},
		{"min above", []byte{1, 0, 11}, nil, ErrMemory},
		{"shared", []byte{1, 3, 1, 2}, nil, ErrABI},
		{"two memories", []byte{2, 0, 1, 0, 1}, nil, ErrABI},
	} {
		in := module(custom, append([]byte{secMemory}, c.memory...), custom)
		out, err := prepareBinary("m", in, 10)
		if !errors.Is(err, c.wantErr) {
			t.Errorf("%s: error %v, want %v", c.name, err, c.wantErr)
			continue
		}
		if err != nil {
			continue
		}
		want := in
		if c.want != nil {
			want = module(custom, append([]byte{secMemory}, c.want...), custom)
		}
		if !bytes.Equal(out, want) {
			t.Errorf("%s:\n got % x\nwant % x", c.name, out, want)
		}
		if &out[0] == &in[0] {
			t.Errorf("%s: the input is not copied", c.name)
		}
	}
}

func TestPrepareBinaryImports(t *testing.T) {
	imp := func(mod, name string, desc ...byte) []byte {
		b := []byte{secImport, 1}
		b = appendU32(b, uint32(len(mod)))
		b = append(b, mod...)
		b = appendU32(b, uint32(len(name)))
		b = append(b, name...)
		return append(b, desc...)
	}
	for _, c := range []struct {
		sec  []byte
		want error
	}{
		{imp("policy_host", "log", 0, 0), nil},
		{imp("wasi_snapshot_preview1", "fd_write", 0, 3), nil},
		{imp("env", "f", 0, 0), ErrImport},
		{imp("policy_host", "t", 1, 0x70, 0, 1), ErrImport}, // table
		{imp("policy_host", "m", 2, 0, 1), ErrImport},       // memory
		{imp("policy_host", "g", 3, 0x7f, 0), ErrImport},    // global
		{imp("policy_host", "x", 4, 0, 0), ErrImport},       // tag
	} {
		if _, err := prepareBinary("m", module(c.sec), 10); !errors.Is(err, c.want) {
			t.Errorf("% x: %v, want %v", c.sec, err, c.want)
		}
	}
	// Truncated sections are left to the compiler.
	if _, err := prepareBinary("m", module([]byte{secImport, 5, 1, 2}), 10); err != nil {
		t.Errorf("truncated import: %v", err)
	}
}

func TestImportNamesAreEscaped(t *testing.T) {
	name := func(s string) []byte { return append(appendU32(nil, uint32(len(s))), s...) }
	for _, kind := range []byte{0, 2} { // a function of a forbidden module, a memory
		sec := []byte{secImport}
		sec = appendU32(sec, 1)
		sec = append(sec, name("\x1b[2Jevil")...)
		sec = append(sec, name("f\nlock acquired")...)
		sec = append(sec, kind, 0, 1) // type index 0 / memory limits {min 1}
		_, err := prepareBinary("m", module(sec), 10)
		if !errors.Is(err, ErrImport) {
			t.Fatalf("kind %d: %v", kind, err)
		}
		if bytes.ContainsAny([]byte(err.Error()), "\x1b\n") || !bytes.Contains([]byte(err.Error()), []byte(`\x1b[2Jevil.f\nlock acquired`)) {
			t.Errorf("kind %d: %q", kind, err)
		}
	}
}
