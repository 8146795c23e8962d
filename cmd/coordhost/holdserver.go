package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"
	coordhostv1 "github.com/coordhost/coordhost/gen/coordhost/v1"
	"github.com/coordhost/coordhost/primitives"
	"google.golang.org/protobuf/types/known/durationpb"
)

// holdFromServer is `lock hold -server URL NAME -- CMD`: the lock is taken
// through the daemon's LockService.Hold stream. The daemon acquires the
// lock of its configuration's lock block NAME, renews it while the stream
// lasts and releases it when the stream ends; CMD runs as it does in
// process (holdAndRun), and the lock counts as lost when the stream ends
// by itself, the connection breaks (HTTP/2 pings find a daemon that went
// silent) or no renewal came within the lock's ttl.
func holdFromServer(ctx context.Context, cfg holdConfig, path string, e *env, sigs <-chan os.Signal, stopRelay func(), interrupted func(string) (int, bool)) int {
	k := cfg.kind
	api, err := newAPIClient(*cfg.server, e.apiPing)
	if err != nil {
		e.logf("%v", err)
		return exitFailure
	}
	defer api.close()

	var t0 time.Time
	h, code, done, err := waitForLock(ctx, func(acqCtx context.Context) (*remoteHold, error) {
		t0 = time.Now()
		return takeRemote(ctx, acqCtx, api, cfg, e)
	}, cfg, e, stopRelay, interrupted)
	if done {
		return code
	}
	if err != nil {
		code := connect.CodeOf(err)
		if cfg.wait > 0 && code == connect.CodeAborted && time.Since(t0) >= cfg.wait {
			// The daemon's wait, the same -wait, ran out first.
			e.logf("%s not acquired within -wait %v", cfg.subject(), cfg.wait)
			return exitFailure
		}
		text := apiErrorText(api.url, err)
		switch {
		case !connect.IsWireError(err):
			e.logf("%s", text)
		case refusedArgs(err):
			return e.usageErrorFor(k.cmd, "%s: %s: %s", k.cmd, cfg.subject(), text)
		case code == connect.CodeAborted:
			// Held by another until the block's retry policy gave up.
			e.logf("%s not acquired: %s", cfg.subject(), text)
		default:
			e.logf("acquiring %s: %s", cfg.subject(), text)
		}
		return exitFailure
	}

	g := h.grant
	token, note := "", ""
	if g.GetFencingToken() > 0 {
		token = strconv.FormatUint(g.GetFencingToken(), 10)
		note = " (fencing token " + token + ")"
	}
	cfg.ttl = g.GetTtl().AsDuration()
	e.logf("acquired %s%s from %s; key %q, ttl %v", cfg.subject(), note, api.url, g.GetKey(), cfg.ttl)
	// The daemon renews the lock; h watches the stream from the start.
	noKeepAlive := func(context.Context) func() { return func() {} }
	return holdAndRun(ctx, h, noKeepAlive, buildChildCmd(path, cfg, e, token), cfg, e, sigs)
}

// takeRemote opens the Hold stream for cfg and waits for its first
// answer, the grant, while acqCtx lasts. The stream itself lives on
// ctx without its cancellation (a deadline would reach the daemon and end
// the hold), until the returned hold is released.
func takeRemote(ctx, acqCtx context.Context, api *apiClient, cfg holdConfig, e *env) (*remoteHold, error) {
	req := &coordhostv1.HoldLockRequest{Name: cfg.name, Attributes: cfg.attrs, SessionId: cfg.session}
	if cfg.wait > 0 {
		req.Wait = durationpb.New(cfg.wait)
	}
	sctx, scancel := context.WithCancel(context.WithoutCancel(ctx))
	stopWaiting := context.AfterFunc(acqCtx, scancel)
	sent := time.Now()
	stream, err := api.lock.Hold(sctx, connect.NewRequest(req))
	if err != nil {
		stopWaiting()
		scancel()
		return nil, err
	}
	end := func() {
		scancel() // first: Close waits for the response headers
		_ = stream.Close()
	}
	if !stream.Receive() {
		stopWaiting()
		err := stream.Err()
		end()
		if err == nil {
			err = errors.New("the stream ended without a grant")
		}
		return nil, err
	}
	if !stopWaiting() {
		// acqCtx ended as the grant came; ending the stream gives it back.
		end()
		return nil, context.Cause(acqCtx)
	}
	g := stream.Msg().GetGrant()
	if g.GetGrantId() == "" || g.GetTtl().AsDuration() <= 0 {
		end()
		return nil, errors.New("the first answer holds no grant (no grant id or ttl)")
	}
	h := &remoteHold{
		api: api, grant: g, what: cfg.subject(), logf: e.logf,
		stream: stream, end: end, done: make(chan struct{}),
	}
	h.watch(sent)
	return h, nil
}

