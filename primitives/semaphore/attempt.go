package semaphore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coordhost/coordhost/primitives/internal/base"
	"github.com/coordhost/coordhost/primitives/internal/fence"
	"github.com/coordhost/coordhost/primitives/internal/handle"
	"github.com/coordhost/coordhost/primitives/internal/keys"
	"github.com/coordhost/coordhost/primitives/internal/replica"
	"github.com/coordhost/coordhost/primitives/internal/script"
	"github.com/coordhost/coordhost/primitives/internal/wait"
	"github.com/redis/rueidis"
)

// outcome is what a refused attempt learnt.
type outcome struct {
	wait time.Duration // until the earliest live permit expires; -1 when none does
	live int64
}

func (o outcome) describeWait() string {
	if o.wait < 0 {
		return ", none expires"
	}
	return fmt.Sprintf(", the first expires in %v", o.wait)
}

// attempt runs the acquire script once: on the engine's tracking
// connection when c is one (c.ID != 0), else on a fenced connection of its
// own. A lost reply is fenced with CLIENT KILL, then released with an owner
// check (fence.Attempt); one that could not be settled is handed to a
// background cleanup (stage "acquire").
func (s *Semaphores) attempt(ctx context.Context, c wait.Conn, r *request) (*Permit, outcome, error) {
	name := r.name()
	ks := []string{r.key, r.capKey}
	if s.grantLog {
		g, err := keys.Space{}.Derived("grants", r.key)
		if err != nil {
			return nil, outcome{}, fmt.Errorf("%s: grant log: %w", name, err)
		}
		ks = append(ks, g)
	}
	token := r.token
	sent := s.clk.Now()
	var ack replica.Ack
	vals, err := fence.Attempt(ctx, s.fences, c.CoreClient, c.Identity, name, r.key,
		func(ctx context.Context, conn rueidis.CoreClient) ([]rueidis.RedisMessage, error) {
			var res rueidis.RedisResult
			res, ack = s.rep.Run(ctx, conn, acquireScript, ks, []string{token, r.capArg, r.ms})
			vals, err := res.ToArray()
			return vals, acquireScript.Classify(err)
		},
		func(ctx context.Context) error { return s.releaseToken(ctx, r.key, r.capKey, r.channel, token) })
	if err == nil && len(vals) != 3 {
		err = fmt.Errorf("semaphore: acquire script returned %d values, want 3", len(vals))
	}
	if err != nil {
		var u *base.Uncertain
		if errors.As(err, &u) && u.Unsettled != nil {
			s.cleanupLater(r.key, r.capKey, r.channel, token, "acquire", err)
		}
		if errors.Is(err, base.ErrUncertain) {
			return nil, outcome{wait: -1}, err
		}
		var se *script.Error
		if errors.As(err, &se) && se.Code != script.CodeBadArg && se.Code != script.CodeWrongType && se.Code != script.CodeRefused {
			// An error reply (an ACL refusing a command part-way, OOM) can
			// follow a write the server does not roll back: release best
			// effort before the error propagates.
			_ = s.releaseToken(ctx, r.key, r.capKey, r.channel, token)
		}
		return nil, outcome{wait: -1}, handle.MapScriptErr(name, err)
	}
	flag, err := vals[0].AsInt64()
	if err != nil {
		return nil, outcome{wait: -1}, fmt.Errorf("%s: acquire script: %w", name, err)
	}
	live, _ := vals[2].AsInt64()
	switch flag {
	case -1:
		stored, _ := vals[1].ToString()
		return nil, outcome{wait: -1, live: live}, fmt.Errorf("%s: %w: asked for capacity %d, but %d live permit(s) were taken with capacity %s",
			name, ErrCapacityMismatch, r.capacity, live, stored)
	case 0:
		ms, err := vals[1].AsInt64()
		if err != nil {
			return nil, outcome{wait: -1}, fmt.Errorf("%s: acquire script: %w", name, err)
		}
		w := time.Duration(-1)
		if ms >= 0 {
			w = time.Duration(ms) * time.Millisecond
		}
		return nil, outcome{wait: w, live: live}, nil
	}
	if !ack.OK() {
		// Granted on the primary only, as far as anyone knows.
		settled := "released"
		if err := s.releaseToken(ctx, r.key, r.capKey, r.channel, token); err != nil {
			s.cleanupLater(r.key, r.capKey, r.channel, token, "acquire", err)
			settled = "release retried in the background"
		}
		return nil, outcome{wait: -1}, ack.Err(name, "acquire", settled)
	}
	p := &Permit{s: s, capacity: r.capacity}
	p.forever.Store(r.forever)
	p.h.Init(s.client, s.clk, r.key, token, permitOps{key: r.key, capKey: r.capKey, channel: r.channel, token: token, rep: s.rep}, sent, r.ttl)
	if p.h.Expired() {
		_ = s.releaseToken(ctx, r.key, r.capKey, r.channel, token)
		return nil, outcome{wait: -1}, &base.LateGrant{Name: name}
	}
	return p, outcome{}, nil
}

// releaseToken is the owner-checked release of token, on a context that
// survives the caller's cancellation, bounded by DefaultCloseWait.
func (s *Semaphores) releaseToken(ctx context.Context, key, capKey, channel, token string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.limits.wait)
	defer cancel()
	return releaseScript.Run(ctx, s.client, []string{key, capKey}, []string{token, channel}).Error()
}
