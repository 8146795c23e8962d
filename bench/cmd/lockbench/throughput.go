package main

import (
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

// add records one repetition's sample.
func (t *tpResult) add(s tpSample) {
	t.rates = append(t.rates, s.rate)
	t.serverCPU = append(t.serverCPU, s.serverCPU)
	t.clientCPU = append(t.clientCPU, s.clientCPU)
	t.errs += s.errs
	if s.err != nil && t.first == nil {
		t.first = s.err
	}
}

// resultFor returns m's entry for key, creating it.
func resultFor[K comparable, R any](m map[K]*R, key K) *R {
	r := m[key]
	if r == nil {
		r = new(R)
		m[key] = r
	}
	return r
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
			redis = time.Duration(usedCPU(info) * float64(time.Second))
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
	return loopCycles(srv, im, "bench:tp:"+name, conc, ctxBackground, warm, dur).tpSample
}