// remoteHold is a lock held through a Hold stream, as holdAndRun needs
// it: Done closes when the lock is lost or its state is unknown, and
// Release gives it back.
type remoteHold struct {
	api    *apiClient
	grant  *coordhostv1.Grant // the first answer
	what   string             // `lock "job"`
	logf   func(string, ...any)
	stream *connect.ServerStreamForClient[coordhostv1.HoldLockResponse]
	end    func() // cancels and closes the stream

	mu       sync.Mutex
	timer    *time.Timer // fires when no renewal came in time
	ending   bool        // Release has begun: the stream's end is ours
	lostOnce sync.Once
	done     chan struct{}
	wg       sync.WaitGroup
}

func (h *remoteHold) Done() <-chan struct{} { return h.done }

// lose reports why the lock counts as lost (unless Release has begun) and
// closes Done, once.
func (h *remoteHold) lose(format string, args ...any) {
	h.mu.Lock()
	ending := h.ending
	h.mu.Unlock()
	h.lostOnce.Do(func() {
		if !ending {
			h.logf("%s: %s", h.what, fmt.Sprintf(format, args...))
		}
		close(h.done)
	})
}

// watch reads the stream's renewals until it ends, and keeps a deadline
// by which the next one must come, as a lease's local estimate runs out
// in process. The daemon sends an answer after each renewal (every third
// of the ttl); the client cannot know how long ago the renewal behind an
// answer ran, so it assumes less than a third of the ttl, the renewal
// interval itself: the lock is then surely held until two thirds of the
// ttl after each answer came (and, for the acquisition, until the ttl
// after the request was sent). Done closes when that passes without a
// newer answer.
func (h *remoteHold) watch(sent time.Time) {
	ttl := h.grant.GetTtl().AsDuration()
	deadline := time.Now().Add(ttl - ttl/3)
	if d := sent.Add(ttl); d.After(deadline) {
		deadline = d
	}
	h.timer = time.AfterFunc(time.Until(deadline), func() {
		h.lose("no renewal from the daemon at %s in time; the lock may have expired", h.api.url)
	})
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		for h.stream.Receive() {
			ttl := h.stream.Msg().GetGrant().GetTtl().AsDuration()
			h.mu.Lock()
			if !h.ending {
				h.timer.Reset(ttl - ttl/3)
			}
			h.mu.Unlock()
		}
		h.timer.Stop()
		if err := h.stream.Err(); err != nil {
			if connect.IsWireError(err) {
				h.lose("%s", apiErrorText(h.api.url, err))
			} else {
				h.lose("the connection to the daemon at %s broke: %s", h.api.url, transportText(err))
			}
			return
		}
		h.lose("the daemon at %s ended the hold without saying why", h.api.url)
	}()
}

// Release gives the grant back by its id (so that what Redis held is
// known, as a release in process tells), then ends the stream, which
// releases it too if the call did not get through.
func (h *remoteHold) Release(ctx context.Context) (primitives.ReleaseResult, error) {
	h.mu.Lock()
	h.ending = true
	h.timer.Stop()
	h.mu.Unlock()
	resp, err := h.api.lock.Release(ctx, connect.NewRequest(&coordhostv1.ReleaseLockRequest{GrantId: h.grant.GetGrantId()}))
	h.end()
	h.wg.Wait()
	h.lostOnce.Do(func() { close(h.done) })
	if err != nil {
		return 0, errors.New(apiErrorText(h.api.url, err))
	}
	switch r := resp.Msg.GetResult(); r {
	case coordhostv1.ReleaseResult_RELEASE_RESULT_RELEASED:
		return primitives.Released, nil
	case coordhostv1.ReleaseResult_RELEASE_RESULT_ALREADY_RELEASED:
		return primitives.AlreadyReleased, nil
	case coordhostv1.ReleaseResult_RELEASE_RESULT_NOT_OWNED:
		return primitives.NotOwned, nil
	default:
		return 0, fmt.Errorf("the daemon at %s answered release result %d", h.api.url, int32(r))
	}
}
