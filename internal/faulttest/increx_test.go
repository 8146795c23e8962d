// These tests exercise INCREX only through IncrexShim: no server available
// here (Redis 7.0, 8.0, 8.6, Valkey 8.1) has INCREX, which shipped in Redis
// 8.8. The shim runs it as a Lua script on a real Redis 7.0; the expected
// replies follow Redis 8.8's documentation and its tests/unit/type/increx.tcl.
package faulttest_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/faulttest"
	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/redis/rueidis"
)

type increxEnv struct {
	t    *testing.T
	ctx  context.Context
	srv  *redistest.Server
	shim *faulttest.IncrexShim
	c    rueidis.Client
}

// newIncrexEnv starts Redis 7.0, a shim in front of it and a rueidis client
// (RESP3, client-side caching on, one pipeline connection) through the shim.
func newIncrexEnv(t *testing.T) *increxEnv {
	srv := redistest.Start(t)
	shim := faulttest.StartIncrexShim(t, srv.Addr)
	c := srv.Client(t, func(o *rueidis.ClientOption) {
		o.InitAddress = []string{shim.Addr()}
		o.DisableRetry = true
		o.PipelineMultiplex = -1
	})
	return &increxEnv{t: t, ctx: xtest.Ctx(t, 30*time.Second), srv: srv, shim: shim, c: c}
}

func (e *increxEnv) cmd(key string, args ...string) rueidis.Completed {
	return e.c.B().Arbitrary("INCREX").Keys(key).Args(args...).Build()
}

// reply checks that r is an array of two RESP integers and returns them.
func reply(t *testing.T, r rueidis.RedisResult) ([2]int64, error) {
	t.Helper()
	arr, err := r.ToArray()
	if err != nil {
		return [2]int64{}, err
	}
	if len(arr) != 2 {
		t.Fatalf("INCREX reply has %d elements, want 2", len(arr))
	}
	var out [2]int64
	for i := range arr {
		if !arr[i].IsInt64() {
			t.Fatalf("INCREX reply element %d is not a RESP integer: %v", i, arr[i])
		}
		out[i], _ = arr[i].ToInt64()
	}
	return out, nil
}

// incr sends INCREX and wants the reply [value, applied].
func (e *increxEnv) incr(key string, args []string, value, applied int64) {
	e.t.Helper()
	got, err := reply(e.t, e.c.Do(e.ctx, e.cmd(key, args...)))
	if err != nil || got != [2]int64{value, applied} {
		e.t.Fatalf("INCREX %s %v = %v, %v; want [%d %d]", key, args, got, err, value, applied)
	}
}

// fails sends INCREX and wants the error text want (rueidis drops the
// "ERR " that starts most errors; TestIncrexShimWire sees the bytes).
func (e *increxEnv) fails(key string, args []string, want string) {
	e.t.Helper()
	err := e.c.Do(e.ctx, e.cmd(key, args...)).Error()
	if err == nil || err.Error() != strings.TrimPrefix(want, "ERR ") {
		e.t.Fatalf("INCREX %s %v: error %v, want %q", key, args, err, want)
	}
}

// is runs an admin command on the server and wants its text.
func (e *increxEnv) is(want string, args ...string) {
	e.t.Helper()
	got, err := e.srv.Cmd(e.t, args...)
	if err != nil && !rueidis.IsRedisNil(err) {
		e.t.Fatalf("%v: %v", args, err)
	}
	if got != want {
		e.t.Fatalf("%v = %q, want %q", args, got, want)
	}
}

