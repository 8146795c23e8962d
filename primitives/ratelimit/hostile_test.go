package ratelimit_test

// Hostile tests: attacks on the contract the doc comments state. A test
// that found a bug is skipped with "FINDING n: ..." so the branch stays
// green; the others are attacks the code survived.

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/faulttest"
	"github.com/coordhost/coordhost/internal/ratetest"
	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives"
	"github.com/coordhost/coordhost/primitives/internal/clock"
	"github.com/coordhost/coordhost/primitives/ratelimit"
	"github.com/redis/rueidis"
)

// A refusal whose permits can come back carries RetryAfter > 0 (Result
// doc: 0 only when acquired or when the request can never succeed). With
// OldestFirst, a call that finds the queue full is answered by a peek; when
// the permits it asks for are free right now (the queue's head waits for
// more than are free), the peek grants, Acquire forces Acquired false and
// returns RetryAfter 0, and WaitN takes that for "more than the limit".
func TestHostileQueueFullRetryAfterZero(t *testing.T) {

	c := redistest.Start(t).Client(t)
	ls := newLimiters(t, c, "h:")
	ctx := xtest.Ctx(t, 20*time.Second)
	l := must(t)(ls.FixedWindow("qfull", ratelimit.FixedWindowOptions{Limit: 2, Window: time.Minute, QueueLimit: 2}))
	if r := try(t, ctx, l, 1); !r.Acquired {
		t.Fatal(describe(r))
	}
	// The head waits for 2 permits (1 is free): it fills the queue.
	out := make(chan outcome, 1)
	qctx, cancel := context.WithCancel(context.Background()) // no deadline: queued calls wait for permits a minute away
	defer cancel()
	queued(t, qctx, l, 2, out, "head")

	r, err := l.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Acquired && r.RetryAfter <= 0 {
		t.Errorf("Acquire(1) with a full queue and 1 permit free: %s (refused, RetryAfter 0 means 'never')", describe(r))
	}
	wctx, wcancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer wcancel()
	if err := l.WaitN(wctx, 1); errors.Is(err, ratelimit.ErrExceedsLimit) {
		t.Errorf("WaitN(1) on a limit of 2: %v", err)
	}
	cancel()
	<-out
}

// QueueLimit 0 means no queue (FixedWindowOptions doc), so Acquire
// decides at once like TryAcquire. A call for 0 permits adds 0 to the
// queue's permit count, so it passes the QueueLimit check and queues
// anyway, on every limiter, without any bound on the number of callers.
func TestHostileZeroPermitsIgnoreQueueLimit(t *testing.T) {

	c := redistest.Start(t).Client(t)
	ls := newLimiters(t, c, "h:")
	ctx := xtest.Ctx(t, 20*time.Second)
	l := must(t)(ls.FixedWindow("zero", ratelimit.FixedWindowOptions{Limit: 1, Window: time.Minute}))
	if r := try(t, ctx, l, 1); !r.Acquired {
		t.Fatal(describe(r))
	}
	actx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	r, err := l.Acquire(actx, 0)
	if err != nil {
		t.Fatalf("Acquire(0) with QueueLimit 0 and no permit: %v (it queued)", err)
	}
	if r.Acquired || r.RetryAfter <= 0 {
		t.Fatalf("Acquire(0) with no permit: %s", describe(r))
	}
}

// NOPERM, READONLY and OOM are real errors (DESIGN §3): the fixed window
// returns them, does not fall back to the script (which would consume
// where INCREX was refused), does not take them for "no INCREX" (the
// server looked the command up before refusing it), and keeps asking
// INCREX.
func TestHostileIncrexRealErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode faulttest.IncrexMode
		word string
	}{
		{"noperm", faulttest.IncrexNoPerm, "NOPERM"},
		{"readonly", faulttest.IncrexReadOnly, "READONLY"},
		{"oom", faulttest.IncrexOOM, "OOM"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			shim, c := increxClient(t)
			shim.SetMode(tc.mode)
			ls := newLimiters(t, c, "x:")
			ctx := xtest.Ctx(t, 10*time.Second)
			l := must(t)(ls.FixedWindow("w", ratelimit.FixedWindowOptions{Limit: 3, Window: time.Minute}))
			for i := range 2 {
				r, err := l.TryAcquire(ctx, 1)
				if err == nil || !strings.Contains(err.Error(), tc.word) {
					t.Fatalf("call %d: %s, %v; want a %s error", i, describe(r), err, tc.word)
				}
				if errors.Is(err, primitives.ErrWrongType) {
					t.Fatalf("call %d: %v classified as ErrWrongType", i, err)
				}
			}
			if n := shim.Calls(); n != 2 {
				t.Fatalf("%d INCREX for 2 calls", n)
			}
			if ls.FastPath() == ratelimit.FastPathLua {
				t.Fatalf("fast path %v after a %s", ls.FastPath(), tc.word)
			}
			if err := c.Do(ctx, c.B().Get().Key("x:w").Build()).Error(); !rueidis.IsRedisNil(err) {
				t.Fatalf("the counter was written after a refused INCREX: %v", err)
			}
			if s := l.Statistics(); s.Granted != 0 || s.Rejected != 0 {
				t.Fatalf("errors counted as decisions: %+v", s)
			}
			shim.SetMode(faulttest.IncrexNative)
			if r := try(t, ctx, l, 1); !r.Acquired || r.Remaining != 2 {
				t.Fatalf("after the fault: %s", describe(r))
			}
		})
	}
}

// A counter someone set negative: the script refuses it as not a permit
// count (ErrWrongType, nothing written, see lua's "fixed: negative
// counter"). INCREX adds to it (value -5+1 is within UBOUND), the reply's
// negative value is then refused as "unreadable" (not ErrWrongType), and
// the counter has moved: each call consumes while failing, and once it
// reaches 0 the window grants Limit more on top.
func TestHostileIncrexNegativeCounter(t *testing.T) {

	_, c := increxClient(t)
	ls := newLimiters(t, c, "x:")
	ctx := xtest.Ctx(t, 10*time.Second)
	if err := c.Do(ctx, c.B().Set().Key("x:neg").Value("-5").Px(time.Minute).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	l := must(t)(ls.FixedWindow("neg", ratelimit.FixedWindowOptions{Limit: 3, Window: time.Minute}))
	_, err := l.TryAcquire(ctx, 1)
	v, _ := c.Do(ctx, c.B().Get().Key("x:neg").Build()).ToString()
	if !errors.Is(err, primitives.ErrWrongType) || v != "-5" {
		t.Fatalf("INCREX on a counter of -5: error %v (want ErrWrongType), counter now %q (want -5 untouched)", err, v)
	}
}

// A lost INCREX reply: the call fails with a transport error, INCREX is
// not retried by the client (it would consume twice), the fast path stays
// as it was, and the next call works on a new connection.
func TestHostileIncrexLostReply(t *testing.T) {
	srv := redistest.Start(t)
	shim := faulttest.StartIncrexShim(t, srv.Addr)
	proxy := faulttest.New(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{shim.Addr()}, DisableCache: true, DialCtxFn: proxy.DialCtxFn})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ls := newLimiters(t, c, "x:")
	ctx := xtest.Ctx(t, 20*time.Second)
	l := must(t)(ls.FixedWindow("lost", ratelimit.FixedWindowOptions{Limit: 5, Window: time.Minute}))
	// Two calls: learn INCREX, and let rueidis open the second
	// connection it uses for DoMulti, so the drop hits INCREX's reply and
	// not a handshake's.
	try(t, ctx, l, 1)
	try(t, ctx, l, 1)
	proxy.DropReplies(1)
	if _, err := l.TryAcquire(ctx, 1); err == nil {
		t.Fatal("no error for a lost reply")
	}
	if st := proxy.Stats(); st.DroppedReplies != 1 {
		t.Fatalf("proxy %+v", st)
	}
	// The drop may hit the reply of INCREX (then the shim saw 3) or of
	// a handshake before it was written (2): never a retry (4).
	n := shim.Calls()
	if n > 3 {
		t.Fatalf("%d INCREX for 3 calls: the lost one was retried", n)
	}
	if v := srv.MustCmd(t, "GET", "x:lost"); v != strconv.FormatInt(n, 10) {
		t.Fatalf("counter %s after %d INCREX", v, n)
	}
	if ls.FastPath() != ratelimit.FastPathIncrex {
		t.Fatalf("fast path %v after a transport error", ls.FastPath())
	}
	if r := try(t, ctx, l, 1); !r.Acquired || r.Remaining != 5-n-1 {
		t.Fatalf("after the lost reply: %s", describe(r))
	}
}

