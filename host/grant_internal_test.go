package host

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"connectrpc.com/connect"
	coordhostv1 "github.com/coordhost/coordhost/gen/coordhost/v1"
	"github.com/coordhost/coordhost/primitives"
)

// grantError's status and reason for the errors a grant operation meets.
func TestGrantErrorStatuses(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		op     string
		err    error
		code   connect.Code
		reason coordhostv1.Reason
	}{
		{"acquire", fmt.Errorf("%w: %q", ErrNoLock, "x"), connect.CodeNotFound, coordhostv1.Reason_REASON_NAME_NOT_CONFIGURED},
		{"acquire", fmt.Errorf("held: %w", primitives.ErrNotAcquired), connect.CodeAborted, coordhostv1.Reason_REASON_CONTENDED},
		{"acquire", &primitives.NotReplicated{Name: `lock "x"`, Op: "acquire", Want: 2, Acked: 1}, connect.CodeUnavailable, coordhostv1.Reason_REASON_NOT_REPLICATED},
		{"renew", &primitives.NotReplicated{Name: `lock "x"`, Op: "renew", Want: 2}, connect.CodeUnavailable, coordhostv1.Reason_REASON_NOT_REPLICATED},
		{"renew", fmt.Errorf("lost reply: %w", primitives.ErrUncertain), connect.CodeUnknown, coordhostv1.Reason_REASON_OUTCOME_UNKNOWN},
		{"acquire", fmt.Errorf("refused: %w", primitives.ErrUnavailable), connect.CodeUnavailable, coordhostv1.Reason_REASON_UNSPECIFIED},
		{"acquire", fmt.Errorf("old: %w", primitives.ErrUnsupported), connect.CodeFailedPrecondition, coordhostv1.Reason_REASON_UNSUPPORTED_SERVER},
		{"acquire", errors.New("dial tcp: refused"), connect.CodeUnavailable, coordhostv1.Reason_REASON_UNSPECIFIED},
	} {
		err := grantError(ctx, tc.op, "x", connect.CodeAborted, tc.err)
		var ce *connect.Error
		if !errors.As(err, &ce) || ce.Code() != tc.code {
			t.Errorf("%s %v: %v, want %v", tc.op, tc.err, err, tc.code)
			continue
		}
		var reason coordhostv1.Reason = -1
		for _, d := range ce.Details() {
			if v, derr := d.Value(); derr == nil {
				if ed, ok := v.(*coordhostv1.ErrorDetail); ok {
					reason = ed.Reason
				}
			}
		}
		if reason != tc.reason {
			t.Errorf("%s %v: reason %v, want %v", tc.op, tc.err, reason, tc.reason)
		}
	}
}
