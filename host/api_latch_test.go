package host_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/redis/rueidis"

	coordhostv1 "github.com/coordhost/coordhost/gen/coordhost/v1"
	"github.com/coordhost/coordhost/gen/coordhost/v1/coordhostv1connect"
	"github.com/coordhost/coordhost/host"
	"github.com/coordhost/coordhost/internal/redistest"
)

// latchBlocks are the latch blocks of the LatchService tests, added to
// rateLimitConfig's (key_prefix "m:", partition policies tenant and raw).
const latchBlocks = `
latch "batch" {}
latch "short" {
  ttl = "400ms"
}
latch "forever" {
  ttl = "none"
}
latch "tenant" {
  partition = policy.partition.raw
}
`

// latchKey is the Redis key of latch key (name, or name/partition).
func latchKey(key string) string { return "m:coordhost:latch:" + key }

// latchWait is an open Wait stream, read by a goroutine of its own.
type latchWait struct {
	msgs chan *coordhostv1.WaitLatchResponse
	err  chan error // the stream's end, after msgs closed
}

func openWait(ctx context.Context, c coordhostv1connect.LatchServiceClient, m *coordhostv1.WaitLatchRequest) *latchWait {
	w := &latchWait{msgs: make(chan *coordhostv1.WaitLatchResponse, 64), err: make(chan error, 1)}
	go func() {
		defer close(w.msgs)
		st, err := c.Wait(ctx, connect.NewRequest(m))
		if err != nil {
			w.err <- err
			return
		}
		for st.Receive() {
			w.msgs <- st.Msg()
		}
		w.err <- st.Err()
		st.Close()
	}()
	return w
}

// next returns the stream's next response; nil when it ended.
func (w *latchWait) next(t *testing.T, what string) *coordhostv1.WaitLatchResponse {
	t.Helper()
	select {
	case m := <-w.msgs:
		return m
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no response in 10s", what)
	}
	return nil
}

// end returns the stream's status once it ended, failing if it sends
// anything more first.
func (w *latchWait) end(t *testing.T, what string) error {
	t.Helper()
	if m := w.next(t, what); m != nil {
		t.Fatalf("%s: %v, want the end of the stream", what, m)
	}
	return <-w.err
}

// done reads the stream to its last response, skipping repeats (which
// must carry done = false), and checks that the stream then ends with OK.
func (w *latchWait) done(t *testing.T, what string) *coordhostv1.WaitLatchResponse {
	t.Helper()
	for {
		m := w.next(t, what)
		if m == nil {
			t.Fatalf("%s: the stream ended without done: %v", what, <-w.err)
		}
		if m.GetDone() {
			if err := w.end(t, what); err != nil {
				t.Fatalf("%s: after done: %v", what, err)
			}
			return m
		}
	}
}

var apiModes = []struct {
	name string
	opts []connect.ClientOption
}{{"grpc", []connect.ClientOption{connect.WithGRPC()}}, {"connect-json", []connect.ClientOption{connect.WithProtoJSON()}}}

