package host_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordhost/coordhost/config"
	"github.com/coordhost/coordhost/host"
	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/plugins/sdk/proctree"
)

// sleepers returns the descendants of this (host) process named "sleep":
// what the allkinds test plugin spawns.
func sleepers() []int {
	tree := proctree.New(os.Getpid())
	tree.Refresh()
	var out []int
	for _, pid := range tree.Members() {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil && strings.TrimSpace(string(b)) == "sleep" {
			out = append(out, pid)
		}
	}
	return out
}

func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}

// TestShutdownLeavesNoPluginDescendant: a plugin that starts a child in a
// session of its own and a detached grandchild (a double fork) leaves
// neither running after the host's Shutdown.
func TestShutdownLeavesNoPluginDescendant(t *testing.T) {
	if !proctree.Supported() {
		t.Skip("descendant tracking is Linux-only")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "allkinds")
	if out, err := exec.Command("go", "build", "-o", bin, "../policies/plugin/testdata/allkinds").CombinedOutput(); err != nil {
		t.Fatalf("building the allkinds test plugin: %v\n%s", err, out)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	s := redistest.Start(t)
	src := fmt.Sprintf(`
redis { addresses = [%q] }

policy "partition" "spawner" {
  driver = "plugin"
  path   = %q
  sha256 = %q
  config = { spawn = true }
}
`, s.Addr, bin, hex.EncodeToString(sum[:]))
	path := filepath.Join(dir, "coordhost.hcl")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, diags := config.Load(path, config.LoadOptions{})
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := host.New(ctx, cfg, host.Options{WasmCacheDir: t.TempDir(), Logger: quietLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() }) // should the test stop early; Close is idempotent
	// The grandchild may still be execing sleep (its parent shell printed
	// its pid first): look for a while.
	var pids []int
	for wait := time.Now().Add(10 * time.Second); len(pids) < 2 && time.Now().Before(wait); time.Sleep(5 * time.Millisecond) {
		pids = sleepers()
	}
	t.Cleanup(func() {
		for _, pid := range pids {
			if running(pid) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	if len(pids) != 2 {
		t.Fatalf("%d sleeping descendants before Shutdown (%v), want the plugin's 2", len(pids), pids)
	}
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, pid := range pids {
		for running(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("process %d, started by the plugin, survives the host's Shutdown", pid)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}
