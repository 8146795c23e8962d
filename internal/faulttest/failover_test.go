package faulttest_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/faulttest"
	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/primitives/lock"
	"github.com/redis/rueidis"
)

// The failover harness against one server and fake failovers, so that it
// is proven to find what a real failover (issue 12, with StartSentinel)
// may do: a no-op loses nothing; FLUSHALL, which loses every write, loses
// every grant acknowledged before it and makes the counters hand out
// tokens again; counters set back by 3 (a promoted replica that missed the
// last 3 increments of each) give exactly 3 duplicate tokens per resource.
func TestRunFailoverFindsLosses(t *testing.T) {
	const resources = 8
	for _, tc := range []struct {
		name  string
		fake  func(s *redistest.Server) func(context.Context) error
		check func(t *testing.T, r faulttest.FailoverReport)
	}{
		{"no-op", func(*redistest.Server) func(context.Context) error {
			return func(context.Context) error { return nil }
		}, func(t *testing.T, r faulttest.FailoverReport) {
			if r.Lost != 0 || r.DuplicateTokens != 0 {
				t.Errorf("lost %d, duplicates %d with no failover", r.Lost, r.DuplicateTokens)
			}
		}},
		{"FLUSHALL", func(s *redistest.Server) func(context.Context) error {
			return func(ctx context.Context) error { return s.Do(ctx, "FLUSHALL").Error() }
		}, func(t *testing.T, r faulttest.FailoverReport) {
			// Every grant acknowledged before it is gone; so are some of
			// those acknowledged while it ran (before it executed); none of
			// those after it returned.
			if r.LostBy[0] != r.AckedBefore || r.LostBy[2] != 0 || r.Lost < r.AckedBefore || len(r.Losses) == 0 {
				t.Errorf("lost %v of %d/%d/%d", r.LostBy, r.AckedBefore, r.AckedDuring, r.AckedAfter)
			}
			// Each counter restarts from 1: at least one reissued token
			// per resource.
			if r.DuplicateTokens < resources || len(r.Duplicates) == 0 || r.Duplicates[0][0].Fence != r.Duplicates[0][1].Fence {
				t.Errorf("%d duplicate tokens, want at least %d: %v", r.DuplicateTokens, resources, r.Duplicates)
			}
		}},
		{"counters back by 3", func(s *redistest.Server) func(context.Context) error {
			return func(ctx context.Context) error {
				for i := range resources {
					if err := s.Do(ctx, "DECRBY", fmt.Sprintf("ft:{r%d}:fence", i), "3").Error(); err != nil {
						return err
					}
				}
				return nil
			}
		}, func(t *testing.T, r faulttest.FailoverReport) {
			if r.Lost != 0 || r.DuplicateTokens != 3*resources {
				t.Errorf("lost %d, %d duplicate tokens; want 0 and %d", r.Lost, r.DuplicateTokens, 3*resources)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := redistest.Start(t)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			rep, err := faulttest.RunFailover(ctx, faulttest.FailoverRun{
				Client: func() (rueidis.Client, error) {
					return rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr}})
				},
				Failover:      tc.fake(s),
				Lock:          lock.Options{Prefix: "ft:"},
				Goroutines:    8,
				FailoverAfter: 300,
				After:         300,
				Resources:     resources,
			})
			t.Log(rep)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Acked < 600 || rep.AckedBefore < 300 || rep.AckedAfter < 300 || rep.Failed != 0 || rep.NotReplicated != 0 {
				t.Fatalf("report %v; errors:\n%s", rep, rep.ErrorSummary())
			}
			tc.check(t, rep)
		})
	}
}

// With Replicas set and no replica, every grant is refused
// (ErrNotReplicated) and the harness says so rather than pass: no grant is
// acknowledged, so the run cannot reach the failover.
func TestRunFailoverCountsNotReplicated(t *testing.T) {
	s := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	rep, err := faulttest.RunFailover(ctx, faulttest.FailoverRun{
		Client: func() (rueidis.Client, error) {
			return rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr}})
		},
		Failover: func(context.Context) error { t.Error("failover called"); return nil },
		Lock:     lock.Options{Prefix: "ft:", Replicas: 1, ReplicaTimeout: 10 * time.Millisecond},
	})
	if err == nil || rep.Acked != 0 || rep.NotReplicated == 0 || rep.Failed != 0 {
		t.Fatalf("%v, %v; errors: %v", rep, err, rep.Errors)
	}
	if n := s.MustCmd(t, "EVAL", "return #redis.call('KEYS', 'ft:{r*}:lease:*')", "0"); n != "0" {
		t.Fatalf("%s unconfirmed grants left held", n)
	}
}

// A failover by hand, which Sentinel cannot stage: replica r1 replicates
// through a Proxy. The failover cuts that link (Blackhole) for
// 300ms while grants go on, kills the primary, drops what the link held
// (ResetAll), promotes r1 (REPLICAOF NO ONE), makes r2 its replica and
// points the client's dials at r1. Without Replicas, the grants
// acknowledged while the link was cut are lost and their fencing tokens
// handed out again; with Replicas = 1 none is: those grants were refused
// (ErrNotReplicated), not acknowledged.
func TestRunFailoverManualPromotion(t *testing.T) {
	for _, tc := range []struct {
		name     string
		replicas int
	}{{"replicas off", 0}, {"replicas 1", 1}} {
		t.Run(tc.name, func(t *testing.T) {
			p := redistest.Start(t)
			r1, r2 := redistest.Start(t), redistest.Start(t)
			px := faulttest.New(t)
			via, err := px.Addr(p.Addr)
			if err != nil {
				t.Fatal(err)
			}
			r1.ReplicaOf(t, p, via)
			var target atomic.Pointer[string]
			target.Store(&p.Addr)
			dial := func(ctx context.Context, _ string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
				return d.DialContext(ctx, "tcp", *target.Load())
			}
			failover := func(ctx context.Context) error {
				px.Blackhole(true)
				time.Sleep(300 * time.Millisecond)
				p.Stop()
				px.ResetAll()
				if err := r1.Do(ctx, "REPLICAOF", "NO", "ONE").Error(); err != nil {
					return err
				}
				if err := r2.Do(ctx, "REPLICAOF", "127.0.0.1", strconv.Itoa(r1.Port)).Error(); err != nil {
					return err
				}
				target.Store(&r1.Addr)
				return nil
			}
			ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
			defer cancel()
			rep, err := faulttest.RunFailover(ctx, faulttest.FailoverRun{
				Client: func() (rueidis.Client, error) {
					return rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{p.Addr}, DialCtxFn: dial})
				},
				Failover:      failover,
				Lock:          lock.Options{Prefix: "ft:", Replicas: tc.replicas, ReplicaTimeout: 50 * time.Millisecond},
				FailoverAfter: 500,
				After:         500,
			})
			t.Log(rep)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Acked < 1000 {
				t.Fatalf("only %d grants acknowledged", rep.Acked)
			}
			if tc.replicas == 0 {
				if rep.Lost == 0 || rep.DuplicateTokens == 0 {
					t.Fatalf("without replicas the cut link lost nothing: the scenario proves nothing")
				}
				return
			}
			if rep.Lost != 0 || rep.DuplicateTokens != 0 || rep.NotReplicated == 0 {
				t.Fatalf("with Replicas = 1: lost %d, %d duplicate tokens, %d refused; errors:\n%s", rep.Lost, rep.DuplicateTokens, rep.NotReplicated, rep.ErrorSummary())
			}
		})
	}
}
