package host

import (
	"context"
	"errors"
	"sync"
	"time"

	"connectrpc.com/connect"
	coordhostv1 "github.com/coordhost/coordhost/gen/coordhost/v1"
)

// holdSet is the streams this daemon serves that hold or wait on
// something in Redis: Holds, by ownership token, so that a Release by id,
// a CloseSession or a Drain here ends them at once, and latch Waits, so
// that a Drain ends them (a stream left open would hold the server's
// shutdown up for its whole timeout).
type holdSet struct {
	mu      sync.Mutex
	m       map[string]holdEntry
	wg      sync.WaitGroup // running holds: Shutdown waits for their releases
	drained bool
}

// errDraining ends the Holds of a daemon that stops.
var errDraining = apiError(connect.CodeUnavailable, coordhostv1.Reason_REASON_UNSPECIFIED, "", "",
	errors.New("the daemon is shutting down: the grant was released; acquire again (at another daemon)"))

// holdEntry is one stream of the set: how to end it, and for a Hold its
// grant (nil for a Wait).
type holdEntry struct {
	cancel context.CancelCauseFunc
	g      *held
}

// add registers a stream by token (a Hold's ownership token, a Wait's id)
// with its grant g (nil for none); false once the set is drained.
func (s *holdSet) add(token string, g *held, cancel context.CancelCauseFunc) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.drained {
		return false
	}
	if s.m == nil {
		s.m = map[string]holdEntry{}
	}
	s.m[token] = holdEntry{cancel: cancel, g: g}
	s.wg.Add(1)
	return true
}

// done unregisters a Hold of token once it has released its grant.
func (s *holdSet) done(token string) {
	s.mu.Lock()
	delete(s.m, token)
	s.mu.Unlock()
	s.wg.Done()
}

// end ends the Hold of token, if one runs here, with cause.
func (s *holdSet) end(token string, cause error) {
	s.mu.Lock()
	e := s.m[token]
	s.mu.Unlock()
	if e.cancel != nil {
		e.cancel(cause)
	}
}

// held returns the grant of the Hold of token served here, or nil.
func (s *holdSet) held(token string) *held {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[token].g
}

// drain ends every Hold and refuses new ones.
func (s *holdSet) drain() {
	s.mu.Lock()
	s.drained = true
	for _, e := range s.m {
		e.cancel(errDraining)
	}
	s.mu.Unlock()
}

// hold keeps g for as long as ctx (the stream) lasts: it sends g, then
// renews it every third of its TTL and sends each renewal, and releases
// it when the stream ends, for whatever reason. A reload that removes
// the block that granted it ends the Hold. The stream runs on the
// handler's goroutine: no goroutine of its own.
func (h *Host) hold(ctx context.Context, g *held, send func(*coordhostv1.Grant) error) error {
	hctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if !h.holds.add(g.ref.Token, g, cancel) {
		h.releaseOwn(ctx, g)
		return errDraining
	}
	defer h.holds.done(g.ref.Token)
	defer h.releaseOwn(ctx, g)
	if err := send(g.proto()); err != nil {
		return err
	}
	ttl := g.ref.ttl()
	every := max(ttl/3, time.Millisecond)
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-hctx.Done():
			if ctx.Err() != nil {
				return ctx.Err() // the client went away or cancelled
			}
			return context.Cause(hctx)
		case <-g.lease.Done():
			return grantLost(g.ref.Name)
		case <-t.C:
		}
		if !h.configured(g.ref.Kind, g.ref.Name) {
			return apiError(connect.CodeNotFound, coordhostv1.Reason_REASON_NAME_NOT_CONFIGURED, "", g.ref.Name,
				errors.New("a reload removed the block; the grant was released"))
		}
		if g.ref.Session != "" {
			n, err := h.client.Do(hctx, h.client.B().Exists().Key(h.sessionKey(g.ref.Session)).Build()).AsInt64()
			if err == nil && n == 0 {
				return sessionGone()
			}
		}
		ok, err := g.lease.Renew(hctx, ttl)
		if hctx.Err() != nil {
			continue // ended meanwhile: say why above
		}
		if err != nil {
			return grantError(hctx, "renew", g.ref.Name, connect.CodeAborted, err)
		}
		if !ok {
			return grantLost(g.ref.Name)
		}
		if err := send(g.proto()); err != nil {
			return err
		}
		t.Reset(every)
	}
}
