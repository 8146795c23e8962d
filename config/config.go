// Package config decodes coordhost's HCL configuration (DESIGN.md §6) into
// plain data. Decoding is pure: it never dials Redis, starts plugins or
// compiles WebAssembly; the only I/O is reading the configuration file, the
// files named by file(), checking the files named by module, path and
// the TLS file attributes, and reading token secrets (secret_file,
// secret_env; only their SHA-256 digests are kept). The host (package host) turns a Config into
// clients, policies and primitives.
//
// Every mistake comes back as an hcl.Diagnostic with a source range (file,
// line, column); Load collects all of them instead of stopping at the first.
// WriteDiagnostics renders them with source snippets.
//
// # Schema
//
//	variable "NAME" {             # any number; referenced as var.NAME
//	  type        = string        # optional type constraint (any when omitted)
//	  default     = "..."         # required unless LoadOptions.Vars sets it
//	  description = "..."
//	}
//
//	redis {                       # optional; without it `serve` runs a private redis-server
//	  addresses    = ["host:port", "/path/to.sock"]  # required, non-empty, unless sentinel is set
//	  sentinel {                  # optional, instead of addresses: find the primary through Sentinel
//	    master_set = "mymaster"   # required: the name the sentinels monitor the primary under
//	    addresses  = ["s1:26379", "s2:26379", "s3:26379"]  # required: the sentinels, host:port
//	    username   = ""           # the sentinels' own credentials (not the primary's);
//	    password   = ""           #   default none
//	  }
//	  username     = ""           # the servers' credentials (with sentinel: the primary's)
//	  password     = ""
//	  key_prefix   = ""
//	  client_cache = true         # default true
//	  tls {                       # optional; with sentinel, for the sentinels and the servers alike
//	    enabled              = true   # default true once the block is present
//	    ca_file              = "..."  # files must exist; relative to path.config
//	    cert_file            = "..."  # cert_file and key_file go together
//	    key_file             = "..."
//	    server_name          = "..."
//	    insecure_skip_verify = false
//	  }
//	}
//
//	server {                      # optional
//	  listen     = "127.0.0.1:7379"   # default DefaultListen
//	  log_format = "text"             # text | json
//	  log_level  = "info"             # debug | info | warn | error
//	  metrics_open = false            # with tokens: serve /metrics without one
//	  tls {                           # optional: HTTPS (HTTP/2 by ALPN, HTTP/1.1)
//	    cert_file      = "server.pem"     # required; files must exist; relative to path.config;
//	    key_file       = "server.key"     # required;  both re-read on SIGHUP
//	    client_ca_file = "clients-ca.pem" # optional: mutual TLS; every request but
//	                                      # /livez, /readyz, grpc.health.v1 needs a verified client cert
//	  }
//	  token "NAME" {                  # any number; with one or more, every API call needs a token
//	    secret_file   = "tokens/NAME" # exactly one of secret_file and secret_env: the secret, at
//	    secret_env    = "ENV_VAR"     #   least 16 visible ASCII bytes after one trailing newline;
//	                                  #   unique per token; never written in the configuration
//	    names         = ["invoice", "tenant-*"]  # path.Match patterns over primitive names; default none
//	    envoy_domains = ["edge"]      # path.Match patterns over Envoy rate-limit domains; default none
//	    admin         = false         # may call AdminService
//	    metrics       = false         # may GET /metrics (unless metrics_open)
//	    max_streams   = 1000          # concurrent streams on one daemon, 1 to 1000000
//	    max_sessions  = 1000          # sessions held at once, 1 to 1000000
//	  }
//	}
//
//	policy "KIND" "NAME" {        # KIND: retry | partition | starvation
//	  driver = "builtin"          # builtin | wasm | plugin (required)
//	  # builtin retry:      kind = "exponential" | "constant" | "none" (required),
//	  #                     base, max, give_up_after (exponential),
//	  #                     delay, give_up_after (constant)
//	  # builtin partition:  template = "{$${tenant}}:$${name}" (required;
//	  #                     "$${" because HCL itself reads "${" as interpolation)
//	  # builtin starvation: bound = "500ms" | "unbounded" (required)
//	  # wasm:   module = "${path.config}/x.wasm" (required),
//	  #         limits { memory_pages = 16  call_timeout = "50ms" }, config = {...}
//	  #         (memory_pages defaults to 512, 32 MiB; call_timeout to 50ms)
//	  # plugin: path (required), sha256 (required), args = [...], config = {...},
//	  #         call_timeout, health_interval
//	}
//
//	lock "NAME" {
//	  ttl       = "30s"           # required, at least 1ms
//	  fencing   = false
//	  fifo      = false
//	  prefix    = "coordhost:lock:"   # default DefaultLockPrefix
//	  retry     = policy.retry.NAME       # optional reference
//	  partition = policy.partition.NAME   # optional reference
//	  replicas  = 0               # grants, renewals confirmed by this many replicas (WAIT); 0 to 64
//	  replica_timeout = "1s"      # how long they may take: 1ms to 1m; only with replicas
//	}
//
//	latch "NAME" {                # a countdown latch (see Latch)
//	  ttl       = "24h"           # lifetime after the last change; "none": never expires
//	  recheck   = "2s"            # a waiter's re-read without notifications, at least 10ms
//	  prefix    = "coordhost:latch:"  # default DefaultLatchPrefix
//	  retry     = policy.retry.NAME       # optional: retries reads after transient errors
//	  partition = policy.partition.NAME   # optional reference
//	}
//
//	rwlock "NAME" {               # read-write leases (see RWLock)
//	  ttl        = "30s"          # required, at least 1ms
//	  prefix     = "coordhost:rwlock:"     # default DefaultRWLockPrefix
//	  marker_ttl = "2s"           # a waiting writer's entry lease, at least 30ms
//	  starvation = policy.starvation.NAME  # optional; none: reader preference
//	  retry      = policy.retry.NAME
//	  partition  = policy.partition.NAME
//	  replicas  = 0               # grants, renewals confirmed by this many replicas (WAIT); 0 to 64
//	  replica_timeout = "1s"      # how long they may take: 1ms to 1m; only with replicas
//	}
//
//	semaphore "NAME" {            # a counting semaphore (see Semaphore)
//	  capacity  = 10              # required, 1 to 1000000000 permits live at once
//	  ttl       = "30s"           # required: a permit's lease; "none": until released
//	  prefix    = "coordhost:semaphore:"  # default DefaultSemaphorePrefix
//	  retry     = policy.retry.NAME       # optional reference
//	  partition = policy.partition.NAME   # optional reference
//	  replicas  = 0               # grants, renewals confirmed by this many replicas (WAIT); 0 to 64
//	  replica_timeout = "1s"      # how long they may take: 1ms to 1m; only with replicas
//	}
//
//	lease "NAME" {                # named hash-field leases (see Lease); serving needs Redis 7.4+
//	  ttl       = "30s"           # required: a request's lease when it names none; whole ms, at least 1ms
//	  max_ttl   = "5m"            # the longest lease a request may ask for; default ttl
//	  prefix    = "coordhost:lease:"  # default DefaultLeasePrefix
//	  retry     = policy.retry.NAME       # optional reference
//	  partition = policy.partition.NAME   # optional: chooses the hash
//	  replicas  = 0               # grants, renewals confirmed by this many replicas (WAIT); 0 to 64
//	  replica_timeout = "1s"      # how long they may take: 1ms to 1m; only with replicas
//	}
//
//	rate_limit "NAME" {           # a rate limit, one limiter per partition key (see RateLimit)
//	  algorithm = "sliding_window"  # required: fixed_window | sliding_window | token_bucket
//	  limit     = 100               # required: permits per window, or the bucket's size
//	  window    = "1m"              # fixed_window, sliding_window: required; whole ms
//	  segments  = 10                # sliding_window only; default 10
//	  tokens_per_period = 10        # token_bucket only: required
//	  period    = "1s"              # token_bucket only: required; whole ms
//	  partition = policy.partition.NAME   # optional reference
//	  queue {                       # optional: Acquire queues up to limit permits
//	    limit = 20
//	    order = "oldest_first"      # oldest_first (default) | newest_first
//	  }
//	  idle_timeout = "1m"           # a partition's limiter idle this long is dropped
//	}
//
//	envoy_rate_limit "NAME" {     # an Envoy rate-limit domain (see EnvoyRateLimit)
//	  domain = "NAME"             # default: the label
//	  descriptor {                # one or more
//	    entries    = [{ key = "remote_address" }, { key = "path", value = "/login" }]
//	    rate_limit = "NAME"       # required: a rate_limit block
//	  }
//	}
//
//	redlock "NAME" {
//	  addresses    = ["a:6379", "b:6379", "c:6379"]  # required: an odd number >= 3 of independent servers, no two alike
//	  ttl          = "10s"        # required; at most max_ttl, above the drift allowance and node_timeout
//	  max_ttl      = "1m"         # longest lease and restart-guard span; default DefaultRedlockMaxTTL
//	  node_timeout = "100ms"      # per node and call; default the primitive's
//	  drift        = "2ms"        # clock-drift allowance: drift + drift_factor * ttl
//	  drift_factor = 0.01
//	  username     = ""           # default the redis block's; its tls applies too
//	  password     = ""
//	  prefix       = "coordhost:redlock:"  # default DefaultRedlockPrefix
//	  retry        = policy.retry.NAME
//	  partition    = policy.partition.NAME
//	}
//
// Durations are strings in time.ParseDuration syntax ("10ms", "1m30s").
// Policy references are traversals written literally (policy.retry.fast,
// not a string or an expression), also inside dynamic content. "dynamic"
// blocks (hcl/v2/ext/dynblock) may generate any block except variable. Expressions may use var.NAME, path.config (the directory of the
// configuration file), path.cwd, and the functions coalesce, concat, file,
// format, join, jsonencode, length, lower, max, merge, min, split, tobool,
// tonumber, tostring, trimspace and upper. file(PATH) reads a UTF-8 file
// relative to path.config (except in a sandboxed parse: LoadOptions.Sandbox).
package config

