package replica_test

import (
	"bufio"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/primitives/internal/base"
	"github.com/coordhost/coordhost/primitives/internal/replica"
	"github.com/coordhost/coordhost/primitives/internal/script"
	"github.com/redis/rueidis"
)

func TestMain(m *testing.M) { xtest.Main(m) }

func TestNewValidates(t *testing.T) {
	for _, tc := range []struct {
		n       int
		timeout time.Duration
		on      bool
		want    time.Duration // the rounded timeout when on
		bad     string        // part of the error; "" for none
	}{
		{n: 0},
		{n: 0, timeout: time.Second}, // off whatever the timeout
		{n: 1, on: true, want: base.DefaultReplicaTimeout},
		{n: 2, timeout: 1500 * time.Microsecond, on: true, want: 2 * time.Millisecond},
		{n: 1, timeout: time.Nanosecond, on: true, want: time.Millisecond}, // never WAIT n 0
		{n: base.MaxReplicas, timeout: base.MaxReplicaTimeout, on: true, want: base.MaxReplicaTimeout},
		{n: -1, bad: "Replicas -1 is negative"},
		{n: base.MaxReplicas + 1, bad: "above the maximum of 64"},
		{n: 1, timeout: -time.Millisecond, bad: "ReplicaTimeout -1ms is negative"},
		{n: 0, timeout: -time.Millisecond, bad: "ReplicaTimeout -1ms is negative"},
		{n: 1, timeout: base.MaxReplicaTimeout + time.Millisecond, bad: "above the maximum of 1m0s"},
	} {
		w, err := replica.New("lock", tc.n, tc.timeout)
		if tc.bad != "" {
			if !errors.Is(err, base.ErrInvalidOptions) || !strings.Contains(err.Error(), tc.bad) || !strings.HasPrefix(err.Error(), "coordhost: invalid options: lock: ") {
				t.Errorf("New(%d, %v) = %v, want an invalid-options error containing %q", tc.n, tc.timeout, err, tc.bad)
			}
			continue
		}
		if err != nil || w.On() != tc.on || tc.on && (w.Timeout() != tc.want || w.Replicas() != int64(tc.n)) {
			t.Errorf("New(%d, %v) = on %v, %d, %v, %v", tc.n, tc.timeout, w.On(), w.Replicas(), w.Timeout(), err)
		}
	}
}

// monitor streams the server's MONITOR lines until the test ends.
func monitor(t *testing.T, addr string) <-chan string {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	if line, err := r.ReadString('\n'); err != nil || line != "+OK\r\n" {
		t.Fatalf("MONITOR: %q %v", line, err)
	}
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			lines <- strings.TrimSpace(line)
		}
	}()
	return lines
}

// source returns the client address of a MONITOR line ("+1700000000.1 [0
// 127.0.0.1:5000] "SET" ...") and its command.
func source(line string) (addr, cmd string) {
	i, j := strings.IndexByte(line, '['), strings.IndexByte(line, ']')
	if i < 0 || j < i {
		return "", ""
	}
	f := strings.Fields(line[i+1 : j])
	if len(f) == 2 {
		addr = f[1]
	}
	return addr, strings.TrimSpace(line[j+1:])
}

// find waits for the line of a command that starts with prefix and holds
// marker, and returns its address.
func find(t *testing.T, lines <-chan string, prefix, marker string) string {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("MONITOR ended before %s %s", prefix, marker)
			}
			if addr, cmd := source(line); strings.HasPrefix(cmd, prefix) && strings.Contains(cmd, marker) {
				return addr
			}
		case <-timeout:
			t.Fatalf("no %s %s in MONITOR", prefix, marker)
		}
	}
}

var setScript = script.New("set", "return redis.call('SET', KEYS[1], ARGV[1])")

