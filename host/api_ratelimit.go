package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"github.com/coordhost/coordhost/config"
	coordhostv1 "github.com/coordhost/coordhost/gen/coordhost/v1"
	"github.com/coordhost/coordhost/policies"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/ratelimit"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Bounds on coordhost.v1 requests. Each is checked before anything is
// sent to Redis; a request past one is InvalidArgument naming the field.
const (
	// MaxAPIRequestBytes bounds an encoded coordhost.v1 request; a larger
	// one is refused by connect with ResourceExhausted before it is
	// decoded.
	MaxAPIRequestBytes = 64 << 10
	// MaxAPINameBytes is the longest name a request may give.
	MaxAPINameBytes = 256
	// MaxAPIAttributes is the most attributes a request may carry.
	MaxAPIAttributes = 32
	// MaxAPIAttributeKeyBytes and MaxAPIAttributeValueBytes bound each
	// attribute.
	MaxAPIAttributeKeyBytes   = 128
	MaxAPIAttributeValueBytes = 1024
	// MaxCheckWait is the longest wait a Check may ask for.
	MaxCheckWait = time.Hour
)

// apiError is a coordhost.v1 error status with its ErrorDetail (grant.proto).
func apiError(code connect.Code, reason coordhostv1.Reason, field, name string, err error) *connect.Error {
	ce := connect.NewError(code, err)
	if d, derr := connect.NewErrorDetail(&coordhostv1.ErrorDetail{Reason: reason, Field: field, Name: name}); derr == nil {
		ce.AddDetail(d)
	}
	return ce
}

// ctxCode is the status of an error that ended a call whose own ctx is
// over: DeadlineExceeded or Canceled; false when the error is another
// one (a Redis or dial timeout while ctx still runs is not the caller's).
func ctxCode(ctx context.Context, err error) (connect.Code, bool) {
	switch {
	case ctx.Err() == nil:
		return 0, false
	case errors.Is(err, context.DeadlineExceeded):
		return connect.CodeDeadlineExceeded, true
	case errors.Is(err, context.Canceled):
		return connect.CodeCanceled, true
	}
	return 0, false
}