import (
	"time"

	"github.com/coordhost/coordhost/policies"
	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
)

// Defaults applied by Load.
const (
	// DefaultListen is server.listen when not set.
	DefaultListen = "127.0.0.1:7379"
	// ReservedKeyPrefix is the key namespace coordhost keeps for keys it
	// derives (fencing counters, queues); a lock name may not start with
	// it. It matches primitives/internal/keys.Reserved.
	ReservedKeyPrefix = "__coordhost:"
	// DefaultLockPrefix is a lock's prefix when not set.
	DefaultLockPrefix = "coordhost:lock:"
	// MinLockTTL is the smallest ttl a lock accepts.
	MinLockTTL = time.Millisecond
	// MaxWasmMemoryPages is the largest limits.memory_pages (4 GiB of
	// 64 KiB pages, the wasm32 maximum).
	MaxWasmMemoryPages = 65536
	// DefaultWasmMemoryPages is limits.memory_pages when not set: 512
	// pages, 32 MiB (policies/wasm.DefaultMemoryLimitPages).
	DefaultWasmMemoryPages = 512
)

// Config is a decoded configuration file. It is plain data: building it did
// not dial Redis or start anything. Load and Parse always return a non-nil
// Config; when their diagnostics have errors it holds only what could be
// decoded and is good for Files (to render the diagnostics) and nothing
// else. A Config is not modified after Load returns, so it is safe for
// concurrent reads.
type Config struct {
	// Path is the absolute path of the file ("" when parsed from memory
	// with an empty filename).
	Path string
	// Dir is path.config: the absolute directory of the file, against which
	// relative paths in the file are resolved.
	Dir string
	// Redis is the redis block, or nil when there is none (dev mode: the
	// host starts a private redis-server).
	Redis *Redis
	// Server is the server block with defaults filled in; present or not.
	Server Server
	// Variables are the declared variables, in declaration order, with
	// their final values.
	Variables []*Variable
	// Policies are the declared policies, in declaration order.
	Policies []*Policy
	// Locks are the declared named locks, in declaration order (blocks
	// generated by "dynamic" appear where the dynamic block is).
	Locks []*Lock
	// Latches are the declared countdown latches, in declaration order.
	Latches []*Latch
	// RWLocks are the declared named read-write leases, in declaration
	// order.
	RWLocks []*RWLock
	// Semaphores are the declared named semaphores, in declaration order.
	Semaphores []*Semaphore
	// Leases are the declared lease blocks (named hash-field leases), in
	// declaration order.
	Leases []*Lease
	// Redlocks are the declared redlocks, in declaration order.
	Redlocks []*Redlock
	// RateLimits are the declared rate limits, in declaration order.
	RateLimits []*RateLimit
	// EnvoyRateLimits are the declared envoy_rate_limit blocks, in
	// declaration order.
	EnvoyRateLimits []*EnvoyRateLimit

	files      map[string]*hcl.File
	policies   map[policyKey]*Policy
	locks      map[string]*Lock
	latches    map[string]*Latch
	rwlocks    map[string]*RWLock
	semaphores map[string]*Semaphore
	leases     map[string]*Lease
	rateLimits map[string]*RateLimit
	// envoyNames and envoyDomains index EnvoyRateLimits by name and by
	// domain.
	envoyNames   map[string]*EnvoyRateLimit
	envoyDomains map[string]*EnvoyRateLimit
}

