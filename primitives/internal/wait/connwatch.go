package wait

import (
	"context"

	"github.com/redis/rueidis"
)

// connFor returns the dedicated connection with q's channel subscribed (in
// ModeChannel), dialing one if needed.
func (e *Engine) connFor(ctx context.Context, q *queue) (*dconn, error) {
	for {
		e.mu.Lock()
		if e.closed {
			e.mu.Unlock()
			return nil, ErrClosed
		}
		if e.conn != nil {
			conn := e.conn
			_, subscribed := conn.subs[q.channel]
			e.mu.Unlock()
			if conn.mode != ModeChannel || q.channel == "" || subscribed {
				return conn, nil
			}
			// SUBSCRIBE returns after the server confirmed it, so the
			// attempt that follows cannot miss a release.
			if err := conn.c.Do(ctx, conn.c.B().Subscribe().Channel(q.channel).Build()).Error(); err != nil {
				if ctx.Err() != nil {
					// Our caller gave up; the connection is fine.
					return nil, ctx.Err()
				}
				if isTransport(err) {
					e.dropConn(conn)
					return nil, err
				}
				// Pub/sub refused (ACL): fall back to polling.
				e.mu.Lock()
				conn.mode = ModePoll
				e.mu.Unlock()
				return conn, nil
			}
			e.mu.Lock()
			conn.subs[q.channel] = struct{}{}
			e.mu.Unlock()
			return conn, nil
		}
		if e.dialing != nil {
			ch := e.dialing
			e.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
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
			return nil, err
		}
		if e.closed {
			e.mu.Unlock()
			conn.close()
			return nil, ErrClosed
		}
		e.conn = conn
		e.mu.Unlock()
		go e.watch(conn)
	}
}

// watch wakes everyone when the dedicated connection dies.
func (e *Engine) watch(conn *dconn) {
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
