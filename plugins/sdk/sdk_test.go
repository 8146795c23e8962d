package sdk

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/coordhost/coordhost/plugins/sdk/proto/policyv1"
	"github.com/coordhost/coordhost/policies"
)

type retryOnly struct{}

func (retryOnly) DecideRetry(_ context.Context, r policies.RetryRequest) policies.RetryDecision {
	if r.Attempt > 3 {
		return policies.RetryDecision{Action: policies.GiveUp}
	}
	return policies.RetryDecision{Action: policies.RetryAfter, Delay: r.Elapsed + r.HolderTTL + time.Duration(r.Rand)}
}

type everything struct {
	retryOnly
	config []byte
}

func (e *everything) Configure(c []byte) error {
	if string(c) == "bad" {
		return errors.New("bad config")
	}
	e.config = c
	return nil
}

func (*everything) PartitionKey(_ context.Context, r policies.PartitionRequest) (string, error) {
	if r.Attributes["panic"] != "" {
		panic("boom")
	}
	if r.Attributes["t"] == "" {
		return "", errors.New("no t")
	}
	return r.Kind + "|" + r.Name + "|" + r.Attributes["t"], nil
}

func (*everything) WriterBound(_ context.Context, r policies.StarvationRequest) time.Duration {
	if r.Readers == 0 {
		return policies.Unbounded
	}
	return r.OldestWriterWait * time.Duration(r.Writers)
}

func (*everything) Info() map[string]string { return map[string]string{"hello": "world"} }

func TestNewServerKinds(t *testing.T) {
	if _, err := NewServer(struct{}{}); !errors.Is(err, ErrNoKinds) {
		t.Fatalf("NewServer(struct{}{}): %v, want ErrNoKinds", err)
	}
	s, err := NewServer(retryOnly{})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.ServedKinds(); !slices.Equal(got, []policies.Kind{policies.KindRetry}) {
		t.Fatalf("ServedKinds = %v", got)
	}
	ctx := context.Background()
	kr, _ := s.Kinds(ctx, &policyv1.KindsRequest{})
	if !slices.Equal(kr.GetKinds(), []policyv1.Kind{policyv1.Kind_KIND_RETRY}) || kr.GetSdkVersion() != WireRevision {
		t.Fatalf("Kinds = %v", kr)
	}
	if _, err := s.PartitionKey(ctx, &policyv1.PartitionKeyRequest{}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("PartitionKey on a retry-only plugin: %v", err)
	}
	if _, err := s.WriterBound(ctx, &policyv1.WriterBoundRequest{}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("WriterBound on a retry-only plugin: %v", err)
	}
	// Not Configurable: only empty configurations.
	for _, c := range []string{"", " null ", "{}"} {
		if _, err := s.Configure(ctx, &policyv1.ConfigureRequest{Config: []byte(c)}); err != nil {
			t.Errorf("Configure(%q): %v", c, err)
		}
	}
	if _, err := s.Configure(ctx, &policyv1.ConfigureRequest{Config: []byte(`{"a":1}`)}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("Configure with a config on a non-configurable policy: %v", err)
	}

	all, err := NewServer(&everything{})
	if err != nil {
		t.Fatal(err)
	}
	if got := all.ServedKinds(); !slices.Equal(got, []policies.Kind{policies.KindRetry, policies.KindPartition, policies.KindStarvation}) {
		t.Fatalf("ServedKinds = %v", got)
	}
}

