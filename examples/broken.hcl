# broken.hcl: five mistakes, one per line, that `coordhost validate` reports
# all at once (config/example_test.go checks them and their line numbers).

server {
  log_format = "yaml"
}

policy "retry" "fast" {
  driver = "builtin"
  kind   = "exponential"
  base   = "10ms"
  max    = "1 second"
}

policy "partition" "per_tenant" {
  driver   = "builtin"
  template = "{$${tenant}}:$${name}"
}

lock "invoice" {
  ttl     = "30s"
  fencng  = true
  retry   = policy.retry.fsat
}

lock "report" {
  ttl       = "2m"
  partition = policy.retry.fast
}
