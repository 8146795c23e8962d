// Package leasetest checks that a handle type keeps the primitives.Lease
// contract, in the spirit of testing/fstest: every primitive that grants
// handles runs Run against a real server. Tests only.
package leasetest

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/primitives"
)

// Subject is one handle type on one server.
type Subject struct {
	// Acquire grants a fresh handle for ttl, on a key (or field) no other
	// call of Acquire uses.
	Acquire func(ctx context.Context, ttl time.Duration) (primitives.Lease, error)
	// Steal gives h's lease to another owner from outside the handle.
	Steal func(t *testing.T, h primitives.Lease)
	// Delete removes h's lease from outside the handle.
	Delete func(t *testing.T, h primitives.Lease)
	// Snapshot describes the server's whole state, to check that a call
	// refused before sending wrote nothing.
	Snapshot func(t *testing.T) string
	// MaxTTL is the longest ttl the primitive documents.
	MaxTTL time.Duration
	// ServerTTL reads the remaining time the server keeps h's lease
	// (PTTL, HPTTL); negative when the lease is gone.
	ServerTTL func(t *testing.T, h primitives.Lease) time.Duration
	// Reacquire tries once to acquire the same resource as h.
	Reacquire func(ctx context.Context, h primitives.Lease, ttl time.Duration) (primitives.Lease, error)
	// Pause stops the server answering until the returned resume is
	// called (SIGSTOP), to make outcomes uncertain.
	Pause func(t *testing.T) (resume func())
	// RenewFailureEnds says that a renewal which fails or whose outcome
	// is unknown also removes the lease from the server, as Redlock does
	// (so no node stays extended for a lease nobody holds): the Release
	// that settles such a handle may then find nothing left and answer
	// AlreadyReleased rather than Released. Either way the lease must be
	// gone after it. False for primitives that leave the lease alone.
	RenewFailureEnds bool
}

