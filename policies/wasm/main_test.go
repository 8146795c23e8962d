package wasm

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/xtest"
)

// sharedCacheDir is an on-disk compilation cache for the tests' runtimes,
// so each Go example is compiled once per test binary.
var sharedCacheDir string

func TestMain(m *testing.M) {
	xtest.Main(m, xtest.Before(func() (err error) {
		sharedCacheDir, err = os.MkdirTemp("", "coordhost-wasm-test-cache-")
		return err
	}), xtest.After(func() { os.RemoveAll(sharedCacheDir) }))
}

// Paths of the committed modules (scripts/build-wasm.sh builds them).
const (
	examples    = "../../plugins/examples/wasm"
	goBackoff   = examples + "/gobackoff/gobackoff.wasm"
	goTenant    = examples + "/gotenant/gotenant.wasm"
	goStarve    = examples + "/gostarve/gostarve.wasm"
	watConstant = examples + "/wat/constant.wasm"
)

func testdata(name string) string { return filepath.Join("testdata", name+".wasm") }

var (
	fileMu    sync.Mutex
	fileCache = map[string][]byte{}
)

func readWasm(t testing.TB, path string) []byte {
	t.Helper()
	fileMu.Lock()
	defer fileMu.Unlock()
	if b, ok := fileCache[path]; ok {
		return b
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run scripts/build-wasm.sh)", err)
	}
	fileCache[path] = b
	return b
}

// newRuntime returns a Runtime closed at the end of the test; without a
// CacheDir it uses the shared one.
func newRuntime(t testing.TB, o RuntimeOptions) *Runtime {
	t.Helper()
	if o.CacheDir == "" {
		o.CacheDir = sharedCacheDir
	}
	r, err := NewRuntime(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(context.Background()); err != nil {
			t.Errorf("Runtime.Close: %v", err)
		}
	})
	return r
}

// testCallTimeout replaces the default deadline in tests that are not about
// deadlines: a starved CPU (parallel test binaries under -race) can delay a
// 150 ns call beyond 50 ms of wall-clock time.
const testCallTimeout = 10 * time.Second

// load loads path into r and closes it at the end of the test; a zero
// CallTimeout becomes testCallTimeout.
func load(t testing.TB, r *Runtime, path string, o ModuleOptions) *Module {
	t.Helper()
	if o.CallTimeout == 0 {
		o.CallTimeout = testCallTimeout
	}
	m, err := r.Load(context.Background(), readWasm(t, path), o)
	if err != nil {
		t.Fatalf("Load %s: %v", path, err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	return m
}

// logRecorder is a slog.Handler that keeps every record as a line
// "LEVEL msg key=value ...".
type logRecorder struct {
	mu    *sync.Mutex
	lines *[]string
	attrs []slog.Attr
}

func newLogRecorder() (*slog.Logger, func() []string) {
	h := &logRecorder{mu: new(sync.Mutex), lines: new([]string)}
	return slog.New(h), func() []string {
		h.mu.Lock()
		defer h.mu.Unlock()
		return append([]string(nil), *h.lines...)
	}
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", r.Level, r.Message)
	for _, a := range h.attrs {
		fmt.Fprintf(&b, " %s", a)
	}
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s", a)
		return true
	})
	h.mu.Lock()
	*h.lines = append(*h.lines, b.String())
	h.mu.Unlock()
	return nil
}

func (h *logRecorder) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), as...)
	return &c
}

func (h *logRecorder) WithGroup(string) slog.Handler { return h }

func countLines(lines []string, substr string) int {
	n := 0
	for _, l := range lines {
		if strings.Contains(l, substr) {
			n++
		}
	}
	return n
}
