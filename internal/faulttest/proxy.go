package faulttest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// Direction names one half of a proxied connection.
type Direction int

const (
	// Up is client to server (commands).
	Up Direction = iota
	// Down is server to client (replies and push messages).
	Down
)

func (d Direction) String() string {
	if d == Up {
		return "up"
	}
	return "down"
}

// UpstreamDialTimeout bounds the proxy's own dial to the real server.
const UpstreamDialTimeout = 2 * time.Second

// ErrClosed is returned by dials through a closed Proxy.
var ErrClosed = errors.New("faulttest: proxy closed")

// Proxy is one fault domain: every connection dialled through it shares its
// faults. Use one Proxy per client to fault clients independently. All
// methods are safe for concurrent use; a fault set by a method is in force
// for bytes read after it returns.
type Proxy struct {
	mu        sync.Mutex
	lns       map[string]*listener // by upstream address
	conns     map[uint64]*Conn
	nextID    uint64
	latency   [2]time.Duration
	hole      chan struct{} // non-nil while blackholed; closed on heal
	dropN     int           // replies still to drop (count mode)
	dropUntil time.Time     // end of the drop window (window mode)
	windowed  map[*Conn]struct{}
	window    *time.Timer
	closed    bool
	stats     Stats
	wg        sync.WaitGroup
}

// Stats counts what a Proxy did.
type Stats struct {
	Conns          int   // connections accepted
	Resets         int   // connections reset as a fault (not by Close or a peer)
	DroppedReplies int   // replies discarded in count mode (DropReplies)
	DroppedBytes   int64 // server-to-client bytes discarded (both drop modes)
	Blackholes     int   // times Blackhole(true) started a blackhole
}

// New returns a Proxy that is closed when t ends.
func New(t testing.TB) *Proxy {
	p := NewProxy()
	t.Cleanup(p.Close)
	return p
}

// NewProxy returns a Proxy; the caller must Close it.
func NewProxy() *Proxy {
	return &Proxy{lns: map[string]*listener{}, conns: map[uint64]*Conn{}, windowed: map[*Conn]struct{}{}}
}

// Option sets ClientOption.DialCtxFn to p.DialCtxFn; use it with
// redistest's Server.Client or Cluster.Client.
func (p *Proxy) Option() func(*rueidis.ClientOption) {
	return func(o *rueidis.ClientOption) { o.DialCtxFn = p.DialCtxFn }
}

// DialCtxFn has rueidis' ClientOption.DialCtxFn signature: it connects to
// the proxy listener for dst (created on first use). TLS is not supported.
func (p *Proxy) DialCtxFn(ctx context.Context, dst string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
	addr, err := p.Addr(dst)
	if err != nil {
		return nil, err
	}
	if d == nil {
		d = &net.Dialer{}
	}
	return d.DialContext(ctx, "tcp", addr)
}

// Addr returns the 127.0.0.1 address of the proxy listener that forwards to
// dst, creating it on first use. Raw connections dialled there get the same
// faults as the client's.
func (p *Proxy) Addr(dst string) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return "", ErrClosed
	}
	if ln, ok := p.lns[dst]; ok {
		return ln.Addr().String(), nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("faulttest: listen: %w", err)
	}
	ln := &listener{Listener: l, dst: dst}
	p.lns[dst] = ln
	p.wg.Add(1)
	go p.serve(ln)
	return l.Addr().String(), nil
}

type listener struct {
	net.Listener
	dst string
}

func (p *Proxy) serve(ln *listener) {
	defer p.wg.Done()
	for {
		cc, err := ln.Accept()
		if err != nil {
			return
		}
		uc, err := net.DialTimeout("tcp", ln.dst, UpstreamDialTimeout)
		if err != nil {
			cc.Close()
			continue
		}
		p.start(cc, uc, ln.dst)
	}
}

// Conn is one proxied connection.
type Conn struct {
	p        *Proxy
	id       uint64
	upstream string
	client   net.Conn // the side rueidis holds
	server   net.Conn // the side Redis holds
	q        [2]chan chunk
	done     chan struct{}
	once     sync.Once

	hole chan struct{} // per-connection blackhole (guarded by p.mu)

	// down-direction framing, owned by the down reader
	pending  []byte
	unframed bool
	poisoned bool // a reply was dropped: everything after it is dropped too
}

type chunk struct {
	data []byte
	due  time.Time
	kill bool // reset the connection here (after a dropped reply)
	eof  bool // the source closed: pass the close on after the data
}

func (p *Proxy) start(cc, uc net.Conn, dst string) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		cc.Close()
		uc.Close()
		return
	}
	p.nextID++
	c := &Conn{p: p, id: p.nextID, upstream: dst, client: cc, server: uc, done: make(chan struct{})}
	c.q[Up] = make(chan chunk, 256)
	c.q[Down] = make(chan chunk, 256)
	p.conns[c.id] = c
	p.stats.Conns++
	p.wg.Add(4)
	p.mu.Unlock()
	go c.read(Up)
	go c.write(Up)
	go c.read(Down)
	go c.write(Down)
}