type policyKey struct {
	kind policies.Kind
	name string
}

// Files returns the parsed source files by the filename used in diagnostic
// ranges, for WriteDiagnostics. The map must not be modified.
func (c *Config) Files() map[string]*hcl.File { return c.files }

// Policy returns the policy declared as `policy "KIND" "NAME"`, or nil.
func (c *Config) Policy(kind policies.Kind, name string) *Policy {
	return c.policies[policyKey{kind, name}]
}

// Lock returns the lock declared as `lock "NAME"`, or nil.
func (c *Config) Lock(name string) *Lock { return c.locks[name] }

// Variable is a `variable "NAME"` block.
type Variable struct {
	Name        string
	Description string
	// Type is the declared type constraint; cty.DynamicPseudoType when the
	// block has no type attribute.
	Type cty.Type
	// Default is the default value, or cty.NilVal when there is none.
	Default cty.Value
	// Value is the value var.NAME has: the override from LoadOptions.Vars
	// or else Default, converted to Type.
	Value cty.Value
	Range hcl.Range
}

// Redis is the redis block: how the host connects to Redis.
type Redis struct {
	// Addresses are "host:port" pairs ("[::1]:6379" for IPv6) or absolute
	// paths of unix sockets; at least one, unless Sentinel is set, and
	// then none.
	Addresses []string
	// Sentinel is the sentinel block, or nil when there is none. With it
	// the host asks the sentinels for the primary of a master set, and
	// follows it through failovers.
	Sentinel *Sentinel
	// Username and Password authenticate to the servers (with Sentinel:
	// to the primary); "" for none.
	Username string
	Password string
	// KeyPrefix is prepended to every key the host writes; "" for none.
	KeyPrefix string
	// ClientCache turns on client-side caching (RESP3 tracking), which the
	// wait engine uses for wake-ups. Default true.
	ClientCache bool
	// TLS is the tls block, or nil when there is none (plain TCP).
	TLS   *TLS
	Range hcl.Range
}

