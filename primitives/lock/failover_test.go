package lock_test

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/faulttest"
	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/primitives/lock"
	"github.com/redis/rueidis"
)

var failoverRounds = flag.Int("failover.rounds", 1, "TestFailoverGrants: rounds of every failover kind × replicas setting (each run ≥ 1,000 grants)")

// failoverKind is one way TestFailoverGrants fails the primary over, run
// from RunFailover while the grants go on, with each Replicas setting
// listed.
type failoverKind struct {
	name     string
	do       func(t *testing.T, st *redistest.Sentinel) error
	replicas []int
}

var failoverKinds = []failoverKind{
	{"SENTINEL FAILOVER", func(t *testing.T, st *redistest.Sentinel) error {
		ft := st.Failover(t)
		t.Logf("    failover: promoted after %v, set whole after %v", ft.Promoted.Round(time.Millisecond), ft.Settled.Round(time.Millisecond))
		return nil
	}, []int{0, 1, 2}},
	{"primary killed", killPrimary(0), []int{0, 1, 2}},
	// Does Sentinel promote the replica that acknowledged? Only Replicas
	// = 1 asks (with 2 every grant of the lag is refused), and it keeps
	// the default run under a minute.
	{"primary killed, one replica lagging", killPrimary(1), []int{1}},
	{"primary killed, both replicas lagging", killPrimary(2), []int{0, 1, 2}},
}

// lagFor is how long the grants go on with lagging replicas before
// killPrimary kills the primary. Together with the junk it writes, the
// replicas stay paused for well under the sentinels' down-after period
// (1s), so that they remain fit for promotion.
const lagFor = 300 * time.Millisecond

// killPrimary returns a failover that kills the primary (and revives it
// once the set is whole again), after making `lagging` replicas lag: it
// pauses them (SIGSTOP) and writes junk to the primary until its output
// buffer to each of them holds at least 1 MiB (so the sockets' kernel
// buffers, which a resumed replica would still read, are full: a
// replica's omem counts whole 16 KiB blocks of the shared replication
// buffer, so a small value proves nothing), lets the grants go on for
// lagFor, kills the primary and resumes the replicas once it is dead. The
// grants acknowledged meanwhile never reached the lagging replicas.
func killPrimary(lagging int) func(t *testing.T, st *redistest.Sentinel) error {
	return func(t *testing.T, st *redistest.Sentinel) error {
		old, reps := st.Primary(), st.Replicas()[:lagging]
		for _, r := range reps {
			r.Pause()
		}
		resumed := make(chan struct{})
		resume := func() {
			for _, r := range reps {
				r.Resume()
			}
			close(resumed)
		}
		if lagging > 0 {
			if err := fillReplicaOutput(t, old, lagging); err != nil {
				resume()
				return err
			}
			time.Sleep(lagFor)
		}
		// Resume the replicas once the primary is gone, while KillPrimary
		// waits for the promotion (which needs them).
		go func() {
			for old.PID() != 0 {
				time.Sleep(time.Millisecond)
			}
			resume()
		}()
		ft := st.KillPrimary(t)
		<-resumed
		promoted := st.Primary()
		back := st.Revive(t)
		var paused []string
		for _, r := range reps {
			paused = append(paused, r.Addr)
		}
		t.Logf("    kill: %s promoted after %v (paused: %v), set whole after %v, revived in %v", promoted.Addr, ft.Promoted.Round(time.Millisecond), paused,
			ft.Settled.Round(time.Millisecond), back.Round(time.Millisecond))
		return nil
	}
}

// fillReplicaOutput writes 4 MiB values to the primary p until its output
// buffers to `paused` replicas hold at least 1 MiB each.
func fillReplicaOutput(t *testing.T, p *redistest.Server, paused int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	chunk := strings.Repeat("x", 4<<20)
	for junk := 1; ; junk++ {
		if err := p.Do(ctx, "SET", fmt.Sprintf("junk:%d", junk), chunk).Error(); err != nil {
			return fmt.Errorf("junk: %w", err)
		}
		omem, err := replicaOutput(ctx, p)
		if err != nil {
			return err
		}
		full := 0
		for _, n := range omem {
			if n >= 1<<20 {
				full++
			}
		}
		if full >= paused {
			t.Logf("    lag: %d MiB of junk, output buffers %v bytes", 4*junk, omem)
			return nil
		}
		if junk == 32 {
			return fmt.Errorf("128 MiB written with %d replica(s) paused and the primary's output buffers hold only %v bytes", paused, omem)
		}
	}
}

