package main

// Section 11, part 3: what idle sessions, KeepAlive streams and Hold
// streams cost one daemon in heap, stacks and goroutines.

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	coordhostv1 "github.com/coordhost/coordhost/gen/coordhost/v1"
	"github.com/coordhost/coordhost/gen/coordhost/v1/coordhostv1connect"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/durationpb"
)

// memStage is the daemon's memory after one step of part 3.
type memStage struct {
	name string
	// liveMB is the heap marked live by the second GC that started after
	// the step was done (GODEBUG=gctrace=1, whole MB).
	liveMB int
	// From /metrics right after that GC: go_goroutines,
	// go_memstats_heap_inuse_bytes, go_memstats_heap_alloc_bytes,
	// go_memstats_stack_inuse_bytes, process_resident_memory_bytes.
	goroutines, heapInuse, heapAlloc, stackInuse, rss float64
	took                                              time.Duration // the step itself
}

// memResult is part 3.
type memResult struct {
	n, conns, perConn int
	stages            []memStage
	err               error // the step that failed, if one did
}

// stage returns the stage named name, or nil.
func (m *memResult) stage(name string) *memStage {
	for i := range m.stages {
		if m.stages[i].name == name {
			return &m.stages[i]
		}
	}
	return nil
}

// Part 3's steps.
const (
	stPre      = "daemon started (one client connection, for the GC churn)"
	stConns    = "client connections open"
	stSessions = "idle sessions created (no stream)"
	stKeep     = "KeepAlive streams open (one per session)"
	stHold     = "Hold streams open (distinct keys, no session)"
	stClosed   = "every stream cancelled"
)

// churnRequest is a ShouldRateLimit request for a domain no
// envoy_rate_limit serves: 64 unknown descriptors of 400-byte values,
// allowed without a Redis call; about 100 KB of garbage in the daemon per
// request, to make its GC run.
var churnRequest = func() *rlsv3.RateLimitRequest {
	r := &rlsv3.RateLimitRequest{Domain: "churn"}
	for i := range 64 {
		r.Descriptors = append(r.Descriptors, &rlcommon.RateLimitDescriptor{
			Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: fmt.Sprintf("k%d", i), Value: strings.Repeat("v", 400)}},
		})
	}
	return r
}()

