package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coordhost/coordhost/policies"
	"github.com/coordhost/coordhost/policies/builtin"
	"github.com/coordhost/coordhost/policies/plugin"
	"github.com/coordhost/coordhost/policies/wasm"
)

// ---- section 6: policy consult cost ----

// Rows of the consult table; the keys are what the targets look up.
const (
	rowTimer         = "timer"
	rowNative        = "native"
	rowWATDeadline   = "wat-deadline"
	rowWATNone       = "wat-none"
	rowGoDeadline    = "go-deadline"
	rowGoNone        = "go-none"
	rowGoDeadlinePar = "go-deadline-par"
	rowPlugin        = "plugin"
)

// Paths of the example policies, relative to the main module's root.
const (
	watModulePath = "plugins/examples/wasm/wat/constant.wasm"
	goModulePath  = "plugins/examples/wasm/gobackoff/gobackoff.wasm"
	pluginPkg     = "./plugins/examples/plugin"
)

// Configs passed to the examples: the Go guest's is the one in the HCL
// example of plugins/examples/wasm/README.md; the WAT module takes the
// first number as its delay in ms (the example plugin's default is 20 ms).
var (
	watConfig = []byte(`{"delay_ms":20}`)
	goConfig  = []byte(`{"base_ms":25,"max_ms":2000}`)
)

// consultResult is one row of the consult table.
type consultResult struct {
	key, policy, call string
	goroutines        int
	// Per repetition: the percentiles of the individually timed calls, the
	// allocations and the mean time per call of the untimed loop.
	p50, p99 []time.Duration
	allocs   []float64
	mallocs  []uint64 // raw malloc count of each untimed loop
	mean     []float64
	// timed: calls timed in all repetitions; untimed: calls in the
	// allocation loops.
	timed, untimed int
	// The module's or plugin's own counters after the row: calls that
	// failed (and were answered by the fallback).
	failures, fallbacks uint64
	rates               []float64 // timed calls/s over all goroutines, per repetition
}

// instResult is one wasm module's instantiation and memory figures.
type instResult struct {
	name     string
	size     int
	loadCold time.Duration // Load on a runtime with an empty disk cache: compile + instantiate
	loadDisk time.Duration // Load on a new runtime reading the disk cache
	loads    []time.Duration
	inst     []time.Duration // Stats().InstantiateTime of each of the loads (one instance each)
	// Heap deltas in bytes, live (HeapAlloc) and in use (HeapInuse), both
	// after a full GC: per Load (module + its first instance) and per
	// extra instance.
	liveLoad, inuseLoad float64
	liveInst, inuseInst float64
	forced              int // instances reached in the forcing run
	forcedCap           int
}

type policyResult struct {
	rows      []*consultResult
	inst      []*instResult
	pluginBin string
	pluginSum string
	built     bool
	reps      int
}

func (p *policyResult) row(key string) *consultResult {
	for _, r := range p.rows {
		if r.key == key {
			return r
		}
	}
	return nil
}

// reqMask indexes the request table.
const reqMask = 1<<10 - 1

// retryRequests is a fixed table of varied requests (attempts 1–12, both
// reasons, elapsed up to 2 s, holder TTL unknown in a quarter of them,
// random bits), cycled through by every row.
func retryRequests() []policies.RetryRequest {
	reqs := make([]policies.RetryRequest, reqMask+1)
	x := uint64(0x9E3779B97F4A7C15)
	for i := range reqs {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		r := policies.RetryRequest{
			Attempt:   1 + i%12,
			Reason:    policies.ReasonContended,
			Elapsed:   time.Duration(x%2000) * time.Millisecond,
			HolderTTL: time.Duration((x>>16)%500_000) * time.Microsecond,
			Rand:      x,
		}
		if i%8 == 7 {
			r.Reason = policies.ReasonError
		}
		if i%4 == 3 {
			r.HolderTTL = -1
		}
		reqs[i] = r
	}
	return reqs
}

// policySink keeps the decisions alive.
var policySink time.Duration

// timed calls p once per element of lat, timing each call on its own.
// p == nil times the clock alone.
func timed(p policies.RetryPolicy, reqs []policies.RetryRequest, lat []time.Duration, off int) {
	var s time.Duration
	if p == nil {
		for i := range lat {
			t := time.Now()
			lat[i] = time.Since(t)
		}
		return
	}
	for i := range lat {
		r := reqs[(off+i)&reqMask]
		t := time.Now()
		d := p.DecideRetry(context.Background(), r)
		lat[i] = time.Since(t)
		s += d.Delay
	}
	policySink += s
}

