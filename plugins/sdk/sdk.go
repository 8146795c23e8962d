// Package sdk is what authors of out-of-process coordhost policy plugins
// import. A plugin is an executable that calls Serve with a value
// implementing one or more of RetryPolicy, PartitionPolicy and
// StarvationPolicy (aliases of the policies package's interfaces, so a
// plugin needs no other coordhost import), optionally Configurable and
// InfoReporter:
//
//	func main() { sdk.Serve(myPolicy{}) }
//
// Policies must be pure functions of their input and safe for concurrent
// use; the host caches partition keys and may call from many goroutines.
//
// coordhost starts the executable (after checking its sha256), talks to it
// over gRPC with the coordhost.policy.v1.Policy service (package
// proto/policyv1) using hashicorp/go-plugin's handshake (HandshakeConfig),
// and consults it at acquisition time. Durations cross the wire as
// nanoseconds; only Configure carries JSON, once per start.
//
// The host side lives in github.com/coordhost/coordhost/policies/plugin; the
// helpers in this package that it shares (Plugin, Client, the To/FromProto
// conversions) are exported for it and for tests, not for plugin authors.
package sdk

import (
	goplugin "github.com/hashicorp/go-plugin"
)

// Handshake constants. The host refuses a plugin whose ProtocolVersion
// differs; the magic cookie only tells an executable that it was started by
// coordhost (it is not a security measure: the sha256 pin is).
const (
	// ProtocolVersion is the go-plugin application protocol version: the
	// version of the coordhost.policy.v1 service contract. Bump it on any
	// incompatible change.
	ProtocolVersion = 1
	// MagicCookieKey is the environment variable carrying the cookie.
	MagicCookieKey = "COORDHOST_PLUGIN"
	// MagicCookieValue is the cookie's fixed value.
	MagicCookieValue = "a6bf957bea420d62232b47f668bea9881fcb616528692a5d"
	// PluginName is the name the policy service is dispensed under.
	PluginName = "policy"
	// WireRevision is reported by the Kinds RPC (sdk_version): compatible
	// additions to the protocol that the host may check for. 1 is the first.
	WireRevision = 1
)

// HandshakeConfig returns the go-plugin handshake shared by coordhost and
// its plugins.
func HandshakeConfig() goplugin.HandshakeConfig {
	return goplugin.HandshakeConfig{
		ProtocolVersion:  ProtocolVersion,
		MagicCookieKey:   MagicCookieKey,
		MagicCookieValue: MagicCookieValue,
	}
}
