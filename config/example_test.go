package config_test

import (
	"fmt"
	"os"

	"github.com/coordhost/coordhost/config"
	"github.com/zclconf/go-cty/cty"
)

func ExampleParse() {
	src := []byte(`
variable "ttl" {
  default = "30s"
}

policy "retry" "fast" {
  driver = "builtin"
  kind   = "exponential"
  base   = "10ms"
  max    = "1s"
}

lock "invoice" {
  ttl     = var.ttl
  fencing = true
  retry   = policy.retry.fast
}
`)
	cfg, diags := config.Parse(src, "coordhost.hcl", config.LoadOptions{
		Vars: map[string]cty.Value{"ttl": cty.StringVal("1m")}, // as from -var ttl=1m
	})
	if diags.HasErrors() {
		config.WriteDiagnostics(os.Stderr, cfg.Files(), diags, false)
		return
	}
	l := cfg.Lock("invoice")
	p := cfg.Policy(l.Retry.Kind, l.Retry.Name)
	fmt.Println(l.Name, l.TTL, l.Fencing, l.Prefix)
	fmt.Println(l.Retry, p.Driver, p.Builtin.Retry, p.Builtin.Base, p.Builtin.Max)
	fmt.Println(cfg.Redis == nil, cfg.Server.Listen)
	// Output:
	// invoice 1m0s true coordhost:lock:
	// policy.retry.fast builtin exponential 10ms 1s
	// true 127.0.0.1:7379
}

func ExampleWriteDiagnostics() {
	src := []byte(`lock "invoice" {
  ttl   = "30 seconds"
  retry = policy.partition.per_tenant
}
`)
	cfg, diags := config.Parse(src, "coordhost.hcl", config.LoadOptions{})
	config.WriteDiagnostics(os.Stdout, cfg.Files(), diags, false)
	// Output:
	// Error: Invalid duration
	//
	//   on coordhost.hcl line 2, in lock "invoice":
	//    2:   ttl   = "30 seconds"
	//
	// Argument "ttl" must be a duration such as "500ms", "30s" or "1m30s" (units ns,
	// us, ms, s, m, h); "30 seconds" is not one.
	//
	// Error: Wrong kind of policy
	//
	//   on coordhost.hcl line 3, in lock "invoice":
	//    3:   retry = policy.partition.per_tenant
	//
	// Argument "retry" of lock "invoice" takes a retry policy, but
	// policy.partition.per_tenant is a partition policy.
}