// replicaOutput returns the output buffer memory (omem) of each replica
// connection of the primary s.
func replicaOutput(ctx context.Context, s *redistest.Server) ([]int, error) {
	list, err := s.Do(ctx, "CLIENT", "LIST", "TYPE", "replica").ToString()
	if err != nil {
		return nil, fmt.Errorf("CLIENT LIST: %w", err)
	}
	var out []int
	for line := range strings.Lines(list) {
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "omem="); ok {
				n, _ := strconv.Atoi(v)
				out = append(out, n)
			}
		}
	}
	return out, nil
}

// failoverTotals adds up the runs of one failover kind and setting.
type failoverTotals struct {
	runs, acked, lost, dups, refused, failed int
	lostMin, lostMax                         int
}

func (a *failoverTotals) add(r faulttest.FailoverReport) {
	if a.runs == 0 || r.Lost < a.lostMin {
		a.lostMin = r.Lost
	}
	a.lostMax = max(a.lostMax, r.Lost)
	a.runs++
	a.acked += r.Acked
	a.lost += r.Lost
	a.dups += r.DuplicateTokens
	a.refused += r.NotReplicated
	a.failed += r.Failed
}

// TestFailoverGrants measures what a real failover does to fenced grants
// (issue 12, docs/failover.md): a primary with two replicas and three
// sentinels, fenced locks (TryAcquireFenced: the script of
// Options.Fencing, with counters shared by many lease keys so that a
// counter set back shows as duplicate tokens) through a Sentinel client,
// 8 goroutines, and faulttest.RunFailover (500 grants acknowledged, then
// the failover while the grants go on, then 500 more) for each
// failoverKind and its Replicas settings, with a 100ms ReplicaTimeout.
// Replicas = 2 (every replica) must lose no acknowledged grant and issue
// no fencing token twice; the other settings are measured and logged,
// with the sentinels' steps and when the lost grants were acknowledged.
// -failover.rounds N repeats everything N times:
//
//	go test -run TestFailoverGrants -v ./primitives/lock/ -failover.rounds 5
func TestFailoverGrants(t *testing.T) {
	if testing.Short() {
		t.Skip("a minute of failovers")
	}
	if *failoverRounds < 1 {
		t.Fatalf("-failover.rounds %d", *failoverRounds)
	}
	begin := time.Now()
	st := redistest.StartSentinel(t, 2)
	totals := map[string]*failoverTotals{}
	for round := range *failoverRounds {
		for ki, kind := range failoverKinds {
			for _, n := range kind.replicas {
				key := fmt.Sprintf("%s/%d", kind.name, n)
				if totals[key] == nil {
					totals[key] = &failoverTotals{}
				}
				streaming(t, st)
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				rep, err := faulttest.RunFailover(ctx, faulttest.FailoverRun{
					Client: func() (rueidis.Client, error) {
						return rueidis.NewClient(rueidis.ClientOption{
							InitAddress: st.SentinelAddrs(),
							Sentinel:    rueidis.SentinelOption{MasterSet: st.MasterSet(), TopologyRefreshInterval: time.Second},
						})
					},
					Failover: func(context.Context) error { return kind.do(t, st) },
					Lock: lock.Options{
						Prefix:         fmt.Sprintf("fo%d.%d.%d:", round, ki, n),
						Replicas:       n,
						ReplicaTimeout: 100 * time.Millisecond,
					},
					Goroutines:    8,
					FailoverAfter: 500,
					After:         500,
				})
				cancel()
				t.Logf("round %d, %s, replicas = %d: %v", round+1, kind.name, n, rep)
				if rep.Failed > 0 {
					t.Logf("    errors:\n%s", rep.ErrorSummary())
				}
				if rep.Lost > 0 {
					t.Logf("    lost grants acknowledged from %v to %v after the failover began", rep.LostFirst.Sub(rep.FailoverAt).Round(time.Millisecond), rep.LostLast.Sub(rep.FailoverAt).Round(time.Millisecond))
				}
				for _, e := range sentinelEvents(st, rep.FailoverAt, rep.FailoverAt.Add(rep.FailoverTook)) {
					t.Logf("    %s", e)
				}
				for _, d := range rep.Duplicates[:min(3, len(rep.Duplicates))] {
					t.Logf("    fencing token %d of resource %d twice: %s (%+dms) and %s (%+dms)", d[0].Fence, d[0].Resource,
						d[0].Key, d[0].At.Sub(rep.FailoverAt).Milliseconds(), d[1].Key, d[1].At.Sub(rep.FailoverAt).Milliseconds())
				}
				if err != nil {
					t.Fatal(err)
				}
				totals[key].add(rep)
				// Each run starts from an empty data set: a revived node's
				// full sync stays short, and no junk is left.
				st.Primary().MustCmd(t, "FLUSHALL")
			}
		}
	}

	var b strings.Builder
	fmt.Fprintf(&b, "| failover | replicas | runs | grants acknowledged | lost (per run) | duplicate fencing tokens | refused (ErrNotReplicated) | other errors |\n|---|---|---|---|---|---|---|---|\n")
	all := failoverTotals{}
	for _, kind := range failoverKinds {
		for _, n := range kind.replicas {
			a := totals[kind.name+"/"+strconv.Itoa(n)]
			fmt.Fprintf(&b, "| %s | %d | %d | %d | %d (%d–%d) | %d | %d | %d |\n", kind.name, n, a.runs, a.acked, a.lost, a.lostMin, a.lostMax, a.dups, a.refused, a.failed)
			if n == 2 {
				all.acked += a.acked
				all.lost += a.lost
				all.dups += a.dups
			}
		}
	}
	t.Logf("%d round(s) in %v:\n%s", *failoverRounds, time.Since(begin).Round(time.Second), b.String())
	if all.acked < 1000 {
		t.Errorf("replicas = 2: only %d grants acknowledged, want at least 1,000", all.acked)
	}
	if all.lost != 0 || all.dups != 0 {
		t.Errorf("replicas = 2 (every replica): %d acknowledged grants lost, %d duplicate fencing tokens over %d grants; want 0 and 0", all.lost, all.dups, all.acked)
	}
}

