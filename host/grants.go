package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"
	coordhostv1 "github.com/coordhost/coordhost/gen/coordhost/v1"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/rwlock"
)

// grantReleaseTimeout bounds a release the daemon makes on its own
// account: a Hold's end, a session's close, a grant whose session went
// away while it was taken.
const grantReleaseTimeout = 5 * time.Second

// grantRequest is one acquisition through the API, whatever the kind.
type grantRequest struct {
	kind, name string
	attrs      map[string]string
	wait       apiWait
	session    string
	field      string        // leases
	mode       string        // rwlocks
	ttl        time.Duration // the request's own (leases); 0: the block's
	// contended is the status of contention: Aborted for exclusive
	// grants, ResourceExhausted for permits.
	contended connect.Code
}

// acquisition is what a kind's acquire answers.
type acquisition struct {
	lease primitives.Lease
	key   string        // below the block's prefix
	fence int64         // locks with fencing
	ttl   time.Duration // the lease taken; 0 for a permit without expiry
}

// acquireFunc takes one grant of a kind for ttl (0: the block's), making
// one attempt when try.
type acquireFunc func(ctx context.Context, ttl time.Duration, try bool) (acquisition, error)

// held is a grant the API took or rebuilt: its reference and its handle.
type held struct {
	ref   *grantRef
	lease primitives.Lease
}

// proto is the grant's Grant message.
func (g *held) proto() *coordhostv1.Grant { return grantProto(g.ref, g.lease.Remaining()) }

// takeGrant runs one acquisition of req through acquire: the caller's
// token must allow the name; a session's grant is taken with the
// session's TTL and then recorded in it (or released again when the
// session went away meanwhile or is full).
func (h *Host) takeGrant(ctx context.Context, req grantRequest, acquire acquireFunc) (*held, error) {
	if err := authorizeName(ctx, req.name); err != nil {
		return nil, err
	}
	ttl := req.ttl
	if req.session != "" {
		st, err := h.runSession(ctx, sessionGet, req.session, callerToken(ctx))
		if err != nil {
			return nil, err
		}
		if len(st.grants) >= MaxSessionGrants {
			// Refused before anything is taken (session_attach.lua
			// checks again, for a race with another acquisition).
			return nil, sessionFull(req.name)
		}
		ttl = st.ttl
	}
	got, err := acquireWithin(ctx, req.wait, func(ctx context.Context) (acquisition, error) {
		return acquire(ctx, ttl, req.wait.try())
	})
	if err != nil && req.session != "" && errors.Is(err, primitives.ErrInvalidTTL) {
		// The request gave no ttl: the session's is too long for the block.
		return nil, invalidField("session_id", req.name, "the session's ttl %v is more than %s %q allows: %v", ttl, req.kind, req.name, err)
	}
	if err != nil {
		return nil, grantError(ctx, "acquire", req.name, req.contended, err)
	}
	g := &held{lease: got.lease, ref: &grantRef{
		Kind: req.kind, Name: req.name, Key: got.key, Field: req.field, Mode: req.mode,
		Token: got.lease.Token(), Fence: got.fence, Session: req.session, TTLMillis: got.ttl.Milliseconds(),
	}}
	if req.session != "" {
		if err := h.attach(ctx, g.ref); err != nil {
			h.releaseOwn(ctx, g)
			return nil, err
		}
	}
	return g, nil
}

// attach records r in its session (lua/session_attach.lua).
func (h *Host) attach(ctx context.Context, r *grantRef) error {
	n, err := sessionAttach.Exec(ctx, h.client, []string{h.sessionKey(r.Session)},
		[]string{callerToken(ctx), r.sessionField(), r.id(), strconv.Itoa(MaxSessionGrants)}).AsInt64()
	switch {
	case err != nil:
		return sessionError(ctx, err)
	case n == 0:
		return sessionGone()
	case n < 0:
		return sessionFull(r.Name)
	}
	h.requota(ctx, r.Session, time.Now().Add(time.Duration(r.TTLMillis)*time.Millisecond))
	return nil
}

