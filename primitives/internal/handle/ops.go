package handle

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/coordhost/coordhost/lua"
	"github.com/coordhost/coordhost/primitives/internal/base"
	"github.com/redis/rueidis"
)

// MaxTTL is the longest lease any handle accepts: 100 years. Longer TTLs
// are refused before anything is sent, and the scripts refuse them too
// (lua.MaxTTLMillis), because a duration that overflows when counted in
// milliseconds turns negative, and PEXPIRE with a negative TTL deletes the
// key.
const MaxTTL = time.Duration(lua.MaxTTLMillis) * time.Millisecond

// Millis rounds ttl up to whole milliseconds, the unit Redis stores. Below
// 1ms (PX 0 would delete the key) and above MaxTTL it fails with an error
// matching base.ErrInvalidTTL.
func Millis(ttl time.Duration) (time.Duration, string, error) {
	if ttl < time.Millisecond {
		return 0, "", fmt.Errorf("%w: %v is below 1ms", base.ErrInvalidTTL, ttl)
	}
	if ttl > MaxTTL {
		return 0, "", fmt.Errorf("%w: %v is above the maximum of %v (100 years)", base.ErrInvalidTTL, ttl, MaxTTL)
	}
	ms := (ttl + time.Millisecond - 1) / time.Millisecond
	return ms * time.Millisecond, strconv.FormatInt(int64(ms), 10), nil
}

// Renew runs one owner-checked renewal to ttl (already rounded) through
// run, which sends the script and returns 1 when the server renewed. It
// answers false without calling run once the estimate ran out or the
// handle was lost or released; any error, and a refusal, lose the handle
// (an error leaves the outcome unknown: fail closed). Renewals of one
// handle go one at a time: two in flight at once could reach the server in
// either order (rueidis spreads commands over connections), and the
// estimate would follow the wrong one.
func (s *State) Renew(ctx context.Context, ttl time.Duration, run func(context.Context) (int64, error)) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.mu.Lock()
	if s.renewing == nil {
		s.renewing = make(chan struct{}, 1)
	}
	slot := s.renewing
	s.mu.Unlock()
	select {
	case slot <- struct{}{}:
	case <-ctx.Done():
		return false, notSent{ctx.Err()}
	}
	defer func() { <-slot }()
	sent := s.clk.Now()
	if !s.CanRenew(sent) {
		return false, nil
	}
	n, err := run(ctx)
	if err != nil || n != 1 {
		s.Lost()
		return false, err
	}
	s.Renewed(sent, ttl)
	return true, nil
}

// Release runs one owner-checked release through run, which returns the
// script's answer: 1 released, 0 absent, -1 another owner's. After a
// settled release later calls answer 0 without calling run. An error
// closes the handle but leaves it unsettled, so a later call may settle it.
func (s *State) Release(ctx context.Context, run func(context.Context) (int64, error)) (int64, error) {
	if s.IsReleased() {
		return 0, nil
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	n, err := run(ctx)
	if err != nil {
		s.Lost()
		return 0, err
	}
	s.Released()
	return n, nil
}

// Verify reads the current owner token with get and compares it with
// token. Absent (a Redis nil), foreign-typed (WRONGTYPE) or another
// owner's: the handle is lost and Verify answers false without an error.
// Transport errors and other error replies leave the handle as it was.
func (s *State) Verify(ctx context.Context, token string, get func(context.Context) (string, error)) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	v, err := get(ctx)
	switch {
	case err == nil && v == token:
		return true, nil
	case err == nil, rueidis.IsRedisNil(err), isWrongType(err):
		s.Lost()
		return false, nil
	}
	return false, err
}

// notSent is an error that ended a call before it sent anything: the
// handle is as it was.
type notSent struct{ err error }

func (e notSent) Error() string { return e.err.Error() }
func (e notSent) Unwrap() error { return e.err }

// isWrongType reports whether err is Redis' WRONGTYPE reply. (IsRedisErr
// answers false for a nil reply, so it cannot be used to find one.)
func isWrongType(err error) bool {
	rerr, ok := rueidis.IsRedisErr(err)
	return ok && len(rerr.Error()) >= 9 && rerr.Error()[:9] == "WRONGTYPE"
}
