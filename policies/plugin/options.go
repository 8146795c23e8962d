package plugin

import (
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/coordhost/coordhost/policies"
)

// Defaults of Options.
const (
	DefaultHealthInterval     = 2 * time.Second
	DefaultPingTimeout        = time.Second
	DefaultCallTimeout        = 100 * time.Millisecond
	DefaultStartTimeout       = 10 * time.Second
	DefaultRestartBackoff     = 100 * time.Millisecond
	DefaultRestartBackoffMax  = 30 * time.Second
	DefaultPartitionCacheSize = 10000
	// DefaultFallbackRetryDelay bounds the wait-for-wake of the default
	// fallback retry decision (used when Options.FallbackRetry is nil).
	DefaultFallbackRetryDelay = 250 * time.Millisecond
)

// Errors. Launch wraps ErrInvalidOptions and ErrChecksum; partition
// failures wrap policies.ErrPartition together with ErrUnavailable (plugin
// down or call failed) or ErrClosed.
var (
	ErrInvalidOptions = errors.New("plugin: invalid options")
	ErrChecksum       = errors.New("plugin: sha256 of the executable does not match")
	ErrKindNotServed  = errors.New("plugin: kind not served by the plugin")
	ErrUnavailable    = errors.New("plugin: plugin unavailable")
	ErrClosed         = errors.New("plugin: closed")
)

// Options configures Launch. The zero value of every optional field means
// the documented default.
type Options struct {
	// Name identifies the plugin in logs, errors and metrics; defaults to
	// the base name of Path.
	Name string
	// Path of the plugin executable (required); made absolute at Launch.
	Path string
	// SHA256 is the hex sha256 of the executable (required). The file is
	// hashed before every start, including restarts; a mismatch refuses to
	// start it.
	SHA256 string
	// Args are passed to the executable after its name.
	Args []string
	// Config is passed to the plugin's Configure after every start (a JSON
	// document; nil or empty means none).
	Config []byte

	// HealthInterval is the period of health pings (default
	// DefaultHealthInterval).
	HealthInterval time.Duration
	// PingTimeout bounds one health ping (default DefaultPingTimeout).
	PingTimeout time.Duration
	// CallTimeout bounds one policy call to the plugin (default
	// DefaultCallTimeout); a call that runs out falls back.
	CallTimeout time.Duration
	// StartTimeout bounds one start: process launch, handshake, Kinds and
	// Configure (default DefaultStartTimeout).
	StartTimeout time.Duration
	// RestartBackoff is the first delay before restarting a dead or
	// unhealthy plugin; it doubles after every restart up to
	// RestartBackoffMax (defaults DefaultRestartBackoff and
	// DefaultRestartBackoffMax), and starts over once a process has stayed
	// healthy for RestartBackoffMax.
	RestartBackoff    time.Duration
	RestartBackoffMax time.Duration

	// PartitionCacheSize bounds the LRU cache of partition keys (default
	// DefaultPartitionCacheSize; negative disables the cache).
	PartitionCacheSize int

	// FallbackRetry decides while the plugin is down or a call fails; nil
	// means WaitForWake bounded by DefaultFallbackRetryDelay.
	FallbackRetry policies.RetryPolicy
	// FallbackStarvation bounds writers while the plugin is down or a call
	// fails; nil means 0 (strict writer preference).
	FallbackStarvation policies.StarvationPolicy

	// Observer, if not nil, is told about every call, fallback, cache
	// lookup and restart (for metrics).
	Observer Observer
	// Logger receives the plugin's lifecycle events and its own log lines
	// (from its stderr); nil means slog.Default().
	Logger *slog.Logger
}

func (o Options) withDefaults() (Options, error) {
	bad := func(format string, args ...any) (Options, error) {
		return o, fmt.Errorf("%w: "+format, append([]any{ErrInvalidOptions}, args...)...)
	}
	if o.Path == "" {
		return bad("Path is required")
	}
	abs, err := filepath.Abs(o.Path)
	if err != nil {
		return bad("Path %q: %v", o.Path, err)
	}
	o.Path = abs
	if o.Name == "" {
		o.Name = filepath.Base(o.Path)
	}
	if o.SHA256 == "" {
		return bad("plugin %q: SHA256 is required", o.Name)
	}
	if sum, err := hex.DecodeString(strings.TrimSpace(o.SHA256)); err != nil || len(sum) != 32 {
		return bad("plugin %q: SHA256 %q is not 64 hex digits", o.Name, o.SHA256)
	}
	o.SHA256 = strings.ToLower(strings.TrimSpace(o.SHA256))
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"HealthInterval", &o.HealthInterval, DefaultHealthInterval},
		{"PingTimeout", &o.PingTimeout, DefaultPingTimeout},
		{"CallTimeout", &o.CallTimeout, DefaultCallTimeout},
		{"StartTimeout", &o.StartTimeout, DefaultStartTimeout},
		{"RestartBackoff", &o.RestartBackoff, DefaultRestartBackoff},
		{"RestartBackoffMax", &o.RestartBackoffMax, DefaultRestartBackoffMax},
	} {
		if *d.v < 0 {
			return bad("plugin %q: negative %s %v", o.Name, d.name, *d.v)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if o.RestartBackoffMax < o.RestartBackoff {
		return bad("plugin %q: RestartBackoffMax %v below RestartBackoff %v", o.Name, o.RestartBackoffMax, o.RestartBackoff)
	}
	if o.PartitionCacheSize == 0 {
		o.PartitionCacheSize = DefaultPartitionCacheSize
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	o.Args = append([]string(nil), o.Args...)
	o.Config = append([]byte(nil), o.Config...)
	return o, nil
}
