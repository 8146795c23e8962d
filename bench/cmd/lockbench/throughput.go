package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// throughputTTL is the lease of every uncontended cycle; never reached.
const throughputTTL = 10 * time.Second

// tpResult is one implementation at one concurrency: per repetition.
type tpResult struct {
	rates     []float64
	serverCPU []float64 // Redis CPU µs per cycle (INFO cpu)
	clientCPU []float64 // this process' CPU µs per cycle (getrusage)
	errs      int64
	first     error
}

// tpSample is one measurement.
type tpSample struct {
	rate                 float64
	serverCPU, clientCPU float64 // µs per cycle; 0 when unknown
	errs                 int64
	err                  error
}

// cpuNow returns Redis' and this process' CPU time used so far.
func cpuNow(srv *server) (redis, self time.Duration) {
	if srv != nil {
		if info, err := srv.do("INFO", "cpu"); err == nil {
			u, _ := strconv.ParseFloat(infoField(info, "used_cpu_user"), 64)
			s, _ := strconv.ParseFloat(infoField(info, "used_cpu_sys"), 64)
			redis = time.Duration((u + s) * float64(time.Second))
		}
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	return redis, self
}

// runThroughput measures uncontended acquire+release cycles/s: conc
// goroutines, each on its own key, loop TryLock + Release for warm, then
// the completed cycles are counted for dur.
// srv, when set, is asked for its CPU time around the window.
func runThroughput(srv *server, im impl, name string, conc int, warm, dur time.Duration) tpSample {
	ctx := context.Background()
	var count, errs atomic.Int64
	var firstErr atomic.Pointer[error]
	var stop atomic.Bool
	var wg sync.WaitGroup
	fail := func(err error) {
		errs.Add(1)
		firstErr.CompareAndSwap(nil, &err)
		time.Sleep(time.Millisecond) // never spin on a persistent error
	}
	for g := range conc {
		key := fmt.Sprintf("bench:tp:%s:%d:%d", name, conc, g)
		wg.Go(func() {
			for !stop.Load() {
				h, err := im.TryLock(ctx, key, throughputTTL)
				if err != nil {
					fail(err)
					continue
				}
				if err := h.Release(ctx); err != nil {
					fail(err)
					continue
				}
				count.Add(1)
			}
		})
	}
	time.Sleep(warm)
	r0, s0 := cpuNow(srv)
	c0, t0 := count.Load(), time.Now()
	time.Sleep(dur)
	c1, t1 := count.Load(), time.Now()
	r1, s1 := cpuNow(srv)
	stop.Store(true)
	wg.Wait()
	out := tpSample{rate: float64(c1-c0) / t1.Sub(t0).Seconds(), errs: errs.Load()}
	if n := c1 - c0; n > 0 {
		out.serverCPU = float64((r1 - r0).Microseconds()) / float64(n)
		out.clientCPU = float64((s1 - s0).Microseconds()) / float64(n)
	}
	if p := firstErr.Load(); p != nil {
		out.err = *p
	}
	return out
}
