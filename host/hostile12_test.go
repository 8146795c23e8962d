package host_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/config"
	"github.com/coordhost/coordhost/host"
	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
)

// FINDING 5 (low): the re-check after a reload compares hazard sentences
// as whole strings, and the replicas sentence embeds the replica count
// (and the primary's address). When a replica is added (or, through
// Sentinel, the primary changes), the daemon logs the old sentence as
// "redis setting no longer weakens coordhost's guarantees" although the
// hazard is still there, larger than before. An operator reading the
// info line is told the replication hazard went away.
func TestHostile12RecheckSaysReplicaHazardGone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := redistest.Start(t, redistest.Args("--appendonly", "yes"))
	redistest.StartReplicaOf(t, p)
	path := filepath.Join(t.TempDir(), "c.hcl")
	if err := os.WriteFile(path, []byte(fmt.Sprintf("redis {\n  addresses = [%q]\n}\n", p.Addr)), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, diags := config.Load(path, config.LoadOptions{})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	var logs xtest.SyncBuffer
	h, err := host.New(ctx, cfg, host.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil)), WasmCacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if !strings.Contains(logs.String(), "has 1 replica(s)") {
		t.Fatalf("no replicas warning at start:\n%s", logs.String())
	}
	redistest.StartReplicaOf(t, p) // a second replica: the hazard stays
	if err := h.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "no longer weakens") && strings.Contains(line, "replica(s)") {
			t.Fatalf("the replicas hazard is reported gone while the primary has 2 replicas:\n%s", line)
		}
	}
}
