package sdk

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/coordhost/coordhost/plugins/sdk/proctree"
	"github.com/coordhost/coordhost/plugins/sdk/proto/policyv1"
	"github.com/coordhost/coordhost/policies"
)

// Configurable is implemented by policies that take a configuration. The
// host calls Configure once after every start of the plugin process, before
// any decision, with the policy block's `config` as a JSON document (empty
// when the block has none). An error makes the start fail.
type Configurable interface {
	Configure(config []byte) error
}

// InfoReporter is implemented by policies that report diagnostics through
// the Stats RPC (free-form key/value pairs; not on the acquisition path).
type InfoReporter interface {
	Info() map[string]string
}

// ErrNoKinds is returned by NewServer for a value that implements none of
// the policy interfaces.
var ErrNoKinds = errors.New("sdk: value implements no policy interface (RetryPolicy, PartitionPolicy, StarvationPolicy)")

// Server serves one policy value as coordhost.policy.v1.Policy. It detects
// the kinds the value serves by type assertion; RPCs of other kinds return
// codes.Unimplemented. A panic in the policy becomes codes.Internal instead
// of killing the process. Safe for concurrent use if the policy is.
type Server struct {
	policyv1.UnimplementedPolicyServer

	impl       any
	retry      policies.RetryPolicy
	partition  policies.PartitionPolicy
	starvation policies.StarvationPolicy
	kinds      []policyv1.Kind

	configureCalls, retryCalls, partitionCalls, starvationCalls atomic.Uint64
}

// NewServer returns a Server for impl, or ErrNoKinds.
func NewServer(impl any) (*Server, error) {
	s := &Server{impl: impl}
	if p, ok := impl.(policies.RetryPolicy); ok {
		s.retry = p
		s.kinds = append(s.kinds, policyv1.Kind_KIND_RETRY)
	}
	if p, ok := impl.(policies.PartitionPolicy); ok {
		s.partition = p
		s.kinds = append(s.kinds, policyv1.Kind_KIND_PARTITION)
	}
	if p, ok := impl.(policies.StarvationPolicy); ok {
		s.starvation = p
		s.kinds = append(s.kinds, policyv1.Kind_KIND_STARVATION)
	}
	if len(s.kinds) == 0 {
		return nil, fmt.Errorf("%w: %T", ErrNoKinds, impl)
	}
	return s, nil
}

// ServedKinds returns the kinds the policy serves.
func (s *Server) ServedKinds() []policies.Kind {
	out := make([]policies.Kind, 0, len(s.kinds))
	for _, k := range s.kinds {
		kind, _ := KindFromProto(k)
		out = append(out, kind)
	}
	return out
}

// Serve runs impl as a coordhost policy plugin: it performs go-plugin's
// handshake on stdout and serves coordhost.policy.v1.Policy over gRPC until
// the host closes the plugin, then returns. impl must implement at least one
// of policies.RetryPolicy, policies.PartitionPolicy and
// policies.StarvationPolicy, and may implement Configurable and
// InfoReporter. Call it from main. It exits the process with status 1 when
// impl serves no kind or when the executable was not started by coordhost
// (wrong or missing magic cookie).
//
// Processes the plugin starts do not outlive it. On Linux, Serve makes the
// process a child subreaper (proctree.BecomeSubreaper), so a process it
// started that detaches itself (setsid, setpgid, a double fork) is
// reparented to the plugin rather than to init and stays where the host
// can find and kill it when it stops the plugin; and before Serve returns
// it kills whatever the plugin started that still runs. A side effect: an
// orphan the plugin adopts stays a zombie until the plugin exits (or reaps
// it with wait4).
func Serve(impl any) {
	srv, err := NewServer(impl)
	if err != nil {
		fmt.Fprintln(os.Stderr, "coordhost plugin:", err)
		os.Exit(1)
	}
	_ = proctree.BecomeSubreaper() // Linux only; elsewhere the host kills the process group
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig: HandshakeConfig(),
		Plugins:         goplugin.PluginSet{PluginName: &Plugin{Impl: srv}},
		GRPCServer:      goplugin.DefaultGRPCServer,
	})
	proctree.New(os.Getpid()).Kill()
}

