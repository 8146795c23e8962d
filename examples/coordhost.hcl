# coordhost.hcl: an example configuration using all three policy drivers.
#
#   coordhost validate -config examples/coordhost.hcl \
#     -var plugin_sha256=$(sha256sum bin/coordhost-example-plugin | cut -d' ' -f1)
#
# It expects the example policies to be built first: the WebAssembly modules
# plugins/examples/wasm/{gobackoff,gostarve}/*.wasm (scripts/build-wasm.sh)
# and the plugin binary bin/coordhost-example-plugin (the Makefile's plugin
# target). Paths are relative to this file's directory, path.config.

variable "redis_addresses" {
  description = "Redis servers (host:port or a unix socket path)."
  type        = list(string)
  default     = ["127.0.0.1:6379"]
}

variable "plugin_sha256" {
  description = "sha256sum of bin/coordhost-example-plugin; the pin changes with every build."
  type        = string
  default     = "0000000000000000000000000000000000000000000000000000000000000000"
}

redis {
  addresses    = var.redis_addresses
  key_prefix   = "app:"
  client_cache = true
}

server {
  listen     = "127.0.0.1:7379"
  log_format = "json"
  log_level  = "info"
}

# Native exponential backoff with full jitter.
policy "retry" "fast" {
  driver        = "builtin"
  kind          = "exponential"
  base          = "10ms"
  max           = "1s"
  give_up_after = "30s"
}

# The same decision made by a Go policy compiled to WebAssembly.
policy "retry" "gobackoff" {
  driver = "wasm"
  module = "${path.config}/../plugins/examples/wasm/gobackoff/gobackoff.wasm"
  limits {
    memory_pages = 64
    call_timeout = "50ms"
  }
  config = {
    base_ms          = 25
    max_ms           = 2000
    give_up_after_ms = 60000
  }
}

# One partition per tenant, computed by an out-of-process plugin.
policy "partition" "per_tenant" {
  driver          = "plugin"
  path            = "${path.config}/../bin/coordhost-example-plugin"
  sha256          = var.plugin_sha256
  config          = { tenant_prefix = "tenant:" }
  call_timeout    = "100ms"
  health_interval = "5s"
}

# Writers wait at most half a second before new readers are held off.
policy "starvation" "writers_first" {
  driver = "builtin"
  bound  = "500ms"
}

# The same decision made in WebAssembly: once the oldest waiting writer has
# waited bound_ms, new readers are held off (at once when more than crowd
# writers wait).
policy "starvation" "writers_wasm" {
  driver = "wasm"
  module = "${path.config}/../plugins/examples/wasm/gostarve/gostarve.wasm"
  limits {
    memory_pages = 64
    call_timeout = "50ms"
  }
  config = {
    bound_ms = 300
    crowd    = 4
  }
}

lock "invoice" {
  ttl     = "30s"
  fencing = true
  retry   = policy.retry.fast
}

lock "report" {
  ttl       = "2m"
  fifo      = true
  prefix    = "reports:"
  retry     = policy.retry.gobackoff
  partition = policy.partition.per_tenant
}

# A read-write lease: many readers of the cached report at once, or one
# writer rebuilding it. A writer that waits longer than writers_wasm's bound
# holds new readers off, so a steady stream of readers cannot starve it.
rwlock "report_cache" {
  ttl        = "5s"
  marker_ttl = "2s"
  starvation = policy.starvation.writers_wasm
  retry      = policy.retry.fast
}

# One partition per tenant again, natively: a template over the request's
# attributes ("$${" because HCL itself reads "${" as interpolation).
policy "partition" "tenant" {
  driver   = "builtin"
  template = "tenant:$${tenant}"
}

# At most 3 checkouts per tenant in any minute: a sliding window of 10
# segments, so a permit comes back at most 6s late. Ask it once with
#   coordhost limit check -config examples/coordhost.hcl -var plugin_sha256=... \
#     -attr tenant=acme checkout
rate_limit "checkout" {
  algorithm = "sliding_window"
  limit     = 3
  window    = "1m"
  segments  = 10
  partition = policy.partition.tenant
  queue {
    limit = 2
    order = "oldest_first"
  }
  idle_timeout = "5m"
}

# Named leases as fields of one hash, each field with its own expiry: a
# worker leases the job it runs (the job's id is the field). A request gets
# ttl unless it asks for a lease of its own, at most max_ttl (default: ttl).
# Serving leases needs hash-field expiry: Redis 7.4 or newer.
lease "jobs" {
  ttl = "30s"
}

# Envoy's rate-limit service: Envoy asks about each request with the
# descriptor [remote_address = <client IP>] in domain "edge"; every client
# address gets 2 requests per minute.
rate_limit "per_ip" {
  algorithm = "fixed_window"
  limit     = 2
  window    = "1m"
}

envoy_rate_limit "edge" {
  descriptor {
    entries    = [{ key = "remote_address" }]
    rate_limit = "per_ip"
  }
}
