package main

// Section 11, part 2: lock acquire + release over the daemon's API
// (LockService TryAcquire + Release by grant id, gRPC over h2c) against the
// embedded library (primitives/lock) on the same Redis.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	coordhostv1 "github.com/coordhost/coordhost/gen/coordhost/v1"
	"github.com/coordhost/coordhost/gen/coordhost/v1/coordhostv1connect"
	"github.com/coordhost/coordhost/primitives"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// Part 2's rows.
const (
	alAPI      = "API: TryAcquire + Release (gRPC, h2c)"
	alEmbedded = "embedded: primitives/lock"
)

type alKey struct {
	row string
	hot bool
}

// alSample is one closed-loop run.
type alSample struct {
	cycles, attempts float64 // per second: granted acquire+release cycles, TryAcquire calls
	// CPU µs per cycle: the daemon (idle in the embedded rows), Redis, this
	// program (the gRPC clients, or the embedded library).
	daemonCPU, redisCPU, selfCPU float64
	// the daemon's allocation per cycle and GCs per second (/metrics)
	allocPerCycle, gcPerSec float64
	errs                    int64
	err                     error
}

// lockCycler makes one attempt: ok false means contention (not an error).
type lockCycler func(ctx context.Context, key string) (ok bool, err error)

// apiCycler takes and releases the daemon's lock "bench" with attribute
// k = key over conn.
func apiCycler(conn *grpc.ClientConn) lockCycler {
	return func(ctx context.Context, key string) (bool, error) {
		var resp coordhostv1.TryAcquireLockResponse
		err := conn.Invoke(ctx, coordhostv1connect.LockServiceTryAcquireProcedure,
			&coordhostv1.TryAcquireLockRequest{Name: "bench", Attributes: map[string]string{"k": key}}, &resp)
		if status.Code(err) == codes.Aborted {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		var rel coordhostv1.ReleaseLockResponse
		if err := conn.Invoke(ctx, coordhostv1connect.LockServiceReleaseProcedure,
			&coordhostv1.ReleaseLockRequest{GrantId: resp.GetGrant().GetGrantId()}, &rel); err != nil {
			return false, err
		}
		if rel.GetResult() != coordhostv1.ReleaseResult_RELEASE_RESULT_RELEASED {
			return false, fmt.Errorf("release: %v", rel.GetResult())
		}
		return true, nil
	}
}

// embeddedCycler is section 1's coordhost row: lock.Locker on a default
// rueidis client, TryAcquire + Release.
func embeddedCycler(im impl) lockCycler {
	return func(ctx context.Context, key string) (bool, error) {
		h, err := im.TryLock(ctx, "emb:bench/"+key, 10*time.Second)
		if errors.Is(err, primitives.ErrNotAcquired) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		return true, h.Release(ctx)
	}
}

// runCycles runs conc goroutines looping cyc for warm, then counts for dur;
// goroutine g uses key "d<g>" (distinct) or "hot" (all on one key).
func runCycles(srv *server, d *child, cyc lockCycler, conc int, hot bool, warm, dur time.Duration) alSample {
	var cycles, attempts, errs atomic.Int64
	var firstErr atomic.Pointer[error]
	var stop atomic.Bool
	var wg sync.WaitGroup
	ctx := context.Background()
	for g := range conc {
		key := fmt.Sprintf("d%d", g)
		if hot {
			key = "hot"
		}
		wg.Go(func() {
			for !stop.Load() {
				ok, err := cyc(ctx, key)
				attempts.Add(1)
				if err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, &err)
					time.Sleep(time.Millisecond)
					continue
				}
				if ok {
					cycles.Add(1)
				}
			}
		})
	}
	time.Sleep(warm)
	s0 := takeCPU(srv, d)
	c0, a0, t0 := cycles.Load(), attempts.Load(), time.Now()
	time.Sleep(dur)
	c1, a1, t1 := cycles.Load(), attempts.Load(), time.Now()
	s1 := takeCPU(srv, d)
	stop.Store(true)
	wg.Wait()
	secs := t1.Sub(t0).Seconds()
	out := alSample{cycles: float64(c1-c0) / secs, attempts: float64(a1-a0) / secs, errs: errs.Load()}
	if n := float64(c1 - c0); n > 0 {
		out.daemonCPU, out.redisCPU, out.selfCPU = s0.usPer(s1, n)
	}
	out.allocPerCycle, out.gcPerSec = allocGC(s0, s1, c1-c0, t1.Sub(t0))
	if p := firstErr.Load(); p != nil {
		out.err = *p
	}
	return out
}

// sectionAPILock runs part 2: the API rows over one gRPC connection (as
// one client process would have), the embedded row on its own rueidis
// client; distinct keys and one hot key; rows rotating in each repetition.
func sectionAPILock(srv *server, o options, d *child) map[alKey][]alSample {
	conn, err := grpc.NewClient(d.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fatalf("11: %v", err)
	}
	defer conn.Close()
	im, err := newCoordhost(implConfig{addr: srv.addr, ttl: 10 * time.Second}, coordhostPlain)
	if err != nil {
		fatalf("11: %v", err)
	}
	defer im.Close()
	rows := []struct {
		key alKey
		cyc lockCycler
	}{
		{alKey{alAPI, false}, apiCycler(conn)},
		{alKey{alEmbedded, false}, embeddedCycler(im)},
		{alKey{alAPI, true}, apiCycler(conn)},
		{alKey{alEmbedded, true}, embeddedCycler(im)},
	}
	for _, r := range rows[:2] {
		if s := runCycles(srv, d, r.cyc, 8, false, 0, 200*time.Millisecond); s.err != nil {
			fatalf("11: %s: warm-up: %v", r.key.row, s.err)
		}
	}
	res := map[alKey][]alSample{}
	for rep := range o.dReps {
		for j := range rows {
			r := rows[(j+rep)%len(rows)]
			var prof func()
			if r.key.row == alAPI {
				prof = profileDuring(o, rep, d, fmt.Sprintf("daemon-cpu-lock-hot-%v.pprof", r.key.hot), o.apiWarm+o.apiDur)
			}
			s := runCycles(srv, d, r.cyc, o.apiConc, r.key.hot, o.apiWarm, o.apiDur)
			if prof != nil {
				prof()
			}
			res[r.key] = append(res[r.key], s)
			logf("11 lock rep %d/%d hot=%-5v %-40s %8.0f cycles/s %8.0f attempts/s  cpu/cycle daemon %.1fµs redis %.1fµs self %.1fµs; daemon alloc/cycle %.0f B, %.1f GC/s; errors %d",
				rep+1, o.dReps, r.key.hot, r.key.row, s.cycles, s.attempts, s.daemonCPU, s.redisCPU, s.selfCPU, s.allocPerCycle, s.gcPerSec, s.errs)
			if s.err != nil {
				logf("11 lock %s first error: %v", r.key.row, s.err)
			}
		}
	}
	return res
}
