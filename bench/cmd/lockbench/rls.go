package main

// Section 11, part 1: Envoy RLS ShouldRateLimit latency, open loop, against
// coordhost serve and envoyproxy/ratelimit's service.

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

const (
	// rlsLimit is both services' limit per remote_address per minute: far
	// above what a section-11 run sends to one address, so every decision
	// is a grant (OVER_LIMIT answers are counted and reported).
	rlsLimit = 1_000_000
	// rlsAddresses is how many remote_address values the requests cycle
	// through (one Redis counter each per window).
	rlsAddresses = 1000
	// rlsTimeout bounds one request; a request that runs out counts as an
	// error with its elapsed time as latency.
	rlsTimeout = time.Second
	// envoyRLSTimeout is Envoy's default timeout for a rate-limit call;
	// past it Envoy lets the request through (fails open) unless told to
	// deny. The report counts the requests slower than that.
	envoyRLSTimeout = 20 * time.Millisecond
	// rlsCapConc is how many requests the closed-loop capacity cells keep
	// in flight.
	rlsCapConc = 64
)

// rlsSample is one open-loop run of one service at one rate.
type rlsSample struct {
	n          int // measured requests (scheduled in the measured window)
	errs, over int
	slow       int // answered after envoyRLSTimeout, or not at all
	firstErr   error
	// lat is from the scheduled send time to the answer; svc from the
	// actual send; lag from the scheduled to the actual send (the
	// generator's own lateness, included in lat).
	lat, svc, lag [4]time.Duration // p50, p99, p99.9, max
	// CPU µs per measured request: the service's process (/proc), Redis
	// (INFO cpu), this program (the load generator; getrusage).
	serverCPU, redisCPU, genCPU float64
	// coordhost only (-1 otherwise): bytes the daemon allocated per
	// request and its GCs per second (/metrics).
	allocPerReq, gcPerSec float64
	elapsed               time.Duration // from the first measured send to the last answer
}

type rlsKey struct {
	server string
	rate   int
}

// rlsTarget is one service under test.
type rlsTarget struct {
	name   string
	proc   *child
	client rlsv3.RateLimitServiceClient
	conn   *grpc.ClientConn
}

func newRLSTarget(name string, c *child) (*rlsTarget, error) {
	conn, err := grpc.NewClient(c.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	return &rlsTarget{name: name, proc: c, client: rlsv3.NewRateLimitServiceClient(conn), conn: conn}, nil
}

// rlsRequest is request i's message: domain "bench", one descriptor
// remote_address = 10.0.x.y, cycling through rlsAddresses values.
func rlsRequest(i int) *rlsv3.RateLimitRequest {
	a := i % rlsAddresses
	return &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*rlcommon.RateLimitDescriptor{{
		Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "remote_address", Value: fmt.Sprintf("10.0.%d.%d", a/256, a%256)}},
	}}}
}

// cpuSnap is the CPU time used so far by a service, Redis and this
// program, and for coordhost its allocation and GC counters (/metrics:
// go_memstats_alloc_bytes_total, go_gc_duration_seconds_count; -1 when
// unknown).
type cpuSnap struct {
	server, redis, self time.Duration
	alloc, gcs          float64
}

func takeCPU(srv *server, c *child) cpuSnap {
	r, s := cpuNow(srv)
	out := cpuSnap{redis: r, self: s, alloc: -1, gcs: -1}
	if c != nil {
		out.server = c.cpu()
		if c.name == "coordhost" {
			if m, err := scrape(c.addr, "go_memstats_alloc_bytes_total", "go_gc_duration_seconds_count"); err == nil {
				out.alloc, out.gcs = m["go_memstats_alloc_bytes_total"], m["go_gc_duration_seconds_count"]
			}
		}
	}
	return out
}

// usPer is the CPU µs per unit the service, Redis and this program used
// from a to b, over n units.
func (a cpuSnap) usPer(b cpuSnap, n float64) (server, redis, self float64) {
	us := func(x, y time.Duration) float64 { return float64((y - x).Nanoseconds()) / 1e3 / n }
	return us(a.server, b.server), us(a.redis, b.redis), us(a.self, b.self)
}