// pttl returns the key's PTTL.
func (e *increxEnv) pttl(key string) int64 {
	e.t.Helper()
	n, err := strconv.ParseInt(e.srv.MustCmd(e.t, "PTTL", key), 10, 64)
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

func args(s string) []string { return strings.Fields(s) }

func TestIncrexShimFixedWindow(t *testing.T) {
	e := newIncrexEnv(t)
	win := args("BYINT 3 UBOUND 5 PX 60000 ENX")
	e.incr("w", win, 3, 3) // creates the window
	if p := e.pttl("w"); p <= 50000 || p > 60000 {
		t.Fatalf("PTTL after the first call = %d, want about 60000", p)
	}
	e.srv.MustCmd(t, "PEXPIRE", "w", "30000") // as if 30 s had passed
	e.incr("w", args("BYINT 2 UBOUND 5 PX 60000 ENX"), 5, 2)
	if p := e.pttl("w"); p <= 0 || p > 30000 {
		t.Fatalf("PTTL after a later call = %d, want the window's (<= 30000)", p)
	}
	e.incr("w", args("BYINT 1 UBOUND 5 PX 60000 ENX"), 5, 0) // over the limit
	e.is("5", "GET", "w")
	if p := e.pttl("w"); p <= 0 || p > 30000 {
		t.Fatalf("PTTL after a refused call = %d, want it untouched", p)
	}
	// A missing key whose first increment is already over the bound is not
	// created.
	e.incr("fresh", args("BYINT 10 UBOUND 5 PX 60000 ENX"), 0, 0)
	e.is("0", "EXISTS", "fresh")
	// Redis's own examples.
	e.incr("d", nil, 1, 1)
	e.incr("d", nil, 2, 1)
	e.srv.MustCmd(t, "SET", "d", "100")
	e.incr("d", args("byint 5"), 105, 5) // options are case-insensitive
	e.incr("d", args("BYINT -10"), 95, -10)
	e.incr("d", args("BYINT 0"), 95, 0)
}

func TestIncrexShimBounds(t *testing.T) {
	e := newIncrexEnv(t)
	e.srv.MustCmd(t, "SET", "k", "10")
	e.incr("k", args("BYINT 10 UBOUND 15"), 10, 0)
	e.is("10", "GET", "k")
	e.incr("k", args("BYINT 10 UBOUND 15 SATURATE"), 15, 5)
	e.incr("k", args("BYINT -20 LBOUND 5"), 15, 0)
	e.incr("k", args("LBOUND 5 SATURATE BYINT -20"), 5, -10) // any order
	e.incr("k", args("BYINT -5 LBOUND 0 UBOUND 10"), 0, -5)  // lands on the bound
	e.is("0", "GET", "k")
	// A value already outside the bounds: refused, or clamped with SATURATE.
	e.srv.MustCmd(t, "SET", "k", "50")
	e.incr("k", args("BYINT 5 UBOUND 30"), 50, 0)
	e.incr("k", args("BYINT 5 UBOUND 30 SATURATE"), 30, -20)
	e.srv.MustCmd(t, "SET", "k", "50")
	e.incr("k", args("BYINT -25 UBOUND 30"), 25, -25)
	// SATURATE creates a missing key; a refusal does not.
	e.incr("m", args("BYINT 5 LBOUND 10"), 0, 0)
	e.is("0", "EXISTS", "m")
	e.incr("m", args("BYINT 5 LBOUND 10 SATURATE"), 10, 10)
	e.is("10", "GET", "m")
}

func TestIncrexShimInt64Limits(t *testing.T) {
	e := newIncrexEnv(t)
	// Past 2^53, where Lua numbers are no longer exact.
	e.srv.MustCmd(t, "SET", "big", "9007199254740993")
	e.incr("big", nil, 9007199254740994, 1)
	e.is("9007199254740994", "GET", "big")

	e.srv.MustCmd(t, "SET", "k", "9223372036854775800")
	e.incr("k", args("BYINT 9223372036854775800"), 9223372036854775800, 0)
	e.incr("k", args("BYINT 9223372036854775800 SATURATE"), 9223372036854775807, 7)
	e.is("9223372036854775807", "GET", "k")
	e.srv.MustCmd(t, "SET", "k", "-9223372036854775800")
	e.incr("k", args("BYINT -9223372036854775800 LBOUND -9223372036854775808"), -9223372036854775800, 0)
	e.incr("k", args("BYINT -9223372036854775800 SATURATE"), -9223372036854775808, -8)
	e.is("-9223372036854775808", "GET", "k")
	// The clamped result is representable, the increment that reaches it
	// is not.
	e.srv.MustCmd(t, "SET", "k", "9223372036854775800")
	e.fails("k", args("BYINT 1 SATURATE UBOUND -9223372036854775808"), "ERR applied increment would overflow")
	e.is("9223372036854775800", "GET", "k")
}

func TestIncrexShimConditions(t *testing.T) {
	e := newIncrexEnv(t)
	e.incr("k", args("XX BYINT 5"), 0, 0)
	e.is("0", "EXISTS", "k")
	e.incr("k", args("NX BYINT 5 PX 60000"), 5, 5)
	e.incr("k", args("nx BYINT 5 PX 60000"), 5, 0)
	e.incr("k", args("XX BYINT 2"), 7, 2)
	e.is("7", "GET", "k")
}

func TestIncrexShimExpiry(t *testing.T) {
	e := newIncrexEnv(t)
	e.incr("k", args("BYINT 1 EX 100"), 1, 1)
	if p := e.pttl("k"); p <= 90000 || p > 100000 {
		t.Fatalf("PTTL after EX 100 = %d", p)
	}
	e.incr("k", nil, 2, 1) // no option: the TTL stays
	if p := e.pttl("k"); p <= 90000 {
		t.Fatalf("PTTL after a plain INCREX = %d, want the TTL kept", p)
	}
	e.incr("k", args("BYINT 1 PX 5000"), 3, 1) // without ENX: reset every time
	if p := e.pttl("k"); p <= 0 || p > 5000 {
		t.Fatalf("PTTL after PX 5000 = %d", p)
	}
	e.incr("k", args("PERSIST"), 4, 1)
	e.is("-1", "PTTL", "k")
	e.incr("k", args("PERSIST"), 5, 1)
	e.is("-1", "PTTL", "k")

	e.incr("k", args("BYINT 1 EX 100 ENX"), 6, 1) // no TTL: ENX sets it
	if p := e.pttl("k"); p <= 90000 || p > 100000 {
		t.Fatalf("PTTL after EX 100 ENX = %d", p)
	}
	e.incr("k", args("BYINT 1 EXAT 1 ENX"), 7, 1) // a TTL: ENX keeps it
	if p := e.pttl("k"); p <= 90000 {
		t.Fatalf("PTTL after EXAT 1 ENX = %d, want the TTL kept", p)
	}
	e.incr("k", args("BYINT 100 UBOUND 10 EX 5"), 7, 0) // refused: TTL untouched
	if p := e.pttl("k"); p <= 90000 {
		t.Fatalf("PTTL after a refused EX 5 = %d, want the TTL kept", p)
	}
	e.incr("k", args("BYINT 100 UBOUND 10 SATURATE EX 5"), 10, 3)
	if p := e.pttl("k"); p <= 0 || p > 5000 {
		t.Fatalf("PTTL after a saturated EX 5 = %d", p)
	}
	at := strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10)
	e.incr("k", []string{"EXAT", at}, 11, 1)
	if p := e.pttl("k"); p <= 3500000 || p > 3600000 {
		t.Fatalf("PTTL after EXAT in an hour = %d", p)
	}
	e.incr("k", args("PXAT 1"), 12, 1) // in the past: the key is gone
	e.is("0", "EXISTS", "k")
}

