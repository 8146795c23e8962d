package wasm

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/policies"
)

func TestLoadRefusesBadModules(t *testing.T) {
	logger, logs := newLogRecorder()
	r := newRuntime(t, RuntimeOptions{Logger: logger})
	cases := []struct {
		file string
		opts ModuleOptions
		want error
		msg  string
	}{
		{file: "bad_version", want: ErrABI, msg: "policy_abi_version returned 2, want 1"},
		{file: "bad_sig", want: ErrABI, msg: "export retry_decide has type (i32, i32) -> (i64), want (i32, i32, i64, i64, i64) -> (i64)"},
		{file: "bad_abisig", want: ErrABI, msg: "export policy_io_cap has type () -> (i64), want () -> (i32)"},
		{file: "bad_import", want: ErrImport, msg: "env.abort (function): only policy_host.* and wasi_snapshot_preview1.* may be imported"},
		{file: "bad_hostname", want: ErrImport, msg: `policy_host.time (function): policy_host has no function "time"`},
		{file: "bad_hostsig", want: ErrImport, msg: "import policy_host.log (function) has type (i32) -> (), want (i32, i32) -> ()"},
		{file: "bad_wasisig", want: ErrImport, msg: "import wasi_snapshot_preview1.fd_write (function) has type (i32) -> (i32)"},
		{file: "bad_memimport", want: ErrImport, msg: "policy_host.memory (memory): a policy module may import functions only"},
		{file: "bad_global", want: ErrImport, msg: "policy_host.seed (global)"},
		{file: "bad_nokind", want: ErrABI, msg: "no policy export"},
		{file: "bad_command", want: ErrABI, msg: "exports _start"},
		{file: "bad_noio", want: ErrABI, msg: "missing export policy_io_cap"},
		{file: "bad_ioarea", want: ErrABI, msg: "I/O area [65000, +1024) outside memory"},
		{file: "bad_nomem", want: ErrABI, msg: `no memory exported as "memory"`},
		{file: "bigmem", opts: ModuleOptions{MemoryPages: 16}, want: ErrMemory, msg: "initial memory of 64 pages is above the limit of 16 pages"},
		{file: "echo", opts: ModuleOptions{Config: []byte("F!")}, want: ErrABI, msg: `policy_configure returned -11: "bad config"`},
		{file: "echo", opts: ModuleOptions{Config: make([]byte, 8193)}, want: ErrABI, msg: "config of 8193 bytes does not fit the I/O area of 8192 bytes"},
		{file: "echo", opts: ModuleOptions{CallTimeout: -2}, want: ErrInvalidOptions, msg: "negative CallTimeout"},
		{file: "echo", opts: ModuleOptions{CircuitCooldown: -1}, want: ErrInvalidOptions, msg: "negative CircuitCooldown"},
		{file: "echo", opts: ModuleOptions{MemoryPages: DefaultMemoryLimitPages + 1}, want: ErrInvalidOptions, msg: "above the runtime's limit"},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			c.opts.Name = c.file
			m, err := r.Load(context.Background(), readWasm(t, testdata(c.file)), c.opts)
			if err == nil {
				_ = m.Close(context.Background())
				t.Fatal("loaded")
			}
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.msg) || !strings.Contains(err.Error(), `"`+c.file+`"`) {
				t.Fatalf("error %q\nwant one wrapping %q, naming the module, containing %q", err, c.want, c.msg)
			}
			t.Log(err)
		})
	}
	if n := countLines(logs(), "instantiated"); n != 0 {
		t.Errorf("a module with a bad signature was instantiated (%d log lines)", n)
	}
	if _, err := r.Load(context.Background(), []byte("not wasm at all"), ModuleOptions{}); !errors.Is(err, ErrABI) {
		t.Errorf("garbage: %v, want ErrABI", err)
	}
	if _, err := r.Load(context.Background(), []byte("\x00asm\x01\x00\x00\x00\x05\xff"), ModuleOptions{}); err == nil {
		t.Error("truncated module loaded")
	}
}

func TestNewRuntimeOptions(t *testing.T) {
	if _, err := NewRuntime(context.Background(), RuntimeOptions{MemoryLimitPages: MaxMemoryLimitPages + 1}); !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("got %v, want ErrInvalidOptions", err)
	}
}

