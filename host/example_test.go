package host_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/coordhost/coordhost/config"
	"github.com/coordhost/coordhost/host"
	"github.com/zclconf/go-cty/cty"
)

// Named locks from HCL, used from Go: the configuration decides the TTL,
// fencing, retry policy and partitioning; the program names the lock and
// passes its attributes.
func Example() {
	src := []byte(`
variable "redis_addresses" {
  type = list(string)
}

redis {
  addresses  = var.redis_addresses
  key_prefix = "example:"
}

policy "retry" "fast" {
  driver        = "builtin"
  kind          = "exponential"
  base          = "10ms"
  max           = "1s"
  give_up_after = "30s"
}

policy "partition" "per_tenant" {
  driver   = "builtin"
  template = "tenant:$${tenant}"
}

lock "report" {
  ttl       = "30s"
  fencing   = true
  retry     = policy.retry.fast
  partition = policy.partition.per_tenant
}
`)
	cfg, diags := config.Parse(src, "coordhost.hcl", config.LoadOptions{
		Vars: map[string]cty.Value{ // as from -var 'redis_addresses=["..."]'
			"redis_addresses": cty.ListVal([]cty.Value{cty.StringVal(exampleAddr)}),
		},
	})
	if diags.HasErrors() {
		config.WriteDiagnostics(os.Stderr, cfg.Files(), diags, false)
		return
	}
	ctx := context.Background()
	h, err := host.New(ctx, cfg, host.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		panic(err)
	}
	defer h.Close()

	report, err := h.Lock("report")
	if err != nil {
		panic(err)
	}
	l, err := report.Acquire(ctx, map[string]string{"tenant": "acme"})
	if err != nil {
		panic(err)
	}
	fmt.Println(l.Key(), l.FencingToken())
	fmt.Println(l.Release(ctx))

	_, err = report.Acquire(ctx, nil) // no tenant: the partition fails closed
	fmt.Println(err)
	// Output:
	// example:coordhost:lock:report/tenant:acme 1
	// Released <nil>
	// lock "report": policies: partition key unavailable: template "tenant:${tenant}" needs attribute "tenant"
}