// LatchService over gRPC and Connect JSON: a latch's whole life, a Wait
// stream and a Join+Count waiter seeing the count-downs complete it,
// Reset and Delete ending waits with completed = false, a completion
// remembered across one Reset, expiry, and partitioned latches.
func TestAPILatchLifecycle(t *testing.T) {
	s := redistest.Start(t)
	h := newHost(t, rateLimitConfig(t, s.Addr, 3, latchBlocks))
	url, hc := apiServer(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for _, mode := range apiModes {
		t.Run(mode.name, func(t *testing.T) {
			s.MustCmd(t, "FLUSHALL")
			c := coordhostv1connect.NewLatchServiceClient(hc, url, mode.opts...)
			key := latchKey("batch")
			count := func(gen string) *coordhostv1.CountLatchResponse {
				t.Helper()
				r, err := c.Count(ctx, connect.NewRequest(&coordhostv1.CountLatchRequest{Name: "batch", Generation: gen}))
				if err != nil {
					t.Fatalf("Count(%q): %v", gen, err)
				}
				return r.Msg
			}
			countDown := func(gen string) *coordhostv1.CountDownLatchResponse {
				t.Helper()
				r, err := c.CountDown(ctx, connect.NewRequest(&coordhostv1.CountDownLatchRequest{Name: "batch", Generation: gen}))
				if err != nil {
					t.Fatalf("CountDown(%q): %v", gen, err)
				}
				return r.Msg
			}

			// Create: a generation, the count, the expiry of the default
			// 24h ttl (the daemon's estimate, not later than Redis's).
			cr, err := c.Create(ctx, connect.NewRequest(&coordhostv1.CreateLatchRequest{Name: "batch", Count: 2}))
			if err != nil {
				t.Fatal(err)
			}
			st := cr.Msg.GetLatch()
			gen := st.GetGeneration()
			if gen == "" || st.GetCount() != 2 || st.GetExpiresAt() == nil {
				t.Fatalf("Create: %v", st)
			}
			if exp := time.Until(st.GetExpiresAt().AsTime()); exp > 24*time.Hour || exp < 24*time.Hour-10*time.Second {
				t.Fatalf("Create: expires in %v, want about 24h", exp)
			}
			pttl, _ := strconv.ParseInt(s.MustCmd(t, "PTTL", key), 10, 64)
			if redisExp := time.Now().Add(time.Duration(pttl) * time.Millisecond); st.GetExpiresAt().AsTime().After(redisExp.Add(50 * time.Millisecond)) {
				t.Fatalf("expires_at %v is later than Redis's expiry %v", st.GetExpiresAt().AsTime(), redisExp)
			}
			if got := s.MustCmd(t, "HGET", key, "count"); got != "2" {
				t.Fatalf("Redis count %q", got)
			}
			_, err = c.Create(ctx, connect.NewRequest(&coordhostv1.CreateLatchRequest{Name: "batch", Count: 5}))
			wantCode(t, "Create where a latch is", err, connect.CodeAlreadyExists, coordhostv1.Reason_REASON_UNSPECIFIED, "")
			if got := s.MustCmd(t, "HGET", key, "count"); got != "2" {
				t.Fatalf("Redis count %q after a refused Create", got)
			}

			// A block with ttl "none": no expiry anywhere.
			fr, err := c.Create(ctx, connect.NewRequest(&coordhostv1.CreateLatchRequest{Name: "forever", Count: 1}))
			if err != nil || fr.Msg.GetLatch().GetExpiresAt() != nil {
				t.Fatalf("Create(forever): %v %v", fr, err)
			}
			if p := s.MustCmd(t, "PTTL", latchKey("forever")); p != "-1" {
				t.Fatalf("forever's PTTL %s", p)
			}

			// Waiter 1: a Wait stream, its first response at once.
			w1 := openWait(ctx, c, &coordhostv1.WaitLatchRequest{Name: "batch", Generation: gen})
			if m := w1.next(t, "Wait"); m == nil || m.GetDone() || m.GetCount() != 2 {
				t.Fatalf("Wait's first response: %v", m)
			}
			// Waiter 2: Join, then Count.
			jr, err := c.Join(ctx, connect.NewRequest(&coordhostv1.JoinLatchRequest{Name: "batch"}))
			if err != nil {
				t.Fatal(err)
			}
			if j := jr.Msg.GetLatch(); j.GetGeneration() != gen || j.GetCount() != 2 || j.GetExpiresAt() != nil {
				t.Fatalf("Join: %v", j)
			}
			if r := count(gen); !r.GetCurrent() || r.GetCount() != 2 {
				t.Fatalf("Count: %v", r)
			}

			if r := countDown(gen); !r.GetCurrent() || r.GetCount() != 1 {
				t.Fatalf("CountDown: %v", r)
			}
			if r := count(""); !r.GetCurrent() || r.GetCount() != 1 {
				t.Fatalf("Count of the current generation: %v", r)
			}
			if r := countDown(gen); !r.GetCurrent() || r.GetCount() != 0 {
				t.Fatalf("the completing CountDown: %v", r)
			}
			if m := w1.done(t, "Wait"); !m.GetCompleted() || m.GetCount() != 0 {
				t.Fatalf("Wait's last response: %v", m)
			}
			if r := count(gen); !r.GetCurrent() || r.GetCount() != 0 {
				t.Fatalf("Count after completion: %v", r)
			}
			// Never below zero: current, count 0, nothing written.
			if r := countDown(gen); !r.GetCurrent() || r.GetCount() != 0 {
				t.Fatalf("CountDown of a completed generation: %v", r)
			}
			if got := s.MustCmd(t, "HGET", key, "count"); got != "0" {
				t.Fatalf("Redis count %q", got)
			}
			// A Wait on a completed generation: only the last response.
			if m := openWait(ctx, c, &coordhostv1.WaitLatchRequest{Name: "batch", Generation: gen}).done(t, "late Wait"); !m.GetCompleted() {
				t.Fatalf("late Wait: %v", m)
			}

			// Reset: a new generation; the completed one stays completed
			// but is no longer current.
			rr, err := c.Reset(ctx, connect.NewRequest(&coordhostv1.ResetLatchRequest{Name: "batch", Count: 3}))
			if err != nil {
				t.Fatal(err)
			}
			gen2 := rr.Msg.GetLatch().GetGeneration()
			if gen2 == "" || gen2 == gen || rr.Msg.GetLatch().GetCount() != 3 || rr.Msg.GetLatch().GetExpiresAt() == nil {
				t.Fatalf("Reset: %v", rr.Msg.GetLatch())
			}
			if r := count(gen); r.GetCurrent() || r.GetCount() != 0 {
				t.Fatalf("Count of a completed, replaced generation: %v", r)
			}
			if r := countDown(gen); r.GetCurrent() || r.GetCount() != 0 {
				t.Fatalf("CountDown of a replaced generation: %v", r)
			}
			if m := openWait(ctx, c, &coordhostv1.WaitLatchRequest{Name: "batch", Generation: gen}).done(t, "Wait after Reset"); !m.GetCompleted() {
				t.Fatalf("Wait of a completed, replaced generation: %v", m)
			}

			// A Reset ends the waits of the generation it replaces.
			w2 := openWait(ctx, c, &coordhostv1.WaitLatchRequest{Name: "batch", Generation: gen2})
			if m := w2.next(t, "Wait"); m == nil || m.GetDone() || m.GetCount() != 3 {
				t.Fatalf("Wait's first response: %v", m)
			}
			countDown(gen2)
			rr, err = c.Reset(ctx, connect.NewRequest(&coordhostv1.ResetLatchRequest{Name: "batch", Count: 1}))
			if err != nil {
				t.Fatal(err)
			}
			gen3 := rr.Msg.GetLatch().GetGeneration()
			if m := w2.done(t, "Wait at Reset"); m.GetCompleted() {
				t.Fatalf("Wait of a generation that a Reset replaced: %v", m)
			}
			if r := count(gen2); r.GetCurrent() || r.GetCount() != -1 {
				t.Fatalf("Count of a replaced generation: %v", r)
			}

			// Delete: only the generation named, or whatever is there;
			// its waiters get completed = false.
			w3 := openWait(ctx, c, &coordhostv1.WaitLatchRequest{Name: "batch", Generation: gen3})
			if m := w3.next(t, "Wait"); m == nil || m.GetDone() || m.GetCount() != 1 {
				t.Fatalf("Wait's first response: %v", m)
			}
			dr, err := c.Delete(ctx, connect.NewRequest(&coordhostv1.DeleteLatchRequest{Name: "batch", Generation: gen2}))
			if err != nil || dr.Msg.GetDeleted() {
				t.Fatalf("Delete of a replaced generation: %v %v", dr, err)
			}
			dr, err = c.Delete(ctx, connect.NewRequest(&coordhostv1.DeleteLatchRequest{Name: "batch"}))
			if err != nil || !dr.Msg.GetDeleted() {
				t.Fatalf("Delete: %v %v", dr, err)
			}
			if m := w3.done(t, "Wait at Delete"); m.GetCompleted() {
				t.Fatalf("Wait of a deleted latch: %v", m)
			}
			if n := s.MustCmd(t, "EXISTS", key); n != "0" {
				t.Fatal("the latch is still in Redis after Delete")
			}
			dr, err = c.Delete(ctx, connect.NewRequest(&coordhostv1.DeleteLatchRequest{Name: "batch"}))
			if err != nil || dr.Msg.GetDeleted() {
				t.Fatalf("Delete of nothing: %v %v", dr, err)
			}
			_, err = c.Join(ctx, connect.NewRequest(&coordhostv1.JoinLatchRequest{Name: "batch"}))
			wantCode(t, "Join of a deleted latch", err, connect.CodeNotFound, coordhostv1.Reason_REASON_LATCH_NOT_FOUND, "")
			_, err = c.Count(ctx, connect.NewRequest(&coordhostv1.CountLatchRequest{Name: "batch"}))
			wantCode(t, "Count of no latch", err, connect.CodeNotFound, coordhostv1.Reason_REASON_LATCH_NOT_FOUND, "")
			if r := countDown(gen3); r.GetCurrent() {
				t.Fatalf("CountDown of a deleted latch: %v", r)
			}
			if m := openWait(ctx, c, &coordhostv1.WaitLatchRequest{Name: "batch", Generation: gen3}).done(t, "Wait after Delete"); m.GetCompleted() {
				t.Fatalf("Wait of a deleted latch: %v", m)
			}
			if n := s.MustCmd(t, "EXISTS", key); n != "0" {
				t.Fatal("CountDown or Wait of a deleted latch wrote it again")
			}

			// Expiry ends a wait with completed = false.
			// Its 400 ms TTL runs from within the call: the expiry lies
			// between the call's start and its end plus 400 ms (less a
			// millisecond of rounding), however slow the call.
			sent := time.Now()
			sr, err := c.Create(ctx, connect.NewRequest(&coordhostv1.CreateLatchRequest{Name: "short", Count: 1}))
			if err != nil {
				t.Fatal(err)
			}
			answered := time.Now()
			if exp := sr.Msg.GetLatch().GetExpiresAt().AsTime(); exp.Before(sent.Add(399*time.Millisecond)) || exp.After(answered.Add(401*time.Millisecond)) {
				t.Fatalf("short expires %v after the call was sent and %v after its answer, want 400ms of the call",
					exp.Sub(sent), exp.Sub(answered))
			}
			start := time.Now()
			ws := openWait(ctx, c, &coordhostv1.WaitLatchRequest{Name: "short", Generation: sr.Msg.GetLatch().GetGeneration()})
			if m := ws.done(t, "Wait until expiry"); m.GetCompleted() || time.Since(start) > 5*time.Second {
				t.Fatalf("Wait of an expiring latch: %v after %v", m, time.Since(start))
			}

			// Partitions: one latch per tenant.
			acme := map[string]string{"tenant": "acme"}
			globex := map[string]string{"tenant": "globex"}
			ar, err := c.Create(ctx, connect.NewRequest(&coordhostv1.CreateLatchRequest{Name: "tenant", Attributes: acme, Count: 1}))
			if err != nil {
				t.Fatal(err)
			}
			if n := s.MustCmd(t, "EXISTS", latchKey("tenant/acme")); n != "1" {
				t.Fatalf("partitioned key missing: %s", s.MustCmd(t, "KEYS", "*"))
			}
			_, err = c.Join(ctx, connect.NewRequest(&coordhostv1.JoinLatchRequest{Name: "tenant", Attributes: globex}))
			wantCode(t, "Join of another tenant", err, connect.CodeNotFound, coordhostv1.Reason_REASON_LATCH_NOT_FOUND, "")
			gr, err := c.Create(ctx, connect.NewRequest(&coordhostv1.CreateLatchRequest{Name: "tenant", Attributes: globex, Count: 2}))
			if err != nil {
				t.Fatal(err)
			}
			wa := openWait(ctx, c, &coordhostv1.WaitLatchRequest{Name: "tenant", Attributes: acme, Generation: ar.Msg.GetLatch().GetGeneration()})
			if m := wa.next(t, "Wait(acme)"); m == nil || m.GetCount() != 1 {
				t.Fatalf("Wait(acme): %v", m)
			}
			// The generation belongs to its tenant's latch only.
			cd, err := c.CountDown(ctx, connect.NewRequest(&coordhostv1.CountDownLatchRequest{Name: "tenant", Attributes: globex, Generation: ar.Msg.GetLatch().GetGeneration()}))
			if err != nil || cd.Msg.GetCurrent() {
				t.Fatalf("acme's generation on globex's latch: %v %v", cd, err)
			}
			cd, err = c.CountDown(ctx, connect.NewRequest(&coordhostv1.CountDownLatchRequest{Name: "tenant", Attributes: acme, Generation: ar.Msg.GetLatch().GetGeneration()}))
			if err != nil || !cd.Msg.GetCurrent() || cd.Msg.GetCount() != 0 {
				t.Fatalf("CountDown(acme): %v %v", cd, err)
			}
			if m := wa.done(t, "Wait(acme)"); !m.GetCompleted() {
				t.Fatalf("Wait(acme): %v", m)
			}
			cr2, err := c.Count(ctx, connect.NewRequest(&coordhostv1.CountLatchRequest{Name: "tenant", Attributes: globex, Generation: gr.Msg.GetLatch().GetGeneration()}))
			if err != nil || !cr2.Msg.GetCurrent() || cr2.Msg.GetCount() != 2 {
				t.Fatalf("Count(globex): %v %v", cr2, err)
			}

			// Not configured.
			_, err = c.Join(ctx, connect.NewRequest(&coordhostv1.JoinLatchRequest{Name: "nope"}))
			wantCode(t, "Join of an unconfigured name", err, connect.CodeNotFound, coordhostv1.Reason_REASON_NAME_NOT_CONFIGURED, "")
			if d := errDetail(t, err); d.GetName() != "nope" || strings.Contains(err.Error(), ".hcl") {
				t.Fatalf("unconfigured: %v %v", err, d)
			}
			err = openWait(ctx, c, &coordhostv1.WaitLatchRequest{Name: "nope", Generation: gen}).end(t, "Wait of an unconfigured name")
			wantCode(t, "Wait of an unconfigured name", err, connect.CodeNotFound, coordhostv1.Reason_REASON_NAME_NOT_CONFIGURED, "")
		})
	}
}

// A Wait stream repeats the count while it waits (every
// Options.WaitHeartbeat, with a fresh count); the call's deadline ends it
// with DeadlineExceeded, a client's cancel ends it, and Drain ends it with
// Unavailable.
func TestAPILatchWaitEnds(t *testing.T) {
	s := redistest.Start(t)
	h := newHostWith(t, rateLimitConfig(t, s.Addr, 3, latchBlocks), host.Options{WaitHeartbeat: 100 * time.Millisecond})
	url, hc := apiServer(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i, mode := range apiModes {
		t.Run(mode.name, func(t *testing.T) {
			s.MustCmd(t, "FLUSHALL")
			c := coordhostv1connect.NewLatchServiceClient(hc, url, mode.opts...)
			// The ends reached the daemon before the next mode's FLUSHALL,
			// which would end a wait still running as not current.
			defer sawWaitEnds(t, h, float64(2*(i+1)))
			cr, err := c.Create(ctx, connect.NewRequest(&coordhostv1.CreateLatchRequest{Name: "batch", Count: 3}))
			if err != nil {
				t.Fatal(err)
			}
			gen := cr.Msg.GetLatch().GetGeneration()
			req := &coordhostv1.WaitLatchRequest{Name: "batch", Generation: gen}

			// Heartbeats: the count again, then the count after a
			// count-down, then the end.
			w := openWait(ctx, c, req)
			start := time.Now()
			for i := range 3 {
				if m := w.next(t, "Wait"); m == nil || m.GetDone() || m.GetCount() != 3 {
					t.Fatalf("response %d: %v", i, m)
				}
			}
			if el := time.Since(start); el < 150*time.Millisecond || el > 3*time.Second {
				t.Fatalf("two heartbeats took %v at 100ms each", el)
			}
			if _, err := c.CountDown(ctx, connect.NewRequest(&coordhostv1.CountDownLatchRequest{Name: "batch", Generation: gen})); err != nil {
				t.Fatal(err)
			}
			for {
				m := w.next(t, "Wait")
				if m == nil || m.GetDone() {
					t.Fatalf("the stream ended: %v", m)
				}
				if m.GetCount() == 2 {
					break
				}
			}
			for range 2 {
				if _, err := c.CountDown(ctx, connect.NewRequest(&coordhostv1.CountDownLatchRequest{Name: "batch", Generation: gen})); err != nil {
					t.Fatal(err)
				}
			}
			if m := w.done(t, "Wait"); !m.GetCompleted() || m.GetCount() != 0 {
				t.Fatalf("last response: %v", m)
			}

			// The call's deadline, through heartbeats: 1 s leaves room
			// for 2 responses at 100 ms heartbeats also when a loaded
			// machine delays the stream's start.
			rr, err := c.Reset(ctx, connect.NewRequest(&coordhostv1.ResetLatchRequest{Name: "batch", Count: 1}))
			if err != nil {
				t.Fatal(err)
			}
			req.Generation = rr.Msg.GetLatch().GetGeneration()
			dctx, dcancel := context.WithTimeout(ctx, time.Second)
			defer dcancel()
			w = openWait(dctx, c, req)
			n := 0
			for w.next(t, "Wait with a deadline") != nil {
				n++
			}
			if err := <-w.err; connect.CodeOf(err) != connect.CodeDeadlineExceeded {
				t.Fatalf("Wait with a deadline: %v, want DeadlineExceeded", err)
			}
			if n < 2 {
				t.Fatalf("%d responses in 1s at 100ms heartbeats", n)
			}

			// The client's cancel.
			cctx, ccancel := context.WithCancel(ctx)
			w = openWait(cctx, c, req)
			if m := w.next(t, "Wait to cancel"); m == nil || m.GetCount() != 1 {
				t.Fatalf("first response: %v", m)
			}
			ccancel()
			for w.next(t, "cancelled Wait") != nil {
			}
			if err := <-w.err; connect.CodeOf(err) != connect.CodeCanceled {
				t.Fatalf("cancelled Wait: %v", err)
			}
		})
	}

	// A plain HTTP client's Connect stream with a timeout header and no
	// deadline of its own: the daemon ends it, with deadline_exceeded.
	c := coordhostv1connect.NewLatchServiceClient(hc, url, connect.WithGRPC())
	jr, err := c.Join(ctx, connect.NewRequest(&coordhostv1.JoinLatchRequest{Name: "batch"}))
	if err != nil {
		t.Fatal(err)
	}
	gen := jr.Msg.GetLatch().GetGeneration()
	msg := []byte(`{"name":"batch","generation":"` + gen + `"}`)
	env := append([]byte{0, 0, 0, 0, byte(len(msg))}, msg...)
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, url+coordhostv1connect.LatchServiceWaitProcedure, bytes.NewReader(env))
	if err != nil {
		t.Fatal(err)
	}
	hreq.Header.Set("Content-Type", "application/connect+json")
	hreq.Header.Set("Connect-Timeout-Ms", "1000") // time for the first response on a loaded machine
	start := time.Now()
	resp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || !bytes.Contains(raw, []byte(`{"count":"1"}`)) ||
		!bytes.Contains(raw, []byte(`"code":"deadline_exceeded"`)) || time.Since(start) > 5*time.Second {
		t.Fatalf("Connect stream with a timeout: %d %q %v after %v", resp.StatusCode, raw, err, time.Since(start))
	}

	// The daemon saw every end: at least one by the call's deadline.
	if d, _ := sawWaitEnds(t, h, 5); d < 1 {
		t.Fatalf("no wait ended by the daemon's deadline")
	}

	// Drain ends the waits with Unavailable and refuses new ones.
	req := &coordhostv1.WaitLatchRequest{Name: "batch", Generation: gen}
	w := openWait(ctx, c, req)
	if m := w.next(t, "Wait"); m == nil {
		t.Fatal(<-w.err)
	}
	h.Drain()
	for w.next(t, "Wait at Drain") != nil {
	}
	wantCode(t, "Wait at Drain", <-w.err, connect.CodeUnavailable, coordhostv1.Reason_REASON_UNSPECIFIED, "")
	err = openWait(ctx, c, req).end(t, "Wait while drained")
	wantCode(t, "Wait while drained", err, connect.CodeUnavailable, coordhostv1.Reason_REASON_UNSPECIFIED, "")
}

// Every bad LatchService request is InvalidArgument naming its field (or
// NotFound for an unconfigured name), and writes nothing.
func TestAPILatchBadInput(t *testing.T) {
	s := redistest.Start(t)
	h := newHost(t, rateLimitConfig(t, s.Addr, 3, latchBlocks))
	url, hc := apiServer(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := coordhostv1connect.NewLatchServiceClient(hc, url, connect.WithGRPC())

	// A real latch, which no bad request may change.
	cr, err := c.Create(ctx, connect.NewRequest(&coordhostv1.CreateLatchRequest{Name: "batch", Count: 2}))
	if err != nil {
		t.Fatal(err)
	}
	gen := cr.Msg.GetLatch().GetGeneration()
	key := latchKey("batch")
	s.MustCmd(t, "PEXPIRE", key, "50000")
	dbsize := s.MustCmd(t, "DBSIZE")

	create := func(m *coordhostv1.CreateLatchRequest) error {
		_, err := c.Create(ctx, connect.NewRequest(m))
		return err
	}
	reset := func(m *coordhostv1.ResetLatchRequest) error {
		_, err := c.Reset(ctx, connect.NewRequest(m))
		return err
	}
	join := func(m *coordhostv1.JoinLatchRequest) error {
		_, err := c.Join(ctx, connect.NewRequest(m))
		return err
	}
	countDown := func(m *coordhostv1.CountDownLatchRequest) error {
		_, err := c.CountDown(ctx, connect.NewRequest(m))
		return err
	}
	count := func(m *coordhostv1.CountLatchRequest) error {
		_, err := c.Count(ctx, connect.NewRequest(m))
		return err
	}
	del := func(m *coordhostv1.DeleteLatchRequest) error {
		_, err := c.Delete(ctx, connect.NewRequest(m))
		return err
	}
	wait := func(m *coordhostv1.WaitLatchRequest) error {
		return openWait(ctx, c, m).end(t, "bad Wait")
	}
	long := strings.Repeat("n", host.MaxAPINameBytes+1)
	longGen := strings.Repeat("G", host.MaxLatchGenerationBytes+1)
	for _, tc := range []struct {
		what  string
		err   error
		code  connect.Code
		field string
	}{
		{"Create: empty name", create(&coordhostv1.CreateLatchRequest{Count: 1}), connect.CodeInvalidArgument, "name"},
		{"Create: long name", create(&coordhostv1.CreateLatchRequest{Name: long, Count: 1}), connect.CodeInvalidArgument, "name"},
		{"Create: no count", create(&coordhostv1.CreateLatchRequest{Name: "short"}), connect.CodeInvalidArgument, "count"},
		{"Create: negative count", create(&coordhostv1.CreateLatchRequest{Name: "short", Count: -1}), connect.CodeInvalidArgument, "count"},
		{"Create: huge count", create(&coordhostv1.CreateLatchRequest{Name: "short", Count: host.MaxLatchCount + 1}), connect.CodeInvalidArgument, "count"},
		{"Create: too many attributes", create(&coordhostv1.CreateLatchRequest{Name: "tenant", Count: 1, Attributes: manyAttrs(host.MaxAPIAttributes + 1)}), connect.CodeInvalidArgument, "attributes"},
		{"Create: empty attribute key", create(&coordhostv1.CreateLatchRequest{Name: "tenant", Count: 1, Attributes: map[string]string{"": "x"}}), connect.CodeInvalidArgument, "attributes"},
		{"Create: long attribute key", create(&coordhostv1.CreateLatchRequest{Name: "tenant", Count: 1, Attributes: map[string]string{strings.Repeat("k", host.MaxAPIAttributeKeyBytes+1): "x"}}), connect.CodeInvalidArgument, "attributes"},
		{"Create: long attribute value", create(&coordhostv1.CreateLatchRequest{Name: "tenant", Count: 1, Attributes: map[string]string{"tenant": strings.Repeat("v", host.MaxAPIAttributeValueBytes+1)}}), connect.CodeInvalidArgument, "attributes"},
		{"Create: missing partition attribute", create(&coordhostv1.CreateLatchRequest{Name: "tenant", Count: 1}), connect.CodeInvalidArgument, "attributes"},
		{"Create: unconfigured", create(&coordhostv1.CreateLatchRequest{Name: "nope", Count: 1}), connect.CodeNotFound, ""},
		{"Reset: empty name", reset(&coordhostv1.ResetLatchRequest{Count: 1}), connect.CodeInvalidArgument, "name"},
		{"Reset: no count", reset(&coordhostv1.ResetLatchRequest{Name: "batch"}), connect.CodeInvalidArgument, "count"},
		{"Reset: huge count", reset(&coordhostv1.ResetLatchRequest{Name: "batch", Count: 1 << 62}), connect.CodeInvalidArgument, "count"},
		{"Reset: missing partition attribute", reset(&coordhostv1.ResetLatchRequest{Name: "tenant", Count: 1, Attributes: map[string]string{"other": "x"}}), connect.CodeInvalidArgument, "attributes"},
		{"Reset: unconfigured", reset(&coordhostv1.ResetLatchRequest{Name: "nope", Count: 1}), connect.CodeNotFound, ""},
		{"Join: empty name", join(&coordhostv1.JoinLatchRequest{}), connect.CodeInvalidArgument, "name"},
		{"Join: missing partition attribute", join(&coordhostv1.JoinLatchRequest{Name: "tenant"}), connect.CodeInvalidArgument, "attributes"},
		{"CountDown: no generation", countDown(&coordhostv1.CountDownLatchRequest{Name: "batch"}), connect.CodeInvalidArgument, "generation"},
		{"CountDown: long generation", countDown(&coordhostv1.CountDownLatchRequest{Name: "batch", Generation: longGen}), connect.CodeInvalidArgument, "generation"},
		{"CountDown: generation with a space", countDown(&coordhostv1.CountDownLatchRequest{Name: "batch", Generation: gen[:4] + " " + gen[5:]}), connect.CodeInvalidArgument, "generation"},
		{"CountDown: generation with DEL", countDown(&coordhostv1.CountDownLatchRequest{Name: "batch", Generation: gen + "\x7f"}), connect.CodeInvalidArgument, "generation"},
		{"CountDown: generation not ASCII", countDown(&coordhostv1.CountDownLatchRequest{Name: "batch", Generation: "généra"}), connect.CodeInvalidArgument, "generation"},
		{"CountDown: empty name", countDown(&coordhostv1.CountDownLatchRequest{Generation: gen}), connect.CodeInvalidArgument, "name"},
		{"CountDown: missing partition attribute", countDown(&coordhostv1.CountDownLatchRequest{Name: "tenant", Generation: gen}), connect.CodeInvalidArgument, "attributes"},
		{"CountDown: unconfigured", countDown(&coordhostv1.CountDownLatchRequest{Name: "nope", Generation: gen}), connect.CodeNotFound, ""},
		{"Count: bad generation", count(&coordhostv1.CountLatchRequest{Name: "batch", Generation: "a\tb"}), connect.CodeInvalidArgument, "generation"},
		{"Count: long name", count(&coordhostv1.CountLatchRequest{Name: long}), connect.CodeInvalidArgument, "name"},
		{"Delete: bad generation", del(&coordhostv1.DeleteLatchRequest{Name: "batch", Generation: longGen}), connect.CodeInvalidArgument, "generation"},
		{"Delete: empty name", del(&coordhostv1.DeleteLatchRequest{Generation: gen}), connect.CodeInvalidArgument, "name"},
		{"Delete: too many attributes", del(&coordhostv1.DeleteLatchRequest{Name: "batch", Attributes: manyAttrs(host.MaxAPIAttributes + 1)}), connect.CodeInvalidArgument, "attributes"},
		{"Delete: missing partition attribute", del(&coordhostv1.DeleteLatchRequest{Name: "tenant"}), connect.CodeInvalidArgument, "attributes"},
		{"Delete: unconfigured", del(&coordhostv1.DeleteLatchRequest{Name: "nope"}), connect.CodeNotFound, ""},
		{"Wait: no generation", wait(&coordhostv1.WaitLatchRequest{Name: "batch"}), connect.CodeInvalidArgument, "generation"},
		{"Wait: bad generation", wait(&coordhostv1.WaitLatchRequest{Name: "batch", Generation: "x y"}), connect.CodeInvalidArgument, "generation"},
		{"Wait: empty name", wait(&coordhostv1.WaitLatchRequest{Generation: gen}), connect.CodeInvalidArgument, "name"},
		{"Wait: missing partition attribute", wait(&coordhostv1.WaitLatchRequest{Name: "tenant", Generation: gen}), connect.CodeInvalidArgument, "attributes"},
	} {
		d := errDetail(t, tc.err)
		switch {
		case connect.CodeOf(tc.err) != tc.code:
			t.Errorf("%s: %v, want %v", tc.what, tc.err, tc.code)
		case d == nil:
			t.Errorf("%s: %v has no ErrorDetail", tc.what, tc.err)
		case tc.code == connect.CodeInvalidArgument && (d.GetField() != tc.field || d.GetReason() != coordhostv1.Reason_REASON_INVALID_FIELD || !strings.Contains(tc.err.Error(), tc.field)):
			t.Errorf("%s: %v (detail %v), want InvalidArgument naming %q", tc.what, tc.err, d, tc.field)
		case tc.code == connect.CodeNotFound && d.GetReason() != coordhostv1.Reason_REASON_NAME_NOT_CONFIGURED:
			t.Errorf("%s: %v (detail %v), want REASON_NAME_NOT_CONFIGURED", tc.what, tc.err, d)
		}
	}

	// A Connect JSON POST, as curl sends it.
	resp, err := http.Post(url+coordhostv1connect.LatchServiceCreateProcedure, "application/json", strings.NewReader(`{"name":"short","count":"0"}`))
	if err != nil {
		t.Fatal(err)
	}
	var body bytes.Buffer
	_, _ = body.ReadFrom(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(body.String(), `"code":"invalid_argument"`) || !strings.Contains(body.String(), "count") {
		t.Fatalf("JSON POST, count 0: %d %s", resp.StatusCode, body.String())
	}

	if got := s.MustCmd(t, "DBSIZE"); got != dbsize {
		t.Fatalf("bad requests changed DBSIZE from %s to %s: %s", dbsize, got, s.MustCmd(t, "KEYS", "*"))
	}
	if got := s.MustCmd(t, "HGET", key, "count"); got != "2" {
		t.Fatalf("bad requests changed the count to %s", got)
	}
	if got := s.MustCmd(t, "HGET", key, "gen"); got != gen {
		t.Fatalf("bad requests changed the generation to %s", got)
	}
	if p, _ := strconv.Atoi(s.MustCmd(t, "PTTL", key)); p > 50000 || p < 0 {
		t.Fatalf("bad requests changed the expiry: PTTL %d", p)
	}
}

// A CountDown whose reply is lost is Unknown (REASON_OUTCOME_UNKNOWN): it
// counted, and Count tells so.
func TestAPILatchLostReply(t *testing.T) {
	s := redistest.Start(t)
	p := newReplyCutter(t, s.Addr)
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{p.addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	h := newHostWith(t, rateLimitConfig(t, s.Addr, 3, latchBlocks), host.Options{Client: client})
	url, hc := apiServer(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := coordhostv1connect.NewLatchServiceClient(hc, url, connect.WithGRPC())

	cr, err := c.Create(ctx, connect.NewRequest(&coordhostv1.CreateLatchRequest{Name: "batch", Count: 3}))
	if err != nil {
		t.Fatal(err)
	}
	cd := &coordhostv1.CountDownLatchRequest{Name: "batch", Generation: cr.Msg.GetLatch().GetGeneration()}
	if _, err := c.CountDown(ctx, connect.NewRequest(cd)); err != nil { // loads the script
		t.Fatal(err)
	}
	p.cut.Store(true)
	_, err = c.CountDown(ctx, connect.NewRequest(cd))
	p.cut.Store(false)
	wantCode(t, "CountDown with its reply lost", err, connect.CodeUnknown, coordhostv1.Reason_REASON_OUTCOME_UNKNOWN, "")
	if got := s.MustCmd(t, "HGET", latchKey("batch"), "count"); got != "1" {
		t.Fatalf("Redis count %s: the lost count-down did not run", got)
	}
	r, err := c.Count(ctx, connect.NewRequest(&coordhostv1.CountLatchRequest{Name: "batch", Generation: cd.Generation}))
	if err != nil || !r.Msg.GetCurrent() || r.Msg.GetCount() != 1 {
		t.Fatalf("Count after the lost reply: %v %v", r, err)
	}
}

// replyCutter is a TCP proxy to a Redis server that, while cut is set,
// closes a connection instead of passing on its next reply.
type replyCutter struct {
	addr string
	cut  atomic.Bool
}

func newReplyCutter(t *testing.T, target string) *replyCutter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &replyCutter{addr: ln.Addr().String()}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			cc, err := ln.Accept()
			if err != nil {
				return
			}
			sc, err := net.Dial("tcp", target)
			if err != nil {
				cc.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, cc, sc)
			mu.Unlock()
			wg.Add(2)
			go func() {
				defer wg.Done()
				_, _ = io.Copy(sc, cc)
				sc.Close()
			}()
			go func() {
				defer wg.Done()
				defer cc.Close()
				buf := make([]byte, 32<<10)
				for {
					n, err := sc.Read(buf)
					if n > 0 && p.cut.Load() {
						sc.Close()
						return
					}
					if n > 0 {
						if _, err := cc.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return p
}

// sawWaitEnds waits (up to 5 s) until h's wait histogram for the latch
// batch counts want waits ended by their deadline or a cancel (a client's
// own deadline may reach the daemon as a cancel), and returns the two
// counts.
func sawWaitEnds(t *testing.T, h *host.Host, want float64) (deadline, cancelled float64) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); ; {
		m := scrape(t, h)
		deadline = metricValue(m, `coordhost_latch_wait_duration_seconds_count{latch="batch",outcome="deadline_exceeded"}`)
		cancelled = metricValue(m, `coordhost_latch_wait_duration_seconds_count{latch="batch",outcome="cancelled"}`)
		if deadline+cancelled == want {
			return deadline, cancelled
		}
		if time.Now().After(end) {
			var seen []string
			for line := range strings.Lines(m) {
				if strings.HasPrefix(line, "coordhost_latch_wait_duration_seconds_count") {
					seen = append(seen, strings.TrimSpace(line))
				}
			}
			t.Fatalf("the daemon observed %v deadline_exceeded and %v cancelled waits, want %v in all; every wait: %q",
				deadline, cancelled, want, seen)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
