package semaphore

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/coordhost/coordhost/primitives/internal/base"
	"github.com/coordhost/coordhost/primitives/internal/script"
)

// cleanupLimits bound the background release (tests shorten them).
type cleanupLimits struct {
	wait       time.Duration // each attempt's bound, and Permit.Close's wait
	total      time.Duration // how long the background retries go on
	base       time.Duration // first backoff bound
	maxBackoff time.Duration // backoff cap
}

// background retries release for up to limits.total unless the Semaphores
// close, and reports true when it started doing so. Once the Semaphores
// are closed it starts nothing, reports the cleanup abandoned (reason
// "closed") and returns false. A cleanup that gives up is reported to
// OnAbandon and logged.
func (s *Semaphores) background(key, token, stage string, last error, release func(context.Context) error) bool {
	s.bgMu.Lock()
	if s.bgStopped {
		s.bgMu.Unlock()
		s.abandon(Abandon{Key: key, Token: token, Stage: stage, Reason: "closed", Err: last})
		return false
	}
	s.cleanups.Add(1)
	s.bgRunning++
	s.bgMu.Unlock()
	go func() {
		defer s.cleanups.Done()
		defer func() {
			s.bgMu.Lock()
			s.bgRunning--
			s.bgMu.Unlock()
		}()
		s.retryRelease(key, token, stage, last, release)
	}()
	return true
}

// cleanupLater hands the release of an acquisition that could not be
// settled to a background cleanup (stage "acquire").
func (s *Semaphores) cleanupLater(key, capKey, channel, token, stage string, last error) {
	s.background(key, token, stage, last, func(ctx context.Context) error {
		return s.releaseToken(ctx, key, capKey, channel, token)
	})
}

func (s *Semaphores) retryRelease(key, token, stage string, last error, release func(context.Context) error) {
	lim := s.limits
	end := time.Now().Add(lim.total)
	bound := lim.base
	attempts := 0
	for {
		// Full jitter under an exponential bound, never past the end.
		d := time.Duration(rand.Int64N(int64(bound)) + 1)
		d = min(d, max(time.Until(end), 0))
		t := time.NewTimer(d)
		final := false
		select {
		case <-t.C:
		case <-s.closed:
			t.Stop()
			final = true
		}
		attempts++
		ctx, cancel := context.WithTimeout(context.Background(), lim.wait)
		err := release(ctx)
		cancel()
		if err == nil {
			return
		}
		last = err
		switch {
		case final:
			s.abandon(Abandon{Key: key, Token: token, Stage: stage, Reason: "closed", Attempts: attempts, Err: last})
			return
		case !time.Now().Before(end):
			s.abandon(Abandon{Key: key, Token: token, Stage: stage, Reason: reasonOf(last), Attempts: attempts, Err: last})
			return
		}
		bound = min(bound*2, lim.maxBackoff)
	}
}

// abandon reports a cleanup that gave up.
func (s *Semaphores) abandon(a Abandon) {
	s.log.Warn("semaphore: cleanup gave up; the permit may stay held by nobody until its ttl runs out (forever without expiry)",
		"key", a.Key, "token", a.Token, "stage", a.Stage, "reason", a.Reason, "attempts", a.Attempts, "err", a.Err)
	if s.abandn != nil {
		s.abandn(a)
	}
}

// reasonOf names why a release failed: "noperm", "timeout" or "error".
func reasonOf(err error) string {
	switch {
	case errors.Is(err, base.ErrNoPermission), strings.Contains(err.Error(), "NOPERM"):
		return "noperm"
	case errors.Is(err, base.ErrUncertain), errors.Is(err, context.DeadlineExceeded), script.IsUncertain(err):
		return "timeout"
	}
	return "error"
}