// sessionFull is ResourceExhausted (REASON_CLIENT_LIMIT): the session
// holds MaxSessionGrants grants.
func sessionFull(name string) error {
	return apiError(connect.CodeResourceExhausted, coordhostv1.Reason_REASON_CLIENT_LIMIT, "session_id", name,
		fmt.Errorf("session_id: the session holds %d grants, the most it may", MaxSessionGrants))
}

// detach removes r from its session, best effort: a grant that stays
// listed is found lost at the session's next renewal and removed then.
func (h *Host) detach(ctx context.Context, r *grantRef) {
	if r.Session == "" {
		return
	}
	c := h.client
	if err := c.Do(ctx, c.B().Hdel().Key(h.sessionKey(r.Session)).Field(r.sessionField()).Build()).Error(); err != nil {
		h.log.Debug("session: removing a released grant failed", "error", err)
	}
}

// releaseOwn releases g on the daemon's own account, whatever ctx's
// state, within grantReleaseTimeout; a Hold of it served here ends.
func (h *Host) releaseOwn(ctx context.Context, g *held) (primitives.ReleaseResult, error) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grantReleaseTimeout)
	defer cancel()
	res, err := g.lease.Release(rctx)
	if err != nil {
		h.log.Warn("releasing a grant failed; it expires with its ttl", "kind", g.ref.Kind, "name", g.ref.Name, "error", err)
	}
	h.holds.end(g.ref.Token, grantLost(g.ref.Name))
	h.detach(rctx, g.ref)
	return res, err
}

// resume rebuilds the handle of the grant r names, on the primitive its
// name has in the configuration in use.
func (h *Host) resume(r *grantRef) (*held, error) {
	var l primitives.Lease
	var err error
	switch r.Kind {
	case kindLock:
		l, err = resumeOn(h, r, ErrNoLock, (&Lock{h: h, name: r.Name}).lookup, func(n *namedLock) (primitives.Lease, error) {
			return asLease(n.prim.Resume(r.Key, r.Token, r.Fence))
		})
	case kindRedlock:
		l, err = resumeOn(h, r, ErrNoRedlock, (&Redlock{h: h, name: r.Name}).lookup, func(n *namedRedlock) (primitives.Lease, error) {
			return asLease(n.prim.Resume(r.Key, r.Token))
		})
	case kindRWLock:
		mode := rwlock.Read
		if r.Mode == modeWrite {
			mode = rwlock.Write
		}
		l, err = resumeOn(h, r, ErrNoRWLock, (&RWLock{h: h, name: r.Name}).lookup, func(n *namedRWLock) (primitives.Lease, error) {
			return asLease(n.prim.Resume(r.Key, r.Token, mode))
		})
	case kindSemaphore:
		l, err = resumeOn(h, r, ErrNoSemaphore, (&Semaphore{h: h, name: r.Name}).lookup, func(n *namedSemaphore) (primitives.Lease, error) {
			return asLease(n.prim.Resume(r.Key, r.Token, n.cfg.Capacity, false))
		})
	case kindLease:
		l, err = resumeOn(h, r, ErrNoLease, (&Lease{h: h, name: r.Name}).lookup, func(n *namedLease) (primitives.Lease, error) {
			return asLease(n.prim.Resume(r.Key, r.Field, r.Token))
		})
	default:
		err = fmt.Errorf("%w: unknown kind %q", errBadGrant, r.Kind)
	}
	if err != nil {
		return nil, err
	}
	return &held{ref: r, lease: l}, nil
}

// resumeOn runs a kind's Resume (fn) on the named primitive of r's name,
// once r's key is found to be one the block makes; a Resume's refusal is
// errBadGrant.
func resumeOn[C any, P io.Closer](h *Host, r *grantRef, errNone error, lookup func(*generation) *named[C, P],
	fn func(*named[C, P]) (primitives.Lease, error)) (primitives.Lease, error) {
	return withNamed(h, r.Kind, r.Name, errNone, lookup, func(n *named[C, P]) (primitives.Lease, error) {
		if err := n.ownsKey(r.Key); err != nil {
			return nil, err
		}
		l, err := fn(n)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errBadGrant, err)
		}
		return l, nil
	})
}

// asLease returns a Resume's handle as a primitives.Lease: nil (not a
// typed nil) with an error.
func asLease[L primitives.Lease](l L, err error) (primitives.Lease, error) {
	if err != nil {
		return nil, err
	}
	return l, nil
}