// invalidField is InvalidArgument naming field; the message leads with it.
func invalidField(field, name, format string, args ...any) *connect.Error {
	return apiError(connect.CodeInvalidArgument, coordhostv1.Reason_REASON_INVALID_FIELD, field, name,
		fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
}

// checkName checks a request's name field.
func checkName(name string) *connect.Error {
	switch {
	case name == "":
		return invalidField("name", "", "empty")
	case len(name) > MaxAPINameBytes:
		return invalidField("name", "", "%d bytes, at most %d", len(name), MaxAPINameBytes)
	}
	return nil
}

// checkAttributes bounds a request's attributes (the partition policy's
// inputs).
func checkAttributes(name string, attrs map[string]string) *connect.Error {
	if len(attrs) > MaxAPIAttributes {
		return invalidField("attributes", name, "%d entries, at most %d", len(attrs), MaxAPIAttributes)
	}
	for k, v := range attrs {
		switch {
		case k == "":
			return invalidField("attributes", name, "empty key")
		case len(k) > MaxAPIAttributeKeyBytes:
			return invalidField("attributes", name, "key of %d bytes, at most %d", len(k), MaxAPIAttributeKeyBytes)
		case len(v) > MaxAPIAttributeValueBytes:
			return invalidField("attributes", name, "value of %q: %d bytes, at most %d", k, len(v), MaxAPIAttributeValueBytes)
		}
	}
	return nil
}

// checkNameAttributes checks the name and attributes that every request
// naming a block carries (checkName, then checkAttributes).
func checkNameAttributes(name string, attrs map[string]string) *connect.Error {
	if err := checkName(name); err != nil {
		return err
	}
	return checkAttributes(name, attrs)
}

// rateLimitService serves coordhost.v1.RateLimitService.
type rateLimitService struct{ h *Host }

// Check serves RateLimitService.Check (ratelimit.proto). Every field is
// checked before the partition policy is asked or Redis is written.
//
// Statuses: NotFound (REASON_NAME_NOT_CONFIGURED) for a name no rate_limit
// block has; InvalidArgument naming "name", "attributes", "cost" or "wait"
// for a bad field, and "attributes" also when the partition policy finds
// no key in them (a missing attribute; the policy fails closed, and a
// partition key longer than ratelimit.MaxPartitionKey); Unavailable when
// Redis fails, the daemon holds too many partitions or is shutting down;
// Canceled or DeadlineExceeded with the call. A refusal is OK with
// allowed false. A positive wait queues in the block's queue (Acquire)
// until the permits are back or the wait runs out (then allowed is
// false); without a queue block it decides at once.
func (s rateLimitService) Check(ctx context.Context, req *connect.Request[coordhostv1.CheckRateLimitRequest]) (*connect.Response[coordhostv1.CheckRateLimitResponse], error) {
	m := req.Msg
	name := m.GetName()
	if err := checkNameAttributes(name, m.GetAttributes()); err != nil {
		return nil, err
	}
	cost := m.GetCost()
	switch {
	case cost < 0:
		return nil, invalidField("cost", name, "%d, must not be negative", cost)
	case cost > config.MaxRateLimit:
		return nil, invalidField("cost", name, "%d, at most %d", cost, int64(config.MaxRateLimit))
	case cost == 0:
		cost = 1
	}
	var wait time.Duration
	if w := m.GetWait(); w != nil {
		if err := w.CheckValid(); err != nil {
			return nil, invalidField("wait", name, "%v", err)
		}
		wait = w.AsDuration()
		if wait < 0 {
			return nil, invalidField("wait", name, "%v, must not be negative", wait)
		}
		if wait > MaxCheckWait {
			return nil, invalidField("wait", name, "%v, at most %v", wait, MaxCheckWait)
		}
	}
	rl, err := s.h.RateLimit(name)
	if err != nil {
		return nil, rateLimitError(ctx, name, err)
	}
	var res ratelimit.Result
	if wait > 0 {
		wctx, cancel := context.WithTimeout(ctx, wait)
		res, err = rl.Acquire(wctx, m.GetAttributes(), cost)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			// The request's own wait ran out while queued, not the call:
			// a refusal. Nothing was consumed for it.
			res, err = ratelimit.Result{Limit: res.Limit, Window: res.Window, Remaining: res.Remaining}, nil
		}
	} else {
		res, err = rl.TryAcquire(ctx, m.GetAttributes(), cost)
	}
	if err != nil {
		return nil, rateLimitError(ctx, name, err)
	}
	out := &coordhostv1.CheckRateLimitResponse{Allowed: res.Acquired, Limit: res.Limit, Remaining: res.Remaining}
	if res.Limit == 0 {
		out.Limit = rl.Policy().Limit
	}
	if !res.Acquired && res.RetryAfter > 0 {
		out.RetryAfter = durationpb.New(res.RetryAfter)
	}
	if res.ResetAfter > 0 {
		out.ResetAfter = durationpb.New(res.ResetAfter)
	}
	return connect.NewResponse(out), nil
}

// rateLimitError maps an error of a rate limit decision to a status.
func rateLimitError(ctx context.Context, name string, err error) error {
	switch {
	case errors.Is(err, ErrNoRateLimit):
		// Without the configuration's path: clients need not know it.
		return apiError(connect.CodeNotFound, coordhostv1.Reason_REASON_NAME_NOT_CONFIGURED, "", name,
			fmt.Errorf("no rate_limit %q is configured", name))
	case errors.Is(err, policies.ErrPartition), errors.Is(err, primitives.ErrInvalidKey):
		return apiError(connect.CodeInvalidArgument, coordhostv1.Reason_REASON_INVALID_FIELD, "attributes", name, fmt.Errorf("attributes: %w", err))
	case errors.Is(err, ratelimit.ErrInvalidPermits):
		return apiError(connect.CodeInvalidArgument, coordhostv1.Reason_REASON_INVALID_FIELD, "cost", name, fmt.Errorf("cost: %w", err))
	}
	if code, ok := ctxCode(ctx, err); ok {
		return apiError(code, coordhostv1.Reason_REASON_UNSPECIFIED, "", name, err)
	}
	if errors.Is(err, primitives.ErrWrongType) {
		// Someone else's data sits under the limiter's key: retrying will
		// not help, and the client cannot fix it.
		return apiError(connect.CodeFailedPrecondition, coordhostv1.Reason_REASON_UNSPECIFIED, "", name, err)
	}
	// Redis failed, the daemon is closing or holds too many partitions:
	// retrying may succeed.
	return apiError(connect.CodeUnavailable, coordhostv1.Reason_REASON_UNSPECIFIED, "", name, err)
}
