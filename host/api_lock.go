package host

import (
	"context"
	"time"

	"connectrpc.com/connect"
	coordhostv1 "github.com/coordhost/coordhost/gen/coordhost/v1"
	"github.com/coordhost/coordhost/primitives/redlock"
	"google.golang.org/protobuf/types/known/durationpb"
)

// lockService serves coordhost.v1.LockService on the `lock` blocks (and,
// by kind, the `redlock` blocks).
//
// Statuses (grant.proto): NotFound (REASON_NAME_NOT_CONFIGURED) for a
// name no block of the kind has; InvalidArgument naming "name", "kind",
// "attributes", "wait", "session_id" or "grant_id" (nothing is written);
// Aborted (REASON_CONTENDED) when the lock stays held through the wait;
// NotFound (REASON_SESSION_NOT_FOUND) for a session that is gone and
// (REASON_GRANT_LOST) for a grant no longer held; Unavailable when Redis
// fails or the daemon stops; Canceled or DeadlineExceeded with the call.
type lockService struct{ h *Host }

// grantFields checks what every acquisition request carries. wait may be
// nil (TryAcquire).
func grantFields(name string, attrs map[string]string, wait *durationpb.Duration, session string) (apiWait, *connect.Error) {
	if err := checkNameAttributes(name, attrs); err != nil {
		return apiWait{}, err
	}
	if session != "" {
		if err := checkSessionID(session); err != nil {
			return apiWait{}, err
		}
	}
	return parseWait(wait, name)
}

// lockRequest resolves a LockService acquisition to its grant request and
// acquire function. w is the request's wait (try for TryAcquire).
func (s lockService) lockRequest(name string, kind coordhostv1.LockKind, attrs map[string]string, w apiWait, session string) (grantRequest, acquireFunc, *connect.Error) {
	g := s.h.gen.Load()
	hasLock, hasRedlock := g.locks[name] != nil, g.redlocks[name] != nil
	switch kind {
	case coordhostv1.LockKind_LOCK_KIND_UNSPECIFIED:
		if hasLock && hasRedlock {
			return grantRequest{}, nil, invalidField("kind", name, "both a lock and a redlock are named %q: say which", name)
		}
		if hasRedlock {
			kind = coordhostv1.LockKind_LOCK_KIND_REDLOCK
		}
	case coordhostv1.LockKind_LOCK_KIND_LOCK, coordhostv1.LockKind_LOCK_KIND_REDLOCK:
	default:
		return grantRequest{}, nil, invalidField("kind", name, "unknown lock kind %d", kind)
	}
	req := grantRequest{kind: kindLock, name: name, attrs: attrs, wait: w, session: session, contended: connect.CodeAborted}
	if kind == coordhostv1.LockKind_LOCK_KIND_REDLOCK {
		req.kind = kindRedlock
		return req, s.h.acquireRedlock(name, attrs), nil
	}
	l := &Lock{h: s.h, name: name}
	return req, func(ctx context.Context, ttl time.Duration, try bool) (acquisition, error) {
		lk, key, err := l.acquire(ctx, attrs, !try, ttl)
		if err != nil {
			return acquisition{}, err
		}
		return acquisition{lease: lk, key: key, fence: lk.FencingToken(), ttl: orTTL(ttl, l.TTL())}, nil
	}, nil
}

// take serves Acquire, TryAcquire and Hold's acquisition.
func (s lockService) take(ctx context.Context, name string, kind coordhostv1.LockKind, attrs map[string]string, wait *durationpb.Duration, try bool, session string) (*held, error) {
	w, cerr := grantFields(name, attrs, wait, session)
	if cerr != nil {
		return nil, cerr
	}
	if try {
		w = apiWait{set: true}
	}
	req, acquire, cerr := s.lockRequest(name, kind, attrs, w, session)
	if cerr != nil {
		return nil, cerr
	}
	return s.h.takeGrant(ctx, req, acquire)
}

// Acquire serves LockService.Acquire.
func (s lockService) Acquire(ctx context.Context, req *connect.Request[coordhostv1.AcquireLockRequest]) (*connect.Response[coordhostv1.AcquireLockResponse], error) {
	m := req.Msg
	g, err := s.take(ctx, m.GetName(), m.GetKind(), m.GetAttributes(), m.GetWait(), false, m.GetSessionId())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&coordhostv1.AcquireLockResponse{Grant: g.proto()}), nil
}

// TryAcquire serves LockService.TryAcquire.
func (s lockService) TryAcquire(ctx context.Context, req *connect.Request[coordhostv1.TryAcquireLockRequest]) (*connect.Response[coordhostv1.TryAcquireLockResponse], error) {
	m := req.Msg
	g, err := s.take(ctx, m.GetName(), m.GetKind(), m.GetAttributes(), nil, true, m.GetSessionId())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&coordhostv1.TryAcquireLockResponse{Grant: g.proto()}), nil
}

// Renew serves LockService.Renew.
func (s lockService) Renew(ctx context.Context, req *connect.Request[coordhostv1.RenewLockRequest]) (*connect.Response[coordhostv1.RenewLockResponse], error) {
	g, err := s.h.renewByID(ctx, req.Msg.GetGrantId(), kindLock, connect.CodeAborted)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&coordhostv1.RenewLockResponse{Grant: g}), nil
}

// Release serves LockService.Release.
func (s lockService) Release(ctx context.Context, req *connect.Request[coordhostv1.ReleaseLockRequest]) (*connect.Response[coordhostv1.ReleaseLockResponse], error) {
	res, err := s.h.releaseByID(ctx, req.Msg.GetGrantId(), kindLock, connect.CodeAborted)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&coordhostv1.ReleaseLockResponse{Result: res}), nil
}

// Hold serves LockService.Hold (see Host.hold).
func (s lockService) Hold(ctx context.Context, req *connect.Request[coordhostv1.HoldLockRequest], st *connect.ServerStream[coordhostv1.HoldLockResponse]) error {
	m := req.Msg
	g, err := s.take(ctx, m.GetName(), m.GetKind(), m.GetAttributes(), m.GetWait(), false, m.GetSessionId())
	if err != nil {
		return err
	}
	return s.h.hold(ctx, g, func(gr *coordhostv1.Grant) error {
		return st.Send(&coordhostv1.HoldLockResponse{Grant: gr})
	})
}

// configured reports whether the configuration in use has a block of
// kind (a grant kind) named name.
func (h *Host) configured(kind, name string) bool {
	g := h.gen.Load()
	switch kind {
	case kindLock:
		return g.locks[name] != nil
	case kindRedlock:
		return g.redlocks[name] != nil
	case kindRWLock:
		return g.rwlocks[name] != nil
	case kindSemaphore:
		return g.semaphores[name] != nil
	case kindLease:
		return g.leases[name] != nil
	}
	return false
}

// acquireRedlock is the acquire function of redlock name.
func (h *Host) acquireRedlock(name string, attrs map[string]string) acquireFunc {
	r := &Redlock{h: h, name: name}
	return func(ctx context.Context, ttl time.Duration, try bool) (acquisition, error) {
		fn := (*redlock.Group).Acquire
		if try {
			fn = (*redlock.Group).TryAcquire
		}
		lk, key, err := r.observe(ctx, attrs, !try, ttl, fn)
		if err != nil {
			return acquisition{}, err
		}
		return acquisition{lease: lk, key: key, ttl: orTTL(ttl, r.TTL())}, nil
	}
}
