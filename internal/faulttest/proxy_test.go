package faulttest_test

import (
	"bufio"
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/faulttest"
	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/redis/rueidis"
)

func TestMain(m *testing.M) { xtest.Main(m) }

// raw is a plain RESP connection through a proxy.
type raw struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
}

func dialRaw(t *testing.T, p *faulttest.Proxy, server string) *raw {
	t.Helper()
	addr, err := p.Addr(server)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &raw{t: t, conn: c, r: bufio.NewReader(c)}
}

func (r *raw) send(cmd string) {
	r.t.Helper()
	if _, err := r.conn.Write([]byte(cmd + "\r\n")); err != nil {
		r.t.Fatalf("write %q: %v", cmd, err)
	}
}

// line reads one reply line within d.
func (r *raw) line(d time.Duration) (string, error) {
	_ = r.conn.SetReadDeadline(time.Now().Add(d))
	s, err := r.r.ReadString('\n')
	return strings.TrimRight(s, "\r\n"), err
}

func (r *raw) mustLine(want string) {
	r.t.Helper()
	got, err := r.line(5 * time.Second)
	if err != nil || got != want {
		r.t.Fatalf("reply = %q, %v; want %q", got, err, want)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// client returns a rueidis client through p with one pipeline connection,
// no retries and no client cache, so each test knows which connection a
// command takes.
func client(t *testing.T, s *redistest.Server, p *faulttest.Proxy) rueidis.Client {
	return s.Client(t, p.Option(), func(o *rueidis.ClientOption) {
		o.DisableRetry = true
		o.DisableCache = true
		o.PipelineMultiplex = -1 // one connection (2^0)
	})
}

func TestFaultProxyForwards(t *testing.T) {
	s := redistest.Start(t)
	p := faulttest.New(t)
	c := client(t, s, p)
	ctx := context.Background()
	if err := c.Do(ctx, c.B().Set().Key("k").Value("v").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	// A reply larger than one read, to exercise framing across reads.
	big := strings.Repeat("x", 300<<10)
	if err := c.Do(ctx, c.B().Set().Key("big").Value(big).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		got, err := c.Do(ctx, c.B().Get().Key("big").Build()).ToString()
		if err != nil || got != big {
			t.Fatalf("GET big: %d bytes, %v", len(got), err)
		}
	}
	if st := p.Stats(); st.Conns < 1 || st.Resets != 0 || st.DroppedBytes != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestFaultProxyLatency(t *testing.T) {
	s := redistest.Start(t)
	p := faulttest.New(t)
	r := dialRaw(t, p, s.Addr)
	rtt := func() time.Duration {
		t.Helper()
		start := time.Now()
		r.send("PING")
		r.mustLine("+PONG")
		return time.Since(start)
	}
	rtt()
	for _, tc := range []struct{ up, down, min time.Duration }{
		{30 * time.Millisecond, 0, 30 * time.Millisecond},
		{0, 40 * time.Millisecond, 40 * time.Millisecond},
		{25 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond},
	} {
		p.SetLatencyDir(tc.up, tc.down)
		if got := rtt(); got < tc.min || got > tc.min+time.Second {
			t.Errorf("latency up=%v down=%v: round trip %v, want ≥ %v", tc.up, tc.down, got, tc.min)
		}
	}
	// A delay line, not a throttle: 20 pipelined commands take about one
	// round trip, not twenty.
	p.SetLatency(30 * time.Millisecond)
	start := time.Now()
	for range 20 {
		r.send("PING")
	}
	for range 20 {
		r.mustLine("+PONG")
	}
	if got := time.Since(start); got < 60*time.Millisecond || got > time.Second {
		t.Errorf("20 pipelined PINGs at 30ms each way took %v, want about 60ms", got)
	}
	p.SetLatency(0)
	best := time.Hour
	for range 5 {
		best = min(best, rtt())
	}
	if best >= 25*time.Millisecond {
		t.Errorf("latency removed: best round trip of 5 is %v", best)
	}

	// Through rueidis as well.
	c := client(t, s, p)
	ctx := context.Background()
	if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	p.SetLatency(20 * time.Millisecond)
	start = time.Now()
	if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if got := time.Since(start); got < 40*time.Millisecond {
		t.Errorf("rueidis PING with 20ms each way took %v", got)
	}
}

func TestFaultProxyReset(t *testing.T) {
	s := redistest.Start(t)
	p := faulttest.New(t)
	c := client(t, s, p)
	ctx := context.Background()
	if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	// A command in flight when the connection is reset fails at once.
	errc := make(chan error, 1)
	go func() { errc <- c.Do(ctx, c.B().Blpop().Key("nothing").Timeout(5).Build()).Error() }()
	time.Sleep(100 * time.Millisecond)
	reset := time.Now()
	if n := p.ResetAll(); n < 1 {
		t.Fatalf("ResetAll reset %d connections", n)
	}
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("BLPOP succeeded across a reset")
		}
		if d := time.Since(reset); d > 2*time.Second {
			t.Errorf("error %v came %v after the reset", err, d)
		}
		t.Logf("in-flight command after reset: %v", err)
	case <-time.After(4 * time.Second):
		t.Fatal("no error after reset")
	}
	if st := p.Stats(); st.Resets < 1 {
		t.Errorf("Resets = %d, want ≥ 1", st.Resets)
	}
	// rueidis reconnects through the proxy. (The first command on a reset
	// connection it had not yet noticed may fail: DisableRetry.)
	var err error
	for range 3 {
		if err = c.Do(ctx, c.B().Ping().Build()).Error(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("PING after reset: %v", err)
	}

	// One connection among several; a raw client sees the reset.
	r := dialRaw(t, p, s.Addr)
	r.send("PING")
	r.mustLine("+PONG")
	conns := p.Conns()
	if len(conns) < 2 {
		t.Fatalf("%d connections, want ≥ 2", len(conns))
	}
	conns[len(conns)-1].Reset() // the newest: the raw one
	if _, err := r.line(2 * time.Second); err == nil || isTimeout(err) {
		t.Fatalf("raw read after reset: %v, want a connection error", err)
	}
	if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
		t.Fatalf("the other connection was hit: %v", err)
	}
}

func TestFaultProxyBlackhole(t *testing.T) {
	s := redistest.Start(t)
	p := faulttest.New(t)
	c := client(t, s, p)
	if err := c.Do(context.Background(), c.B().Ping().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	p.Blackhole(true)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	err := c.Do(ctx, c.B().Ping().Build()).Error()
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("PING in a blackhole: %v, want a deadline error", err)
	}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done <- c.Do(ctx, c.B().Set().Key("bh").Value("1").Build()).Error()
	}()
	select {
	case err := <-done:
		t.Fatalf("SET returned during the blackhole: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	if _, err := s.Cmd(t, "GET", "bh"); !rueidis.IsRedisNil(err) {
		t.Fatalf("the server got the held SET before the heal: GET bh: %v", err)
	}
	// rueidis gave up on the PING's connection (its deadline), but the
	// proxy closed nothing itself.
	if st := p.Stats(); st.Resets != 0 {
		t.Fatalf("a blackhole must not close anything: %+v", st)
	}
	p.Blackhole(false)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("SET after heal: %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("SET still blocked after heal")
	}
	if got := s.MustCmd(t, "GET", "bh"); got != "1" {
		t.Fatalf("GET bh = %q", got)
	}

	// Raw: a reply is held, then delivered on heal.
	r := dialRaw(t, p, s.Addr)
	p.Blackhole(true)
	r.send("PING")
	if _, err := r.line(100 * time.Millisecond); !isTimeout(err) {
		t.Fatalf("raw read in a blackhole: %v, want a timeout", err)
	}
	p.Blackhole(false)
	r.mustLine("+PONG")
}

func TestFaultProxyDropReply(t *testing.T) {
	s := redistest.Start(t)
	p := faulttest.New(t)

	// Raw: the command runs, its reply never comes, the connection dies.
	r := dialRaw(t, p, s.Addr)
	r.send("PING")
	r.mustLine("+PONG")
	p.DropReplies(1)
	r.send("INCR ctr")
	if got, err := r.line(2 * time.Second); err == nil || isTimeout(err) {
		t.Fatalf("after a dropped reply: %q, %v; want a connection error", got, err)
	}
	if got := s.MustCmd(t, "GET", "ctr"); got != "1" {
		t.Fatalf("server did not run the INCR whose reply was dropped: ctr = %q", got)
	}

	// Through rueidis: an error for the caller, the INCR ran anyway.
	c := client(t, s, p)
	ctx := context.Background()
	if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	p.DropReplies(1)
	n, err := c.Do(ctx, c.B().Incr().Key("ctr").Build()).AsInt64()
	if err == nil {
		t.Fatalf("INCR with a dropped reply returned %d", n)
	}
	t.Logf("INCR with a dropped reply: %v", err)
	if got := s.MustCmd(t, "GET", "ctr"); got != "2" {
		t.Fatalf("ctr = %q, want 2", got)
	}
	if got, err := c.Do(ctx, c.B().Get().Key("ctr").Build()).ToString(); err != nil || got != "2" {
		t.Fatalf("GET ctr after reconnect: %q, %v", got, err)
	}
	if st := p.Stats(); st.DroppedReplies != 2 || st.Resets != 2 {
		t.Fatalf("stats %+v, want 2 dropped replies and 2 resets", st)
	}

	// Pipelined commands: all run; the first reply is lost and everything
	// after it on that connection with it.
	r = dialRaw(t, p, s.Addr)
	r.send("PING")
	r.mustLine("+PONG")
	p.DropReplies(1)
	r.send("INCR ctr\r\nINCR ctr\r\nINCR ctr")
	if got, err := r.line(2 * time.Second); err == nil || isTimeout(err) {
		t.Fatalf("got %q, %v; want the connection to die", got, err)
	}
	if got := s.MustCmd(t, "GET", "ctr"); got != "5" {
		t.Fatalf("ctr = %q, want 5", got)
	}
}

func TestFaultProxyDropReplySkipsPush(t *testing.T) {
	s := redistest.Start(t)
	p := faulttest.New(t)
	r := dialRaw(t, p, s.Addr)
	r.send("HELLO 3")
	// The HELLO reply is a map: read until the last field (modules: empty).
	for {
		l, err := r.line(2 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if l == "*0" {
			break
		}
	}
	r.send("SUBSCRIBE ch")
	for _, want := range []string{">3", "$9", "subscribe", "$2", "ch", ":1"} {
		r.mustLine(want)
	}
	p.DropReplies(1)
	s.MustCmd(t, "PUBLISH", "ch", "hello")
	for _, want := range []string{">3", "$7", "message", "$2", "ch", "$5", "hello"} {
		r.mustLine(want) // a push is not a reply: delivered
	}
	r.send("PING")
	if got, err := r.line(2 * time.Second); err == nil || isTimeout(err) {
		t.Fatalf("PING reply %q, %v; want it dropped and the connection dead", got, err)
	}
}

func TestFaultProxyDropWindow(t *testing.T) {
	s := redistest.Start(t)
	p := faulttest.New(t)
	r := dialRaw(t, p, s.Addr)
	r.send("PING")
	r.mustLine("+PONG")
	start := time.Now()
	p.DropRepliesFor(150 * time.Millisecond)
	r.send("INCR w")
	if got, err := r.line(2 * time.Second); err == nil || isTimeout(err) {
		t.Fatalf("got %q, %v; want the connection reset at the window's end", got, err)
	}
	if d := time.Since(start); d < 140*time.Millisecond {
		t.Errorf("connection died after %v, before the window ended", d)
	}
	if got := s.MustCmd(t, "GET", "w"); got != "1" {
		t.Fatalf("w = %q, want 1", got)
	}
	// After the window, new connections work.
	r = dialRaw(t, p, s.Addr)
	r.send("PING")
	r.mustLine("+PONG")
}

func TestFaultProxyClose(t *testing.T) {
	s := redistest.Start(t)
	p := faulttest.NewProxy()
	r := dialRaw(t, p, s.Addr)
	r.send("PING")
	r.mustLine("+PONG")
	p.Blackhole(true)
	p.Close()
	p.Close()
	if _, err := r.line(time.Second); err == nil || isTimeout(err) {
		t.Fatalf("read after Close: %v", err)
	}
	if _, err := p.DialCtxFn(context.Background(), s.Addr, nil, nil); !errors.Is(err, faulttest.ErrClosed) {
		t.Fatalf("dial after Close: %v", err)
	}
}
