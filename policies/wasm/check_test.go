package wasm

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/coordhost/coordhost/policies"
)

// TestCheckAgreesWithLoad runs Check and Load on every test and example
// module: whatever Check refuses, Load refuses with the same error; whatever
// Load accepts, Check accepts; and where Check accepts what Load refuses,
// the reason is one Check reports as unchecked (it needs the module's code
// to run).
func TestCheckAgreesWithLoad(t *testing.T) {
	r := newRuntime(t, RuntimeOptions{})
	paths, err := filepath.Glob(filepath.Join("testdata", "*.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	paths = append(paths, goBackoff, goTenant, watConstant)
	type variant struct {
		name string
		o    ModuleOptions
	}
	variants := []variant{
		{"defaults", ModuleOptions{}},
		{"16 pages", ModuleOptions{MemoryPages: 16}},
		{"config F", ModuleOptions{Config: []byte("F!")}},
		{"big config", ModuleOptions{Config: make([]byte, 5000)}},
		{"bad options", ModuleOptions{CallTimeout: -5}},
	}
	for _, p := range paths {
		for _, v := range variants {
			name := filepath.Base(p) + "/" + v.name
			o := v.o
			o.Name = name
			if o.CallTimeout == 0 {
				o.CallTimeout = testCallTimeout
			}
			bin := readWasm(t, p)
			res, cerr := r.Check(context.Background(), bin, o)
			m, lerr := r.Load(context.Background(), bin, o)
			if m != nil {
				_ = m.Close(context.Background())
			}
			switch {
			case cerr != nil && (lerr == nil || lerr.Error() != cerr.Error()):
				t.Errorf("%s: Check: %v\nLoad: %v", name, cerr, lerr)
			case cerr == nil && lerr == nil:
				if len(res.Kinds) == 0 {
					t.Errorf("%s: Check found no kinds", name)
				}
			case cerr == nil && lerr != nil:
				// Only instantiation can tell: policy_configure's verdict, a
				// Go runtime that does not fit, a non-constant I/O area.
				ok := strings.Contains(lerr.Error(), "policy_configure returned") ||
					(strings.Contains(lerr.Error(), "instantiate") && slices.ContainsFunc(res.Unchecked, func(s string) bool { return strings.Contains(s, "ABI version") })) ||
					(strings.Contains(lerr.Error(), "I/O area") && slices.ContainsFunc(res.Unchecked, func(s string) bool { return strings.Contains(s, "I/O area") }))
				if !ok {
					t.Errorf("%s: Check passed (unchecked: %q) but Load failed: %v", name, res.Unchecked, lerr)
				}
			}
		}
	}
}

func TestCheckRunsNoCode(t *testing.T) {
	logger, logs := newLogRecorder()
	r := newRuntime(t, RuntimeOptions{Logger: logger})
	res, err := r.Check(context.Background(), readWasm(t, testdata("started")), ModuleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n := countLines(logs(), "instantiated"); n != 0 {
		t.Fatalf("Check ran the start function: %q", logs())
	}
	if !slices.Equal(res.Kinds, []policies.Kind{policies.KindRetry}) || !slices.ContainsFunc(res.Unchecked, func(s string) bool { return strings.Contains(s, "start function") }) {
		t.Errorf("result %+v", res)
	}
	// Load runs it, and the grown memory holds the I/O area.
	m := load(t, r, testdata("started"), ModuleOptions{})
	if n := countLines(logs(), "instantiated"); n != 1 {
		t.Errorf("Load: %q", logs())
	}
	if d := m.Retry().DecideRetry(context.Background(), policies.RetryRequest{Attempt: 1}); d.Delay != 7*ms {
		t.Errorf("decision %+v", d)
	}
}

func TestCheckRefusesBadModules(t *testing.T) {
	for _, c := range []struct {
		file string
		opts ModuleOptions
		want error
		msg  string
	}{
		{file: "bad_version", want: ErrABI, msg: "policy_abi_version returned 2, want 1"},
		{file: "bad_ioarea", want: ErrABI, msg: "I/O area [65000, +1024) outside memory (65536 bytes before any code runs)"},
		{file: "bad_sig", want: ErrABI, msg: "export retry_decide has type (i32, i32) -> (i64)"},
		{file: "bad_import", want: ErrImport, msg: "env.abort (function)"},
		{file: "bad_hostsig", want: ErrImport, msg: "import policy_host.log (function) has type (i32) -> ()"},
		{file: "bad_memimport", want: ErrImport, msg: "policy_host.memory (memory)"},
		{file: "bad_nokind", want: ErrABI, msg: "no policy export"},
		{file: "bad_command", want: ErrABI, msg: "exports _start"},
		{file: "bad_nomem", want: ErrABI, msg: `no memory exported as "memory"`},
		{file: "bigmem", opts: ModuleOptions{MemoryPages: 16}, want: ErrMemory, msg: "initial memory of 64 pages is above the limit of 16 pages"},
		{file: "echo", opts: ModuleOptions{Config: make([]byte, 8193)}, want: ErrABI, msg: "config of 8193 bytes does not fit the I/O area of 8192 bytes"},
	} {
		_, err := Check(context.Background(), readWasm(t, testdata(c.file)), c.opts)
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: %v; want %v containing %q", c.file, err, c.want, c.msg)
		}
	}
	// A module Load accepts.
	res, err := Check(context.Background(), readWasm(t, testdata("echo")), ModuleOptions{Config: []byte(`{"a":1}`)})
	if err != nil || len(res.Kinds) != 3 {
		t.Errorf("echo: %+v, %v", res, err)
	}
	// A Go module: its ABI version needs its runtime.
	res, err = Check(context.Background(), readWasm(t, goTenant), ModuleOptions{MemoryPages: 64})
	if err != nil || !slices.ContainsFunc(res.Unchecked, func(s string) bool { return strings.Contains(s, "ABI version") }) {
		t.Errorf("gotenant: %+v, %v", res, err)
	}
	if _, err := Check(context.Background(), []byte("garbage"), ModuleOptions{}); !errors.Is(err, ErrABI) {
		t.Errorf("garbage: %v", err)
	}
}

func TestConstResult(t *testing.T) {
	// echo.wat returns its I/O area from immutable globals.
	b, err := os.ReadFile(testdata("echo"))
	if err != nil {
		t.Fatal(err)
	}
	l := staticLayout(b)
	if l.funcImports != 1 || len(l.globals) != 4 || !l.globals[0].ok || l.globals[0].v != 4096 || l.globals[2].ok {
		t.Fatalf("layout: imports %d globals %+v", l.funcImports, l.globals)
	}
	for fn, want := range map[uint32]int32{1: 1, 2: 4096, 3: 8192} { // after the import
		if v, ok := l.constResult(fn); !ok || v != want {
			t.Errorf("function %d: %d, %v; want %d", fn, v, ok, want)
		}
	}
	if _, ok := l.constResult(4); ok { // policy_configure: not a constant
		t.Error("policy_configure read as a constant")
	}
	if _, ok := l.constResult(0); ok { // the import
		t.Error("an import read as a constant")
	}
	for _, c := range []struct {
		in   []byte
		want int32
		ok   bool
	}{
		{[]byte{0x41, 0x01, 0x0b}, 1, true},
		{[]byte{0x41, 0x7f, 0x0b}, -1, true},
		{[]byte{0x41, 0x80, 0x80, 0x80, 0x80, 0x78, 0x0b}, -1 << 31, true},
		{[]byte{0x41, 0xff, 0xff, 0xff, 0xff, 0x07, 0x0b}, 1<<31 - 1, true},
		{[]byte{0x41, 0x01, 0x41, 0x02, 0x0b}, 0, false},
		{[]byte{0x41, 0x01}, 0, false},
		{[]byte{0x42, 0x01, 0x0b}, 0, false},
	} {
		v, ok := plainI32Const(c.in)
		if v != c.want || ok != c.ok {
			t.Errorf("% x: %d, %v; want %d, %v", c.in, v, ok, c.want, c.ok)
		}
	}
}
