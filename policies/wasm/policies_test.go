package wasm

import (
	"context"
	"errors"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordhost/coordhost/plugins/sdk/guest"
	"github.com/coordhost/coordhost/policies"
)

const ms = time.Millisecond

// recordingObserver keeps every CallInfo.
type recordingObserver struct {
	mu    sync.Mutex
	calls []CallInfo
}

func (o *recordingObserver) ObserveCall(c CallInfo) {
	o.mu.Lock()
	o.calls = append(o.calls, c)
	o.mu.Unlock()
}

func (o *recordingObserver) outcomes() []Outcome {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []Outcome
	for _, c := range o.calls {
		out = append(out, c.Outcome)
	}
	return out
}

var sentinelRetry = policies.RetryFunc(func(context.Context, policies.RetryRequest) policies.RetryDecision {
	return policies.RetryDecision{Action: policies.RetryAfter, Delay: 777 * ms}
})

func TestEchoRetryEncoding(t *testing.T) {
	r := newRuntime(t, RuntimeOptions{})
	cfg := []byte(`{"k":1}`)
	m := load(t, r, testdata("echo"), ModuleOptions{Name: "echo", Config: cfg, FallbackRetry: sentinelRetry})
	p := m.Retry()
	wait := func(d time.Duration) policies.RetryDecision {
		return policies.RetryDecision{Action: policies.WaitForWake, Delay: d}
	}
	after := func(d time.Duration) policies.RetryDecision {
		return policies.RetryDecision{Action: policies.RetryAfter, Delay: d}
	}
	giveUp := policies.RetryDecision{Action: policies.GiveUp}
	for _, c := range []struct {
		name string
		req  policies.RetryRequest
		want policies.RetryDecision
	}{
		{"elapsed rounds down", policies.RetryRequest{Attempt: 1, Elapsed: 1234*ms + 999*time.Microsecond}, wait(1234 * ms)},
		{"negative elapsed is 0", policies.RetryRequest{Attempt: 1, Elapsed: -5 * ms}, wait(0)},
		{"hint rounds up", policies.RetryRequest{Attempt: 2, HolderTTL: 10*ms + 1}, after(11 * ms)},
		{"hint exact", policies.RetryRequest{Attempt: 2, HolderTTL: 10 * ms}, after(10 * ms)},
		{"hint zero", policies.RetryRequest{Attempt: 2, HolderTTL: 0}, after(0)},
		{"unknown hint is -1", policies.RetryRequest{Attempt: 2, HolderTTL: -1}, giveUp}, // -2-(-1) = -1
		{"give up", policies.RetryRequest{Attempt: 3}, giveUp},
		{"rand", policies.RetryRequest{Attempt: 4, Rand: 0x12_3456_789a}, wait(0x12_3456_789a * ms)},
		{"rand high bits", policies.RetryRequest{Attempt: 5, Rand: 0xdead_beef_0000_0001}, wait(0xdead_beef * ms)},
		{"reason contended", policies.RetryRequest{Attempt: 6, Reason: policies.ReasonContended}, wait(1 * ms)},
		{"reason error", policies.RetryRequest{Attempt: 6, Reason: policies.ReasonError}, wait(2 * ms)},
		{"configured once", policies.RetryRequest{Attempt: 8}, wait(1 * ms)},
		{"config length", policies.RetryRequest{Attempt: 9}, wait(time.Duration(len(cfg)) * ms)},
		{"attempt passed", policies.RetryRequest{Attempt: 42}, wait(42 * ms)},
		{"negative attempt is 0", policies.RetryRequest{Attempt: -3}, wait(0)},
		{"huge attempt is capped", policies.RetryRequest{Attempt: math.MaxInt32 + 10}, wait(math.MaxInt32 * ms)},
		{"bad result falls back", policies.RetryRequest{Attempt: 7}, after(777 * ms)},
	} {
		if got := p.DecideRetry(context.Background(), c.req); got != c.want {
			t.Errorf("%s: %+v: got %+v, want %+v", c.name, c.req, got, c.want)
		}
	}
	s := m.Stats()
	if s.BadResults != 1 || s.Failures != 1 || s.Fallbacks != 1 || s.InstancesDiscarded != 1 {
		t.Errorf("stats %+v, want exactly one bad result", s)
	}
}