func TestIncrexShimErrors(t *testing.T) {
	e := newIncrexEnv(t)
	const (
		syntax = "ERR syntax error"
		notInt = "ERR value is not an integer or out of range"
	)
	e.srv.MustCmd(t, "SET", "k", "10")
	for _, c := range []struct{ args, want string }{
		{"FOO", syntax},
		{"BYINT 1 FOO", syntax},
		{"BYINT", syntax},
		{"BYINT 1 UBOUND", syntax},
		{"BYINT 1 BYINT 2", syntax},
		{"BYFLOAT 1.5", syntax}, // the shim counts integers only
		{"BYINT 1 BYFLOAT 1.5", syntax},
		{"LBOUND 0 LBOUND 1", syntax},
		{"SATURATE SATURATE LBOUND 0", syntax},
		{"EX 10 PX 5000", syntax},
		{"EX 10 EX 20", syntax},
		{"EX 10 PERSIST", syntax},
		{"PERSIST ENX", syntax},
		{"ENX ENX EX 10", syntax},
		{"NX XX", syntax},
		{"ENX", "ERR ENX flag requires an expiration"},
		{"BYINT abc", "ERR Increment is not an integer or out of range"},
		{"BYINT 1.5", "ERR Increment is not an integer or out of range"},
		{"BYINT +1", "ERR Increment is not an integer or out of range"},
		{"BYINT 9223372036854775808", "ERR Increment is not an integer or out of range"},
		{"UBOUND x", notInt},
		{"LBOUND 01", notInt},
		{"EX ten", notInt},
		{"BYINT 1 LBOUND 10 UBOUND 5", "ERR LBOUND can't be greater than UBOUND"},
		{"EX 0", "ERR invalid expire time in 'increx' command"},
		{"PX -1", "ERR invalid expire time in 'increx' command"},
		{"EX 9223372036854775", "ERR invalid expire time in 'increx' command"},
		{"PX 9223372036854775807", "ERR invalid expire time in 'increx' command"}, // overflows now+ms on the server
	} {
		e.fails("k", args(c.args), c.want)
	}
	e.is("10", "GET", "k")
	e.is("-1", "PTTL", "k")

	e.srv.MustCmd(t, "RPUSH", "list", "a")
	e.fails("list", nil, "WRONGTYPE Operation against a key holding the wrong kind of value")
	for _, v := range []string{"abc", "1.5", " 1", "+1", "007", "-0", "9223372036854775808", ""} {
		e.srv.MustCmd(t, "SET", "s", v)
		e.fails("s", nil, notInt)
		e.is(v, "GET", "s")
	}
	err := e.c.Do(e.ctx, e.c.B().Arbitrary("INCREX").Build()).Error()
	if err == nil || err.Error() != "wrong number of arguments for 'increx' command" {
		t.Fatalf("INCREX without a key: %v", err)
	}
}