// A probe that ends with the caller's ctx (before or while it is sent)
// leaves the fast path unknown and lets the next call probe.
func TestHostileIncrexCancelledProbe(t *testing.T) {
	shim, c := increxClient(t)
	ls := newLimiters(t, c, "x:")
	ctx := xtest.Ctx(t, 10*time.Second)
	l := must(t)(ls.FixedWindow("cp", ratelimit.FixedWindowOptions{Limit: 5, Window: time.Minute}))
	dead, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.TryAcquire(dead, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled ctx: %v", err)
	}
	if ls.FastPath() != ratelimit.FastPathUnknown {
		t.Fatalf("fast path %v after a cancelled probe", ls.FastPath())
	}
	before := shim.Calls()
	if r := try(t, ctx, l, 1); !r.Acquired {
		t.Fatal(describe(r))
	}
	if shim.Calls() != before+1 || ls.FastPath() != ratelimit.FastPathIncrex {
		t.Fatalf("no probe after a cancelled one: %d INCREX, fast path %v", shim.Calls()-before, ls.FastPath())
	}
	if v, _ := c.Do(ctx, c.B().Get().Key("x:cp").Build()).ToString(); v != "1" && v != "2" {
		t.Fatalf("counter %q", v)
	}
}

// Many goroutines on one fixed window while the server flips between
// having INCREX and not (an upgrade and a failover to an older replica):
// INCREX and the script share one counter, so exactly Limit permits are
// granted in the window, every call is answered, and -race sees no race.
func TestHostileIncrexFlappingUnderLoad(t *testing.T) {
	shim, c := increxClient(t)
	ls := newLimiters(t, c, "x:")
	ratelimit.SetProbeInterval(ls, 0) // re-probe on every call after a refusal
	ctx := xtest.Ctx(t, 30*time.Second)
	const limit = 100
	l := must(t)(ls.FixedWindow("flap", ratelimit.FixedWindowOptions{Limit: limit, Window: time.Hour}))
	var granted atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			shim.SetMode([]faulttest.IncrexMode{faulttest.IncrexNative, faulttest.IncrexUnknown, faulttest.IncrexSyntaxError}[i%3])
			time.Sleep(time.Millisecond)
		}
	}()
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				r, err := l.TryAcquire(ctx, 1)
				if err != nil {
					t.Error(err)
					return
				}
				if r.Acquired {
					granted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	if g := granted.Load(); g != limit {
		t.Fatalf("%d granted in one window of limit %d (%d INCREX)", g, limit, shim.Calls())
	}
	if v := c.Do(ctx, c.B().Get().Key("x:flap").Build()); v.Error() != nil {
		t.Fatal(v.Error())
	} else if s, _ := v.ToString(); s != "100" {
		t.Fatalf("counter %s", s)
	}
}

// scriptCalls counts the scripts the server ran (EVALSHA and EVAL).
func scriptCalls(t *testing.T, s *redistest.Server) int {
	t.Helper()
	n := 0
	for _, line := range strings.Split(s.MustCmd(t, "INFO", "commandstats"), "\n") {
		if strings.HasPrefix(line, "cmdstat_evalsha:") || strings.HasPrefix(line, "cmdstat_eval:") {
			i := strings.Index(line, "calls=")
			j := strings.IndexByte(line[i:], ',')
			k, _ := strconv.Atoi(line[i+6 : i+j])
			n += k
		}
	}
	return n
}

// serverMicros reads the server's TIME.
func serverMicros(t *testing.T, s *redistest.Server) int64 {
	t.Helper()
	f := strings.Fields(s.MustCmd(t, "TIME"))
	a, _ := strconv.ParseInt(f[0], 10, 64)
	b, _ := strconv.ParseInt(f[1], 10, 64)
	return a*1_000_000 + b
}

// The queue never polls (Acquire doc): it retries when the server said.
// A sliding window whose key holds counts above 2^53 (someone else wrote
// them; the script accepts 16-digit counts) is refused with RetryAfter 0
// (lua TestRateLimitHostileSlidingHugeCounts), and the dispatcher takes
// that as "retry now": a queued Acquire hammers the server until its ctx
// ends, and WaitN calls it "more than the limit".
func TestHostileSlidingHugeCountsSpin(t *testing.T) {

	srv := redistest.Start(t)
	c := srv.Client(t)
	ls := newLimiters(t, c, "h:")
	ctx := xtest.Ctx(t, 20*time.Second)
	const window, segments = time.Minute, 10
	l := must(t)(ls.SlidingWindow("spin", ratelimit.SlidingWindowOptions{Limit: 1, Window: window, Segments: segments, QueueLimit: 1}))
	seg := window.Microseconds() / segments
	now := serverMicros(t, srv)
	current := (now/seg + 1) * seg
	srv.MustCmd(t, "HSET", "h:spin", strconv.FormatInt(current-seg, 10), "9007199254740992")
	srv.MustCmd(t, "HSET", "h:spin", strconv.FormatInt(current, 10), "3")
	before := scriptCalls(t, srv)
	actx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	r, err := l.Acquire(actx, 1)
	calls := scriptCalls(t, srv) - before
	t.Logf("Acquire: %s, %v after %d script calls", describe(r), err, calls)
	if calls > 3 {
		t.Errorf("one queued Acquire ran %d scripts in 300ms: the dispatcher polls", calls)
	}
	wctx, wcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer wcancel()
	if err := l.WaitN(wctx, 1); errors.Is(err, ratelimit.ErrExceedsLimit) {
		t.Errorf("WaitN(1) on a limit of 1: %v", err)
	}
}

// ErrQueueFull's doc: "Wait or WaitN could not queue (the queue holds
// QueueLimit permits already) and its ctx ends before the server said
// the permits would be back". Nothing returns it: WaitN answers
// ErrWouldExceedDeadline in that case, so errors.Is(err, ErrQueueFull)
// never holds.
func TestHostileErrQueueFullNeverReturned(t *testing.T) {

	c := redistest.Start(t).Client(t)
	ls := newLimiters(t, c, "h:")
	ctx := xtest.Ctx(t, 20*time.Second)
	l := must(t)(ls.FixedWindow("qf", ratelimit.FixedWindowOptions{Limit: 1, Window: time.Minute, QueueLimit: 1}))
	if r := try(t, ctx, l, 1); !r.Acquired {
		t.Fatal(describe(r))
	}
	out := make(chan outcome, 1)
	qctx, cancel := context.WithCancel(context.Background()) // no deadline: queued calls wait for permits a minute away
	defer cancel()
	queued(t, qctx, l, 1, out, "filler")
	wctx, wcancel := context.WithTimeout(ctx, time.Second)
	defer wcancel()
	err := l.WaitN(wctx, 1)
	if !errors.Is(err, ratelimit.ErrQueueFull) {
		t.Errorf("WaitN with a full queue and a deadline before the permits: %v, want ErrQueueFull", err)
	}
	cancel()
	<-out
}

// WaitN returns ErrWouldExceedDeadline "at once, as x/time/rate does" when
// the permits are back only after ctx's deadline. With a queue, Acquire
// queues the call anyway: it waits out its whole deadline, holds a place
// in the queue meanwhile (refusing callers that could have been served),
// and ends with ctx's error instead.
func TestHostileQueuedPastDeadline(t *testing.T) {

	c := redistest.Start(t).Client(t)
	ls := newLimiters(t, c, "h:")
	ctx := xtest.Ctx(t, 20*time.Second)
	l := must(t)(ls.FixedWindow("doomed", ratelimit.FixedWindowOptions{Limit: 1, Window: time.Minute, QueueLimit: 1}))
	if r := try(t, ctx, l, 1); !r.Acquired {
		t.Fatal(describe(r))
	}
	wctx, wcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer wcancel()
	if err := l.WaitN(wctx, 1); !errors.Is(err, ratelimit.ErrWouldExceedDeadline) {
		t.Errorf("WaitN(1) with 300ms left and the permit back in a minute: %v, want ErrWouldExceedDeadline at once", err)
	}
}

// countingClock is the real clock that counts Now calls.
type countingClock struct{ now atomic.Int64 }

func (c *countingClock) Now() time.Time { c.now.Add(1); return time.Now() }
func (c *countingClock) NewTimer(d time.Duration) clock.Timer {
	return clock.Real.NewTimer(d)
}
func (c *countingClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	return clock.Real.AfterFunc(d, f)
}

