package host

import (
	"context"
	"errors"
	"time"

	"connectrpc.com/connect"
	"github.com/coordhost/coordhost/config"
	coordhostv1 "github.com/coordhost/coordhost/gen/coordhost/v1"
	"github.com/coordhost/coordhost/primitives/lease"
	"github.com/coordhost/coordhost/primitives/rwlock"
	"github.com/coordhost/coordhost/primitives/semaphore"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The grant services besides LockService (api_lock.go): LeaseService,
// RWLockService and SemaphoreService. Their statuses are LockService's,
// with ResourceExhausted (REASON_CONTENDED) for a semaphore without a free
// permit, and FailedPrecondition (REASON_UNSUPPORTED_SERVER) for leases on
// a server without hash-field expiry.

// HoldPermitTTL is the lease of a permit that a Hold takes on a semaphore
// block with ttl = "none": over the API every grant expires in Redis, so
// that a daemon crash or a client that vanishes never leaks a permit for
// good. The Hold renews it every third.
const HoldPermitTTL = 30 * time.Second

// errNoExpiryUnary refuses a unary acquisition, without a session, on a
// semaphore block with ttl = "none".
var errNoExpiryUnary = errors.New(`semaphore: the block's ttl is "none", and a permit taken over the API must expire: pass a session_id or use Hold`)

// rwlockService serves coordhost.v1.RWLockService on the `rwlock` blocks.
type rwlockService struct{ h *Host }

// take serves the acquisitions of RWLockService.
func (s rwlockService) take(ctx context.Context, name string, mode coordhostv1.LockMode, attrs map[string]string, wait *durationpb.Duration, try bool, session string) (*held, error) {
	w, cerr := grantFields(name, attrs, wait, session)
	if cerr != nil {
		return nil, cerr
	}
	if try {
		w = apiWait{set: true}
	}
	var m rwlock.Mode
	var ref string
	switch mode {
	case coordhostv1.LockMode_LOCK_MODE_READ:
		m, ref = rwlock.Read, modeRead
	case coordhostv1.LockMode_LOCK_MODE_WRITE:
		m, ref = rwlock.Write, modeWrite
	default:
		return nil, invalidField("mode", name, "must be LOCK_MODE_READ or LOCK_MODE_WRITE")
	}
	l := &RWLock{h: s.h, name: name}
	req := grantRequest{kind: kindRWLock, name: name, attrs: attrs, wait: w, session: session, mode: ref, contended: connect.CodeAborted}
	return s.h.takeGrant(ctx, req, func(ctx context.Context, ttl time.Duration, try bool) (acquisition, error) {
		fn := (*rwlock.Locker).AcquireWrite
		switch {
		case m == rwlock.Read && try:
			fn = (*rwlock.Locker).TryAcquireRead
		case m == rwlock.Read:
			fn = (*rwlock.Locker).AcquireRead
		case try:
			fn = (*rwlock.Locker).TryAcquireWrite
		}
		got, key, err := l.observe(ctx, attrs, m, !try, ttl, fn)
		if err != nil {
			return acquisition{}, err
		}
		return acquisition{lease: got, key: key, ttl: orTTL(ttl, l.TTL())}, nil
	})
}

// orTTL is ttl, or the block's when ttl is 0.
func orTTL(ttl, block time.Duration) time.Duration {
	if ttl == 0 {
		return block
	}
	return ttl
}

// modeOf is the LockMode of a grant's mode.
func modeOf(g *held) coordhostv1.LockMode {
	if g.ref.Mode == modeRead {
		return coordhostv1.LockMode_LOCK_MODE_READ
	}
	return coordhostv1.LockMode_LOCK_MODE_WRITE
}

func (s rwlockService) Acquire(ctx context.Context, req *connect.Request[coordhostv1.AcquireRWLockRequest]) (*connect.Response[coordhostv1.AcquireRWLockResponse], error) {
	m := req.Msg
	g, err := s.take(ctx, m.GetName(), m.GetMode(), m.GetAttributes(), m.GetWait(), false, m.GetSessionId())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&coordhostv1.AcquireRWLockResponse{Grant: g.proto(), Mode: modeOf(g)}), nil
}

func (s rwlockService) TryAcquire(ctx context.Context, req *connect.Request[coordhostv1.TryAcquireRWLockRequest]) (*connect.Response[coordhostv1.TryAcquireRWLockResponse], error) {
	m := req.Msg
	g, err := s.take(ctx, m.GetName(), m.GetMode(), m.GetAttributes(), nil, true, m.GetSessionId())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&coordhostv1.TryAcquireRWLockResponse{Grant: g.proto(), Mode: modeOf(g)}), nil
}

func (s rwlockService) Renew(ctx context.Context, req *connect.Request[coordhostv1.RenewRWLockRequest]) (*connect.Response[coordhostv1.RenewRWLockResponse], error) {
	g, err := s.h.renewByID(ctx, req.Msg.GetGrantId(), kindRWLock, connect.CodeAborted)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&coordhostv1.RenewRWLockResponse{Grant: g}), nil
}