func TestServerCalls(t *testing.T) {
	impl := &everything{}
	s, err := NewServer(impl)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.Configure(ctx, &policyv1.ConfigureRequest{Config: []byte(`{"x":1}`)}); err != nil || string(impl.config) != `{"x":1}` {
		t.Fatalf("Configure: %v, config %q", err, impl.config)
	}
	if _, err := s.Configure(ctx, &policyv1.ConfigureRequest{Config: []byte("bad")}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "bad config") {
		t.Fatalf("Configure(bad): %v", err)
	}

	req := policies.RetryRequest{Attempt: 2, Reason: policies.ReasonError, Elapsed: time.Second, HolderTTL: -1, Rand: 5}
	resp, err := s.DecideRetry(ctx, RetryRequestToProto(req))
	if err != nil {
		t.Fatal(err)
	}
	d, err := RetryDecisionFromProto(resp)
	if want := impl.DecideRetry(context.Background(), req); err != nil || d != want {
		t.Fatalf("DecideRetry = %+v, %v; want %+v", d, err, want)
	}

	pr, err := s.PartitionKey(ctx, PartitionRequestToProto(policies.PartitionRequest{Kind: "lock", Name: "n", Attributes: map[string]string{"t": "x"}}))
	if err != nil || pr.GetKey() != "lock|n|x" || pr.GetError() != "" {
		t.Fatalf("PartitionKey = %v, %v", pr, err)
	}
	pr, err = s.PartitionKey(ctx, &policyv1.PartitionKeyRequest{})
	if err != nil || pr.GetError() != "no t" {
		t.Fatalf("PartitionKey refusal = %v, %v", pr, err)
	}
	_, err = s.PartitionKey(ctx, &policyv1.PartitionKeyRequest{Attributes: map[string]string{"panic": "1"}})
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("panicking PartitionKey: %v", err)
	}

	wr, err := s.WriterBound(ctx, StarvationRequestToProto(policies.StarvationRequest{Readers: 1, Writers: 3, OldestWriterWait: time.Millisecond}))
	if b, _ := WriterBoundFromProto(wr); err != nil || b != 3*time.Millisecond {
		t.Fatalf("WriterBound = %v, %v", wr, err)
	}
	wr, _ = s.WriterBound(ctx, StarvationRequestToProto(policies.StarvationRequest{}))
	if b, _ := WriterBoundFromProto(wr); b != policies.Unbounded {
		t.Fatalf("WriterBound(no readers) = %v, want Unbounded", b)
	}

	st, err := s.Stats(ctx, &policyv1.StatsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetPid() == 0 || st.GetConfigureCalls() != 2 || st.GetDecideRetryCalls() != 1 || st.GetPartitionKeyCalls() != 3 ||
		st.GetWriterBoundCalls() != 2 || st.GetInfo()["hello"] != "world" {
		t.Fatalf("Stats = %v", st)
	}
}

func TestConversions(t *testing.T) {
	req := policies.RetryRequest{Attempt: 7, Reason: policies.ReasonContended, Elapsed: 3 * time.Second, HolderTTL: -1, Rand: 1<<64 - 1}
	if got := RetryRequestFromProto(RetryRequestToProto(req)); got != req {
		t.Errorf("retry request round trip: %+v", got)
	}
	for _, d := range []policies.RetryDecision{
		{Action: policies.WaitForWake},
		{Action: policies.WaitForWake, Delay: time.Millisecond},
		{Action: policies.RetryAfter, Delay: time.Hour},
		{Action: policies.GiveUp},
	} {
		if got, err := RetryDecisionFromProto(RetryDecisionToProto(d)); err != nil || got != d {
			t.Errorf("decision round trip %+v: %+v, %v", d, got, err)
		}
	}
	for _, bad := range []*policyv1.DecideRetryResponse{
		{},
		{Action: policyv1.RetryAction(99)},
		{Action: policyv1.RetryAction_RETRY_ACTION_RETRY_AFTER, DelayNs: -1},
	} {
		if _, err := RetryDecisionFromProto(bad); !errors.Is(err, ErrInvalidAnswer) {
			t.Errorf("RetryDecisionFromProto(%v): %v, want ErrInvalidAnswer", bad, err)
		}
	}
	if RetryDecisionToProto(policies.RetryDecision{Action: 42}).GetAction() != policyv1.RetryAction_RETRY_ACTION_UNSPECIFIED {
		t.Error("unknown action not encoded as UNSPECIFIED")
	}
	sr := policies.StarvationRequest{Readers: 4, Writers: 2, OldestWriterWait: time.Minute}
	if got := StarvationRequestFromProto(StarvationRequestToProto(sr)); got != sr {
		t.Errorf("starvation round trip: %+v", got)
	}
	if _, err := WriterBoundFromProto(&policyv1.WriterBoundResponse{BoundNs: -5}); !errors.Is(err, ErrInvalidAnswer) {
		t.Errorf("negative bound: %v", err)
	}
	for _, k := range []policies.Kind{policies.KindRetry, policies.KindPartition, policies.KindStarvation} {
		if got, ok := KindFromProto(KindToProto(k)); !ok || got != k {
			t.Errorf("kind round trip %s: %s, %v", k, got, ok)
		}
	}
	if _, ok := KindFromProto(KindToProto("nope")); ok {
		t.Error("unknown kind decoded")
	}
	h := HandshakeConfig()
	if h.ProtocolVersion != ProtocolVersion || h.MagicCookieKey != MagicCookieKey || h.MagicCookieValue != MagicCookieValue {
		t.Errorf("HandshakeConfig = %+v", h)
	}
}