func TestRetryEncodingMatchesGuestSDK(t *testing.T) {
	for _, v := range []int64{0, 1, 1 << 40, MaxDelayMS, MaxDelayMS + 1, math.MaxInt64, -1, -2, -3, -MaxDelayMS - 2, -MaxDelayMS - 3, math.MinInt64} {
		d, ok := decodeRetry(v)
		a, gms, gok := guest.DecodeRetry(v)
		if ok != gok {
			t.Errorf("%d: host ok %v, guest ok %v", v, ok, gok)
			continue
		}
		if !ok {
			continue
		}
		if int(d.Action) != int(a) || d.Delay != time.Duration(gms)*ms {
			t.Errorf("%d: host %+v, guest %v %d ms", v, d, a, gms)
		}
		if got := guest.EncodeRetry(a, gms); got != v && !(v == -1 && a == guest.ActionGiveUp) {
			t.Errorf("%d: guest re-encodes as %d", v, got)
		}
	}
	if policies.WaitForWake != policies.RetryAction(guest.ActionWaitForWake) ||
		policies.RetryAfter != policies.RetryAction(guest.ActionRetryAfter) ||
		policies.GiveUp != policies.RetryAction(guest.ActionGiveUp) ||
		policies.ReasonContended != policies.RetryReason(guest.ReasonContended) ||
		policies.ReasonError != policies.RetryReason(guest.ReasonError) ||
		MaxDelayMS != guest.MaxDelayMS {
		t.Error("guest SDK constants disagree with the host's")
	}
}

func TestStarvation(t *testing.T) {
	r := newRuntime(t, RuntimeOptions{})
	m := load(t, r, testdata("echo"), ModuleOptions{})
	p := m.Starvation()
	for _, c := range []struct {
		req  policies.StarvationRequest
		want time.Duration
	}{
		{policies.StarvationRequest{Readers: 0, Writers: 3}, policies.Unbounded},
		{policies.StarvationRequest{Readers: 2, Writers: 3, OldestWriterWait: 4*ms + 999*time.Microsecond}, 2_003_004 * ms},
		{policies.StarvationRequest{Readers: 99}, 0}, // trap: the default fallback is strict writer preference
	} {
		if got := p.WriterBound(context.Background(), c.req); got != c.want {
			t.Errorf("%+v: got %v, want %v", c.req, got, c.want)
		}
	}
	m2 := load(t, r, testdata("trap"), ModuleOptions{
		FallbackStarvation: policies.StarvationFunc(func(context.Context, policies.StarvationRequest) time.Duration { return 42 * ms }),
	})
	if got := m2.Starvation().WriterBound(context.Background(), policies.StarvationRequest{Readers: 1}); got != 42*ms {
		t.Errorf("fallback: got %v", got)
	}
}

func TestPartitionRoundTrip(t *testing.T) {
	r := newRuntime(t, RuntimeOptions{})
	m := load(t, r, testdata("echo"), ModuleOptions{})
	p := m.Partition()
	for _, req := range []policies.PartitionRequest{
		{Kind: "lock", Name: "invoice", Attributes: map[string]string{"tenant": "acme", "route": "/pay", "a": "", "": "empty key", "ünï": "cödé\x00\xff"}},
		{Kind: "rate_limit", Name: "checkout"},
		{Kind: "lock", Name: strings.Repeat("n", 5000)},
	} {
		key, err := p.PartitionKey(context.Background(), req)
		if err != nil {
			t.Fatalf("%v", err)
		}
		want := string(guest.AppendPartition(nil, req.Kind, req.Name, req.Attributes))
		if key != want {
			t.Fatalf("host encoding differs from the SDK's:\n got %q\nwant %q", key, want)
		}
		dec, err := guest.DecodePartition([]byte(key))
		if err != nil {
			t.Fatal(err)
		}
		if dec.Kind != req.Kind || dec.Name != req.Name || len(dec.Attrs) != len(req.Attributes) {
			t.Fatalf("decoded %+v from %+v", dec, req)
		}
		if !slices.IsSortedFunc(dec.Attrs, func(a, b guest.Attr) int { return strings.Compare(a.Key, b.Key) }) {
			t.Errorf("attributes not sorted: %+v", dec.Attrs)
		}
		for _, a := range dec.Attrs {
			if req.Attributes[a.Key] != a.Value {
				t.Errorf("attribute %q: %q, want %q", a.Key, a.Value, req.Attributes[a.Key])
			}
		}
	}
	if s := m.Stats(); s.OK != 3 || s.Failures != 0 {
		t.Errorf("stats %+v", s)
	}
}