func (s rwlockService) Release(ctx context.Context, req *connect.Request[coordhostv1.ReleaseRWLockRequest]) (*connect.Response[coordhostv1.ReleaseRWLockResponse], error) {
	res, err := s.h.releaseByID(ctx, req.Msg.GetGrantId(), kindRWLock, connect.CodeAborted)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&coordhostv1.ReleaseRWLockResponse{Result: res}), nil
}

func (s rwlockService) Hold(ctx context.Context, req *connect.Request[coordhostv1.HoldRWLockRequest], st *connect.ServerStream[coordhostv1.HoldRWLockResponse]) error {
	m := req.Msg
	g, err := s.take(ctx, m.GetName(), m.GetMode(), m.GetAttributes(), m.GetWait(), false, m.GetSessionId())
	if err != nil {
		return err
	}
	return s.h.hold(ctx, g, func(gr *coordhostv1.Grant) error {
		return st.Send(&coordhostv1.HoldRWLockResponse{Grant: gr, Mode: modeOf(g)})
	})
}

// semaphoreService serves coordhost.v1.SemaphoreService on the `semaphore`
// blocks.
type semaphoreService struct{ h *Host }

// take serves the acquisitions of SemaphoreService; hold says whether it
// is a Hold's.
func (s semaphoreService) take(ctx context.Context, name string, attrs map[string]string, wait *durationpb.Duration, try, hold bool, session string) (*held, int64, error) {
	w, cerr := grantFields(name, attrs, wait, session)
	if cerr != nil {
		return nil, 0, cerr
	}
	if try {
		w = apiWait{set: true}
	}
	if err := authorizeName(ctx, name); err != nil {
		return nil, 0, err
	}
	sem := &Semaphore{h: s.h, name: name}
	var ttl time.Duration
	if sem.TTL() == config.SemaphoreNoExpiry && session == "" {
		if !hold {
			return nil, 0, apiError(connect.CodeFailedPrecondition, coordhostv1.Reason_REASON_UNSPECIFIED, "session_id", name, errNoExpiryUnary)
		}
		ttl = HoldPermitTTL
	}
	req := grantRequest{kind: kindSemaphore, name: name, attrs: attrs, wait: w, session: session, ttl: ttl, contended: connect.CodeResourceExhausted}
	var capacity int64
	g, err := s.h.takeGrant(ctx, req, func(ctx context.Context, ttl time.Duration, try bool) (acquisition, error) {
		got, key, err := sem.observe(ctx, attrs, !try, ttl, semaphoreAcquire(try))
		if err != nil {
			return acquisition{}, err
		}
		capacity = int64(got.Capacity())
		return acquisition{lease: got, key: key, ttl: orTTL(ttl, sem.TTL())}, nil
	})
	return g, capacity, err
}

func (s semaphoreService) Acquire(ctx context.Context, req *connect.Request[coordhostv1.AcquireSemaphoreRequest]) (*connect.Response[coordhostv1.AcquireSemaphoreResponse], error) {
	m := req.Msg
	g, c, err := s.take(ctx, m.GetName(), m.GetAttributes(), m.GetWait(), false, false, m.GetSessionId())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&coordhostv1.AcquireSemaphoreResponse{Grant: g.proto(), Capacity: c}), nil
}

func (s semaphoreService) TryAcquire(ctx context.Context, req *connect.Request[coordhostv1.TryAcquireSemaphoreRequest]) (*connect.Response[coordhostv1.TryAcquireSemaphoreResponse], error) {
	m := req.Msg
	g, c, err := s.take(ctx, m.GetName(), m.GetAttributes(), nil, true, false, m.GetSessionId())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&coordhostv1.TryAcquireSemaphoreResponse{Grant: g.proto(), Capacity: c}), nil
}

func (s semaphoreService) Renew(ctx context.Context, req *connect.Request[coordhostv1.RenewSemaphoreRequest]) (*connect.Response[coordhostv1.RenewSemaphoreResponse], error) {
	g, err := s.h.renewByID(ctx, req.Msg.GetGrantId(), kindSemaphore, connect.CodeResourceExhausted)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&coordhostv1.RenewSemaphoreResponse{Grant: g}), nil
}

func (s semaphoreService) Release(ctx context.Context, req *connect.Request[coordhostv1.ReleaseSemaphoreRequest]) (*connect.Response[coordhostv1.ReleaseSemaphoreResponse], error) {
	res, err := s.h.releaseByID(ctx, req.Msg.GetGrantId(), kindSemaphore, connect.CodeResourceExhausted)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&coordhostv1.ReleaseSemaphoreResponse{Result: res}), nil
}

