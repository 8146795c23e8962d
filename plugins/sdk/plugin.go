package sdk

import (
	"context"
	"errors"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/coordhost/coordhost/plugins/sdk/proto/policyv1"
)

// Plugin is the go-plugin plugin type of coordhost policies, used on both
// sides: the plugin process serves a Server with it, the host dispenses a
// *Client from it. gRPC only; the net/rpc methods return errors.
type Plugin struct {
	goplugin.NetRPCUnsupportedPlugin

	// Impl is the implementation served in the plugin process; nil on
	// the host side.
	Impl policyv1.PolicyServer
}

var _ goplugin.GRPCPlugin = (*Plugin)(nil)

// GRPCServer implements goplugin.GRPCPlugin.
func (p *Plugin) GRPCServer(_ *goplugin.GRPCBroker, s *grpc.Server) error {
	if p.Impl == nil {
		return errors.New("sdk: Plugin has no Impl")
	}
	policyv1.RegisterPolicyServer(s, p.Impl)
	return nil
}

// GRPCClient implements goplugin.GRPCPlugin: it returns a *Client.
func (p *Plugin) GRPCClient(_ context.Context, _ *goplugin.GRPCBroker, conn *grpc.ClientConn) (any, error) {
	return &Client{
		Policy: policyv1.NewPolicyClient(conn),
		Health: healthpb.NewHealthClient(conn),
	}, nil
}

// Client is the host's view of a running plugin process.
type Client struct {
	// Policy is the coordhost.policy.v1.Policy client.
	Policy policyv1.PolicyClient
	// Health is the grpc.health.v1 client of the same connection; go-plugin
	// registers the service name goplugin.GRPCServiceName ("plugin") as
	// SERVING in every plugin process.
	Health healthpb.HealthClient
}

// PluginSet returns the go-plugin plugin set a host passes to
// goplugin.ClientConfig.Plugins.
func PluginSet() goplugin.PluginSet {
	return goplugin.PluginSet{PluginName: &Plugin{}}
}