// WAIT covers the writes of its own connection only, so it must follow the
// script on the connection that ran it. MONITOR names the connection of
// every command: the script and the WAIT after it share one, and the WAIT
// is the next command of that connection. The control (the script and
// WAIT sent as two Do calls) shows the check can tell: rueidis then sends
// WAIT on a blocking connection of its own.
func TestWaitFollowsScriptOnOneConnection(t *testing.T) {
	p := redistest.Start(t)
	redistest.StartReplicaOf(t, p)
	c := p.Client(t)
	ctx := xtest.Ctx(t, 20*time.Second)
	lines := monitor(t, p.Addr)

	w, err := replica.New("test", 1, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// The first run loads the script (NOSCRIPT, then EVAL): run twice.
	for i, marker := range []string{"first-run", "second-run"} {
		res, ack := w.Run(ctx, c, setScript, []string{"k" + marker}, []string{marker})
		if err := res.Error(); err != nil || !ack.OK() || ack.Acked() != 1 {
			t.Fatalf("run %d: %v, ack ok %v acked %d", i, err, ack.OK(), ack.Acked())
		}
		evalAddr := find(t, lines, `"EVAL`, marker)
		// The next command from that address is WAIT 1 5000.
		for {
			line := <-lines
			addr, cmd := source(line)
			if addr != evalAddr {
				continue
			}
			if cmd != `"WAIT" "1" "5000"` {
				t.Fatalf("run %d: after the script, connection %s sent %s, not WAIT", i, addr, cmd)
			}
			break
		}
	}

	// Control: two Do calls go on different connections.
	if err := setScript.Run(ctx, c, []string{"kcontrol"}, []string{"control"}).Error(); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, c.B().Wait().Numreplicas(1).Timeout(5001).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if a, b := find(t, lines, `"EVALSHA"`, "control"), find(t, lines, `"WAIT"`, "5001"); a == b {
		t.Fatalf("control: the script and a separate WAIT both came from %s; the check could not tell them apart", a)
	}
}

// A paused replica acknowledges nothing: WAIT after our write answers 0
// once the timeout passes, and Ack says so.
func TestPausedReplicaIsCountedOut(t *testing.T) {
	p := redistest.Start(t)
	r := redistest.StartReplicaOf(t, p)
	c := p.Client(t)
	ctx := xtest.Ctx(t, 20*time.Second)
	w, err := replica.New("test", 1, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if res, ack := w.Run(ctx, c, setScript, []string{"k"}, []string{"before"}); res.Error() != nil || !ack.OK() || ack.Err("x", "acquire", "") != nil {
		t.Fatalf("before the pause: %v, ok %v", res.Error(), ack.OK())
	}

	r.Pause()
	defer r.Resume()
	start := time.Now()
	res, ack := w.Run(ctx, c, setScript, []string{"k"}, []string{"during"})
	took := time.Since(start)
	if res.Error() != nil || ack.OK() || ack.Acked() != 0 {
		t.Fatalf("paused: %v, ok %v, acked %d", res.Error(), ack.OK(), ack.Acked())
	}
	if took < 300*time.Millisecond || took > 3*time.Second {
		t.Fatalf("WAIT took %v with a 300ms timeout", took)
	}
	err = ack.Err(`lock "k"`, "acquire", "released")
	var nr *base.NotReplicated
	if !errors.Is(err, base.ErrNotReplicated) || !errors.As(err, &nr) || nr.Want != 1 || nr.Acked != 0 ||
		err.Error() != `lock "k": acquire not confirmed by replicas (released): 0 of 1 replica(s) acknowledged within 300ms` {
		t.Fatalf("error: %v", err)
	}
}

// Off, Run is the script alone: one command, and an Ack that is OK.
func TestOffRunsTheScriptAlone(t *testing.T) {
	p := redistest.Start(t)
	c := p.Client(t)
	ctx := xtest.Ctx(t, 10*time.Second)
	var w replica.Wait
	setScript.Run(ctx, c, []string{"warm"}, []string{"x"}) // load it
	p.MustCmd(t, "CONFIG", "RESETSTAT")
	res, ack := w.Run(ctx, c, setScript, []string{"k"}, []string{"v"})
	if res.Error() != nil || !ack.OK() {
		t.Fatal(res.Error(), ack.OK())
	}
	stats := p.MustCmd(t, "INFO", "commandstats")
	if strings.Contains(stats, "cmdstat_wait:") || !strings.Contains(stats, "cmdstat_evalsha:calls=1,") {
		t.Fatalf("commandstats:\n%s", stats)
	}
}

// In a cluster the pair goes on a dedicated connection to the script's
// node; with no replica there, WAIT answers 0 after its timeout.
func TestClusterRunsOnTheScriptsNode(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	c := cl.Client(t)
	ctx := xtest.Ctx(t, 20*time.Second)
	w, err := replica.New("test", 1, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b", "c", "d"} {
		res, ack := w.Run(ctx, c, setScript, []string{k}, []string{"v"})
		if res.Error() != nil || ack.OK() || ack.Acked() != 0 {
			t.Fatalf("%s: %v ok %v", k, res.Error(), ack.OK())
		}
		if got := cl.NodeForKey(t, k).MustCmd(t, "GET", k); got != "v" {
			t.Fatalf("%s: %q on its node", k, got)
		}
	}
}

// WAIT refused (an ACL without it): the script's write stands, the Ack is
// not OK, and its error names the refusal.
func TestWaitRefused(t *testing.T) {
	p := redistest.Start(t)
	p.MustCmd(t, "ACL", "SETUSER", "nowait", "on", ">pw", "~*", "&*", "+@all", "-wait")
	c := p.Client(t, func(o *rueidis.ClientOption) { o.Username, o.Password = "nowait", "pw" })
	ctx := xtest.Ctx(t, 10*time.Second)
	w, err := replica.New("test", 1, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	res, ack := w.Run(ctx, c, setScript, []string{"k"}, []string{"v"})
	if res.Error() != nil || ack.OK() {
		t.Fatalf("%v, ok %v", res.Error(), ack.OK())
	}
	err = ack.Err(`lock "k"`, "acquire", "released")
	if !errors.Is(err, base.ErrNotReplicated) || !strings.Contains(err.Error(), "WAIT failed: NOPERM") {
		t.Fatalf("error %v", err)
	}
}
