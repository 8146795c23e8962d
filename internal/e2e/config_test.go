package e2e

// rateLimitHCL configures what the rate-limit tests use: rate_limit "api"
// (2 per hour per tenant, attribute "tenant") for RateLimitService, and the
// Envoy domain "edge" whose descriptor (generic_key = "checkout", user =
// any) is decided by rate_limit "checkout" (2 per hour per user).
const rateLimitHCL = `
policy "partition" "tenant" {
  driver   = "builtin"
  template = "tenant:$${tenant}"
}

rate_limit "api" {
  algorithm = "sliding_window"
  limit     = 2
  window    = "1h"
  partition = policy.partition.tenant
}

rate_limit "checkout" {
  algorithm = "fixed_window"
  limit     = 2
  window    = "1h"
}

envoy_rate_limit "edge" {
  descriptor {
    entries    = [{ key = "generic_key", value = "checkout" }, { key = "user" }]
    rate_limit = "checkout"
  }
}
`