func TestPartitionFailsClosed(t *testing.T) {
	r := newRuntime(t, RuntimeOptions{})
	obs := &recordingObserver{}
	m := load(t, r, testdata("echo"), ModuleOptions{Observer: obs, CircuitThreshold: -1})
	p := m.Partition()
	for _, c := range []struct {
		kind    string
		attrs   map[string]string
		outcome Outcome
		msg     string
		call    bool // wraps ErrCall
	}{
		{kind: "e", outcome: OutcomeRefused, msg: "echo: refused"},
		{kind: "z", outcome: OutcomeRefused, msg: "empty partition key"},
		{kind: "k", attrs: map[string]string{"big": strings.Repeat("x", 9000)}, outcome: OutcomeRefused, msg: "does not fit the I/O area of 8192 bytes"},
		{kind: "x", outcome: OutcomeBadResult, msg: "partition_key returned 2147483647", call: true},
		{kind: "t", outcome: OutcomeTrap, msg: "unreachable", call: true},
	} {
		key, err := p.PartitionKey(context.Background(), policies.PartitionRequest{Kind: c.kind, Name: "n", Attributes: c.attrs})
		if key != "" || !errors.Is(err, policies.ErrPartition) || !strings.Contains(err.Error(), c.msg) || errors.Is(err, ErrCall) != c.call {
			t.Errorf("kind %q: %q, %v; want an ErrPartition containing %q (ErrCall: %v)", c.kind, key, err, c.msg, c.call)
		}
		if got := obs.outcomes(); got[len(got)-1] != c.outcome {
			t.Errorf("kind %q: outcome %v, want %v", c.kind, got[len(got)-1], c.outcome)
		}
	}
	if s := m.Stats(); s.Refused != 3 || s.Failures != 2 || s.InstancesDiscarded != 2 {
		t.Errorf("stats %+v", s)
	}
}

func TestTrapDiscardsInstanceAndFallsBack(t *testing.T) {
	r := newRuntime(t, RuntimeOptions{})
	obs := &recordingObserver{}
	logger, logs := newLogRecorder()
	m := load(t, r, testdata("trap"), ModuleOptions{Name: "trap", FallbackRetry: sentinelRetry, Observer: obs, Logger: logger})
	for i := 1; i <= 3; i++ {
		if got := m.Retry().DecideRetry(context.Background(), policies.RetryRequest{Attempt: i}); got.Delay != 777*ms {
			t.Fatalf("got %+v, want the fallback", got)
		}
		s := m.Stats()
		if s.Traps != uint64(i) || s.InstancesDiscarded != uint64(i) || s.InstancesCreated != uint64(i) || s.Instances != 0 {
			t.Fatalf("after %d traps: %+v", i, s)
		}
	}
	if _, err := m.Partition().PartitionKey(context.Background(), policies.PartitionRequest{Kind: "lock"}); !errors.Is(err, policies.ErrPartition) || !errors.Is(err, ErrCall) {
		t.Errorf("partition: %v", err)
	}
	if got := obs.outcomes(); !slices.Equal(got, []Outcome{OutcomeTrap, OutcomeTrap, OutcomeTrap, OutcomeTrap}) {
		t.Errorf("observed %v", got)
	}
	if n := countLines(logs(), "call failed"); n != 4 {
		t.Errorf("%d failure warnings, want 4:\n%s", n, strings.Join(logs(), "\n"))
	}
	if err := m.SelfTest(context.Background()); err == nil || !errors.Is(err, ErrCall) {
		t.Errorf("SelfTest: %v", err)
	}
}

