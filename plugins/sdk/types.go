package sdk

import "github.com/coordhost/coordhost/policies"

// Aliases of the policies types a plugin implements, so that plugin
// authors need to import this package only.
type (
	// RetryPolicy is policies.RetryPolicy.
	RetryPolicy = policies.RetryPolicy
	// RetryRequest is policies.RetryRequest.
	RetryRequest = policies.RetryRequest
	// RetryDecision is policies.RetryDecision.
	RetryDecision = policies.RetryDecision
	// RetryReason is policies.RetryReason.
	RetryReason = policies.RetryReason
	// RetryAction is policies.RetryAction.
	RetryAction = policies.RetryAction
	// PartitionPolicy is policies.PartitionPolicy.
	PartitionPolicy = policies.PartitionPolicy
	// PartitionRequest is policies.PartitionRequest.
	PartitionRequest = policies.PartitionRequest
	// StarvationPolicy is policies.StarvationPolicy.
	StarvationPolicy = policies.StarvationPolicy
	// StarvationRequest is policies.StarvationRequest.
	StarvationRequest = policies.StarvationRequest
)

// Values of the aliased types.
const (
	ReasonContended = policies.ReasonContended
	ReasonError     = policies.ReasonError
	WaitForWake     = policies.WaitForWake
	RetryAfter      = policies.RetryAfter
	GiveUp          = policies.GiveUp
	// Unbounded is policies.Unbounded: the writer bound meaning reader
	// preference.
	Unbounded = policies.Unbounded
)