// errBadGrant is a grant id that parses but does not fit the block its
// name has now (InvalidArgument naming "grant_id").
var errBadGrant = errors.New("grant_id does not fit its block")

// ownsKey checks that key (from a grant id) is one this block makes: its
// name, or name "/" something when it has a partition policy.
func (n *named[C, P]) ownsKey(key string) error {
	if key == n.name || n.partition != nil && len(key) > len(n.name)+1 && key[:len(n.name)+1] == n.name+"/" {
		return nil
	}
	return fmt.Errorf("%w: key %q is not one %s %q makes", errBadGrant, key, n.kind, n.name)
}

// renewByID serves a Renew of any kind: the grant id's handle is rebuilt
// and renewed. A session's grant is renewed by its session's TTL, and
// only while the session lives (a grant whose session is gone is
// released); any other by the TTL it was taken with, at most what its
// block allows now: the id is not signed, and its TTL is the client's to
// rewrite.
func (h *Host) renewByID(ctx context.Context, id, kind string, contended connect.Code) (*coordhostv1.Grant, error) {
	r, cerr := parseGrantID(id, kind)
	if cerr != nil {
		return nil, cerr
	}
	if err := authorizeName(ctx, r.Name); err != nil {
		return nil, err
	}
	g, err := h.resume(r)
	if err != nil {
		return nil, grantError(ctx, "renew", r.Name, contended, err)
	}
	if r.Session != "" {
		st, err := h.runSession(ctx, sessionGet, r.Session, callerToken(ctx))
		if connect.CodeOf(err) == connect.CodeNotFound {
			res, rerr := h.releaseOwn(ctx, g)
			h.metrics.grantOp(r.Kind, "release", "session", false, res, rerr)
			return nil, apiError(connect.CodeNotFound, coordhostv1.Reason_REASON_GRANT_LOST, "grant_id", r.Name,
				errors.New("the grant's session ended (closed or expired): the grant was released; acquire again"))
		}
		if err != nil {
			return nil, err
		}
		r.TTLMillis = st.ttl.Milliseconds()
	} else if limit := h.renewalLimit(r); r.ttl() > limit {
		r.TTLMillis = limit.Milliseconds()
	}
	ok, err := h.renewHeld(ctx, g)
	h.metrics.grantOp(r.Kind, "renew", "grant_id", ok, 0, err)
	if err != nil {
		return nil, grantError(ctx, "renew", r.Name, contended, err)
	}
	if !ok {
		return nil, grantLost(r.Name)
	}
	return g.proto(), nil
}

// renewalLimit is the longest TTL a renewal by id may give r, outside a
// session: what its block grants now (a lease's max_ttl; a ttl = "none"
// semaphore's Hold lease), so that a rewritten id cannot stretch a grant.
func (h *Host) renewalLimit(r *grantRef) time.Duration {
	g := h.gen.Load()
	switch r.Kind {
	case kindLock:
		if n := g.locks[r.Name]; n != nil {
			return n.cfg.TTL
		}
	case kindRedlock:
		if n := g.redlocks[r.Name]; n != nil {
			return n.cfg.TTL
		}
	case kindRWLock:
		if n := g.rwlocks[r.Name]; n != nil {
			return n.cfg.TTL
		}
	case kindSemaphore:
		if n := g.semaphores[r.Name]; n != nil && n.cfg.TTL > 0 {
			return n.cfg.TTL
		}
		return HoldPermitTTL
	case kindLease:
		if n := g.leases[r.Name]; n != nil {
			return n.cfg.MaxTTL
		}
	}
	return r.ttl() // the block went: resume refuses it anyway
}

// renewHeld renews g by its TTL; a permit without expiry is verified
// instead.
func (h *Host) renewHeld(ctx context.Context, g *held) (bool, error) {
	if ttl := g.ref.ttl(); ttl > 0 {
		return g.lease.Renew(ctx, ttl)
	}
	return g.lease.Verify(ctx)
}