// allocGC is the daemon's allocation per unit and GCs per second between
// two snapshots; -1 each when unknown.
func allocGC(a, b cpuSnap, n int64, d time.Duration) (alloc, gcs float64) {
	if a.alloc < 0 || b.alloc < 0 || n <= 0 {
		return -1, -1
	}
	return (b.alloc - a.alloc) / float64(n), (b.gcs - a.gcs) / d.Seconds()
}

// openLoop sends rate requests per second to t for warm+dur, each at its
// scheduled instant start + i/rate whether or not earlier ones have been
// answered (one goroutine per request), and measures those scheduled after
// warm. The pacer runs on its own locked OS thread and sleeps with
// clock_nanosleep to an absolute deadline with a 1 ns timer slack: Go's
// timers would wake it up to a millisecond late on this machine.
func openLoop(srv *server, t *rlsTarget, rate int, warm, dur time.Duration) rlsSample {
	period := time.Second / time.Duration(rate)
	nWarm, nMeas := int(warm/period), int(dur/period)
	n := nWarm + nMeas
	type rec struct {
		lat, svc, lag time.Duration
		err           error
		over          bool
	}
	recs := make([]rec, n)
	var wg sync.WaitGroup
	var snap0 cpuSnap
	var snapWG sync.WaitGroup
	var first time.Time

	runtime.LockOSThread()
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	goBase := time.Now().Add(10 * time.Millisecond)
	monoBase := ts.Nano() + int64(10*time.Millisecond)
	for i := range n {
		off := time.Duration(i) * period
		sched := goBase.Add(off)
		if time.Until(sched) > 0 {
			dl := unix.NsecToTimespec(monoBase + int64(off))
			for unix.ClockNanosleep(unix.CLOCK_MONOTONIC, unix.TIMER_ABSTIME, &dl, nil) == syscall.EINTR {
			}
		}
		if i == nWarm {
			first = sched
			snapWG.Go(func() { snap0 = takeCPU(srv, t.proc) })
		}
		wg.Go(func() {
			sent := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), rlsTimeout)
			resp, err := t.client.ShouldRateLimit(ctx, rlsRequest(i))
			cancel()
			done := time.Now()
			recs[i] = rec{lat: done.Sub(sched), svc: done.Sub(sent), lag: sent.Sub(sched), err: err,
				over: err == nil && resp.GetOverallCode() != rlsv3.RateLimitResponse_OK}
		})
	}
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 50_000, 0, 0, 0) // the kernel's default
	runtime.UnlockOSThread()
	wg.Wait()
	end := time.Now()
	snapWG.Wait()
	snap1 := takeCPU(srv, t.proc)

	s := rlsSample{n: nMeas, elapsed: end.Sub(first)}
	lat, svc, lag := make([]time.Duration, 0, nMeas), make([]time.Duration, 0, nMeas), make([]time.Duration, 0, nMeas)
	for _, r := range recs[nWarm:] {
		lat, svc, lag = append(lat, r.lat), append(svc, r.svc), append(lag, r.lag)
		if r.err != nil {
			s.errs++
			if s.firstErr == nil {
				s.firstErr = r.err
			}
		}
		if r.over {
			s.over++
		}
		if r.err != nil || r.lat > envoyRLSTimeout {
			s.slow++
		}
	}
	for i, p := range []float64{50, 99, 99.9, 100} {
		s.lat[i], s.svc[i], s.lag[i] = pct(lat, p), pct(svc, p), pct(lag, p)
	}
	s.serverCPU, s.redisCPU, s.genCPU = snap0.usPer(snap1, float64(nMeas))
	s.allocPerReq, s.gcPerSec = allocGC(snap0, snap1, int64(nMeas), s.elapsed)
	return s
}

// rlsCapacity is one closed-loop run: rlsCapConc requests in flight at all
// times, each sent as soon as one is answered.
type rlsCapacity struct {
	rate                        float64 // answers per second
	serverCPU, redisCPU, genCPU float64 // µs per request
	p50, p99                    time.Duration
	errs                        int64
	firstErr                    error
}