// MaxPartitions exists "so keys chosen by clients cannot grow it without
// end". Once it is reached with no partition idle long enough, every call
// for a new partition sweeps all of them under the Partitioned's one
// mutex (an IdleDuration, a lock and a clock read per limiter) before
// refusing: a client that sends fresh keys makes each of its requests cost
// O(MaxPartitions) (100,000 by default) and stalls every other partition's
// calls meanwhile. The sweep should stay rate-limited (idle/2 apart) even
// when full.
func TestHostilePartitionedFullSweepsEveryCall(t *testing.T) {

	c := redistest.Start(t).Client(t)
	ls := newLimiters(t, c, "h:")
	clk := &countingClock{}
	ratelimit.SetClock(ls, clk)
	ctx := xtest.Ctx(t, 60*time.Second)
	const max = 2000
	p, err := ratelimit.NewPartitioned(ratelimit.PartitionedOptions{
		New: func(part string) (*ratelimit.Limiter, error) {
			return ls.FixedWindow("p:"+part, ratelimit.FixedWindowOptions{Limit: 1, Window: time.Minute})
		},
		MaxPartitions: max,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// n = 2 > Limit: decided without the server, so filling is cheap.
	for i := range max {
		if _, err := p.TryAcquire(ctx, strconv.Itoa(i), 2); err != nil {
			t.Fatal(err)
		}
	}
	const attacks = 50
	before := clk.now.Load()
	start := time.Now()
	for i := range attacks {
		// Past MaxPartitions a new partition replaces an idle one.
		if _, err := p.TryAcquire(ctx, "fresh"+strconv.Itoa(i), 2); err != nil || p.Len() != max {
			t.Fatalf("new partition past MaxPartitions: %v, %d held", err, p.Len())
		}
	}
	per := (clk.now.Load() - before) / attacks
	t.Logf("%d calls past MaxPartitions: %d limiter clock reads each, %v each", attacks, per, time.Since(start)/attacks)
	if per > 2*32+10 { // evict's sample, and the new limiter's own reads
		t.Errorf("each refused call past MaxPartitions read %d limiters (of %d): a full sweep per call under the Partitioned's mutex", per, max)
	}
}

// DefaultMaxPartitions bounds a Partitioned "(about 1 KB each), so keys
// chosen by clients cannot grow it without end". The bound counts
// partitions, not bytes: a Key that returns a request header (an API key,
// a tenant name: the documented use) lets each client-chosen key hold
// its whole length twice (the map's key and the limiter's Redis key), so
// 100,000 partitions of 1 MB headers (net/http's default MaxHeaderBytes)
// are 200 GB. Long partition keys should be refused (400 via Key's error
// path) or hashed.
func TestHostileMiddlewareHugeKeysMemory(t *testing.T) {

	e := newHTTPEnv(t, nil, ratelimit.MiddlewareOptions{
		Key: func(r *http.Request) (string, error) { return r.Header.Get("X-Api-Key"), nil },
		// More than the limit: decided without the server, so this
		// measures the Partitioned alone.
		Cost: func(*http.Request) int64 { return 1 << 62 },
	}, fixed(1, time.Minute, 0))
	const n, size = 16, 512 << 10
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range n {
		key := strconv.Itoa(i) + strings.Repeat("k", size)
		w := e.do(t, "/", "192.0.2.1:1", "X-Api-Key", key)
		if w.Code != http.StatusBadRequest { // longer than MaxPartitionKey
			t.Fatalf("status %d", w.Code)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / n
	t.Logf("%d partitions of %d-byte keys: %d bytes retained each (%d held)", n, size, per, e.p.Len())
	if per > 64<<10 {
		t.Errorf("each client-chosen partition retains %d bytes: DefaultMaxPartitions (%d) bounds memory at %d GB, not ~100 MB", per, ratelimit.DefaultMaxPartitions, per*ratelimit.DefaultMaxPartitions>>30)
	}
}

// The middleware's fields stay well-formed under hostile inputs: a Name
// with CR/LF is refused (no header injection), quotes and backslashes
// are escaped, a Cost of MaxInt64 is refused without Retry-After, MinInt64
// is a 500, binary and huge keys decide like any other, and a bucket
// whose refill is 100 years away gives a finite Retry-After.
func TestHostileMiddlewareFields(t *testing.T) {
	for _, name := range []string{"a\r\nX-Evil: 1", "a\nb", "tab\there", "caf\xc3\xa9", "\x7f"} {
		p, _ := ratelimit.NewPartitioned(ratelimit.PartitionedOptions{New: func(string) (*ratelimit.Limiter, error) { return nil, nil }})
		if _, err := ratelimit.NewMiddleware(p, ratelimit.MiddlewareOptions{Name: name}); !errors.Is(err, primitives.ErrInvalidOptions) {
			t.Errorf("Name %q: %v", name, err)
		}
		p.Close()
	}
	srv := redistest.Start(t)
	var cost atomic.Int64
	e := newHTTPEnv(t, srv, ratelimit.MiddlewareOptions{
		Name: `q"u\o`,
		Key:  func(r *http.Request) (string, error) { return r.Header.Get("X-K"), nil },
		Cost: func(*http.Request) int64 { return cost.Load() },
	}, func(ls *ratelimit.Limiters, part string) (*ratelimit.Limiter, error) {
		if strings.HasPrefix(part, "slow") {
			return ls.TokenBucket(part, ratelimit.TokenBucketOptions{Limit: 1, TokensPerPeriod: 1, Period: ratelimit.MaxWindow})
		}
		return ls.FixedWindow(part, ratelimit.FixedWindowOptions{Limit: 3, Window: time.Minute})
	})
	cost.Store(math.MaxInt64)
	w := e.do(t, "/", "192.0.2.1:1", "X-K", "k")
	want(t, w, http.StatusTooManyRequests, "", "Retry-After", "", "RateLimit-Policy", `"q\"u\\o";q=3;w=60`)
	cost.Store(math.MinInt64)
	want(t, e.do(t, "/", "192.0.2.1:1", "X-K", "k"), http.StatusInternalServerError, "")
	cost.Store(1)
	for _, key := range []string{"\x00\xff{}\r\n", strings.Repeat("{", 1<<20), "__coordhost:x"} {
		w := e.do(t, "/", "192.0.2.1:1", "X-K", key)
		if w.Code != http.StatusOK && !(strings.HasPrefix(key, "__coordhost:") && w.Code == http.StatusServiceUnavailable) &&
			!(len(key) > ratelimit.MaxPartitionKey && w.Code == http.StatusBadRequest) {
			t.Errorf("key %.20q: status %d %q", key, w.Code, w.Body.String())
		}
	}
	cost.Store(1)
	want(t, e.do(t, "/", "192.0.2.1:1", "X-K", "slow"), http.StatusOK, "")
	w = e.do(t, "/", "192.0.2.1:1", "X-K", "slow")
	ra, err := strconv.ParseInt(w.Header().Get("Retry-After"), 10, 64)
	maxSecs := int64(ratelimit.MaxWindow / time.Second)
	if w.Code != http.StatusTooManyRequests || err != nil || ra <= maxSecs-60 || ra > maxSecs+1 {
		t.Errorf("100-year refill: status %d Retry-After %q, want about %d", w.Code, w.Header().Get("Retry-After"), maxSecs)
	}
	for k, v := range w.Header() {
		for _, s := range v {
			if strings.ContainsAny(s, "\r\n") {
				t.Errorf("header %s has a line break: %q", k, s)
			}
		}
	}
}

// hammer runs workers goroutines that TryAcquire random n in [1, maxN]
// until d has passed, and returns every grant at its ServerTime.
func hammer(t *testing.T, ctx context.Context, l *ratelimit.Limiter, workers int, maxN int64, d time.Duration) []ratetest.Grant {
	t.Helper()
	var mu sync.Mutex
	var grants []ratetest.Grant
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for time.Now().Before(end) {
				n := 1 + rng.Int64N(maxN)
				r, err := l.TryAcquire(ctx, n)
				if err != nil {
					t.Error(err)
					return
				}
				if r.Acquired {
					mu.Lock()
					grants = append(grants, ratetest.Grant{At: r.ServerTime, N: n})
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return grants
}

// No interval of one window holds more than the limit, whatever the
// segment count (1, the default, one per millisecond, a count that does
// not divide the window), with mixed n, many goroutines, and grants
// timed by the server.
func TestHostileSlidingWindowBound(t *testing.T) {
	c := redistest.Start(t).Client(t)
	ls := newLimiters(t, c, "h:")
	ctx := xtest.Ctx(t, 60*time.Second)
	const limit, window = 10, 30 * time.Millisecond
	for _, segs := range []int{1, 7, 10, 30} {
		t.Run(strconv.Itoa(segs), func(t *testing.T) {
			l := must(t)(ls.SlidingWindow("sw"+strconv.Itoa(segs), ratelimit.SlidingWindowOptions{Limit: limit, Window: window, Segments: segs}))
			grants := hammer(t, ctx, l, 6, 4, 400*time.Millisecond)
			most, from := ratetest.MaxIn(grants, window)
			t.Logf("%d grants, %d permits; most in a window: %d", len(grants), ratetest.Total(grants), most)
			if most > limit {
				t.Fatalf("%d permits in the window from %v (limit %d)", most, from, limit)
			}
			if ratetest.Total(grants) < 2*limit {
				t.Fatalf("only %d permits in 400ms: the window does not slide", ratetest.Total(grants))
			}
		})
	}
}

// A token bucket grants at most Limit + TokensPerPeriod×⌈D/Period⌉ in any
// interval D, under load with mixed n.
func TestHostileTokenBucketBound(t *testing.T) {
	c := redistest.Start(t).Client(t)
	ls := newLimiters(t, c, "h:")
	ctx := xtest.Ctx(t, 60*time.Second)
	for _, tc := range []struct{ limit, per int64 }{{5, 2}, {5, 5}, {7, 1}} {
		t.Run(strconv.FormatInt(tc.limit, 10)+"/"+strconv.FormatInt(tc.per, 10), func(t *testing.T) {
			const period = 15 * time.Millisecond
			l := must(t)(ls.TokenBucket("tb"+strconv.FormatInt(tc.limit*10+tc.per, 10), ratelimit.TokenBucketOptions{Limit: tc.limit, TokensPerPeriod: tc.per, Period: period}))
			grants := hammer(t, ctx, l, 6, 3, 400*time.Millisecond)
			excess, at := ratetest.BucketExcess(grants, tc.limit, tc.per, period, 12)
			t.Logf("%d permits; largest excess %d at %v", ratetest.Total(grants), excess, at)
			if excess > 0 {
				t.Fatalf("%d permits over the bound in an interval of %v", excess, at)
			}
		})
	}
}

// A refusal's RetryAfter is never early: once the server's clock has
// passed the decision's ServerTime + RetryAfter, the same request (no one
// else consuming) is granted. Every algorithm, n from 1 to the limit.
func TestHostileRetryAfterNeverEarly(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ls := newLimiters(t, c, "h:")
	ctx := xtest.Ctx(t, 60*time.Second)
	rng := rand.New(rand.NewPCG(1, 2))
	mk := map[string]func() (*ratelimit.Limiter, error){
		"fixed": func() (*ratelimit.Limiter, error) {
			return ls.FixedWindow("ra:f", ratelimit.FixedWindowOptions{Limit: 4, Window: 20 * time.Millisecond})
		},
		"sliding": func() (*ratelimit.Limiter, error) {
			return ls.SlidingWindow("ra:s", ratelimit.SlidingWindowOptions{Limit: 4, Window: 20 * time.Millisecond, Segments: 3})
		},
		"bucket": func() (*ratelimit.Limiter, error) {
			return ls.TokenBucket("ra:b", ratelimit.TokenBucketOptions{Limit: 4, TokensPerPeriod: 1, Period: 7 * time.Millisecond})
		},
	}
	for name, make := range mk {
		t.Run(name, func(t *testing.T) {
			l := must(t)(make())
			for i := 0; i < 25; i++ {
				// Consume a random amount, then ask for a random n.
				try(t, ctx, l, 1+rng.Int64N(4))
				n := 1 + rng.Int64N(4)
				r := try(t, ctx, l, n)
				if r.Acquired {
					continue
				}
				if r.RetryAfter <= 0 {
					t.Fatalf("refused %d with RetryAfter %v", n, r.RetryAfter)
				}
				due := r.ServerTime.Add(r.RetryAfter).UnixMicro()
				time.Sleep(r.RetryAfter)
				for serverMicros(t, srv) < due {
					time.Sleep(100 * time.Microsecond)
				}
				if again := try(t, ctx, l, n); !again.Acquired {
					t.Fatalf("refused %d at %v with RetryAfter %v, refused again after it: %s", n, r.ServerTime, r.RetryAfter, describe(again))
				}
			}
		})
	}
}

// ctxEnded reports whether err is how a call ends when its ctx does. A
// dial timeout counts too: it is how a ctx's deadline ends a call while
// rueidis dials (FINDING 9, TestHostileDeadlineDuringDial), and a shared
// dial gives it to the calls waiting on the same connection.
func ctxEnded(err error) bool {
	var op *net.OpError
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		(errors.As(err, &op) && op.Op == "dial" && op.Timeout())
}

// storm runs random calls on l from many goroutines until stop closes:
// TryAcquire, Acquire and WaitN with n in [0, limit+1], contexts that end
// at random (before the call, while queued, while the dispatcher's retry is
// in flight), Allow. It returns the grants and fails t on an error no call
// of that shape may return.
//
// WaitN's ErrExceedsLimit for n within the limit is FINDING 1 (an
// OldestFirst queue that is full answers RetryAfter 0): counted in
// *finding1, not failed here, so the rest of the storm still runs.
func storm(t *testing.T, ctx context.Context, l *ratelimit.Limiter, workers int, stop <-chan struct{}, closing *atomic.Bool, finding1 *atomic.Int64) []ratetest.Grant {
	t.Helper()
	var mu sync.Mutex
	var grants []ratetest.Grant
	var wg sync.WaitGroup
	limit := l.Policy().Limit
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 99))
			for {
				select {
				case <-stop:
					return
				default:
				}
				n := rng.Int64N(limit + 2)
				cctx, cancel := context.WithTimeout(ctx, time.Duration(rng.Int64N(int64(20*time.Millisecond))))
				if rng.IntN(10) == 0 {
					cancel() // ended before the call
				}
				var (
					r   ratelimit.Result
					err error
				)
				op := rng.IntN(4)
				switch op {
				case 0:
					r, err = l.TryAcquire(cctx, n)
				case 1:
					r, err = l.Acquire(cctx, n)
				case 2:
					err = l.WaitN(cctx, n)
					r.Acquired = err == nil
				default:
					r.Acquired = l.AllowN(cctx, n)
				}
				cancel()
				switch {
				case err == nil, ctxEnded(err):
				case errors.Is(err, ratelimit.ErrWouldExceedDeadline):
				case errors.Is(err, ratelimit.ErrExceedsLimit) && n > limit:
				case errors.Is(err, ratelimit.ErrExceedsLimit) && op == 2:
					finding1.Add(1)
				case errors.Is(err, primitives.ErrClosed) && closing.Load():
				default:
					t.Errorf("op %d n %d: %v", op, n, err)
				}
				if r.Acquired && n > 0 && op < 2 {
					mu.Lock()
					grants = append(grants, ratetest.Grant{At: r.ServerTime, N: n})
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return grants
}

// Many goroutines, random calls and random cancellations, then Close
// racing with a second storm: the queue's count returns to 0, the limiter
// is idle, the bucket's bound holds for the grants seen, Close ends every
// call promptly, and no goroutine is left (goleak in TestMain).
func TestHostileLifecycleStorm(t *testing.T) {
	for _, order := range []ratelimit.QueueOrder{ratelimit.OldestFirst, ratelimit.NewestFirst} {
		t.Run(order.String(), func(t *testing.T) {
			c := redistest.Start(t).Client(t)
			ls := newLimiters(t, c, "h:")
			ctx := xtest.Ctx(t, 60*time.Second)
			const limit, per, period = 3, 1, 4 * time.Millisecond
			l, err := ls.TokenBucket("storm", ratelimit.TokenBucketOptions{Limit: limit, TokensPerPeriod: per, Period: period, QueueLimit: 4, QueueOrder: order})
			if err != nil {
				t.Fatal(err)
			}
			var closing atomic.Bool
			var finding1 atomic.Int64
			defer func() {
				if n := finding1.Load(); n > 0 {
					t.Logf("FINDING 1: WaitN answered ErrExceedsLimit within the limit %d times", n)
				}
			}()
			stop := make(chan struct{})
			time.AfterFunc(400*time.Millisecond, func() { close(stop) })
			grants := storm(t, ctx, l, 24, stop, &closing, &finding1)
			if excess, at := ratetest.BucketExcess(grants, limit, per, period, 10); excess > 0 {
				t.Errorf("%d over the bound in %v", excess, at)
			}
			xtest.Eventually(t, 5*time.Second, "the queue empties", func() bool { return l.Statistics().Queued == 0 })
			if _, idle := l.IdleDuration(); !idle {
				t.Errorf("not idle after every call returned: %+v", l.Statistics())
			}
			t.Logf("%d grants, statistics %+v", len(grants), l.Statistics())

			stop2 := make(chan struct{})
			done := make(chan struct{})
			go func() {
				storm(t, ctx, l, 24, stop2, &closing, &finding1)
				close(done)
			}()
			time.Sleep(50 * time.Millisecond)
			closing.Store(true)
			l.Close()
			close(stop2)
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("calls still running 10s after Close")
			}
			if s := l.Statistics(); s.Queued != 0 {
				t.Errorf("queued after Close: %+v", s)
			}
			if _, err := l.Acquire(ctx, 1); !errors.Is(err, primitives.ErrClosed) {
				t.Errorf("Acquire after Close: %v", err)
			}
		})
	}
}

// Partitions swept while calls run on them: with an idle timeout of 1ns
// every call sweeps, yet no call sees its limiter closed under it, the
// counts survive the sweeps, and Close ends the queued calls.
func TestHostilePartitionedSweepRace(t *testing.T) {
	c := redistest.Start(t).Client(t)
	ls := newLimiters(t, c, "h:")
	ctx := xtest.Ctx(t, 60*time.Second)
	var made atomic.Int64
	p, err := ratelimit.NewPartitioned(ratelimit.PartitionedOptions{
		New: func(part string) (*ratelimit.Limiter, error) {
			made.Add(1)
			return ls.SlidingWindow("ps:"+part, ratelimit.SlidingWindowOptions{Limit: 2, Window: 20 * time.Millisecond, Segments: 4, QueueLimit: 3})
		},
		IdleTimeout:   time.Nanosecond,
		MaxPartitions: 4,
	})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var closed atomic.Bool
	stop := make(chan struct{})
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 5))
			for {
				select {
				case <-stop:
					return
				default:
				}
				part := strconv.Itoa(rng.IntN(6))
				var err error
				if rng.IntN(2) == 0 {
					cctx, cancel := context.WithTimeout(ctx, time.Duration(rng.Int64N(int64(50*time.Millisecond))))
					_, err = p.Acquire(cctx, part, 1+rng.Int64N(2))
					cancel()
				} else {
					_, err = p.TryAcquire(ctx, part, rng.Int64N(3))
				}
				switch {
				case err == nil, ctxEnded(err):
				case errors.Is(err, ratelimit.ErrTooManyPartitions):
				case errors.Is(err, primitives.ErrClosed) && closed.Load():
				default:
					t.Errorf("partition %s: %v", part, err)
				}
			}
		}()
	}
	time.Sleep(400 * time.Millisecond)
	closed.Store(true)
	p.Close()
	close(stop)
	wg.Wait()
	s := p.Statistics()
	t.Logf("%d limiters made; statistics %+v", made.Load(), s)
	if s.Queued != 0 || p.Len() != 0 {
		t.Errorf("after Close: %+v, %d held", s, p.Len())
	}
	if s.Granted == 0 {
		t.Error("nothing granted")
	}
}

// A ctx that ended before the call: the call fails with its error and
// nothing is written (DESIGN §2: a failed acquire leaves no state), on
// every algorithm and through every entry point.
func TestHostileDeadCtxWritesNothing(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ls := newLimiters(t, c, "h:")
	dead, cancel := context.WithCancel(context.Background())
	cancel()
	for _, k := range kinds {
		l := must(t)(k.make(ls, "dead:"+k.name, 3, time.Minute, 3, ratelimit.OldestFirst))
		for name, call := range map[string]func() error{
			"TryAcquire": func() error { _, err := l.TryAcquire(dead, 1); return err },
			"Acquire":    func() error { _, err := l.Acquire(dead, 1); return err },
			"WaitN":      func() error { return l.WaitN(dead, 1) },
		} {
			if err := call(); !errors.Is(err, context.Canceled) {
				t.Errorf("%s %s: %v", k.name, name, err)
			}
		}
		if l.AllowN(dead, 1) {
			t.Errorf("%s: AllowN with a dead ctx", k.name)
		}
		if n := srv.MustCmd(t, "EXISTS", "h:dead:"+k.name); n != "0" {
			t.Errorf("%s: a call with a dead ctx wrote the key", k.name)
		}
		if s := l.Statistics(); s.Granted+s.Rejected != 0 || s.Queued != 0 {
			t.Errorf("%s: %+v", k.name, s)
		}
	}
}

// A paused server (SIGSTOP): calls end with their ctx (also queued ones
// and the dispatcher's retry in flight), the queue empties, and after
// Resume the limiter decides again.
func TestHostilePausedServer(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ls := newLimiters(t, c, "h:")
	ctx := xtest.Ctx(t, 30*time.Second)
	l := must(t)(ls.TokenBucket("pause", ratelimit.TokenBucketOptions{Limit: 1, TokensPerPeriod: 1, Period: 50 * time.Millisecond, QueueLimit: 5}))
	if r := try(t, ctx, l, 1); !r.Acquired {
		t.Fatal(describe(r))
	}
	out := make(chan outcome, 3)
	short, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
	defer cancel()
	for i := range 3 {
		queued(t, short, l, 1, out, strconv.Itoa(i))
	}
	srv.Pause()
	defer srv.Resume()
	tctx, tcancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer tcancel()
	if _, err := l.TryAcquire(tctx, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("TryAcquire on a paused server: %v", err)
	}
	granted := 0
	for range 3 {
		o := <-out
		switch {
		case o.err == nil && o.res.Acquired:
			granted++ // served before the pause took hold
		case errors.Is(o.err, context.DeadlineExceeded):
		default:
			t.Errorf("queued %s: %s, %v", o.tag, describe(o.res), o.err)
		}
	}
	if s := l.Statistics(); s.Queued != 0 {
		t.Errorf("after the pause: %+v", s)
	}
	srv.Resume()
	xtest.Eventually(t, 10*time.Second, "the limiter decides again", func() bool {
		_, err := l.TryAcquire(ctx, 0)
		return err == nil
	})
	t.Logf("%d queued calls served before the pause", granted)
}

// A restart without persistence loses the counts: the limiter fails open
// (a whole new limit), as doc.go says ("What the limits rest on"), and the
// scripts are loaded again (NOSCRIPT) without an error reaching the
// caller.
func TestHostileRestartFailsOpen(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ls := newLimiters(t, c, "h:")
	ctx := xtest.Ctx(t, 30*time.Second)
	var lims []*ratelimit.Limiter
	for _, k := range kinds {
		l := must(t)(k.make(ls, "restart:"+k.name, 2, time.Hour, 0, ratelimit.OldestFirst))
		if r := try(t, ctx, l, 2); !r.Acquired {
			t.Fatal(describe(r))
		}
		if r := try(t, ctx, l, 1); r.Acquired {
			t.Fatal(describe(r))
		}
		lims = append(lims, l)
	}
	srv.Restart(t)
	for i, l := range lims {
		var r ratelimit.Result
		xtest.Eventually(t, 10*time.Second, "the client reconnects", func() bool {
			var err error
			r, err = l.TryAcquire(ctx, 1)
			return err == nil
		})
		if !r.Acquired || r.Remaining != 1 {
			t.Errorf("%s after a restart: %s (doc.go: fails open with a new limit)", kinds[i].name, describe(r))
		}
	}
}

// Connections killed under load (CLIENT KILL): calls fail with transport
// errors or succeed, nothing else; the limiter works afterwards and the
// queue is empty.
func TestHostileKilledConnections(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ls := newLimiters(t, c, "h:")
	ctx := xtest.Ctx(t, 30*time.Second)
	l := must(t)(ls.SlidingWindow("kill", ratelimit.SlidingWindowOptions{Limit: 5, Window: 20 * time.Millisecond, Segments: 4, QueueLimit: 5}))
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var answered, failed atomic.Int64
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				_, err := l.Acquire(cctx, 1)
				cancel()
				if err == nil {
					answered.Add(1)
					continue
				}
				failed.Add(1)
				if errors.Is(err, primitives.ErrWrongType) || errors.Is(err, primitives.ErrClosed) || errors.Is(err, primitives.ErrInvalidOptions) {
					t.Errorf("under CLIENT KILL: %v", err)
				}
			}
		}()
	}
	for range 10 {
		time.Sleep(20 * time.Millisecond)
		srv.Cmd(t, "CLIENT", "KILL", "TYPE", "normal")
	}
	close(stop)
	wg.Wait()
	t.Logf("%d answered, %d failed", answered.Load(), failed.Load())
	if s := l.Statistics(); s.Queued != 0 {
		t.Errorf("queue after the storm: %+v", s)
	}
	xtest.Eventually(t, 10*time.Second, "the limiter decides again", func() bool {
		_, err := l.TryAcquire(ctx, 0)
		return err == nil
	})
}