// untimed calls p n times from each of g goroutines without reading the
// clock per call, and returns the heap allocations (runtime.MemStats
// Mallocs delta, whole process) and the wall time.
func untimed(p policies.RetryPolicy, reqs []policies.RetryRequest, g, n int) (mallocs uint64, wall time.Duration) {
	var m0, m1 runtime.MemStats
	var sinks = make([]time.Duration, g)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for j := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			var s time.Duration
			off := j * 97
			for i := range n {
				s += p.DecideRetry(context.Background(), reqs[(off+i)&reqMask]).Delay
			}
			sinks[j] = s
		}()
	}
	runtime.Gosched()
	runtime.ReadMemStats(&m0)
	t := time.Now()
	close(start)
	wg.Wait()
	wall = time.Since(t)
	runtime.ReadMemStats(&m1)
	for _, s := range sinks {
		policySink += s
	}
	return m1.Mallocs - m0.Mallocs, wall
}

// measureRep runs one repetition of row r: n individually timed calls (n/g
// on each of g goroutines), then n untimed calls the same way.
func measureRep(r *consultResult, p policies.RetryPolicy, reqs []policies.RetryRequest, n, rep int) {
	g := r.goroutines
	per := max(n/g, 1)
	lats := make([][]time.Duration, g)
	for j := range lats {
		lats[j] = make([]time.Duration, per)
	}
	runtime.GC()
	var wg sync.WaitGroup
	start := make(chan struct{})
	for j := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			timed(p, reqs, lats[j], rep*7919+j*97)
		}()
	}
	t := time.Now()
	close(start)
	wg.Wait()
	wall := time.Since(t)
	all := slices.Concat(lats...)
	r.p50 = append(r.p50, pct(all, 50))
	r.p99 = append(r.p99, pct(all, 99))
	r.timed += len(all)
	r.rates = append(r.rates, float64(len(all))/wall.Seconds())

	if p == nil {
		return
	}
	runtime.GC()
	mallocs, uwall := untimed(p, reqs, g, per)
	calls := per * g
	r.untimed += calls
	r.mallocs = append(r.mallocs, mallocs)
	r.allocs = append(r.allocs, float64(mallocs)/float64(calls))
	// Per call as one goroutine sees it: wall time × goroutines / calls.
	r.mean = append(r.mean, float64(uwall.Nanoseconds())*float64(g)/float64(calls))
}

// warmUp calls p n times from g goroutines (the pool fills, code and data
// get cached).
func warmUp(p policies.RetryPolicy, reqs []policies.RetryRequest, g, n int) {
	if p != nil {
		untimed(p, reqs, g, n)
	}
}