// rawConn is a plain RESP2 connection, to see the bytes of replies.
type rawConn struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
}

func dialRawConn(t *testing.T, addr string) *rawConn {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	return &rawConn{t: t, conn: c, r: bufio.NewReader(c)}
}

// do sends each command, then reads the replies, each returned as one
// string: simple values, bulk strings, and arrays of those.
func (c *rawConn) do(cmds ...[]string) []string {
	c.t.Helper()
	var b strings.Builder
	for _, args := range cmds {
		fmt.Fprintf(&b, "*%d\r\n", len(args))
		for _, a := range args {
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
		}
	}
	if _, err := c.conn.Write([]byte(b.String())); err != nil {
		c.t.Fatal(err)
	}
	out := make([]string, len(cmds))
	for i := range out {
		out[i] = c.value()
	}
	return out
}

func (c *rawConn) value() string {
	c.t.Helper()
	line := c.line()
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	switch {
	case err != nil || n < 0:
	case line[0] == '$':
		line += c.line()
	case line[0] == '*':
		for range n {
			line += c.value()
		}
	}
	return line
}

func (c *rawConn) line() string {
	c.t.Helper()
	s, err := c.r.ReadString('\n')
	if err != nil {
		c.t.Fatal(err)
	}
	return s
}

// TestIncrexShimWire checks the bytes: the two modes answer exactly what
// the server answers to a command it does not know and to a syntax error;
// a native reply is an array of two integers; errors keep their prefix.
func TestIncrexShimWire(t *testing.T) {
	srv := redistest.Start(t)
	shim := faulttest.StartIncrexShim(t, srv.Addr)
	direct, via := dialRawConn(t, srv.Addr), dialRawConn(t, shim.Addr())
	long := strings.Repeat("x", 100)
	cmds := [][]string{
		{"INCREX", "k", "BYINT", "5", "UBOUND", "10"},
		{"increx", "k", "BYINT", "5", long, long, long},
		{"INCREX", "k", "a\r\nb", "c\x00d"},
		{"INCREX", "k"},
		{"INCREX"},
	}
	want := direct.do(cmds...)
	if want[0] != "-ERR unknown command 'INCREX', with args beginning with: 'k' 'BYINT' '5' 'UBOUND' '10' \r\n" {
		t.Fatalf("the server's own reply: %q", want[0])
	}
	shim.SetMode(faulttest.IncrexUnknown)
	for i, got := range via.do(cmds...) {
		if got != want[i] {
			t.Errorf("IncrexUnknown: %q\n got %q\nwant %q", cmds[i], got, want[i])
		}
	}
	shim.SetMode(faulttest.IncrexSyntaxError)
	for i, got := range via.do(cmds...) {
		if want := "-ERR syntax error\r\n"; got != want {
			t.Errorf("IncrexSyntaxError: %q: got %q, want %q", cmds[i], got, want)
		}
	}
	want = direct.do([]string{"SET", "s", "x"}, []string{"INCR", "s"})
	shim.SetMode(faulttest.IncrexNative)
	got := via.do([]string{"INCREX", "k", "BYINT", "-3"}, []string{"INCREX", "k", "ENX"}, []string{"INCREX", "s"},
		[]string{"INCREX", "k", "EX", "0"}, []string{"PING"})
	for i, w := range []string{"*2\r\n:-3\r\n:-3\r\n", "-ERR ENX flag requires an expiration\r\n", want[1],
		"-ERR invalid expire time in 'increx' command\r\n", "+PONG\r\n"} {
		if got[i] != w {
			t.Errorf("native reply %d = %q, want %q", i, got[i], w)
		}
	}
	if n := shim.Calls(); n != 14 {
		t.Errorf("Calls() = %d, want 14", n)
	}
	// An inline command passes through (and ends rewriting on its connection).
	inline := dialRawConn(t, shim.Addr())
	if _, err := inline.conn.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	if got := inline.line(); got != "+PONG\r\n" {
		t.Fatalf("inline PING = %q", got)
	}
}

