package host_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/config"
	"github.com/coordhost/coordhost/host"
	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/policies"
)

// Bad input to the Host's entry points fails clearly and writes nothing.
func TestHostBadInputs(t *testing.T) {
	s := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := host.New(ctx, nil, host.Options{}); err == nil || !strings.Contains(err.Error(), "nil config") {
		t.Fatalf("New(nil): %v", err)
	}
	cfg, diags := config.Parse([]byte(`
redis { addresses = ["`+s.Addr+`"] }
policy "partition" "tenant" {
  driver   = "builtin"
  template = "$${tenant}"
}
lock "job" {
  ttl       = "5s"
  partition = policy.partition.tenant
}
`), "bad.hcl", config.LoadOptions{})
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	h, err := host.New(ctx, cfg, host.Options{Logger: quietLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if _, err := h.Lock("nope"); err == nil || !strings.Contains(err.Error(), `no lock "nope"`) {
		t.Fatalf("Lock(nope): %v", err)
	}
	job, err := h.Lock("job")
	if err != nil {
		t.Fatal(err)
	}
	for name, attrs := range map[string]map[string]string{"no attributes": nil, "empty tenant": {"tenant": ""}} {
		if _, err := job.TryAcquire(ctx, attrs); !errors.Is(err, policies.ErrPartition) {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := job.Acquire(ctx, attrs); !errors.Is(err, policies.ErrPartition) {
			t.Fatalf("%s (Acquire): %v", name, err)
		}
	}
	cancelled, stop := context.WithCancel(ctx)
	stop()
	if _, err := job.TryAcquire(cancelled, map[string]string{"tenant": "a"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	if n := s.MustCmd(t, "DBSIZE"); n != "0" {
		t.Fatalf("DBSIZE %s after refused calls", n)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Lock("job"); err == nil {
		t.Fatal("Lock after Close")
	}
}