func sectionPolicy(o options) *policyResult {
	ctx := context.Background()
	res := &policyResult{reps: o.reps}
	root, err := mainModuleDir()
	if err != nil {
		fatalf("6: %v", err)
	}
	watBin, err := os.ReadFile(filepath.Join(root, watModulePath))
	if err != nil {
		fatalf("6: %v (scripts/build-wasm.sh builds it)", err)
	}
	goBin, err := os.ReadFile(filepath.Join(root, goModulePath))
	if err != nil {
		fatalf("6: %v (scripts/build-wasm.sh builds it)", err)
	}
	cacheDir, err := os.MkdirTemp("", "lockbench-wasm-cache-")
	if err != nil {
		fatalf("6: %v", err)
	}
	removeOnExit(cacheDir)
	defer os.RemoveAll(cacheDir)
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	// Instantiation and memory first, while nothing else runs in the
	// process.
	for _, m := range []struct {
		name string
		bin  []byte
		cfg  []byte
	}{{"WAT `constant.wasm`", watBin, watConfig}, {"Go `gobackoff.wasm`", goBin, goConfig}} {
		res.inst = append(res.inst, measureInstances(ctx, m.name, m.bin, m.cfg, cacheDir, o.policyLoads, logger))
	}

	// The consult rows, in one runtime (reading the disk cache the
	// measurements above filled for the guarded engine).
	rt, err := wasm.NewRuntime(ctx, wasm.RuntimeOptions{CacheDir: cacheDir, Logger: logger})
	if err != nil {
		fatalf("6: %v", err)
	}
	defer rt.Close(ctx)
	load := func(name string, bin, cfg []byte, timeout time.Duration) *wasm.Module {
		m, err := rt.Load(ctx, bin, wasm.ModuleOptions{Name: name, CallTimeout: timeout, Config: cfg, FallbackRetry: builtin.Exponential{}})
		if err != nil {
			fatalf("6: load %s: %v", name, err)
		}
		return m
	}
	watD := load("wat-deadline", watBin, watConfig, 0)
	watN := load("wat-none", watBin, watConfig, wasm.NoCallTimeout)
	goD := load("go-deadline", goBin, goConfig, 0)
	goN := load("go-none", goBin, goConfig, wasm.NoCallTimeout)
	goP := load("go-deadline-par", goBin, goConfig, 0)

	procs := runtime.GOMAXPROCS(0)
	type row struct {
		r *consultResult
		p policies.RetryPolicy
		m *wasm.Module
	}
	deadline := fmt.Sprintf("`CallTimeout` %v (default): per-instance timer + wazero's close-on-context-done watchdog", wasm.DefaultCallTimeout)
	none := "`NoCallTimeout`: uninterruptible runtime, no watchdog"
	rows := []row{
		{&consultResult{key: rowTimer, policy: "(clock only: `time.Now` + `time.Since`, no call)", call: "–", goroutines: 1}, nil, nil},
		{&consultResult{key: rowNative, policy: "native `builtin.Exponential{}`", call: "interface call in-process", goroutines: 1}, builtin.Exponential{}, nil},
		{&consultResult{key: rowWATDeadline, policy: "wasm WAT `constant.wasm`", call: deadline, goroutines: 1}, watD.Retry(), watD},
		{&consultResult{key: rowWATNone, policy: "wasm WAT `constant.wasm`", call: none, goroutines: 1}, watN.Retry(), watN},
		{&consultResult{key: rowGoDeadline, policy: "wasm Go `gobackoff.wasm`", call: deadline, goroutines: 1}, goD.Retry(), goD},
		{&consultResult{key: rowGoNone, policy: "wasm Go `gobackoff.wasm`", call: none, goroutines: 1}, goN.Retry(), goN},
		{&consultResult{key: rowGoDeadlinePar, policy: "wasm Go `gobackoff.wasm`", call: deadline + "; pool of GOMAXPROCS instances", goroutines: procs}, goP.Retry(), goP},
	}
	reqs := retryRequests()
	per := max(o.policyCalls/o.reps, 1)
	for _, x := range rows {
		warmUp(x.p, reqs, x.r.goroutines, min(per, 20_000))
	}
	for rep := range o.reps {
		for j := range rows {
			x := rows[(j+rep)%len(rows)]
			measureRep(x.r, x.p, reqs, per, rep)
			logf("6 rep %d/%d %-16s p50 %v p99 %v allocs/call %s mean %s", rep+1, o.reps, x.r.key,
				last(x.r.p50), last(x.r.p99), lastF(x.r.allocs, "%.2f"), lastF(x.r.mean, "%.0fns"))
		}
	}
	for _, x := range rows {
		if x.m != nil {
			s := x.m.Stats()
			x.r.failures, x.r.fallbacks = s.Failures, s.Fallbacks
			if s.Fallbacks > 0 {
				logf("6 %s: %d failures, %d fallbacks", x.r.key, s.Failures, s.Fallbacks)
			}
		}
		res.rows = append(res.rows, x.r)
	}
	for _, m := range []*wasm.Module{watD, watN, goD, goN, goP} {
		_ = m.Close(ctx)
	}

	// The plugin last and alone: its health pings and gRPC goroutines would
	// add allocations to the other rows' counts.
	bin, built, cleanupBin := pluginBinary(o, root)
	defer cleanupBin()
	sum, err := fileSHA256(bin)
	if err != nil {
		fatalf("6: %v", err)
	}
	res.pluginBin, res.pluginSum, res.built = bin, sum, built
	pl, err := plugin.Launch(ctx, plugin.Options{Path: bin, SHA256: sum, Logger: logger})
	if err != nil {
		fatalf("6: launch plugin: %v", err)
	}
	pr, err := pl.Retry()
	if err != nil {
		_ = pl.Close()
		fatalf("6: plugin: %v", err)
	}
	r := &consultResult{key: rowPlugin, policy: "plugin (example, `" + filepath.Base(bin) + "`)", call: fmt.Sprintf("gRPC over a unix socket to another process, default `CallTimeout` (%v)", plugin.DefaultCallTimeout), goroutines: 1}
	pper := max(o.pluginCalls/o.reps, 1)
	warmUp(pr, reqs, 1, min(pper, 1000))
	for rep := range o.reps {
		measureRep(r, pr, reqs, pper, rep)
		logf("6 rep %d/%d %-16s p50 %v p99 %v allocs/call %s mean %s", rep+1, o.reps, r.key,
			last(r.p50), last(r.p99), lastF(r.allocs, "%.1f"), lastF(r.mean, "%.0fns"))
	}
	st := pl.Stats()
	r.failures, r.fallbacks = st.Retry.Failures, st.Retry.Fallbacks
	if st.Retry.Fallbacks > 0 || st.Restarts > 0 {
		logf("6 plugin: %d failures, %d fallbacks, %d restarts", st.Retry.Failures, st.Retry.Fallbacks, st.Restarts)
	}
	_ = pl.Close()
	res.rows = append(res.rows, r)
	return res
}