// Behind Envoy's redis_proxy (and proxies like it), INCREX never reaches
// a server: the proxy answers "unsupported command 'INCREX'", without the
// ERR code word and without "unknown". unsupported() matches only
// "unknown command" and "syntax error", so the probe concludes the server
// HAS INCREX (any other error reply counts as proof it exists) and every
// fixed-window decision that consumes fails from then on, for good: the
// Lua script, which would work through the proxy, is never tried again.
func TestHostileIncrexBehindProxy(t *testing.T) {

	shim, c := increxClient(t)
	shim.SetMode(faulttest.IncrexProxyUnsupported)
	ls := newLimiters(t, c, "x:")
	ctx := xtest.Ctx(t, 10*time.Second)
	l := must(t)(ls.FixedWindow("envoy", ratelimit.FixedWindowOptions{Limit: 3, Window: time.Minute}))
	for i := range 3 {
		r, err := l.TryAcquire(ctx, 1)
		if err != nil || !r.Acquired {
			t.Fatalf("call %d through a proxy without INCREX: %s, %v (fast path %v)", i, describe(r), err, ls.FastPath())
		}
	}
	if ls.FastPath() != ratelimit.FastPathLua {
		t.Fatalf("fast path %v behind a proxy that refuses INCREX", ls.FastPath())
	}
}