// Kinds implements policyv1.PolicyServer.
func (s *Server) Kinds(context.Context, *policyv1.KindsRequest) (*policyv1.KindsResponse, error) {
	return &policyv1.KindsResponse{Kinds: s.kinds, SdkVersion: WireRevision}, nil
}

// Configure implements policyv1.PolicyServer. A policy that is not
// Configurable accepts only an empty configuration ("", "null", "{}").
func (s *Server) Configure(_ context.Context, req *policyv1.ConfigureRequest) (resp *policyv1.ConfigureResponse, err error) {
	s.configureCalls.Add(1)
	defer recoverInto(&err, "Configure")
	c, ok := s.impl.(Configurable)
	if !ok {
		switch string(bytes.TrimSpace(req.GetConfig())) {
		case "", "null", "{}":
			return &policyv1.ConfigureResponse{}, nil
		}
		return nil, status.Errorf(codes.InvalidArgument, "policy %T takes no configuration", s.impl)
	}
	if err := c.Configure(req.GetConfig()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return &policyv1.ConfigureResponse{}, nil
}

// DecideRetry implements policyv1.PolicyServer.
func (s *Server) DecideRetry(ctx context.Context, req *policyv1.DecideRetryRequest) (resp *policyv1.DecideRetryResponse, err error) {
	if s.retry == nil {
		return nil, status.Error(codes.Unimplemented, "plugin serves no retry policy")
	}
	s.retryCalls.Add(1)
	defer recoverInto(&err, "DecideRetry")
	return RetryDecisionToProto(s.retry.DecideRetry(ctx, RetryRequestFromProto(req))), nil
}

// PartitionKey implements policyv1.PolicyServer. The policy's error is
// returned in the response, not as a gRPC error.
func (s *Server) PartitionKey(ctx context.Context, req *policyv1.PartitionKeyRequest) (resp *policyv1.PartitionKeyResponse, err error) {
	if s.partition == nil {
		return nil, status.Error(codes.Unimplemented, "plugin serves no partition policy")
	}
	s.partitionCalls.Add(1)
	defer recoverInto(&err, "PartitionKey")
	key, perr := s.partition.PartitionKey(ctx, PartitionRequestFromProto(req))
	if perr != nil {
		msg := perr.Error()
		if msg == "" {
			msg = "partition policy failed"
		}
		return &policyv1.PartitionKeyResponse{Error: msg}, nil
	}
	return &policyv1.PartitionKeyResponse{Key: key}, nil
}

// WriterBound implements policyv1.PolicyServer.
func (s *Server) WriterBound(ctx context.Context, req *policyv1.WriterBoundRequest) (resp *policyv1.WriterBoundResponse, err error) {
	if s.starvation == nil {
		return nil, status.Error(codes.Unimplemented, "plugin serves no starvation policy")
	}
	s.starvationCalls.Add(1)
	defer recoverInto(&err, "WriterBound")
	return &policyv1.WriterBoundResponse{BoundNs: int64(s.starvation.WriterBound(ctx, StarvationRequestFromProto(req)))}, nil
}

// Stats implements policyv1.PolicyServer: the calls this process served
// per RPC, its pid and the policy's InfoReporter output.
func (s *Server) Stats(context.Context, *policyv1.StatsRequest) (resp *policyv1.StatsResponse, err error) {
	defer recoverInto(&err, "Stats")
	resp = &policyv1.StatsResponse{
		Pid:               int64(os.Getpid()),
		ConfigureCalls:    s.configureCalls.Load(),
		DecideRetryCalls:  s.retryCalls.Load(),
		PartitionKeyCalls: s.partitionCalls.Load(),
		WriterBoundCalls:  s.starvationCalls.Load(),
	}
	if r, ok := s.impl.(InfoReporter); ok {
		resp.Info = r.Info()
	}
	return resp, nil
}

// recoverInto turns a panic of the policy into a codes.Internal error.
func recoverInto(err *error, method string) {
	if r := recover(); r != nil {
		*err = status.Errorf(codes.Internal, "policy panicked in %s: %v", method, r)
	}
}