// measureInstances loads bin: once on a runtime with an empty disk cache
// (compile), once on a new runtime reading that cache, then loads more
// times on that runtime keeping every module (the HeapInuse delta per
// Load), and finally forces a pool of k instances in one module (the
// HeapInuse delta per extra instance).
func measureInstances(ctx context.Context, name string, bin, cfg []byte, cacheDir string, loads int, logger *slog.Logger) *instResult {
	res := &instResult{name: name, size: len(bin)}
	opts := wasm.ModuleOptions{Name: "inst", Config: cfg}
	timeLoad := func(cache string) time.Duration {
		rt, err := wasm.NewRuntime(ctx, wasm.RuntimeOptions{CacheDir: cache, Logger: logger})
		if err != nil {
			fatalf("6: %v", err)
		}
		defer rt.Close(ctx)
		t := time.Now()
		m, err := rt.Load(ctx, bin, opts)
		d := time.Since(t)
		if err != nil {
			fatalf("6: load %s: %v", name, err)
		}
		_ = m.Close(ctx)
		return d
	}
	res.loadCold = timeLoad(cacheDir) // the directory is empty for this module
	res.loadDisk = timeLoad(cacheDir)

	rt, err := wasm.NewRuntime(ctx, wasm.RuntimeOptions{CacheDir: cacheDir, Logger: logger})
	if err != nil {
		fatalf("6: %v", err)
	}
	defer rt.Close(ctx)
	// One Load first so the heap baseline includes what every later Load
	// shares (the compiled module in the engine).
	first, err := rt.Load(ctx, bin, opts)
	if err != nil {
		fatalf("6: load %s: %v", name, err)
	}
	defer first.Close(ctx)
	h0 := heapNow()
	mods := make([]*wasm.Module, 0, loads)
	for range loads {
		t := time.Now()
		m, err := rt.Load(ctx, bin, opts)
		d := time.Since(t)
		if err != nil {
			fatalf("6: load %s: %v", name, err)
		}
		s := m.Stats()
		if s.InstancesCreated != 1 {
			fatalf("6: %s: Load created %d instances, want 1", name, s.InstancesCreated)
		}
		res.loads = append(res.loads, d)
		res.inst = append(res.inst, s.InstantiateTime)
		mods = append(mods, m)
	}
	h1 := heapNow()
	res.liveLoad, res.inuseLoad = h1.delta(h0, loads)
	for _, m := range mods {
		_ = m.Close(ctx)
	}

	// A pool of k instances: Load sizes the pool by GOMAXPROCS, so raise it
	// for the Load and for the goroutines that force the pool to fill (on
	// 2 CPUs, k threads get preempted by the OS inside calls), then restore.
	// Without a deadline: with one, every call starts a watchdog goroutine,
	// and the goroutine descriptors the runtime keeps for reuse would count
	// as instance memory.
	const k = 8
	prev := runtime.GOMAXPROCS(k)
	m, err := rt.Load(ctx, bin, wasm.ModuleOptions{Name: "inst-pool", Config: cfg, CallTimeout: wasm.NoCallTimeout})
	if err != nil {
		runtime.GOMAXPROCS(prev)
		fatalf("6: load %s: %v", name, err)
	}
	p := m.Retry()
	reqs := retryRequests()
	h2 := heapNow()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for j := range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				p.DecideRetry(context.Background(), reqs[(i+j)&reqMask])
			}
		}()
	}
	for t := time.Now(); m.Stats().Instances < k && time.Since(t) < 5*time.Second; {
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
	runtime.GOMAXPROCS(prev)
	s := m.Stats()
	h3 := heapNow()
	res.forced, res.forcedCap = s.Instances, m.MaxInstances()
	if s.Instances > 1 {
		res.liveInst, res.inuseInst = h3.delta(h2, s.Instances-1)
	}
	if s.Failures > 0 {
		logf("6 %s: %d failures while forcing instances", name, s.Failures)
	}
	_ = m.Close(ctx)
	logf("6 %s: Load cold %v, disk cache %v; instantiate median %v; heap per Load %s live (%s in use), per extra instance %s (%s) over %d instances",
		name, res.loadCold, res.loadDisk, medianDur(res.inst), bytesStr(res.liveLoad), bytesStr(res.inuseLoad), bytesStr(res.liveInst), bytesStr(res.inuseInst), res.forced)
	return res
}