func TestDeadline(t *testing.T) {
	checkLeaks := noNewGoroutines(t)
	r := newRuntime(t, RuntimeOptions{})
	m := load(t, r, testdata("loop"), ModuleOptions{CallTimeout: 20 * ms, FallbackRetry: sentinelRetry, CircuitThreshold: -1})
	start := time.Now()
	if got := m.Retry().DecideRetry(context.Background(), policies.RetryRequest{Attempt: 1}); got.Delay != 777*ms {
		t.Fatalf("got %+v, want the fallback", got)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("the deadline took %v", el)
	}
	if got := m.Starvation().WriterBound(context.Background(), policies.StarvationRequest{Readers: 1}); got != 0 {
		t.Errorf("starvation: %v, want 0", got)
	}
	if _, err := m.Partition().PartitionKey(context.Background(), policies.PartitionRequest{}); !errors.Is(err, policies.ErrPartition) {
		t.Errorf("partition: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.SelfTest(ctx); err == nil {
		t.Error("SelfTest of a looping module passed")
	}
	s := m.Stats()
	if s.Timeouts != 6 || s.InstancesDiscarded != 6 || s.Instances != 0 {
		t.Errorf("stats %+v, want 6 timeouts", s)
	}
	// The watchdog goroutines of the calls are gone.
	if err := m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkLeaks()
}

func TestCircuitBreaker(t *testing.T) {
	r := newRuntime(t, RuntimeOptions{})
	obs := &recordingObserver{}
	const cooldown = 100 * ms
	m := load(t, r, testdata("echo"), ModuleOptions{
		FallbackRetry: sentinelRetry, Observer: obs, CircuitThreshold: 3, CircuitCooldown: cooldown,
	})
	p := m.Retry()
	fallback := policies.RetryDecision{Action: policies.RetryAfter, Delay: 777 * ms}
	fromModule := policies.RetryDecision{Action: policies.WaitForWake, Delay: 42 * ms}
	trap := policies.RetryRequest{Attempt: 10}
	good := policies.RetryRequest{Attempt: 42}

	// Two failures, a success (resets the count), three failures: opens.
	for _, req := range []policies.RetryRequest{trap, trap, good, trap, trap} {
		p.DecideRetry(context.Background(), req)
	}
	if m.Stats().CircuitOpen {
		t.Fatal("open before 3 consecutive failures")
	}
	p.DecideRetry(context.Background(), trap)
	s := m.Stats()
	if !s.CircuitOpen || s.CircuitOpens != 1 {
		t.Fatalf("not open after 3 consecutive failures: %+v", s)
	}
	// Open: the module is not called.
	created := s.InstancesCreated
	if got := p.DecideRetry(context.Background(), good); got != fallback {
		t.Fatalf("open circuit: %+v, want the fallback", got)
	}
	if _, err := m.Partition().PartitionKey(context.Background(), policies.PartitionRequest{Kind: "lock"}); !errors.Is(err, ErrCircuitOpen) || !errors.Is(err, policies.ErrPartition) {
		t.Fatalf("partition while open: %v", err)
	}
	if got := m.Starvation().WriterBound(context.Background(), policies.StarvationRequest{Readers: 1}); got != 0 {
		t.Fatalf("starvation while open: %v", got)
	}
	// Half-open after the cooldown: the probe fails, it opens again.
	time.Sleep(cooldown + 20*ms)
	p.DecideRetry(context.Background(), trap)
	if s := m.Stats(); !s.CircuitOpen || s.CircuitOpens != 2 {
		t.Fatalf("a failed probe did not reopen: %+v", s)
	}
	if got := p.DecideRetry(context.Background(), good); got != fallback {
		t.Fatalf("reopened circuit: %+v, want the fallback", got)
	}
	// The next probe succeeds: closed again.
	time.Sleep(cooldown + 20*ms)
	if got := p.DecideRetry(context.Background(), good); got != fromModule {
		t.Fatalf("probe: %+v, want the module's answer", got)
	}
	if got := p.DecideRetry(context.Background(), good); got != fromModule {
		t.Fatalf("closed again: %+v, want the module's answer", got)
	}
	s = m.Stats()
	if s.CircuitOpen || s.InstancesCreated != created+2 {
		t.Errorf("stats %+v", s)
	}
	want := []Outcome{OutcomeTrap, OutcomeTrap, OutcomeOK, OutcomeTrap, OutcomeTrap, OutcomeTrap,
		OutcomeCircuitOpen, OutcomeCircuitOpen, OutcomeCircuitOpen, OutcomeTrap, OutcomeCircuitOpen, OutcomeOK, OutcomeOK}
	if got := obs.outcomes(); !slices.Equal(got, want) {
		t.Errorf("outcomes\n got %v\nwant %v", got, want)
	}
}

func TestConfigOncePerInstanceAndLogs(t *testing.T) {
	logger, logs := newLogRecorder()
	r := newRuntime(t, RuntimeOptions{Logger: logger})
	cfg := `{"base_ms":25}`
	m := load(t, r, testdata("echo"), ModuleOptions{Name: "echo-cfg", Config: []byte(cfg), CircuitThreshold: -1})
	p := m.Retry()
	for range 5 {
		for range 10 {
			if d := p.DecideRetry(context.Background(), policies.RetryRequest{Attempt: 8}); d.Delay != 1*ms {
				t.Fatalf("policy_configure ran %v times in one instance", d.Delay/ms)
			}
			if d := p.DecideRetry(context.Background(), policies.RetryRequest{Attempt: 9}); d.Delay != time.Duration(len(cfg))*ms {
				t.Fatalf("config length %v", d.Delay/ms)
			}
		}
		p.DecideRetry(context.Background(), policies.RetryRequest{Attempt: 10}) // trap: the next call gets a new instance
	}
	// Attempt 13 logs 200 lines: the rate limit keeps 100 a second.
	p.DecideRetry(context.Background(), policies.RetryRequest{Attempt: 13})
	s := m.Stats()
	if s.InstancesCreated != 6 {
		t.Errorf("%d instances created, want 6", s.InstancesCreated)
	}
	// echo's policy_configure logs the config through policy_host.log.
	if n := countLines(logs(), "INFO "+cfg+" policy=echo-cfg"); n != 6 {
		t.Errorf("config logged %d times, want once per instance (6):\n%s", n, strings.Join(logs(), "\n"))
	}
	if n := countLines(logs(), `INFO {"ba policy=echo-cfg`); n != logLinesPerSec-1 { // the instance logged its config first
		t.Errorf("%d rate-limited lines, want %d", n, logLinesPerSec-1)
	}
}

func TestMemoryLimit(t *testing.T) {
	r := newRuntime(t, RuntimeOptions{MemoryLimitPages: 64})
	m := load(t, r, testdata("grow"), ModuleOptions{MemoryPages: 4, FallbackRetry: sentinelRetry, CircuitThreshold: -1})
	p := m.Retry()
	if got := p.DecideRetry(context.Background(), policies.RetryRequest{Attempt: 2}); got.Delay != 3*ms {
		t.Fatalf("grow to 3 pages: %+v", got)
	}
	if got := p.DecideRetry(context.Background(), policies.RetryRequest{Attempt: 1}); got.Delay != 4*ms {
		t.Fatalf("grow to 4 pages: %+v", got)
	}
	if got := p.DecideRetry(context.Background(), policies.RetryRequest{Attempt: 1}); got.Delay != 777*ms {
		t.Fatalf("grow to 5 pages: %+v, want the fallback", got)
	}
	if s := m.Stats(); s.Traps != 1 || s.InstancesDiscarded != 1 {
		t.Errorf("stats %+v", s)
	}
	// Without MemoryPages the runtime's limit applies.
	m2 := load(t, r, testdata("grow"), ModuleOptions{FallbackRetry: sentinelRetry})
	if got := m2.Retry().DecideRetry(context.Background(), policies.RetryRequest{Attempt: 63}); got.Delay != 64*ms {
		t.Fatalf("grow to the runtime limit: %+v", got)
	}
	if got := m2.Retry().DecideRetry(context.Background(), policies.RetryRequest{Attempt: 1}); got.Delay != 777*ms {
		t.Fatalf("beyond the runtime limit: %+v", got)
	}
	// A Go module needs more than a few pages to start.
	_, err := r.Load(context.Background(), readWasm(t, goBackoff), ModuleOptions{MemoryPages: 8})
	if !errors.Is(err, ErrMemory) {
		t.Fatalf("Go module in 8 pages: %v", err)
	}
	t.Log(err)
}

func TestNoCallTimeoutAllocatesNothing(t *testing.T) {
	r := newRuntime(t, RuntimeOptions{})
	m := load(t, r, watConstant, ModuleOptions{CallTimeout: NoCallTimeout})
	p := m.Retry()
	req := policies.RetryRequest{Attempt: 2, Reason: policies.ReasonContended, Elapsed: 5 * ms, HolderTTL: 100 * ms, Rand: 12345}
	if got := p.DecideRetry(context.Background(), req); got.Delay != 10*ms {
		t.Fatalf("got %+v", got)
	}
	allocs := testing.AllocsPerRun(1000, func() { p.DecideRetry(context.Background(), req) })
	t.Logf("%.1f allocations per decision without a deadline", allocs)
	if allocs != 0 && !raceEnabled {
		t.Errorf("%.1f allocations per decision, want 0", allocs)
	}
	if err := m.SelfTest(context.Background()); err != nil {
		t.Error(err)
	}
}

func TestConcurrency(t *testing.T) {
	// A pool of 4 whatever the machine, so that the bound is exercised.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	r := newRuntime(t, RuntimeOptions{})
	m := load(t, r, testdata("echo"), ModuleOptions{FallbackRetry: sentinelRetry, CircuitThreshold: -1})
	mt := load(t, r, goTenant, ModuleOptions{})
	const goroutines, calls = 32, 200
	var wg sync.WaitGroup
	errs := make(chan string, goroutines)
	stop := make(chan struct{})
	var peakSeen int
	var peakMu sync.Mutex
	sampled := make(chan struct{})
	go func() { // sample the live instance count
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			default:
			}
			n := m.Stats().Instances
			peakMu.Lock()
			peakSeen = max(peakSeen, n)
			peakMu.Unlock()
			time.Sleep(50 * time.Microsecond)
		}
	}()
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range calls {
				attempt := 14 + (g*calls+i)%1000
				want := time.Duration(attempt) * ms
				if i%50 == 49 {
					attempt, want = 10, 777*ms // a trap now and then
				}
				if got := m.Retry().DecideRetry(context.Background(), policies.RetryRequest{Attempt: attempt}); got.Delay != want {
					errs <- "retry: wrong decision"
					return
				}
				if i%10 == 0 {
					tenant := string(rune('a' + g%26))
					key, err := mt.Partition().PartitionKey(context.Background(), policies.PartitionRequest{Attributes: map[string]string{"tenant": tenant}})
					if err != nil || key != "tenant:"+tenant {
						errs <- "partition: wrong key"
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-sampled
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	s := m.Stats()
	limit := m.MaxInstances()
	if limit != maxInstances() {
		t.Errorf("pool size %d, want GOMAXPROCS %d", limit, maxInstances())
	}
	if s.PeakInstances > limit || peakSeen > limit {
		t.Errorf("peak of %d (sampled %d) instances, above GOMAXPROCS %d", s.PeakInstances, peakSeen, limit)
	}
	wantTraps := uint64(goroutines * calls / 50)
	if s.Calls != goroutines*calls || s.Traps != wantTraps || s.InstancesDiscarded != wantTraps {
		t.Errorf("stats %+v", s)
	}
	if ts := mt.Stats(); ts.PeakInstances > mt.MaxInstances() || ts.Failures != 0 {
		t.Errorf("tenant stats %+v", ts)
	}
	t.Logf("echo: %d instances created for %d calls (peak %d, GOMAXPROCS %d); gotenant: %d created",
		s.InstancesCreated, s.Calls, s.PeakInstances, limit, mt.Stats().InstancesCreated)
}

func TestLineWriter(t *testing.T) {
	logger, logs := newLogRecorder()
	w := &lineWriter{info: &instInfo{logger: logger}, stream: "stderr"}
	w.Write([]byte("panic: boom\ngorou"))
	w.Write([]byte("tine 1 [running]:\n"))
	w.Write([]byte(strings.Repeat("y", 3000) + "\n"))
	got := logs()
	if len(got) != 3 || got[0] != "INFO panic: boom stream=stderr" || got[1] != "INFO goroutine 1 [running]: stream=stderr" ||
		!strings.HasSuffix(got[2], truncatedSuffix+" stream=stderr") || len(got[2]) > maxLogLine+100 {
		t.Errorf("lines %q", got)
	}
}

func TestEncodePartitionTooSmall(t *testing.T) {
	var keys []string
	req := policies.PartitionRequest{Kind: "lock", Name: "n", Attributes: map[string]string{"a": "b"}}
	full := guest.AppendPartition(nil, req.Kind, req.Name, req.Attributes)
	for size := 0; size < len(full); size++ {
		if _, ok := encodePartition(make([]byte, size), req, &keys); ok {
			t.Fatalf("encoded into %d bytes, needs %d", size, len(full))
		}
	}
	buf := make([]byte, len(full))
	if n, ok := encodePartition(buf, req, &keys); !ok || string(buf[:n]) != string(full) {
		t.Fatalf("exact fit: %v %q", ok, buf[:n])
	}
	if len(keys) != 0 || cap(keys) == 0 {
		t.Errorf("scratch not reset: %q", keys)
	}
}

func TestDurationsToMS(t *testing.T) {
	for _, c := range []struct {
		d           time.Duration
		floor, hint int64
	}{
		{0, 0, 0}, {1, 0, 1}, {ms, 1, 1}, {ms + 1, 1, 2}, {-1, 0, -1}, {math.MaxInt64, MaxDelayMS, MaxDelayMS + 1},
	} {
		if f, h := floorMS(c.d), hintMS(c.d); f != c.floor || h != c.hint {
			t.Errorf("%v: floor %d hint %d, want %d %d", c.d, f, h, c.floor, c.hint)
		}
	}
}