// closedLoop measures t's capacity: rlsCapConc goroutines sending
// requests back to back for warm, then counted for dur.
func closedLoop(srv *server, t *rlsTarget, warm, dur time.Duration) rlsCapacity {
	var stop, measuring atomic.Bool
	var n, errs atomic.Int64
	var firstErr atomic.Pointer[error]
	var mu sync.Mutex
	var lats []time.Duration
	var wg sync.WaitGroup
	for g := range rlsCapConc {
		wg.Go(func() {
			var mine []time.Duration
			for i := g; !stop.Load(); i += rlsCapConc {
				t0 := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), rlsTimeout)
				_, err := t.client.ShouldRateLimit(ctx, rlsRequest(i))
				cancel()
				if !measuring.Load() {
					continue
				}
				if err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, &err)
					continue
				}
				n.Add(1)
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lats = append(lats, mine...)
			mu.Unlock()
		})
	}
	time.Sleep(warm)
	s0 := takeCPU(srv, t.proc)
	measuring.Store(true)
	t0 := time.Now()
	time.Sleep(dur)
	measuring.Store(false)
	el := time.Since(t0)
	s1 := takeCPU(srv, t.proc)
	stop.Store(true)
	wg.Wait()
	c := rlsCapacity{rate: float64(n.Load()) / el.Seconds(), p50: pct(lats, 50), p99: pct(lats, 99), errs: errs.Load()}
	if k := float64(n.Load()); k > 0 {
		c.serverCPU, c.redisCPU, c.genCPU = s0.usPer(s1, k)
	}
	if p := firstErr.Load(); p != nil {
		c.firstErr = *p
	}
	return c
}

// sectionRLS runs part 1: for each repetition, each service's closed-loop
// capacity, then for each rate each service (order rotating) open loop.
func sectionRLS(srv *server, o options, targets []*rlsTarget, loads *[]string) (map[rlsKey][]rlsSample, map[string][]rlsCapacity) {
	res := map[rlsKey][]rlsSample{}
	capRes := map[string][]rlsCapacity{}
	// Untimed: connections, scripts, counters.
	for _, t := range targets {
		openLoop(srv, t, 1000, 0, 300*time.Millisecond)
	}
	for r := range o.dReps {
		*loads = append(*loads, loadAvg())
		for j := range targets {
			t := targets[(j+r)%len(targets)]
			c := closedLoop(srv, t, o.rlsWarm, o.rlsDur)
			capRes[t.name] = append(capRes[t.name], c)
			logf("11 rls rep %d/%d capacity %-22s %8.0f requests/s with %d in flight, p50 %v p99 %v cpu/req server %.1fµs redis %.1fµs generator %.1fµs errors %d",
				r+1, o.dReps, t.name, c.rate, rlsCapConc, c.p50, c.p99, c.serverCPU, c.redisCPU, c.genCPU, c.errs)
		}
		for _, rate := range o.rlsRates {
			for j := range targets {
				t := targets[(j+r)%len(targets)]
				prof := profileDuring(o, r, t.proc, fmt.Sprintf("daemon-cpu-rls-%d.pprof", rate), o.rlsWarm+o.rlsDur)
				s := openLoop(srv, t, rate, o.rlsWarm, o.rlsDur)
				prof()
				res[rlsKey{t.name, rate}] = append(res[rlsKey{t.name, rate}], s)
				logf("11 rls rep %d/%d %6d/s %-22s p50 %v p99 %v p99.9 %v max %v (from send: p50 %v p99 %v; send lag p50 %v p99 %v) cpu/req server %.1fµs redis %.1fµs generator %.1fµs alloc/req %.0f B, %.1f GC/s, over 20ms %d, errors %d over %d",
					r+1, o.dReps, rate, t.name, s.lat[0], s.lat[1], s.lat[2], s.lat[3], s.svc[0], s.svc[1], s.lag[0], s.lag[1], s.serverCPU, s.redisCPU, s.genCPU, s.allocPerReq, s.gcPerSec, s.slow, s.errs, s.over)
				if s.firstErr != nil {
					logf("11 rls %s first error: %v", t.name, s.firstErr)
				}
			}
		}
	}
	return res, capRes
}

// profileDuring starts a CPU profile of c (a coordhost built for -d-pprof)
// in the first repetition, saved in -d-pprof as file, and returns a
// function that waits for it.
func profileDuring(o options, rep int, c *child, file string, d time.Duration) func() {
	if o.dPprof == "" || rep != 0 || c.pprof == "" {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.saveProfile(fmt.Sprintf("profile?seconds=%d", max(1, int(d.Seconds()))), filepath.Join(o.dPprof, file))
	}()
	return func() { <-done }
}
