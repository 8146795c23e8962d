package wait

import (
	"context"

	"github.com/redis/rueidis"
)

// connFor returns the dedicated connection and its mode, with q's channel
// subscribed in ModeChannel, dialing one if needed. In ModePoll (forced) it
// returns no connection: polling needs none, and dialing one against a
// dead server would only spin.
func (e *Engine) connFor(ctx context.Context, q *queue) (*dconn, Mode, error) {
	if e.opts.Mode == ModePoll {
		if e.Closed() {
			return nil, ModePoll, ErrClosed
		}
		return nil, ModePoll, nil
	}
	for {
		e.mu.Lock()
		if e.closed {
			e.mu.Unlock()
			return nil, 0, ErrClosed
		}
		if e.conn != nil {
			conn, mode := e.conn, e.conn.mode
			if done := conn.unsubbing[q.channel]; done != nil {
				// An UNSUBSCRIBE of this channel is in flight: wait for it,
				// or the server would drop the subscription we make next.
				e.mu.Unlock()
				select {
				case <-done:
					continue
				case <-ctx.Done():
					return nil, 0, ctx.Err()
				}
			}
			_, subscribed := conn.subs[q.channel]
			e.mu.Unlock()
			if mode != ModeChannel || q.channel == "" || subscribed {
				return conn, mode, nil
			}
			// SUBSCRIBE returns after the server confirmed it, so the
			// attempt that follows cannot miss a release.
			if err := conn.c.Do(ctx, conn.c.B().Subscribe().Channel(q.channel).Build()).Error(); err != nil {
				if ctx.Err() != nil {
					// Our caller gave up; the connection is fine.
					return nil, 0, ctx.Err()
				}
				if isTransport(err) {
					e.dropConn(conn)
					return nil, 0, err
				}
				// Pub/sub refused (ACL): fall back to polling.
				e.mu.Lock()
				conn.mode = ModePoll
				e.mu.Unlock()
				return conn, ModePoll, nil
			}
			e.mu.Lock()
			conn.subs[q.channel] = struct{}{}
			e.mu.Unlock()
			return conn, ModeChannel, nil
		}
		if e.dialing != nil {
			ch := e.dialing
			e.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, 0, ctx.Err()
			}
		}
		ch := make(chan struct{})
		e.dialing = ch
		e.mu.Unlock()

		conn, err := dial(e.client, e.opts.Mode, e.onMessage, e.onInvalidations)
		e.mu.Lock()
		e.dialing = nil
		close(ch)
		if err != nil {
			e.mu.Unlock()
			return nil, 0, err
		}
		if e.closed {
			e.mu.Unlock()
			conn.close()
			return nil, 0, ErrClosed
		}
		e.conn = conn
		e.mu.Unlock()
		e.wg.Add(1)
		go e.watch(conn)
	}
}

// unsubscribe drops channel from conn in the background; connFor waits for
// it before subscribing the channel again, so the server sees the two in
// order. Called with e.mu held.
func (e *Engine) unsubscribe(conn *dconn, channel string) {
	delete(conn.subs, channel)
	done := make(chan struct{})
	conn.unsubbing[channel] = done
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
		defer cancel()
		// Best effort: a stale subscription costs only spurious messages.
		_ = conn.c.Do(ctx, conn.c.B().Unsubscribe().Channel(channel).Build()).Error()
		e.mu.Lock()
		delete(conn.unsubbing, channel)
		e.mu.Unlock()
		close(done)
	}()
}

// watch wakes everyone when the dedicated connection dies.
func (e *Engine) watch(conn *dconn) {
	defer e.wg.Done()
	if conn.errc != nil {
		<-conn.errc
	}
	e.dropConn(conn)
}

// dropConn forgets conn (if current), closes it and wakes every head, so
// each re-attempts and re-registers on a fresh connection.
func (e *Engine) dropConn(conn *dconn) {
	e.mu.Lock()
	if e.conn != conn {
		e.mu.Unlock()
		return
	}
	e.conn = nil
	e.stats.ConnLost++
	for _, q := range e.queues {
		q.wake()
	}
	e.mu.Unlock()
	conn.close()
}

func (e *Engine) onMessage(m rueidis.PubSubMessage) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stats.Messages++
	for q := range e.byChan[m.Channel] {
		q.wake()
	}
}

// onInvalidations runs on the connection's reader goroutine: only signal.
// A nil list (FLUSHALL, tracking table overflow) wakes every head.
func (e *Engine) onInvalidations(keys []rueidis.RedisMessage) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stats.Invalidations++
	if keys == nil {
		for _, q := range e.queues {
			q.wake()
		}
		return
	}
	for _, k := range keys {
		s, err := k.ToString()
		if err != nil {
			continue
		}
		for q := range e.byKey[s] {
			q.wake()
		}
	}
}