// releaseByID serves a Release of any kind.
func (h *Host) releaseByID(ctx context.Context, id, kind string, contended connect.Code) (coordhostv1.ReleaseResult, error) {
	r, cerr := parseGrantID(id, kind)
	if cerr != nil {
		return 0, cerr
	}
	if err := authorizeName(ctx, r.Name); err != nil {
		return 0, err
	}
	// A Hold of the grant served here releases through its own handle, so
	// that its metrics see a release, not a grant found gone at its end.
	g := h.holds.held(r.Token)
	if g != nil && !g.ref.same(r) {
		g = nil // the id names something else than the Hold: resume it
	}
	if g == nil {
		var err error
		if g, err = h.resume(r); err != nil {
			return 0, grantError(ctx, "release", r.Name, contended, err)
		}
	}
	res, err := g.lease.Release(ctx)
	h.metrics.grantOp(r.Kind, "release", "grant_id", false, res, err)
	if err != nil {
		return 0, grantError(ctx, "release", r.Name, contended, err)
	}
	if res == primitives.Released {
		// This call held the grant: a Hold of it here ends now. (Any other
		// answer proves nothing about a Hold of the same token.)
		h.holds.end(r.Token, apiError(connect.CodeNotFound, coordhostv1.Reason_REASON_GRANT_LOST, "", r.Name,
			errors.New("the grant was released by a Release call")))
		h.detach(ctx, r)
	}
	return releaseResult(res), nil
}

// renewSessionGrants renews the grants of session id by its TTL, all at
// once; a grant found lost (or an id that does not parse) is removed from
// the session.
func (h *Host) renewSessionGrants(ctx context.Context, id string, st *sessionState) {
	var wg sync.WaitGroup
	for _, gid := range st.grants {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, cerr := parseGrantID(gid, "")
			if cerr != nil || r.Session != id {
				h.log.Warn("session: dropping a grant id that does not parse", "session", id)
				h.dropSessionField(ctx, id, gid)
				return
			}
			r.TTLMillis = st.ttl.Milliseconds()
			g, err := h.resume(r)
			if err != nil {
				h.log.Warn("session: cannot renew a grant", "kind", r.Kind, "name", r.Name, "error", err)
				return
			}
			if authorizeName(ctx, r.Name) != nil {
				// The token may no longer use the name (a reload took it):
				// the grant is given back, not kept alive.
				res, err := h.releaseOwn(ctx, g)
				h.metrics.grantOp(r.Kind, "release", "session", false, res, err)
				return
			}
			ok, err := h.renewHeld(ctx, g)
			h.metrics.grantOp(r.Kind, "renew", "session", ok, 0, err)
			if err == nil && !ok {
				h.detach(ctx, r)
			}
		}()
	}
	wg.Wait()
}

// dropSessionField removes, by value, a field of session id that holds
// grant id gid but cannot be parsed into its field name.
func (h *Host) dropSessionField(ctx context.Context, id, gid string) {
	c := h.client
	all, err := c.Do(ctx, c.B().Hgetall().Key(h.sessionKey(id)).Build()).AsStrMap()
	if err != nil {
		return
	}
	for f, v := range all {
		if v == gid && len(f) > 2 && f[:2] == "g:" {
			c.Do(ctx, c.B().Hdel().Key(h.sessionKey(id)).Field(f).Build())
		}
	}
}

// releaseGrants releases the grants of a closed session, all at once, and
// returns how many were held until now.
func (h *Host) releaseGrants(ctx context.Context, ids []string) int {
	var wg sync.WaitGroup
	var mu sync.Mutex
	n := 0
	for _, gid := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, cerr := parseGrantID(gid, "")
			if cerr != nil {
				return
			}
			g, err := h.resume(r)
			if err != nil {
				h.log.Warn("session: cannot release a grant; it expires with its ttl", "kind", r.Kind, "name", r.Name, "error", err)
				return
			}
			r.Session = "" // the session is gone: nothing to detach from
			res, err := h.releaseOwn(ctx, g)
			h.metrics.grantOp(r.Kind, "release", "session", false, res, err)
			if err == nil && res == primitives.Released {
				mu.Lock()
				n++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return n
}

// listedGrant is the Grant message of a grant id listed in a session, or
// nil when it does not parse. Its expiry is the session's.
func (h *Host) listedGrant(gid string) *coordhostv1.Grant {
	r, cerr := parseGrantID(gid, "")
	if cerr != nil {
		return nil
	}
	return grantProto(r, 0)
}