// A counter that is a number with leading zeros ("007", which Redis's
// INCRBY refuses): both paths refuse with ErrWrongType and write nothing.
func TestHostileLeadingZeroCounter(t *testing.T) {

	shim, c := increxClient(t)
	ctx := xtest.Ctx(t, 10*time.Second)
	for _, mode := range []faulttest.IncrexMode{faulttest.IncrexUnknown, faulttest.IncrexNative} {
		shim.SetMode(mode)
		ls := newLimiters(t, c, "x:")
		if err := c.Do(ctx, c.B().Set().Key("x:007").Value("007").Px(time.Minute).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		l := must(t)(ls.FixedWindow("007", ratelimit.FixedWindowOptions{Limit: 10, Window: time.Minute}))
		_, err := l.TryAcquire(ctx, 1)
		v, _ := c.Do(ctx, c.B().Get().Key("x:007").Build()).ToString()
		if !errors.Is(err, primitives.ErrWrongType) || v != "007" {
			t.Errorf("fast path %v: counter \"007\": %v (want ErrWrongType), counter now %q", ls.FastPath(), err, v)
		}
	}
}

// WaitN never polls: each wait is one refusal and one retry after the
// RetryAfter the server gave, with and without a queue, on every
// algorithm.
func TestHostileWaitDoesNotPoll(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ls := newLimiters(t, c, "h:")
	ctx := xtest.Ctx(t, 60*time.Second)
	for _, k := range kinds {
		for _, q := range []int64{0, 2} {
			t.Run(k.name+"/queue="+strconv.FormatInt(q, 10), func(t *testing.T) {
				l := must(t)(k.make(ls, "wait:"+k.name+strconv.FormatInt(q, 10), 2, 60*time.Millisecond, q, ratelimit.OldestFirst))
				if r := try(t, ctx, l, 2); !r.Acquired {
					t.Fatal(describe(r))
				}
				const waits = 4
				before := scriptCalls(t, srv)
				for range waits {
					if err := l.WaitN(ctx, 2); err != nil {
						t.Fatal(err)
					}
				}
				calls := scriptCalls(t, srv) - before
				t.Logf("%d waits: %d scripts", waits, calls)
				// A refusal and a grant per wait, and a spare retry each
				// for a wake-up a hair early on the server's clock.
				if calls > 3*waits {
					t.Fatalf("%d scripts for %d waits: WaitN polls", calls, waits)
				}
			})
		}
	}
}

// IdleDuration is false while a call is under way. WaitN, between its
// refusal and its retry, sleeps outside any call: the limiter reports
// itself idle (with a growing duration) while WaitN still waits on it, so
// a caller that closes idle limiters, as Partitioned does with its own,
// closes it under the WaitN, which then fails with ErrClosed.
func TestHostileIdleWhileWaitNSleeps(t *testing.T) {

	c := redistest.Start(t).Client(t)
	ls := newLimiters(t, c, "h:")
	ctx := xtest.Ctx(t, 20*time.Second)
	l := must(t)(ls.FixedWindow("idlewait", ratelimit.FixedWindowOptions{Limit: 1, Window: time.Minute}))
	if r := try(t, ctx, l, 1); !r.Acquired {
		t.Fatal(describe(r))
	}
	wctx, cancel := context.WithCancel(context.Background()) // no deadline: WaitN sleeps, not refused
	done := make(chan error, 1)
	before := l.Statistics().Rejected
	go func() { done <- l.WaitN(wctx, 1) }()
	xtest.Eventually(t, 5*time.Second, "WaitN was refused and sleeps", func() bool { return l.Statistics().Rejected > before })
	time.Sleep(10 * time.Millisecond)
	d, idle := l.IdleDuration()
	cancel()
	<-done
	if idle {
		t.Fatalf("IdleDuration = %v, true while WaitN waits on the limiter", d)
	}
}

// Ten queued calls are granted in queue order (arrival for OldestFirst,
// reverse for NewestFirst), as the server's clock at each grant shows, and
// the queue's count ends at 0.
func TestHostileQueueGrantOrder(t *testing.T) {
	for _, order := range []ratelimit.QueueOrder{ratelimit.OldestFirst, ratelimit.NewestFirst} {
		t.Run(order.String(), func(t *testing.T) {
			c := redistest.Start(t).Client(t)
			ls := newLimiters(t, c, "h:")
			ctx := xtest.Ctx(t, 30*time.Second)
			// The first refill comes after all ten are queued (queued()
			// needs the count to grow, not shrink meanwhile).
			l := must(t)(ls.TokenBucket("order", ratelimit.TokenBucketOptions{Limit: 1, TokensPerPeriod: 1, Period: 200 * time.Millisecond, QueueLimit: 10, QueueOrder: order}))
			if r := try(t, ctx, l, 1); !r.Acquired {
				t.Fatal(describe(r))
			}
			const n = 10
			out := make(chan outcome, n)
			for i := range n {
				queued(t, ctx, l, 1, out, strconv.Itoa(i))
			}
			got := make([]outcome, 0, n)
			for range n {
				o := <-out
				if o.err != nil || !o.res.Acquired {
					t.Fatalf("%s: %s, %v", o.tag, describe(o.res), o.err)
				}
				got = append(got, o)
			}
			slices.SortFunc(got, func(a, b outcome) int { return a.res.ServerTime.Compare(b.res.ServerTime) })
			var tags []string
			for _, o := range got {
				tags = append(tags, o.tag)
			}
			want := []string{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}
			if order == ratelimit.NewestFirst {
				slices.Reverse(want)
			}
			if !slices.Equal(tags, want) {
				t.Fatalf("granted in order %v, want %v", tags, want)
			}
			if s := l.Statistics(); s.Queued != 0 || s.Granted != n+1 {
				t.Fatalf("statistics %+v", s)
			}
		})
	}
}

// NewestFirst refuses the oldest calls to make room, as many as needed
// and no more: each refused call gets Acquired false, a RetryAfter, no
// error, and the queue's count stays exact; a call bigger than the queue
// refuses nobody.
func TestHostileNewestFirstEviction(t *testing.T) {
	c := redistest.Start(t).Client(t)
	ls := newLimiters(t, c, "h:")
	ctx := xtest.Ctx(t, 30*time.Second)
	l := must(t)(ls.FixedWindow("evict", ratelimit.FixedWindowOptions{Limit: 5, Window: time.Minute, QueueLimit: 4, QueueOrder: ratelimit.NewestFirst}))
	if r := try(t, ctx, l, 5); !r.Acquired {
		t.Fatal(describe(r))
	}
	qctx, cancel := context.WithCancel(context.Background()) // no deadline: queued calls wait for permits a minute away
	defer cancel()
	out := make(chan outcome, 8)
	queued(t, qctx, l, 1, out, "a")
	queued(t, qctx, l, 2, out, "b")
	queued(t, qctx, l, 1, out, "c") // 4 queued: full
	// 5 permits: more than the queue holds; refused alone, nobody evicted.
	if r, err := l.Acquire(ctx, 5); err != nil || r.Acquired || r.RetryAfter <= 0 {
		t.Fatalf("bigger than the queue: %s, %v", describe(r), err)
	}
	if q := l.Statistics().Queued; q != 4 {
		t.Fatalf("a call that could not queue evicted: %d queued", q)
	}
	// 3 permits: a (1) and b (2) must go, c stays.
	go func() {
		r, err := l.Acquire(qctx, 3)
		out <- outcome{"d", r, err, time.Now()}
	}()
	// Both are refused in one step; their callers return in any order.
	evicted := map[string]bool{}
	for range 2 {
		o := <-out
		if (o.tag != "a" && o.tag != "b") || o.err != nil || o.res.Acquired || o.res.RetryAfter <= 0 {
			t.Fatalf("evicted %s (want a and b): %s, %v", o.tag, describe(o.res), o.err)
		}
		evicted[o.tag] = true
	}
	if len(evicted) != 2 {
		t.Fatalf("evicted %v", evicted)
	}
	xtest.Eventually(t, 5*time.Second, "d queued", func() bool { return l.Statistics().Queued == 4 })
	select {
	case o := <-out:
		t.Fatalf("%s ended: %s, %v", o.tag, describe(o.res), o.err)
	case <-time.After(50 * time.Millisecond):
	}
	cancel()
	for range 2 {
		if o := <-out; !errors.Is(o.err, context.Canceled) {
			t.Fatalf("%s: %v", o.tag, o.err)
		}
	}
	if s := l.Statistics(); s.Queued != 0 {
		t.Fatalf("statistics %+v", s)
	}
}

// The largest options and arguments: MaxLimit permits at once over
// MaxWindow (and MaxSegments), on every algorithm. Decisions stay exact
// and durations finite; n = MaxInt64 is refused without the server, and
// MinInt64 is ErrInvalidPermits.
func TestHostileExtremeOptions(t *testing.T) {
	c := redistest.Start(t).Client(t)
	ls := newLimiters(t, c, "h:")
	ctx := xtest.Ctx(t, 30*time.Second)
	const max = ratelimit.MaxLimit
	mk := []struct {
		name string
		make func() (*ratelimit.Limiter, error)
	}{
		{"fixed", func() (*ratelimit.Limiter, error) {
			return ls.FixedWindow("x:f", ratelimit.FixedWindowOptions{Limit: max, Window: ratelimit.MaxWindow, QueueLimit: max})
		}},
		{"sliding", func() (*ratelimit.Limiter, error) {
			return ls.SlidingWindow("x:s", ratelimit.SlidingWindowOptions{Limit: max, Window: ratelimit.MaxWindow, Segments: ratelimit.MaxSegments, QueueLimit: max})
		}},
		{"bucket", func() (*ratelimit.Limiter, error) {
			return ls.TokenBucket("x:b", ratelimit.TokenBucketOptions{Limit: max, TokensPerPeriod: max, Period: ratelimit.MaxWindow, QueueLimit: max})
		}},
	}
	for _, m := range mk {
		t.Run(m.name, func(t *testing.T) {
			l := must(t)(m.make())
			if r := try(t, ctx, l, max-1); !r.Acquired || r.Remaining != 1 {
				t.Fatalf("MaxLimit-1: %s", describe(r))
			}
			if r := try(t, ctx, l, 1); !r.Acquired || r.Remaining != 0 {
				t.Fatalf("the last one: %s", describe(r))
			}
			r := try(t, ctx, l, max)
			seg := ratelimit.MaxWindow / ratelimit.MaxSegments
			if r.Acquired || r.RetryAfter < ratelimit.MaxWindow-time.Minute || r.RetryAfter > ratelimit.MaxWindow+seg || r.ResetAfter <= 0 {
				t.Fatalf("refused MaxLimit: %s", describe(r))
			}
			if r := try(t, ctx, l, math.MaxInt64); r.Acquired || r.RetryAfter != 0 {
				t.Fatalf("MaxInt64: %s", describe(r))
			}
			if _, err := l.TryAcquire(ctx, math.MinInt64); !errors.Is(err, ratelimit.ErrInvalidPermits) {
				t.Fatalf("MinInt64: %v", err)
			}
			if err := l.WaitN(ctx, math.MaxInt64); !errors.Is(err, ratelimit.ErrExceedsLimit) {
				t.Fatalf("WaitN(MaxInt64): %v", err)
			}
			if _, err := l.Acquire(ctx, math.MinInt64); !errors.Is(err, ratelimit.ErrInvalidPermits) {
				t.Fatalf("Acquire(MinInt64): %v", err)
			}
			// A queued call for every permit, cancelled: the count returns.
			// (Its permits are back only after its deadline, so it is
			// refused at once rather than queued.)
			qctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			if r, err := l.Acquire(qctx, max); !errors.Is(err, context.DeadlineExceeded) && (err != nil || r.Acquired || r.RetryAfter < 50*time.Millisecond) {
				t.Fatalf("queued MaxLimit: %s, %v", describe(r), err)
			}
			cancel()
			if s := l.Statistics(); s.Queued != 0 {
				t.Fatalf("statistics %+v", s)
			}
		})
	}
}

// Keys that are binary, 1 MB long, or full of braces, on a cluster and a
// standalone server: the limiter's key is the prefix and the key,
// byte-exact, and decides like any other.
func TestHostileKeys(t *testing.T) {
	keys := []string{"\x00\xff\r\n", strings.Repeat("k", 1<<20), "{", "}", "{}", "}{", "{a}{b}", "a{b}c", "{" + strings.Repeat("x", 1000) + "}"}
	for _, tg := range []struct {
		name   string
		client func(t *testing.T) rueidis.Client
	}{
		{"standalone", func(t *testing.T) rueidis.Client { return redistest.Start(t).Client(t) }},
		{"cluster", func(t *testing.T) rueidis.Client { return redistest.StartCluster(t, 3).Client(t) }},
	} {
		t.Run(tg.name, func(t *testing.T) {
			c := tg.client(t)
			ls := newLimiters(t, c, "{p}")
			ctx := xtest.Ctx(t, 30*time.Second)
			for i, key := range keys {
				for _, k := range kinds {
					l := must(t)(k.make(ls, key+k.name, 2, time.Minute, 0, ratelimit.OldestFirst))
					if l.Key() != "{p}"+key+k.name {
						t.Fatalf("key %d: Key() is not the prefix and the key", i)
					}
					if r := try(t, ctx, l, 2); !r.Acquired {
						t.Fatalf("key %d %s: %s", i, k.name, describe(r))
					}
					if r := try(t, ctx, l, 1); r.Acquired {
						t.Fatalf("key %d %s: %s", i, k.name, describe(r))
					}
					if n, err := c.Do(ctx, c.B().Exists().Key(l.Key()).Build()).AsInt64(); err != nil || n != 1 {
						t.Fatalf("key %d %s: EXISTS %d %v", i, k.name, n, err)
					}
					l.Close()
				}
			}
		})
	}
}

// The calls refuse a nil or zero Limiter with ErrInvalidOptions ("use a
// Limiters method"), so its zero value is meant to be safe to hold. Its
// other methods panic on it instead: Close (close of a nil channel),
// IdleDuration (nil Limiters); so do a nil Limiter's and a nil
// Partitioned's. `l, err := ls.FixedWindow(...); defer l.Close()` before
// checking err is then a panic, where Close is documented as idempotent
// and safe.
func TestHostileZeroValues(t *testing.T) {

	var nilL *ratelimit.Limiter
	var nilP *ratelimit.Partitioned
	var nilLs *ratelimit.Limiters
	ctx := context.Background()
	for name, f := range map[string]func(){
		"zero Limiter TryAcquire":   func() { (&ratelimit.Limiter{}).TryAcquire(ctx, 1) },
		"zero Limiter WaitN":        func() { (&ratelimit.Limiter{}).WaitN(ctx, 1) },
		"zero Limiter Statistics":   func() { (&ratelimit.Limiter{}).Statistics() },
		"zero Limiter Close":        func() { (&ratelimit.Limiter{}).Close() },
		"zero Limiter IdleDuration": func() { (&ratelimit.Limiter{}).IdleDuration() },
		"nil Limiter Close":         func() { nilL.Close() },
		"nil Limiter Statistics":    func() { nilL.Statistics() },
		"nil Partitioned Close":     func() { nilP.Close() },
		"nil Partitioned Len":       func() { nilP.Len() },
		"nil Partitioned TryAcquire": func() {
			if _, err := nilP.TryAcquire(ctx, "p", 1); !errors.Is(err, primitives.ErrInvalidOptions) {
				panic(err)
			}
		},
		"zero Partitioned Close": func() { (&ratelimit.Partitioned{}).Close() },
		"nil Limiters FastPath":  func() { nilLs.FastPath() },
	} {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s: panic: %v", name, r)
				}
			}()
			f()
		}()
	}
}

