package plugin

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/coordhost/coordhost/internal/xtest"
)

// buildDir holds the plugin binaries the tests build, once per test binary.
var buildDir string

// Nothing but rueidis' bounded goroutines is ignored. go-plugin's
// Client.Kill waits for its process goroutines but not for the three its
// gRPC client starts (GRPCBroker.Run, gRPCBrokerClientImpl.StartStream,
// grpcStdioClient.Run); they return as soon as Kill closes the
// connection, and in practice are gone when Close returns. goleak's
// retries cover any remaining instant.
func TestMain(m *testing.M) {
	xtest.Main(m, xtest.Before(func() (err error) {
		buildDir, err = os.MkdirTemp("", "coordhost-plugin-test-")
		return err
	}), xtest.After(func() { os.RemoveAll(buildDir) }))
}

// pluginBin is a built plugin executable and its sha256.
type pluginBin struct {
	path, sum string
}

var (
	buildMu sync.Mutex
	builds  = map[string]*buildOnce{}
)

type buildOnce struct {
	once sync.Once
	bin  pluginBin
	err  error
}

// build builds the package (an import path or ./testdata/... directory)
// once per test binary.
func build(tb testing.TB, pkg string) pluginBin {
	tb.Helper()
	buildMu.Lock()
	b := builds[pkg]
	if b == nil {
		b = &buildOnce{}
		builds[pkg] = b
	}
	buildMu.Unlock()
	b.once.Do(func() {
		out := filepath.Join(buildDir, fmt.Sprintf("plugin-%d", len(builds)))
		cmd := exec.Command("go", "build", "-o", out, pkg)
		if msg, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, msg)
			return
		}
		sum, err := fileSHA256(out)
		b.bin, b.err = pluginBin{path: out, sum: sum}, err
	})
	if b.err != nil {
		tb.Fatal(b.err)
	}
	return b.bin
}

const (
	examplePkg  = "github.com/coordhost/coordhost/plugins/examples/plugin"
	allKindsPkg = "./testdata/allkinds"
)

func examplePlugin(tb testing.TB) pluginBin  { return build(tb, examplePkg) }
func allKindsPlugin(tb testing.TB) pluginBin { return build(tb, allKindsPkg) }

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// testLogger discards logs unless PLUGIN_TEST_LOG is set (then debug logs
// go to stderr). Not t.Log: go-plugin's stdio goroutine may log after a
// test ended.
func testLogger() *slog.Logger {
	if os.Getenv("PLUGIN_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug - 4}))
	}
	return slog.New(slog.DiscardHandler)
}
