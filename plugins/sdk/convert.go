package sdk

import (
	"errors"
	"fmt"
	"time"

	"github.com/coordhost/coordhost/plugins/sdk/proto/policyv1"
	"github.com/coordhost/coordhost/policies"
)

// ErrInvalidAnswer is wrapped by the errors of the FromProto conversions
// when a plugin's answer is not a valid decision.
var ErrInvalidAnswer = errors.New("sdk: invalid answer from plugin")

// KindToProto maps a policy kind to its wire value (KIND_UNSPECIFIED for an
// unknown kind).
func KindToProto(k policies.Kind) policyv1.Kind {
	switch k {
	case policies.KindRetry:
		return policyv1.Kind_KIND_RETRY
	case policies.KindPartition:
		return policyv1.Kind_KIND_PARTITION
	case policies.KindStarvation:
		return policyv1.Kind_KIND_STARVATION
	}
	return policyv1.Kind_KIND_UNSPECIFIED
}

// KindFromProto maps a wire kind to the policy kind; ok is false for an
// unknown or unspecified value.
func KindFromProto(k policyv1.Kind) (kind policies.Kind, ok bool) {
	switch k {
	case policyv1.Kind_KIND_RETRY:
		return policies.KindRetry, true
	case policyv1.Kind_KIND_PARTITION:
		return policies.KindPartition, true
	case policyv1.Kind_KIND_STARVATION:
		return policies.KindStarvation, true
	}
	return "", false
}

// RetryRequestToProto encodes a retry request.
func RetryRequestToProto(r policies.RetryRequest) *policyv1.DecideRetryRequest {
	return &policyv1.DecideRetryRequest{
		Attempt:     int64(r.Attempt),
		Reason:      policyv1.RetryReason(r.Reason),
		ElapsedNs:   int64(r.Elapsed),
		HolderTtlNs: int64(r.HolderTTL),
		Rand:        r.Rand,
	}
}

// RetryRequestFromProto decodes a retry request.
func RetryRequestFromProto(m *policyv1.DecideRetryRequest) policies.RetryRequest {
	return policies.RetryRequest{
		Attempt:   int(m.GetAttempt()),
		Reason:    policies.RetryReason(m.GetReason()),
		Elapsed:   time.Duration(m.GetElapsedNs()),
		HolderTTL: time.Duration(m.GetHolderTtlNs()),
		Rand:      m.GetRand(),
	}
}

// RetryDecisionToProto encodes a retry decision. An unknown action is
// encoded as RETRY_ACTION_UNSPECIFIED, which the host rejects.
func RetryDecisionToProto(d policies.RetryDecision) *policyv1.DecideRetryResponse {
	a := policyv1.RetryAction_RETRY_ACTION_UNSPECIFIED
	switch d.Action {
	case policies.WaitForWake:
		a = policyv1.RetryAction_RETRY_ACTION_WAIT_FOR_WAKE
	case policies.RetryAfter:
		a = policyv1.RetryAction_RETRY_ACTION_RETRY_AFTER
	case policies.GiveUp:
		a = policyv1.RetryAction_RETRY_ACTION_GIVE_UP
	}
	return &policyv1.DecideRetryResponse{Action: a, DelayNs: int64(d.Delay)}
}

// RetryDecisionFromProto decodes and validates a retry decision: the action
// must be one of the three and the delay must not be negative; otherwise
// the error wraps ErrInvalidAnswer.
func RetryDecisionFromProto(m *policyv1.DecideRetryResponse) (policies.RetryDecision, error) {
	var d policies.RetryDecision
	switch m.GetAction() {
	case policyv1.RetryAction_RETRY_ACTION_WAIT_FOR_WAKE:
		d.Action = policies.WaitForWake
	case policyv1.RetryAction_RETRY_ACTION_RETRY_AFTER:
		d.Action = policies.RetryAfter
	case policyv1.RetryAction_RETRY_ACTION_GIVE_UP:
		d.Action = policies.GiveUp
	default:
		return d, fmt.Errorf("%w: retry action %v", ErrInvalidAnswer, m.GetAction())
	}
	if m.GetDelayNs() < 0 {
		return d, fmt.Errorf("%w: negative retry delay %dns", ErrInvalidAnswer, m.GetDelayNs())
	}
	d.Delay = time.Duration(m.GetDelayNs())
	return d, nil
}

// PartitionRequestToProto encodes a partition request. The attribute map is
// shared, not copied: the message must not outlive the call.
func PartitionRequestToProto(r policies.PartitionRequest) *policyv1.PartitionKeyRequest {
	return &policyv1.PartitionKeyRequest{Kind: r.Kind, Name: r.Name, Attributes: r.Attributes}
}

// PartitionRequestFromProto decodes a partition request.
func PartitionRequestFromProto(m *policyv1.PartitionKeyRequest) policies.PartitionRequest {
	return policies.PartitionRequest{Kind: m.GetKind(), Name: m.GetName(), Attributes: m.GetAttributes()}
}

// StarvationRequestToProto encodes a starvation request.
func StarvationRequestToProto(r policies.StarvationRequest) *policyv1.WriterBoundRequest {
	return &policyv1.WriterBoundRequest{
		Readers:            int64(r.Readers),
		Writers:            int64(r.Writers),
		OldestWriterWaitNs: int64(r.OldestWriterWait),
	}
}

// StarvationRequestFromProto decodes a starvation request.
func StarvationRequestFromProto(m *policyv1.WriterBoundRequest) policies.StarvationRequest {
	return policies.StarvationRequest{
		Readers:          int(m.GetReaders()),
		Writers:          int(m.GetWriters()),
		OldestWriterWait: time.Duration(m.GetOldestWriterWaitNs()),
	}
}

// WriterBoundFromProto decodes and validates a writer bound: a negative
// bound wraps ErrInvalidAnswer.
func WriterBoundFromProto(m *policyv1.WriterBoundResponse) (time.Duration, error) {
	if m.GetBoundNs() < 0 {
		return 0, fmt.Errorf("%w: negative writer bound %dns", ErrInvalidAnswer, m.GetBoundNs())
	}
	return time.Duration(m.GetBoundNs()), nil
}
