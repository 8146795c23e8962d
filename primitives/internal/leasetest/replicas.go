package leasetest

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/redis/rueidis"
)

// Read sends a read command (GET, HGET, ZSCORE ...) to s and returns its
// reply: "" when it is nil (absent).
func Read(t *testing.T, s *redistest.Server, args ...string) string {
	t.Helper()
	v, err := s.Cmd(t, args...)
	if err != nil && !rueidis.IsRedisNil(err) {
		t.Fatalf("%v on %s: %v", args, s.Addr, err)
	}
	return v
}

// Unreplicated is a primitive made with Options.Replicas = 1 and
// ReplicaTimeout = Timeout, its only replica paused (SIGSTOP), so that
// WAIT answers 0 once the timeout has passed.
type Unreplicated struct {
	// Held is a handle granted (and confirmed) before the replica paused.
	Held primitives.Lease
	// Timeout is the primitive's ReplicaTimeout.
	Timeout time.Duration
	// RenewErr and AcquireErr are parts of the errors of an unconfirmed
	// renewal and of an unconfirmed acquire.
	RenewErr, AcquireErr string
	// Try are attempts that acquire once, by name; Wait are waiting
	// acquires, run with a ctx that ends after 3 × Timeout.
	Try, Wait map[string]func(context.Context) (primitives.Lease, error)
	// Left describes what the primary still holds of the resource the
	// attempts are for: "" for nothing.
	Left func(t *testing.T) string
}

// Check checks what happens with the replica paused. Renewing Held returns
// false and an error matching primitives.ErrNotReplicated (with RenewErr)
// and closes Done; Release still deletes the lease. Each Try fails with
// such an error (with AcquireErr), no sooner than Timeout, and leaves
// nothing held on the primary. Each Wait does not stop at an unconfirmed
// grant: it gives each one back and tries again until its ctx ends,
// holding nothing.
func (u Unreplicated) Check(t *testing.T, ctx context.Context) {
	t.Helper()
	ok, err := u.Held.Renew(ctx, time.Minute)
	if ok || !errors.Is(err, primitives.ErrNotReplicated) || !strings.Contains(err.Error(), u.RenewErr) {
		t.Fatalf("Renew with the replica paused: %v %v", ok, err)
	}
	select {
	case <-u.Held.Done():
	default:
		t.Fatal("Done open after an unconfirmed renewal")
	}
	if res, err := u.Held.Release(ctx); res != primitives.Released || err != nil {
		t.Fatal(res, err)
	}
	for name, try := range u.Try {
		start := time.Now()
		h, err := try(ctx)
		if !isNil(h) || !errors.Is(err, primitives.ErrNotReplicated) || !strings.Contains(err.Error(), u.AcquireErr) {
			t.Fatalf("%s: %v %v", name, h, err)
		}
		if took := time.Since(start); took < u.Timeout {
			t.Errorf("%s: failed after %v, before the %v timeout", name, took, u.Timeout)
		}
		if left := u.Left(t); left != "" {
			t.Fatalf("%s: %s left on the primary", name, left)
		}
	}
	for name, try := range u.Wait {
		actx, cancel := context.WithTimeout(ctx, 3*u.Timeout)
		h, err := try(actx)
		cancel()
		if !isNil(h) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s with the replica paused: %v %v", name, h, err)
		}
		if left := u.Left(t); left != "" {
			t.Fatalf("%s with the replica paused: %s left on the primary", name, left)
		}
	}
}

// isNil reports whether h holds no handle (nil, or a nil pointer).
func isNil(h primitives.Lease) bool {
	if h == nil {
		return true
	}
	v := reflect.ValueOf(h)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// BadReplicaOptions checks that a primitive's constructor refuses
// Replicas and ReplicaTimeout out of range with an error matching
// primitives.ErrInvalidOptions that says why, after what (e.g. "lock").
// newWith makes the primitive with those two options and reports whether
// it got one.
func BadReplicaOptions(t *testing.T, what string, newWith func(replicas int, timeout time.Duration) (made bool, err error)) {
	t.Helper()
	for _, tc := range []struct {
		replicas int
		timeout  time.Duration
		want     string
	}{
		{-1, 0, "Replicas -1 is negative"},
		{primitives.MaxReplicas + 1, 0, "Replicas 65 is above the maximum of 64"},
		{1, -time.Millisecond, "ReplicaTimeout -1ms is negative"},
		{1, -time.Second, "ReplicaTimeout -1s is negative"},
		{1, primitives.MaxReplicaTimeout + time.Millisecond, "ReplicaTimeout 1m0.001s is above the maximum of 1m0s"},
		{1, time.Hour, "ReplicaTimeout 1h0m0s is above the maximum of 1m0s"},
		{0, -time.Second, "ReplicaTimeout -1s is negative"},
	} {
		made, err := newWith(tc.replicas, tc.timeout)
		if made || !errors.Is(err, primitives.ErrInvalidOptions) || !strings.Contains(err.Error(), what+": "+tc.want) {
			t.Errorf("Replicas %d, ReplicaTimeout %v: %v, want ErrInvalidOptions with %q", tc.replicas, tc.timeout, err, what+": "+tc.want)
		}
	}
}