// Run checks the contract: a fresh handle; renewal; the bad-input table
// (each refused with the documented error, the handle untouched and
// nothing written); a lease taken or deleted from outside; release and
// its idempotence; the estimate running out; Close; concurrent use.
func Run(t *testing.T, s Subject) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	acquire := func(t *testing.T, ttl time.Duration) primitives.Lease {
		t.Helper()
		h, err := s.Acquire(ctx, ttl)
		if err != nil || h == nil {
			t.Fatalf("Acquire(%v): %v, %v", ttl, h, err)
		}
		return h
	}

	t.Run("fresh", func(t *testing.T) {
		h := acquire(t, time.Minute)
		defer h.Close()
		if h.Key() == "" || h.Token() == "" {
			t.Fatalf("Key %q, Token %q", h.Key(), h.Token())
		}
		if r := h.Remaining(); r <= 0 || r > time.Minute {
			t.Fatalf("Remaining %v, want in (0, 1m]", r)
		}
		if closed(h.Done()) {
			t.Fatal("Done closed on a fresh handle")
		}
		if ok, err := h.Verify(ctx); !ok || err != nil {
			t.Fatalf("Verify: %v, %v", ok, err)
		}
		// (The server reports whole milliseconds, rounded down.)
		if st := s.ServerTTL(t, h); st+time.Millisecond < h.Remaining() || st > time.Minute {
			t.Fatalf("server TTL %v, local estimate %v: the estimate must not exceed it", st, h.Remaining())
		}
		if _, err := s.Reacquire(ctx, h, time.Minute); !errors.Is(err, primitives.ErrNotAcquired) {
			t.Fatalf("a second grant of a held lease: %v", err)
		}
	})

	t.Run("renew", func(t *testing.T) {
		h := acquire(t, time.Second)
		defer h.Close()
		if ok, err := h.Renew(ctx, time.Hour); !ok || err != nil {
			t.Fatalf("Renew: %v, %v", ok, err)
		}
		if r := h.Remaining(); r <= 59*time.Minute || r > time.Hour {
			t.Fatalf("Remaining %v after Renew(1h)", r)
		}
		if st := s.ServerTTL(t, h); st <= 59*time.Minute || st > time.Hour {
			t.Fatalf("server TTL %v after Renew(1h)", st)
		}
		if ok, err := h.Renew(ctx, s.MaxTTL); !ok || err != nil {
			t.Fatalf("Renew(MaxTTL): %v, %v", ok, err)
		}
		if st := s.ServerTTL(t, h); st < s.MaxTTL-time.Hour {
			t.Fatalf("server TTL %v after Renew(MaxTTL %v)", st, s.MaxTTL)
		}
	})

	t.Run("concurrent renewals", func(t *testing.T) {
		// Whatever order they reach the server in, the estimate never
		// promises more than the server keeps.
		h := acquire(t, time.Minute)
		defer h.Close()
		var wg sync.WaitGroup
		for _, ttl := range []time.Duration{time.Hour, 2 * time.Second, 30 * time.Minute, 5 * time.Second} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				h.Renew(ctx, ttl)
			}()
		}
		wg.Wait()
		if r, st := h.Remaining(), s.ServerTTL(t, h); r > st+50*time.Millisecond {
			t.Fatalf("estimate %v, server TTL %v: the estimate follows a renewal the server did not keep", r, st)
		}
	})

	t.Run("uncertain renew", func(t *testing.T) {
		h := acquire(t, time.Minute)
		done := h.Done()
		resume := s.Pause(t)
		short, stop := context.WithTimeout(ctx, 200*time.Millisecond)
		ok, err := h.Renew(short, time.Minute)
		stop()
		resume()
		if ok || !errors.Is(err, primitives.ErrUncertain) {
			t.Fatalf("Renew on a paused server: %v, %v; want an error matching ErrUncertain", ok, err)
		}
		if !closed(done) {
			t.Fatal("Done open after an uncertain renewal")
		}
		if ok, err := h.Renew(ctx, time.Minute); ok || err != nil {
			t.Fatalf("Renew after an uncertain one: %v, %v; want false, nil", ok, err)
		}
		if r, err := h.Release(ctx); err != nil || r != primitives.Released && !(s.RenewFailureEnds && r == primitives.AlreadyReleased) {
			t.Fatalf("Release settling an uncertain handle: %v, %v", r, err)
		}
		if st := s.ServerTTL(t, h); st >= 0 {
			t.Fatalf("the lease is still on the server after Release (TTL %v)", st)
		}
	})

	t.Run("bad input", func(t *testing.T) {
		h := acquire(t, time.Minute)
		defer h.Close()
		cancelled, stop := context.WithCancel(ctx)
		stop()
		var nilCtx context.Context
		before := s.Snapshot(t)
		remaining := h.Remaining()
		type row struct {
			name string
			call func() error
			want error
		}
		rows := []row{
			{"Renew(ctx done)", func() error { _, err := h.Renew(cancelled, time.Second); return err }, context.Canceled},
			{"Verify(ctx done)", func() error { _, err := h.Verify(cancelled); return err }, context.Canceled},
			{"Release(ctx done)", func() error { _, err := h.Release(cancelled); return err }, context.Canceled},
			{"Renew(nil ctx)", func() error { _, err := h.Renew(nilCtx, time.Second); return err }, primitives.ErrInvalidOptions},
			{"Verify(nil ctx)", func() error { _, err := h.Verify(nilCtx); return err }, primitives.ErrInvalidOptions},
			{"Release(nil ctx)", func() error { _, err := h.Release(nilCtx); return err }, primitives.ErrInvalidOptions},
		}
		for _, ttl := range []time.Duration{0, -time.Second, time.Microsecond, time.Millisecond - 1, s.MaxTTL + time.Millisecond, math.MaxInt64, math.MinInt64} {
			rows = append(rows, row{"Renew(" + ttl.String() + ")", func() error {
				ok, err := h.Renew(ctx, ttl)
				if ok {
					return errors.New("renewed")
				}
				return err
			}, primitives.ErrInvalidTTL})
		}
		for _, r := range rows {
			err := r.call()
			if !errors.Is(err, r.want) {
				t.Errorf("%s: %v, want an error matching %v", r.name, err, r.want)
			} else if err.Error() == r.want.Error() && r.want != context.Canceled {
				t.Errorf("%s: error %q names no detail", r.name, err)
			}
		}
		if after := s.Snapshot(t); after != before {
			t.Errorf("refused calls wrote:\nbefore %s\nafter  %s", before, after)
		}
		if closed(h.Done()) || h.Remaining() <= 0 || h.Remaining() > remaining {
			t.Errorf("refused calls changed the handle: Done closed %v, Remaining %v (was %v)", closed(h.Done()), h.Remaining(), remaining)
		}
		if ok, err := h.Verify(ctx); !ok || err != nil {
			t.Errorf("refused calls lost the lease: Verify %v, %v", ok, err)
		}
	})

	t.Run("taken from outside", func(t *testing.T) {
		h := acquire(t, time.Minute)
		s.Steal(t, h)
		taken := s.Snapshot(t)
		if ok, err := h.Verify(ctx); ok || err != nil {
			t.Fatalf("Verify after a takeover: %v, %v; want false, nil", ok, err)
		}
		if !closed(h.Done()) || h.Remaining() != 0 {
			t.Fatalf("Done open or Remaining %v after Verify said false", h.Remaining())
		}
		if ok, err := h.Renew(ctx, time.Minute); ok || err != nil {
			t.Fatalf("Renew of a lost handle: %v, %v; want false, nil", ok, err)
		}
		if r, err := h.Release(ctx); r != primitives.NotOwned || err != nil {
			t.Fatalf("Release after a takeover: %v, %v; want NotOwned", r, err)
		}
		if err := h.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if after := s.Snapshot(t); after != taken {
			t.Fatalf("the lost handle touched the new owner's lease:\nbefore %s\nafter  %s", taken, after)
		}
	})

	t.Run("deleted from outside", func(t *testing.T) {
		h := acquire(t, time.Minute)
		done := h.Done()
		s.Delete(t, h)
		if ok, err := h.Verify(ctx); ok || err != nil {
			t.Fatalf("Verify after a delete: %v, %v; want false, nil", ok, err)
		}
		if !closed(done) {
			t.Fatal("Done open after Verify said false")
		}
		if r, err := h.Release(ctx); r != primitives.AlreadyReleased || err != nil {
			t.Fatalf("Release after a delete: %v, %v; want AlreadyReleased", r, err)
		}
	})

	t.Run("release", func(t *testing.T) {
		h := acquire(t, time.Minute)
		done := h.Done()
		if r, err := h.Release(ctx); r != primitives.Released || err != nil {
			t.Fatalf("Release: %v, %v", r, err)
		}
		if !closed(done) || h.Remaining() != 0 {
			t.Fatalf("Done open or Remaining %v after Release", h.Remaining())
		}
		if st := s.ServerTTL(t, h); st >= 0 {
			t.Fatalf("Release answered Released but the server keeps the lease (TTL %v)", st)
		}
		if r, err := h.Release(ctx); r != primitives.AlreadyReleased || err != nil {
			t.Fatalf("second Release: %v, %v", r, err)
		}
		if ok, err := h.Renew(ctx, time.Minute); ok || err != nil {
			t.Fatalf("Renew after Release: %v, %v", ok, err)
		}
		for range 2 {
			if err := h.Close(); err != nil {
				t.Fatalf("Close after Release: %v", err)
			}
		}
		// A new grant on the same resource is possible at once.
		h2, err := s.Reacquire(ctx, h, time.Minute)
		if err != nil {
			t.Fatalf("a new grant after Release: %v", err)
		}
		h2.Close()
	})

	t.Run("estimate runs out", func(t *testing.T) {
		h := acquire(t, 50*time.Millisecond)
		select {
		case <-h.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("Done did not close when the estimate ran out")
		}
		if h.Remaining() != 0 {
			t.Fatalf("Remaining %v after the estimate ran out", h.Remaining())
		}
		// The server's own expiry comes a little later than the estimate
		// (which starts before the acquire was sent): let it pass, so the
		// snapshots compare a settled keyspace.
		time.Sleep(100 * time.Millisecond)
		before := s.Snapshot(t)
		if ok, err := h.Renew(ctx, time.Minute); ok || err != nil {
			t.Fatalf("Renew after the estimate ran out: %v, %v; want false, nil", ok, err)
		}
		if after := s.Snapshot(t); after != before {
			t.Fatalf("Renew after the estimate ran out wrote:\nbefore %s\nafter  %s", before, after)
		}
		h.Close()
	})

	t.Run("concurrent use", func(t *testing.T) {
		h := acquire(t, time.Minute)
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 10 {
					switch i % 4 {
					case 0:
						h.Renew(ctx, time.Minute)
					case 1:
						h.Verify(ctx)
					case 2:
						h.Remaining()
						_ = h.Done()
					case 3:
						_ = h.Key() + h.Token()
					}
				}
			}()
		}
		wg.Wait()
		var results [2]primitives.ReleaseResult
		for i := range results {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i], _ = h.Release(ctx)
			}()
		}
		wg.Wait()
		if n := count(results[:], primitives.Released); n != 1 {
			t.Fatalf("two concurrent Releases answered %v and %v; want exactly one Released", results[0], results[1])
		}
	})
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func count(rs []primitives.ReleaseResult, want primitives.ReleaseResult) int {
	n := 0
	for _, r := range rs {
		if r == want {
			n++
		}
	}
	return n
}