// measureMem waits until two GCs have started and ended after now (driving
// them with churn requests), then reads the daemon's /metrics.
func measureMem(d *child, churn rlsv3.RateLimitServiceClient, name string, took time.Duration) (memStage, error) {
	time.Sleep(200 * time.Millisecond)
	g0 := d.lastGC().n
	var stop atomic.Bool
	var wg sync.WaitGroup
	var churnErr atomic.Pointer[error]
	for range 2 {
		wg.Go(func() {
			for !stop.Load() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := churn.ShouldRateLimit(ctx, churnRequest)
				cancel()
				if err != nil {
					churnErr.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	deadline := time.After(90 * time.Second)
	var err error
wait:
	for d.lastGC().n < g0+2 {
		select {
		case <-d.gcc:
		case <-deadline:
			err = fmt.Errorf("%s: no two GCs in 90s of churn", name)
			break wait
		case <-time.After(time.Second):
			if p := churnErr.Load(); p != nil {
				err = fmt.Errorf("%s: churn: %w", name, *p)
				break wait
			}
		}
	}
	stop.Store(true)
	wg.Wait()
	if err != nil {
		return memStage{}, err
	}
	gc := d.lastGC()
	time.Sleep(100 * time.Millisecond) // the churn's handlers return
	m, err := scrape(d.addr, "go_", "process_")
	if err != nil {
		return memStage{}, err
	}
	s := memStage{name: name, liveMB: gc.live, took: took,
		goroutines: m["go_goroutines"], heapInuse: m["go_memstats_heap_inuse_bytes"], heapAlloc: m["go_memstats_heap_alloc_bytes"],
		stackInuse: m["go_memstats_stack_inuse_bytes"], rss: m["process_resident_memory_bytes"]}
	logf("11 mem %-52s goroutines %6.0f  live heap %4d MB (gc %d)  heap in use %7.1f MB  stacks %6.1f MB  RSS %6.1f MB  (step took %v)",
		name, s.goroutines, s.liveMB, gc.n, s.heapInuse/1e6, s.stackInuse/1e6, s.rss/1e6, took.Round(time.Millisecond))
	return s, nil
}

// parallel runs f(i) for i < n on 64 goroutines and returns the first error.
func parallel(n int, f func(i int) error) error {
	var next atomic.Int64
	var first atomic.Pointer[error]
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || first.Load() != nil {
					return
				}
				if err := f(i); err != nil {
					first.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	if p := first.Load(); p != nil {
		return *p
	}
	return nil
}

// sectionStreams runs part 3 on a daemon of its own, started with
// GODEBUG=gctrace=1: o.memN idle sessions, then a KeepAlive stream on each,
// then o.memN Hold streams, over enough client connections that none
// carries more than o.memPerConn streams (Go's HTTP/2 server allows 250 at
// once), measuring after each step.
func sectionStreams(srv *server, bin string, o options) *memResult {
	n := o.memN
	res := &memResult{n: n, perConn: o.memPerConn, conns: (2*n + o.memPerConn - 1) / o.memPerConn}
	d, err := startCoordhost(bin, srv.addr, o.dPprof, "GODEBUG=gctrace=1")
	if err != nil {
		res.err = err
		return res
	}
	defer d.stop()
	dial := func() (*grpc.ClientConn, error) {
		c, err := grpc.NewClient(d.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := healthpb.NewHealthClient(c).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	}
	cc, err := dial()
	if err != nil {
		res.err = err
		return res
	}
	defer cc.Close()
	churn := rlsv3.NewRateLimitServiceClient(cc)
	step := func(name string, f func() error) bool {
		t := time.Now()
		if err := f(); err != nil {
			res.err = fmt.Errorf("%s: %w", name, err)
			logf("11 mem: %v", res.err)
			return false
		}
		s, err := measureMem(d, churn, name, time.Since(t))
		if err != nil {
			res.err = err
			logf("11 mem: %v", err)
			return false
		}
		if o.dPprof != "" {
			d.saveProfile("heap?gc=1", filepath.Join(o.dPprof, fmt.Sprintf("daemon-heap-%d.pprof", len(res.stages))))
		}
		res.stages = append(res.stages, s)
		return true
	}
	if !step(stPre, func() error { return nil }) {
		return res
	}
	conns := make([]*grpc.ClientConn, res.conns)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	if !step(stConns, func() error {
		return parallel(len(conns), func(i int) (err error) {
			conns[i], err = dial()
			return err
		})
	}) {
		return res
	}
	bg := context.Background()
	ids := make([]string, n)
	if !step(stSessions, func() error {
		return parallel(n, func(i int) error {
			var resp coordhostv1.CreateSessionResponse
			ctx, cancel := context.WithTimeout(bg, 10*time.Second)
			defer cancel()
			err := conns[i%len(conns)].Invoke(ctx, coordhostv1connect.SessionServiceCreateSessionProcedure,
				&coordhostv1.CreateSessionRequest{Ttl: durationpb.New(10 * time.Minute)}, &resp)
			ids[i] = resp.GetSession().GetSessionId()
			return err
		})
	}) {
		return res
	}
	// Every stream's context; cancelling it resets the stream (the client
	// going away, for the daemon).
	var cancels []context.CancelFunc
	var cancelsMu sync.Mutex
	defer func() {
		for _, c := range cancels {
			c()
		}
	}()
	open := func(i int, desc *grpc.StreamDesc, method string, req, resp any, closeSend bool) error {
		ctx, cancel := context.WithCancel(bg)
		cancelsMu.Lock()
		cancels = append(cancels, cancel)
		cancelsMu.Unlock()
		cs, err := conns[i%len(conns)].NewStream(ctx, desc, method)
		if err != nil {
			return err
		}
		if err := cs.SendMsg(req); err != nil {
			return err
		}
		if closeSend {
			if err := cs.CloseSend(); err != nil {
				return err
			}
		}
		return cs.RecvMsg(resp)
	}
	if !step(stKeep, func() error {
		return parallel(n, func(i int) error {
			var resp coordhostv1.KeepAliveResponse
			return open(i, &grpc.StreamDesc{StreamName: "KeepAlive", ServerStreams: true, ClientStreams: true},
				coordhostv1connect.SessionServiceKeepAliveProcedure, &coordhostv1.KeepAliveRequest{SessionId: ids[i]}, &resp, false)
		})
	}) {
		return res
	}
	if !step(stHold, func() error {
		return parallel(n, func(i int) error {
			var resp coordhostv1.HoldLockResponse
			err := open(i, &grpc.StreamDesc{StreamName: "Hold", ServerStreams: true},
				coordhostv1connect.LockServiceHoldProcedure,
				&coordhostv1.HoldLockRequest{Name: "hold", Attributes: map[string]string{"k": fmt.Sprintf("h%d", i)}}, &resp, true)
			if err == nil && resp.GetGrant().GetGrantId() == "" {
				err = fmt.Errorf("Hold %d: no grant in the first response", i)
			}
			return err
		})
	}) {
		return res
	}
	pre := res.stage(stConns)
	step(stClosed, func() error {
		cancelsMu.Lock()
		for _, c := range cancels {
			c()
		}
		cancels = nil
		cancelsMu.Unlock()
		// The handlers return once the daemon has read the resets and the
		// Holds have released their locks.
		deadline := time.Now().Add(30 * time.Second)
		for {
			m, err := scrape(d.addr, "go_goroutines")
			if err != nil {
				return err
			}
			if m["go_goroutines"] <= pre.goroutines+20 {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%v goroutines 30s after the cancels (%v before the streams)", m["go_goroutines"], pre.goroutines)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	return res
}