// ID returns the connection's number within its Proxy (1, 2, ...).
func (c *Conn) ID() uint64 { return c.id }

// Upstream returns the server address the connection forwards to.
func (c *Conn) Upstream() string { return c.upstream }

// Reset closes both sides now (the client gets a TCP reset). Bytes held by
// the proxy are lost; bytes already written to the server are processed
// by it. Idempotent.
func (c *Conn) Reset() { c.close(true) }

func (c *Conn) close(fault bool) {
	c.once.Do(func() {
		// Book-keeping first: a client that sees the reset must find it
		// in Stats.
		c.p.mu.Lock()
		delete(c.p.conns, c.id)
		delete(c.p.windowed, c)
		if fault {
			c.p.stats.Resets++
		}
		c.p.mu.Unlock()
		close(c.done)
		if tc, ok := c.client.(*net.TCPConn); ok && fault {
			_ = tc.SetLinger(0)
		}
		c.client.Close()
		c.server.Close()
	})
}

func (c *Conn) read(dir Direction) {
	defer c.p.wg.Done()
	src := c.client
	if dir == Down {
		src = c.server
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			var out []chunk
			if dir == Up {
				out = []chunk{{data: slices.Clone(buf[:n])}}
			} else {
				out = c.down(buf[:n])
			}
			lat := c.p.latencyOf(dir)
			for _, ch := range out {
				ch.due = time.Now().Add(lat)
				select {
				case c.q[dir] <- ch:
				case <-c.done:
					return
				}
			}
		}
		if err != nil {
			// The source closed (or failed): pass that on after the bytes
			// already read, as TCP would deliver them.
			select {
			case c.q[dir] <- chunk{eof: true, due: time.Now().Add(c.p.latencyOf(dir))}:
			case <-c.done:
			}
			return
		}
	}
}

func (c *Conn) write(dir Direction) {
	defer c.p.wg.Done()
	dst := c.server
	if dir == Down {
		dst = c.client
	}
	var timer *time.Timer
	clientGone := false // down only: the client is gone, the server not yet
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		var ch chunk
		select {
		case ch = <-c.q[dir]:
		case <-c.done:
			return
		}
		if d := time.Until(ch.due); d > 0 {
			if timer == nil {
				timer = time.NewTimer(d)
			} else {
				timer.Reset(d)
			}
			select {
			case <-timer.C:
			case <-c.done:
				return
			}
		}
		for {
			hole := c.p.blackhole(c)
			if hole == nil {
				break
			}
			select {
			case <-hole:
			case <-c.done:
				return
			}
		}
		switch {
		case ch.kill:
			c.close(true)
			return
		case ch.eof && dir == Up:
			// The client closed after sending: the server reads everything
			// it sent, then EOF, and closes its side, which ends the
			// connection through the down direction.
			if tc, ok := c.server.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			} else {
				c.close(false)
			}
			return
		case ch.eof:
			c.close(false) // the server closed: its last bytes are delivered
			return
		case clientGone:
			continue // discard replies until the server closes too
		}
		if _, err := dst.Write(ch.data); err != nil {
			if dir == Up {
				c.close(false)
				return
			}
			clientGone = true
		}
	}
}

// down frames server-to-client bytes into messages and applies the drop
// faults. It returns what to forward, possibly followed by a kill marker.
func (c *Conn) down(b []byte) []chunk {
	if c.poisoned {
		c.p.countDropped(len(b))
		return nil
	}
	if c.unframed {
		// Any drop fault takes the whole chunk.
		if kill, drop := c.p.dropMessage(c, false); drop {
			c.poisoned = true
			c.p.countDropped(len(b))
			if kill {
				return []chunk{{kill: true}}
			}
			return nil
		}
		return []chunk{{data: slices.Clone(b)}}
	}
	c.pending = append(c.pending, b...)
	var fwd []byte
	var out []chunk
	for len(c.pending) > 0 {
		n, push, err := messageLen(c.pending)
		if err != nil {
			// Not RESP we understand: stop framing, forward the rest raw.
			c.unframed = true
			fwd = append(fwd, c.pending...)
			c.pending = c.pending[:0]
			break
		}
		if n == 0 {
			break
		}
		if kill, drop := c.p.dropMessage(c, push); drop {
			c.poisoned = true
			c.p.countDropped(len(c.pending))
			c.pending = nil
			if len(fwd) > 0 {
				out = append(out, chunk{data: fwd})
			}
			if kill {
				out = append(out, chunk{kill: true})
			}
			return out
		}
		fwd = append(fwd, c.pending[:n]...)
		c.pending = c.pending[n:]
	}
	c.pending = slices.Clone(c.pending)
	if len(fwd) > 0 {
		out = append(out, chunk{data: fwd})
	}
	return out
}