func (s semaphoreService) Hold(ctx context.Context, req *connect.Request[coordhostv1.HoldSemaphoreRequest], st *connect.ServerStream[coordhostv1.HoldSemaphoreResponse]) error {
	m := req.Msg
	g, c, err := s.take(ctx, m.GetName(), m.GetAttributes(), m.GetWait(), false, true, m.GetSessionId())
	if err != nil {
		return err
	}
	return s.h.hold(ctx, g, func(gr *coordhostv1.Grant) error {
		return st.Send(&coordhostv1.HoldSemaphoreResponse{Grant: gr, Capacity: c})
	})
}

// semaphoreAcquire is the Semaphores method of an attempt (try) or a wait.
func semaphoreAcquire(try bool) func(*semaphore.Semaphores, context.Context, string, int, time.Duration) (*semaphore.Permit, error) {
	if try {
		return (*semaphore.Semaphores).TryAcquire
	}
	return (*semaphore.Semaphores).Acquire
}

// leaseService serves coordhost.v1.LeaseService on the `lease` blocks.
type leaseService struct{ h *Host }

// take serves the acquisitions of LeaseService.
func (s leaseService) take(ctx context.Context, name, field string, attrs map[string]string, ttlpb, wait *durationpb.Duration, try bool, session string) (*held, error) {
	w, cerr := grantFields(name, attrs, wait, session)
	if cerr != nil {
		return nil, cerr
	}
	if try {
		w = apiWait{set: true}
	}
	switch {
	case field == "":
		return nil, invalidField("field", name, "empty")
	case len(field) > MaxLeaseFieldBytes:
		return nil, invalidField("field", name, "%d bytes, at most %d", len(field), MaxLeaseFieldBytes)
	}
	var ttl time.Duration
	if ttlpb != nil {
		if err := ttlpb.CheckValid(); err != nil {
			return nil, invalidField("ttl", name, "%v", err)
		}
		if ttl = ttlpb.AsDuration(); ttl < time.Millisecond {
			return nil, invalidField("ttl", name, "%v, at least 1ms", ttl)
		}
		if session != "" {
			return nil, invalidField("ttl", name, "a session's grant takes the session's ttl: give no ttl with a session_id")
		}
	}
	l := &Lease{h: s.h, name: name}
	req := grantRequest{kind: kindLease, name: name, attrs: attrs, wait: w, session: session, field: field, ttl: ttl, contended: connect.CodeAborted}
	return s.h.takeGrant(ctx, req, func(ctx context.Context, ttl time.Duration, try bool) (acquisition, error) {
		fn := (*lease.Leases).Acquire
		if try {
			fn = (*lease.Leases).TryAcquire
		}
		got, key, err := l.observe(ctx, attrs, field, ttl, !try, fn)
		if err != nil {
			return acquisition{}, err
		}
		return acquisition{lease: got, key: key, ttl: orTTL(ttl, l.TTL())}, nil
	})
}

func (s leaseService) Acquire(ctx context.Context, req *connect.Request[coordhostv1.AcquireLeaseRequest]) (*connect.Response[coordhostv1.AcquireLeaseResponse], error) {
	m := req.Msg
	g, err := s.take(ctx, m.GetName(), m.GetField(), m.GetAttributes(), m.GetTtl(), m.GetWait(), false, m.GetSessionId())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&coordhostv1.AcquireLeaseResponse{Grant: g.proto()}), nil
}

func (s leaseService) TryAcquire(ctx context.Context, req *connect.Request[coordhostv1.TryAcquireLeaseRequest]) (*connect.Response[coordhostv1.TryAcquireLeaseResponse], error) {
	m := req.Msg
	g, err := s.take(ctx, m.GetName(), m.GetField(), m.GetAttributes(), m.GetTtl(), nil, true, m.GetSessionId())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&coordhostv1.TryAcquireLeaseResponse{Grant: g.proto()}), nil
}

func (s leaseService) Renew(ctx context.Context, req *connect.Request[coordhostv1.RenewLeaseRequest]) (*connect.Response[coordhostv1.RenewLeaseResponse], error) {
	g, err := s.h.renewByID(ctx, req.Msg.GetGrantId(), kindLease, connect.CodeAborted)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&coordhostv1.RenewLeaseResponse{Grant: g}), nil
}

func (s leaseService) Release(ctx context.Context, req *connect.Request[coordhostv1.ReleaseLeaseRequest]) (*connect.Response[coordhostv1.ReleaseLeaseResponse], error) {
	res, err := s.h.releaseByID(ctx, req.Msg.GetGrantId(), kindLease, connect.CodeAborted)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&coordhostv1.ReleaseLeaseResponse{Result: res}), nil
}

func (s leaseService) Hold(ctx context.Context, req *connect.Request[coordhostv1.HoldLeaseRequest], st *connect.ServerStream[coordhostv1.HoldLeaseResponse]) error {
	m := req.Msg
	g, err := s.take(ctx, m.GetName(), m.GetField(), m.GetAttributes(), m.GetTtl(), m.GetWait(), false, m.GetSessionId())
	if err != nil {
		return err
	}
	return s.h.hold(ctx, g, func(gr *coordhostv1.Grant) error {
		return st.Send(&coordhostv1.HoldLeaseResponse{Grant: gr})
	})
}