func TestKinds(t *testing.T) {
	r := newRuntime(t, RuntimeOptions{})
	all := []policies.Kind{policies.KindRetry, policies.KindPartition, policies.KindStarvation}
	for _, c := range []struct {
		path  string
		kinds []policies.Kind
	}{
		{testdata("echo"), all},
		{testdata("trap"), all},
		{testdata("grow"), all[:1]},
		{goBackoff, all[:1]},
		{watConstant, all[:1]},
		{goTenant, all[1:2]},
	} {
		m := load(t, r, c.path, ModuleOptions{Name: filepath.Base(c.path)})
		if got := m.Kinds(); !slices.Equal(got, c.kinds) {
			t.Errorf("%s: kinds %v, want %v", c.path, got, c.kinds)
		}
		if (m.Retry() != nil) != slices.Contains(c.kinds, policies.KindRetry) ||
			(m.Partition() != nil) != slices.Contains(c.kinds, policies.KindPartition) ||
			(m.Starvation() != nil) != slices.Contains(c.kinds, policies.KindStarvation) {
			t.Errorf("%s: policy accessors disagree with kinds %v", c.path, c.kinds)
		}
		if err := m.SelfTest(context.Background()); err != nil && c.path != testdata("trap") {
			t.Errorf("%s: SelfTest: %v", c.path, err)
		}
	}
}

func TestCompilationCacheReused(t *testing.T) {
	dir := t.TempDir()
	files := func() map[string]int64 {
		out := map[string]int64{}
		err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				fi, _ := d.Info()
				out[p] = fi.ModTime().UnixNano()
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	run := func() {
		r, err := NewRuntime(context.Background(), RuntimeOptions{CacheDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close(context.Background())
		// WAT modules: compiling a Go module takes seconds under -race.
		for _, p := range []string{testdata("echo"), watConstant} {
			m, err := r.Load(context.Background(), readWasm(t, p), ModuleOptions{CallTimeout: testCallTimeout})
			if err != nil {
				t.Fatal(err)
			}
			if d := m.Retry().DecideRetry(context.Background(), policies.RetryRequest{Attempt: 42, Reason: policies.ReasonContended}); d.Action != policies.WaitForWake || d.Delay <= 0 {
				t.Fatalf("%s: %+v", p, d)
			}
		}
	}
	run()
	first := files()
	if len(first) < 2 {
		t.Fatalf("cache directory holds %d files after compiling two modules, want at least 2: %v", len(first), first)
	}
	run()
	second := files()
	if !maps2Equal(first, second) {
		t.Fatalf("the second runtime wrote to the cache instead of reading it:\nbefore %v\nafter  %v", first, second)
	}
}

func maps2Equal(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestCloseAndReuse(t *testing.T) {
	r, err := NewRuntime(context.Background(), RuntimeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fallback := policies.RetryFunc(func(context.Context, policies.RetryRequest) policies.RetryDecision {
		return policies.RetryDecision{Action: policies.RetryAfter, Delay: 7 * time.Millisecond}
	})
	m, err := r.Load(context.Background(), readWasm(t, testdata("echo")), ModuleOptions{FallbackRetry: fallback})
	if err != nil {
		t.Fatal(err)
	}
	retry, part := m.Retry(), m.Partition()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if err := m.SelfTest(cancelled); !errors.Is(err, context.Canceled) {
		t.Errorf("SelfTest with a cancelled ctx: %v", err)
	}
	if err := m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if d := retry.DecideRetry(context.Background(), policies.RetryRequest{Attempt: 1}); d.Delay != 7*time.Millisecond {
		t.Errorf("after Close: %+v, want the fallback", d)
	}
	if _, err := part.PartitionKey(context.Background(), policies.PartitionRequest{Kind: "lock"}); !errors.Is(err, policies.ErrPartition) || !errors.Is(err, ErrClosed) {
		t.Errorf("partition after Close: %v", err)
	}
	if err := m.SelfTest(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("SelfTest after Close: %v", err)
	}
	if s := m.Stats(); s.Instances != 0 || s.Fallbacks != 2 {
		t.Errorf("stats after Close: %+v", s)
	}

	m2, err := r.Load(context.Background(), readWasm(t, testdata("echo")), ModuleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatalf("second Runtime.Close: %v", err)
	}
	if d := m2.Retry().DecideRetry(context.Background(), policies.RetryRequest{Attempt: 3}); d != (policies.RetryDecision{}) {
		t.Errorf("module of a closed runtime: %+v, want the default fallback", d)
	}
	if _, err := r.Load(context.Background(), readWasm(t, testdata("echo")), ModuleOptions{}); !errors.Is(err, ErrClosed) {
		t.Errorf("Load after Close: %v", err)
	}
}

func TestWASIStdioGoesToTheLogger(t *testing.T) {
	logger, logs := newLogRecorder()
	r := newRuntime(t, RuntimeOptions{})
	load(t, r, testdata("stdio"), ModuleOptions{Name: "stdio", Logger: logger})
	got := logs()
	if countLines(got, "WARN guest says hi policy=stdio stream=stderr") != 1 ||
		countLines(got, "INFO to stdout policy=stdio stream=stdout") != 1 {
		t.Errorf("log lines %q", got)
	}
}