// NewestFirst refuses its oldest queued call to make room, with Acquired
// false and no error: a clean refusal that consumed nothing. But the
// oldest call can be the one whose retry the dispatcher has in flight (a
// newer call was queued in front of it meanwhile, or it was alone): when
// that retry is granted on the server and the new call's refusal is
// handled first, the evicted caller is told "refused" while the server
// consumed its permits, which the dispatcher then drops ("its caller is
// gone"). Reproduced by pausing the server while the dispatcher's retry
// and the new call's decision are both sent, so their replies come back
// together.
func TestHostileEvictedWhileRetryInFlight(t *testing.T) {

	srv := redistest.Start(t)
	c := srv.Client(t)
	ls := newLimiters(t, c, "h:")
	ctx := xtest.Ctx(t, 120*time.Second)
	const window = 150 * time.Millisecond
	for i := range 40 {
		key := "evict" + strconv.Itoa(i)
		l := must(t)(ls.FixedWindow(key, ratelimit.FixedWindowOptions{Limit: 1, Window: window, QueueLimit: 1, QueueOrder: ratelimit.NewestFirst}))
		r0 := try(t, ctx, l, 1)
		if !r0.Acquired {
			t.Fatal(describe(r0))
		}
		windowEnd := time.Now().Add(r0.ResetAfter)
		out := make(chan outcome, 2)
		queued(t, ctx, l, 1, out, "A")
		// Pause before the window ends: the dispatcher's retry of A is
		// sent into the paused server, and B's decision after it.
		time.Sleep(time.Until(windowEnd) - 20*time.Millisecond)
		srv.Pause()
		time.Sleep(60 * time.Millisecond)
		go func() {
			r, err := l.Acquire(ctx, 1)
			out <- outcome{"B", r, err, time.Now()}
		}()
		time.Sleep(20 * time.Millisecond)
		srv.Resume()
		first := <-out
		// Give the dispatcher time to settle, then look at the server.
		time.Sleep(20 * time.Millisecond)
		counter := srv.MustCmd(t, "GET", "h:"+key)
		st := l.Statistics()
		if first.tag == "A" && first.err == nil && !first.res.Acquired && counter == "1" && st.Granted == 1 {
			t.Fatalf("iteration %d: A was refused cleanly (%s) while its retry consumed the window's permit (counter %s, granted %d): the permit is lost", i, describe(first.res), counter, st.Granted)
		}
		l.Close()
		for len(out) > 0 {
			<-out
		}
	}
}