func (p *Proxy) latencyOf(dir Direction) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.latency[dir]
}

// blackhole returns a channel to wait on while c may not forward, or nil.
func (p *Proxy) blackhole(c *Conn) chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hole != nil {
		return p.hole
	}
	return c.hole
}

// Blackhole stops (true) or resumes (false) forwarding on this connection
// alone, in both directions, like Proxy.Blackhole.
func (c *Conn) Blackhole(on bool) {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	switch {
	case on && c.hole == nil:
		c.hole = make(chan struct{})
	case !on && c.hole != nil:
		close(c.hole)
		c.hole = nil
	}
}

// dropMessage decides the fate of one framed message from the server: drop
// it (and everything after it on c), and whether to queue the reset after
// what was already forwarded (count mode) or leave it to the window's end.
func (p *Proxy) dropMessage(c *Conn, push bool) (kill, drop bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Now().Before(p.dropUntil) {
		p.windowed[c] = struct{}{}
		return false, true
	}
	if !push && p.dropN > 0 {
		p.dropN--
		p.stats.DroppedReplies++
		return true, true
	}
	return false, false
}

func (p *Proxy) countDropped(bytes int) {
	p.mu.Lock()
	p.stats.DroppedBytes += int64(bytes)
	p.mu.Unlock()
}

// SetLatency delays both directions by d (0 removes the delay).
func (p *Proxy) SetLatency(d time.Duration) { p.SetLatencyDir(d, d) }

// SetLatencyDir delays client-to-server bytes by up and server-to-client
// bytes by down. Bytes already in flight keep the delay they were read with.
func (p *Proxy) SetLatencyDir(up, down time.Duration) {
	p.mu.Lock()
	p.latency = [2]time.Duration{max(up, 0), max(down, 0)}
	p.mu.Unlock()
}

// Blackhole stops (true) or resumes (false) forwarding in both directions
// on every connection, without closing anything. Held bytes are delivered
// in order on heal. New connections are accepted but carry nothing while
// the blackhole lasts.
func (p *Proxy) Blackhole(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case on && p.hole == nil:
		p.hole = make(chan struct{})
		p.stats.Blackholes++
	case !on && p.hole != nil:
		close(p.hole)
		p.hole = nil
	}
}

// DropReplies lets commands through and discards the next n replies from
// the server (on any connection of p, push messages excluded). A
// connection that lost a reply forwards nothing more and is reset as soon
// as the replies before the lost one are delivered. n <= 0 cancels drops
// not yet made.
func (p *Proxy) DropReplies(n int) {
	p.mu.Lock()
	p.dropN = max(n, 0)
	p.mu.Unlock()
}

// DropRepliesFor discards every server-to-client byte for d, then resets
// the connections that lost bytes. A new call replaces the window.
func (p *Proxy) DropRepliesFor(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.dropUntil = time.Now().Add(d)
	if p.window != nil {
		p.window.Stop()
	}
	p.window = time.AfterFunc(d, p.endWindow)
}

// endWindow resets the connections that lost bytes in the drop window.
func (p *Proxy) endWindow() {
	p.mu.Lock()
	p.dropUntil = time.Time{}
	victims := make([]*Conn, 0, len(p.windowed))
	for c := range p.windowed {
		victims = append(victims, c)
	}
	p.mu.Unlock()
	for _, c := range victims {
		c.Reset()
	}
}

// Heal removes every fault: latency, blackhole, pending drops; a drop window
// ends now (its victims are reset, as at its natural end).
func (p *Proxy) Heal() {
	p.SetLatency(0)
	p.Blackhole(false)
	p.DropReplies(0)
	p.mu.Lock()
	if p.window != nil {
		p.window.Stop()
		p.window = nil
	}
	p.mu.Unlock()
	p.endWindow()
}

// Conns returns the open connections, oldest first.
func (p *Proxy) Conns() []*Conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*Conn, 0, len(p.conns))
	for _, c := range p.conns {
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b *Conn) int { return int(a.id) - int(b.id) })
	return out
}

// ResetAll resets every open connection and returns how many there were.
func (p *Proxy) ResetAll() int {
	cs := p.Conns()
	for _, c := range cs {
		c.Reset()
	}
	return len(cs)
}

// Stats returns a snapshot of the counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// Close stops the listeners, closes every connection and waits for the
// proxy's goroutines. Later dials fail with ErrClosed. Idempotent.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	if p.window != nil {
		p.window.Stop()
	}
	if p.hole != nil {
		close(p.hole)
		p.hole = nil
	}
	lns := make([]*listener, 0, len(p.lns))
	for _, ln := range p.lns {
		lns = append(lns, ln)
	}
	p.mu.Unlock()
	for _, ln := range lns {
		ln.Close()
	}
	for _, c := range p.Conns() {
		c.close(false)
	}
	p.wg.Wait()
}