// heap is the Go heap after a full GC: live bytes (HeapAlloc; a forced
// GC finishes sweeping, so it is exactly the live objects) and bytes in
// spans in use (HeapInuse: live objects plus the free room in their
// spans).
type heap struct{ live, inuse uint64 }

func heapNow() heap {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return heap{m.HeapAlloc, m.HeapInuse}
}

// delta is (h - h0) / n for both figures.
func (h heap) delta(h0 heap, n int) (live, inuse float64) {
	return float64(int64(h.live)-int64(h0.live)) / float64(n), float64(int64(h.inuse)-int64(h0.inuse)) / float64(n)
}

// mainModuleDir is the directory of github.com/coordhost/coordhost as this
// module sees it (the `replace => ../`).
func mainModuleDir() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/coordhost/coordhost").Output()
	if err != nil {
		return "", fmt.Errorf("go list -m github.com/coordhost/coordhost (run from bench/): %w", err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		return "", fmt.Errorf("go list -m github.com/coordhost/coordhost: no directory")
	}
	return dir, nil
}

// pluginBinary returns -plugin-bin, or builds the example plugin from the
// main module into a temporary directory.
func pluginBinary(o options, root string) (path string, built bool, cleanup func()) {
	if o.pluginBin != "" {
		return o.pluginBin, false, func() {}
	}
	dir, err := os.MkdirTemp("", "lockbench-plugin-")
	if err != nil {
		fatalf("6: %v", err)
	}
	removeOnExit(dir)
	path = filepath.Join(dir, "coordhost-example-plugin")
	t := time.Now()
	cmd := exec.Command("go", "build", "-o", path, pluginPkg)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		fatalf("6: go build %s: %v\n%s", pluginPkg, err, out)
	}
	logf("6 built %s in %v", pluginPkg, time.Since(t).Round(time.Millisecond))
	return path, true, func() { os.RemoveAll(dir) }
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func last[T any](s []T) T {
	var z T
	if len(s) == 0 {
		return z
	}
	return s[len(s)-1]
}

func lastF(s []float64, format string) string {
	if len(s) == 0 {
		return "–"
	}
	return fmt.Sprintf(format, s[len(s)-1])
}

func durs(d []time.Duration) []float64 {
	out := make([]float64, len(d))
	for i, v := range d {
		out[i] = float64(v)
	}
	return out
}

// medianDur is the median of d.
func medianDur(d []time.Duration) time.Duration { return time.Duration(median(durs(d))) }

// ns formats a short duration with nanosecond resolution.
func ns(d time.Duration) string {
	switch {
	case d < 10*time.Microsecond:
		return fmt.Sprintf("%d ns", d.Nanoseconds())
	case d < time.Millisecond:
		return fmt.Sprintf("%.1f µs", float64(d)/1e3)
	}
	return dur(d)
}

func bytesStr(b float64) string {
	switch {
	case b >= 1<<20 || b <= -(1<<20):
		return fmt.Sprintf("%.2f MiB", b/(1<<20))
	case b >= 1<<10 || b <= -(1<<10):
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	}
	return fmt.Sprintf("%.0f B", b)
}
