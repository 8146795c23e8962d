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
	// lock "report": policies: partition key unavailable: template "tenant:${tenant}" needs a non-empty attribute "tenant"
}

// A rate limit from HCL: the configuration decides the algorithm, limit
// and partitioning; the program asks for permits with the request's
// attributes.
func ExampleHost_RateLimit() {
	src := []byte(`
variable "redis_addresses" {
  type = list(string)
}

redis {
  addresses  = var.redis_addresses
  key_prefix = "example:"
}

policy "partition" "per_tenant" {
  driver   = "builtin"
  template = "tenant:$${tenant}"
}

rate_limit "checkout" {
  algorithm = "fixed_window"
  limit     = 2
  window    = "1h"
  partition = policy.partition.per_tenant
}
`)
	cfg, diags := config.Parse(src, "coordhost.hcl", config.LoadOptions{
		Vars: map[string]cty.Value{
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

	checkout, err := h.RateLimit("checkout")
	if err != nil {
		panic(err)
	}
	acme := map[string]string{"tenant": "acme"}
	for range 3 {
		res, err := checkout.TryAcquire(ctx, acme, 1)
		if err != nil {
			panic(err)
		}
		fmt.Println(res.Acquired, res.Remaining, res.RetryAfter > 0)
	}
	_, err = checkout.TryAcquire(ctx, nil, 1) // no tenant: the partition fails closed
	fmt.Println(err)
	// Output:
	// true 1 false
	// true 0 false
	// false 0 true
	// rate_limit "checkout": policies: partition key unavailable: template "tenant:${tenant}" needs a non-empty attribute "tenant"
}