// Keyspace describes every key of a standalone server: name, type, value
// and expiry (field expiries for hashes), for Subject.Snapshot.
func Keyspace(t *testing.T, s *redistest.Server) string {
	t.Helper()
	keys := strings.Fields(s.MustCmd(t, "KEYS", "*"))
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		typ := s.MustCmd(t, "TYPE", k)
		if typ == "none" {
			continue // expired since KEYS listed it
		}
		b.WriteString(k + ":" + typ + "=")
		switch typ {
		case "string":
			b.WriteString(s.MustCmd(t, "GET", k))
		case "hash":
			fields := strings.Split(s.MustCmd(t, "HKEYS", k), "\n")
			slices.Sort(fields)
			for _, f := range fields {
				b.WriteString(f + ":" + s.MustCmd(t, "HGET", k, f))
				if s.Has(redistest.HashFieldExpiry) {
					b.WriteString("@" + s.MustCmd(t, "HPEXPIRETIME", k, "FIELDS", "1", f))
				}
				b.WriteString(",")
			}
		case "zset":
			b.WriteString(strings.ReplaceAll(s.MustCmd(t, "ZRANGE", k, "0", "-1", "WITHSCORES"), "\n", ","))
		}
		b.WriteString(" expire=" + s.MustCmd(t, "PEXPIRETIME", k) + "; ")
	}
	return b.String()
}