func TestIncrexShimModes(t *testing.T) {
	e := newIncrexEnv(t)
	e.shim.SetMode(faulttest.IncrexUnknown)
	e.fails("k", args("BYINT 5"), "ERR unknown command 'INCREX', with args beginning with: 'k' 'BYINT' '5' ")
	e.is("0", "EXISTS", "k")
	e.shim.SetMode(faulttest.IncrexSyntaxError)
	e.fails("k", args("BYINT 5"), "ERR syntax error")
	e.is("0", "EXISTS", "k")
	e.shim.SetMode(faulttest.IncrexNative)
	e.incr("k", args("BYINT 5"), 5, 5)
	if n := e.shim.Calls(); n != 3 {
		t.Fatalf("Calls() = %d, want 3", n)
	}
}

// The modes of a server that has INCREX but refuses this call, and of a
// proxy that refuses it: the error text arrives as the mode says, and
// nothing changes.
func TestIncrexShimRealErrorModes(t *testing.T) {
	e := newIncrexEnv(t)
	for _, tc := range []struct {
		mode faulttest.IncrexMode
		want string
	}{
		{faulttest.IncrexNoPerm, "NOPERM User default has no permissions to run the 'increx' command"},
		{faulttest.IncrexReadOnly, "READONLY You can't write against a read only replica."},
		{faulttest.IncrexOOM, "OOM command not allowed when used memory > 'maxmemory'."},
		{faulttest.IncrexProxyUnsupported, "unsupported command 'INCREX'"},
	} {
		e.shim.SetMode(tc.mode)
		e.fails("k", args("BYINT 5 UBOUND 10 PX 1000 ENX"), tc.want)
		e.is("0", "EXISTS", "k")
	}
}

func TestIncrexShimPipeline(t *testing.T) {
	e := newIncrexEnv(t)
	c := e.c
	show := func(i int, r rueidis.RedisResult) string {
		if err := r.Error(); err != nil {
			return "error: " + err.Error()
		}
		if i == 2 || i == 4 { // an INCREX that succeeds
			v, _ := reply(t, r)
			return fmt.Sprint(v)
		}
		s, _ := r.ToString()
		return s
	}
	for _, mode := range []faulttest.IncrexMode{faulttest.IncrexNative, faulttest.IncrexSyntaxError} {
		e.srv.MustCmd(t, "FLUSHALL")
		e.shim.SetMode(mode)
		res := c.DoMulti(e.ctx,
			c.B().Set().Key("a").Value("1").Build(),
			c.B().Get().Key("a").Build(),
			e.cmd("a", "BYINT", "4"),
			c.B().Get().Key("a").Build(),
			e.cmd("b", "BYINT", "2", "UBOUND", "1"),
			e.cmd("a", "BYINT", "x"),
			c.B().Set().Key("c").Value("x").Build(),
			e.cmd("c"),
			c.B().Get().Key("c").Build(),
		)
		want := []string{"OK", "1", "[5 4]", "5", "[0 0]", "error: Increment is not an integer or out of range",
			"OK", "error: value is not an integer or out of range", "x"}
		if mode == faulttest.IncrexSyntaxError {
			want[2], want[3], want[4], want[5], want[7] = "error: syntax error", "1", "error: syntax error",
				"error: syntax error", "error: syntax error"
		}
		for i, r := range res {
			if got := show(i, r); got != want[i] {
				t.Errorf("%v: reply %d = %q, want %q", mode, i, got, want[i])
			}
		}
	}
}