// Sentinel is redis.sentinel: the primary is the one the sentinels report
// for MasterSet. It is exclusive with Redis.Addresses.
type Sentinel struct {
	// MasterSet is the name the sentinels monitor the primary under (the
	// NAME of `sentinel monitor NAME host port quorum`): one word.
	MasterSet string
	// Addresses are the sentinels' "host:port" pairs (no unix sockets, no
	// duplicates); at least one. The client also learns the other
	// sentinels of the set from the ones it reaches.
	Addresses []string
	// Username and Password authenticate to the sentinels (Sentinel's own
	// requirepass or ACL user), not to the primary; "" for none.
	Username string
	Password string
	Range    hcl.Range
}

// TLS is redis.tls. File paths are absolute and the files existed and were
// readable when the configuration was loaded.
type TLS struct {
	// Enabled is true unless the block says enabled = false.
	Enabled            bool
	CAFile             string
	CertFile           string
	KeyFile            string
	ServerName         string
	InsecureSkipVerify bool
	Range              hcl.Range
}

// LogFormat is server.log_format.
type LogFormat string

// The log formats.
const (
	LogText LogFormat = "text"
	LogJSON LogFormat = "json"
)

// LogLevel is server.log_level.
type LogLevel string

// The log levels.
const (
	LogDebug LogLevel = "debug"
	LogInfo  LogLevel = "info"
	LogWarn  LogLevel = "warn"
	LogError LogLevel = "error"
)

// Server is the server block with defaults applied: Listen DefaultListen,
// LogFormat LogText, LogLevel LogInfo.
type Server struct {
	// Listen is the host:port of the daemon's HTTP server; an empty host
	// means all interfaces, port 0 any free port.
	Listen    string
	LogFormat LogFormat
	LogLevel  LogLevel
	// TLS is the tls block, or nil: the daemon serves cleartext HTTP/1.1
	// and HTTP/2 (h2c).
	TLS *ServerTLS
	// Tokens are the token blocks, in declaration order. With at least
	// one, every API call needs one of them (see Auth).
	Tokens []*Token
	// MetricsOpen serves /metrics without a token when Auth is on;
	// otherwise /metrics needs a token with Metrics.
	MetricsOpen bool
	// Range is the block's range, or the zero Range when there is no
	// server block.
	Range hcl.Range
}