// sentinelEvents returns the sentinels' log lines about the failover's
// steps logged between from and to, each prefixed with its time from
// from.
func sentinelEvents(st *redistest.Sentinel, from, to time.Time) []string {
	var out []string
	for _, s := range st.Sentinels {
		for line := range strings.Lines(s.Log()) {
			// "PID:X 03 Dec 2026 19:58:01.234 # +promoted-slave ..."
			_, rest, ok := strings.Cut(line, ":X ")
			if !ok || len(rest) < 24 {
				continue
			}
			at, err := time.ParseInLocation("02 Jan 2006 15:04:05.000", rest[:24], time.Local)
			if err != nil || at.Before(from.Truncate(time.Millisecond)) || at.After(to) {
				continue
			}
			ev := strings.TrimSpace(rest[24:])
			for _, want := range []string{"+selected-slave", "+failover-state-send-slaveof-noone", "+promoted-slave", "+failover-state-reconf-slaves", "+slave-reconf-sent", "+slave-reconf-done", "+switch-master", "+convert-to-slave", "+sdown master", "+odown"} {
				if strings.Contains(ev, want) {
					out = append(out, fmt.Sprintf("%+6dms %s %s", at.Sub(from).Milliseconds(), s.Addr, ev))
					break
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// streaming waits until the primary streams its writes to every replica:
// WAIT counts them all. A replica that has just finished a diskless sync
// (the one revived or demoted by the previous run) reports its link up,
// but the primary sends it nothing until its first acknowledgement, up to
// a second later; a failover then would lose more than this run's grants.
func streaming(t *testing.T, st *redistest.Sentinel) {
	t.Helper()
	p, n := st.Primary(), len(st.Replicas())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got int64
	for ctx.Err() == nil {
		if err := p.Do(ctx, "SET", "fo:streaming", "1").Error(); err != nil {
			t.Fatalf("%s: SET: %v", p.Addr, err)
		}
		var err error
		if got, err = p.Do(ctx, "WAIT", strconv.Itoa(n), "200").AsInt64(); err == nil && got >= int64(n) {
			return
		}
	}
	t.Fatalf("%s: WAIT counts %d of %d replicas after 10s", p.Addr, got, n)
}