// DESIGN §2: a failed acquire returns an error that matches ctx.Err()
// with errors.Is. rueidis dials its connections lazily, with the caller's
// ctx; when that ctx's deadline ends the dial, Go may report the socket's
// own deadline ("dial tcp ...: i/o timeout", os.ErrDeadlineExceeded), which
// matches neither context.DeadlineExceeded nor ctx.Err(). The limiter
// passes it on as it is. (A dial error also means nothing was sent, so the
// call could say so, or retry while its ctx lasts.)
func TestHostileDeadlineDuringDial(t *testing.T) {

	srv := redistest.Start(t)
	ctx := xtest.Ctx(t, 60*time.Second)
	rng := rand.New(rand.NewPCG(3, 4))
	seen := 0
	for i := 0; i < 60 && seen < 200; i++ {
		// A fresh client each round: its other connections are dialled
		// by the calls below.
		c := srv.Client(t)
		ls := newLimiters(t, c, "h:")
		for j := range 16 {
			l := must(t)(ls.SlidingWindow("dial"+strconv.Itoa(i*16+j), ratelimit.SlidingWindowOptions{Limit: 5, Window: time.Minute}))
			cctx, cancel := context.WithTimeout(ctx, time.Duration(rng.Int64N(int64(2*time.Millisecond))))
			_, err := l.TryAcquire(cctx, 1)
			<-cctx.Done()
			cancel()
			if err == nil {
				continue
			}
			seen++
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("round %d: the call's ctx ended (%v), the error does not match it: %v", i, cctx.Err(), err)
			}
		}
		c.Close()
	}
	t.Logf("%d errors, all matching ctx.Err()", seen)
}