// Driver is the backend that implements a policy.
type Driver string

// The drivers.
const (
	DriverBuiltin Driver = "builtin"
	DriverWasm    Driver = "wasm"
	DriverPlugin  Driver = "plugin"
)

// Policy is a `policy "KIND" "NAME"` block. Exactly one of Builtin, Wasm and
// Plugin is set, according to Driver.
type Policy struct {
	Kind    policies.Kind
	Name    string
	Driver  Driver
	Builtin *BuiltinPolicy
	Wasm    *WasmPolicy
	Plugin  *PluginPolicy
	// Range is the block header's range.
	Range hcl.Range
}

// RetryKind selects a builtin retry policy.
type RetryKind string

// The builtin retry kinds, after policies/builtin's Exponential, Constant
// and NoRetry.
const (
	RetryExponential RetryKind = "exponential"
	RetryConstant    RetryKind = "constant"
	RetryNone        RetryKind = "none"
)

// BuiltinPolicy holds the parameters of a builtin policy, as data; the host
// builds the policies/builtin value from it. Only the fields of the policy's
// kind are set; unset durations are zero, which the builtin policies read as
// their own defaults (for Exponential: DefaultBackoffBase and
// DefaultBackoffMax; GiveUpAfter zero means never). All durations are
// non-negative and Max >= Base when both are set.
type BuiltinPolicy struct {
	// Retry (kind retry).
	Retry       RetryKind
	Base        time.Duration // exponential
	Max         time.Duration // exponential
	Delay       time.Duration // constant
	GiveUpAfter time.Duration // exponential, constant

	// Template is the partition template (kind partition); it is
	// syntactically valid (see builtin.ParseTemplate).
	Template string

	// Bound is the writer-starvation bound (kind starvation);
	// policies.Unbounded for "unbounded".
	Bound time.Duration
}

// WasmPolicy is a policy run by the wasm driver.
type WasmPolicy struct {
	// Module is the absolute path of the .wasm file; it existed, was
	// readable and began with the WebAssembly magic when loaded.
	Module string
	// ModuleRange is the range of the module attribute's value, for
	// diagnostics about the module itself (e.g. the host's check of its
	// ABI).
	ModuleRange hcl.Range
	// MemoryPages caps the instance memory in 64 KiB pages:
	// limits.memory_pages, or DefaultWasmMemoryPages when not set. (A
	// WasmPolicy built by hand with 0 gets the driver's default, the same
	// 512 pages.)
	MemoryPages uint32
	// CallTimeout bounds one call; 0 means the driver's default.
	CallTimeout time.Duration
	// Config is the config attribute as JSON (an object), passed to
	// policy_configure; nil when absent.
	Config []byte
}

// PluginPolicy is a policy run by the plugin driver (a go-plugin binary).
type PluginPolicy struct {
	// Path is the absolute path of the executable; it existed, was
	// executable and had checksum SHA256 when loaded. The host checks the
	// checksum again when it launches the binary.
	Path string
	// SHA256 is the pinned checksum: 64 lowercase hex digits.
	SHA256 string
	// Args are passed to the binary.
	Args []string
	// Config is the config attribute as JSON (an object); nil when absent.
	Config []byte
	// CallTimeout bounds one call; 0 means the driver's default.
	CallTimeout time.Duration
	// HealthInterval is the time between health pings; 0 means the
	// driver's default.
	HealthInterval time.Duration
}

// Lock is a `lock "NAME"` block: a named lock the host serves.
type Lock struct {
	Name string
	// TTL is the lease of an acquisition; at least MinLockTTL.
	TTL     time.Duration
	Fencing bool
	FIFO    bool
	// Prefix is the lock's key prefix (after redis.key_prefix);
	// DefaultLockPrefix when not set.
	Prefix string
	// Retry and Partition name policies of their kind that the Config
	// declares; nil when not set.
	Retry     *PolicyRef
	Partition *PolicyRef
	// Replication is the replicas and replica_timeout arguments: grants
	// and renewals confirmed by that many replicas; zero when not set.
	Replication
	// Range is the block header's range.
	Range hcl.Range
}

// PolicyRef is a reference such as policy.retry.fast.
type PolicyRef struct {
	Kind policies.Kind
	Name string
	// Range is the reference's range in the source.
	Range hcl.Range
}

// String returns the reference as written: "policy.KIND.NAME".
func (r *PolicyRef) String() string { return "policy." + string(r.Kind) + "." + r.Name }