// TestIncrexShimTransaction: an INCREX reply inside EXEC's array is
// rewritten too.
func TestIncrexShimTransaction(t *testing.T) {
	e := newIncrexEnv(t)
	c := e.c
	var res []rueidis.RedisResult
	_ = c.Dedicated(func(d rueidis.DedicatedClient) error {
		res = d.DoMulti(e.ctx, c.B().Multi().Build(), e.cmd("k", "BYINT", "3"), c.B().Get().Key("k").Build(),
			e.cmd("k", "BYINT", "9", "UBOUND", "5"), c.B().Exec().Build())
		return nil
	})
	arr, err := res[4].ToArray()
	if err != nil || len(arr) != 3 {
		t.Fatalf("EXEC = %v, %v", arr, err)
	}
	for i, want := range [][2]int64{{3, 3}, {}, {3, 0}} {
		if i == 1 {
			continue
		}
		vals, err := arr[i].ToArray()
		if err != nil || len(vals) != 2 || !vals[0].IsInt64() || !vals[1].IsInt64() {
			t.Fatalf("EXEC element %d = %v, %v", i, vals, err)
		}
		v0, _ := vals[0].ToInt64()
		v1, _ := vals[1].ToInt64()
		if [2]int64{v0, v1} != want {
			t.Fatalf("EXEC element %d = [%d %d], want %v", i, v0, v1, want)
		}
	}
}

// TestIncrexShimTracking: RESP3 push messages (client-side caching
// invalidations) pass through, so a cached GET sees what INCREX wrote.
func TestIncrexShimTracking(t *testing.T) {
	e := newIncrexEnv(t)
	c := e.c
	get := func() (string, bool) {
		r := c.DoCache(e.ctx, c.B().Get().Key("k").Cache(), time.Minute)
		s, err := r.ToString()
		if err != nil {
			t.Fatal(err)
		}
		return s, r.IsCacheHit()
	}
	e.incr("k", nil, 1, 1)
	get()
	if v, hit := get(); v != "1" || !hit {
		t.Fatalf("GET = %q (cache hit %v), want a cached 1", v, hit)
	}
	e.incr("k", nil, 2, 1)
	// The invalidation precedes the reply to a later command on the same
	// (only) connection.
	if err := c.Do(e.ctx, c.B().Ping().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if v, _ := get(); v != "2" {
		t.Fatalf("GET after INCREX = %q, want 2", v)
	}
}

func TestIncrexShimConcurrent(t *testing.T) {
	e := newIncrexEnv(t)
	const workers, each, limit = 8, 50, 300
	var mu sync.Mutex
	applied, refused := 0, 0
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				r, err := reply(t, e.c.Do(e.ctx, e.cmd("n", "BYINT", "1", "UBOUND", strconv.Itoa(limit), "PX", "60000", "ENX")))
				mu.Lock()
				switch {
				case err != nil:
					t.Error(err)
				case r[1] == 1:
					applied++
				case r == [2]int64{limit, 0}:
					refused++
				default:
					t.Errorf("reply %v", r)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if applied != limit || refused != workers*each-limit {
		t.Fatalf("applied %d, refused %d; want %d and %d", applied, refused, limit, workers*each-limit)
	}
	e.is(strconv.Itoa(limit), "GET", "n")
	if n := e.shim.Calls(); n != workers*each {
		t.Fatalf("Calls() = %d, want %d", n, workers*each)
	}
}

// TestIncrexShimKinds: the shim works in front of every server kind.
func TestIncrexShimKinds(t *testing.T) {
	for _, k := range redistest.Kinds() {
		t.Run(k.String(), func(t *testing.T) {
			srv := redistest.Start(t, redistest.WithKind(k))
			shim := faulttest.StartIncrexShim(t, srv.Addr)
			c := dialRawConn(t, shim.Addr())
			win := []string{"INCREX", "w", "BYINT", "3", "UBOUND", "5", "PX", "60000", "ENX"}
			got := c.do(win, win, []string{"PTTL", "w"}, []string{"INCREX", "w", "BYFLOAT", "1"})
			if got[0] != "*2\r\n:3\r\n:3\r\n" || got[1] != "*2\r\n:3\r\n:0\r\n" || got[3] != "-ERR syntax error\r\n" {
				t.Fatalf("replies %q", got)
			}
			if p, _ := strconv.Atoi(strings.TrimSpace(got[2][1:])); p <= 50000 || p > 60000 {
				t.Fatalf("PTTL %q", got[2])
			}
			// Every kind words "unknown command" as Redis 7.0 does.
			shim.SetMode(faulttest.IncrexUnknown)
			unknown := []string{"INCREX", "w", "BYINT", "1"}
			if got, want := c.do(unknown), dialRawConn(t, srv.Addr).do(unknown); got[0] != want[0] {
				t.Fatalf("IncrexUnknown: %q, the server: %q", got[0], want[0])
			}
		})
	}
}