// The key changed from outside between two calls: replaced by another
// algorithm's state or another type (ErrWrongType, nothing written),
// deleted (a fresh limit), or stripped of its expiry (the next grant
// gives it one again).
func TestHostileKeyChangedBetweenCalls(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ls := newLimiters(t, c, "h:")
	ctx := xtest.Ctx(t, 30*time.Second)
	foreign := map[string][][]string{
		"fixed":   {{"HSET", "K", "tokens", "1", "at", "1"}, {"RPUSH", "K", "x"}, {"SET", "K", "abc"}},
		"sliding": {{"HSET", "K", "tokens", "1", "at", "1"}, {"SET", "K", "1"}, {"HSET", "K", "x", "1"}},
		"bucket":  {{"HSET", "K", "1", "1"}, {"SET", "K", "1"}, {"SADD", "K", "x"}},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			key := "chg:" + k.name
			full := "h:" + key
			l := must(t)(k.make(ls, key, 3, time.Minute, 0, ratelimit.OldestFirst))
			for _, f := range foreign[k.name] {
				if r := try(t, ctx, l, 1); !r.Acquired {
					t.Fatal(describe(r))
				}
				srv.MustCmd(t, "DEL", full)
				cmd := slices.Clone(f)
				cmd[1] = full
				srv.MustCmd(t, cmd...)
				before := srv.MustCmd(t, "DUMP", full)
				if _, err := l.TryAcquire(ctx, 1); !errors.Is(err, primitives.ErrWrongType) {
					t.Fatalf("after %v: %v", f, err)
				}
				if _, err := l.TryAcquire(ctx, 0); !errors.Is(err, primitives.ErrWrongType) {
					t.Fatalf("peek after %v: %v", f, err)
				}
				if after := srv.MustCmd(t, "DUMP", full); after != before {
					t.Fatalf("after %v: the foreign value was changed", f)
				}
				srv.MustCmd(t, "DEL", full)
			}
			if r := try(t, ctx, l, 3); !r.Acquired {
				t.Fatalf("after DEL: %s", describe(r))
			}
			srv.MustCmd(t, "DEL", full)
			if r := try(t, ctx, l, 1); !r.Acquired {
				t.Fatal(describe(r))
			}
			srv.MustCmd(t, "PERSIST", full)
			if k.name == "sliding" {
				// A sliding window sets its expiry when a segment starts
				// counting, not on every grant (one call fewer per
				// decision): a PERSIST from outside lasts until the next
				// segment's first grant. Wait for it on a short window.
				short := must(t)(ls.SlidingWindow(key+":short", ratelimit.SlidingWindowOptions{Limit: 3, Window: 100 * time.Millisecond, Segments: 10}))
				try(t, ctx, short, 1)
				srv.MustCmd(t, "PERSIST", full+":short")
				time.Sleep(15 * time.Millisecond)
				l, full = short, full+":short"
			}
			if r := try(t, ctx, l, 1); !r.Acquired {
				t.Fatal(describe(r))
			}
			if ttl := srv.MustCmd(t, "PTTL", full); ttl == "-1" {
				t.Fatalf("a grant left the key without expiry")
			}
		})
	}
}
