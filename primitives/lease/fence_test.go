package lease_test

import (
	"bytes"
	"context"
	"crypto/sha1"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"github.com/coordhost/coordhost/internal/faulttest"
	"github.com/coordhost/coordhost/primitives"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordhost/coordhost/internal/redistest"
	"github.com/coordhost/coordhost/internal/xtest"
	"github.com/coordhost/coordhost/lua"
	"github.com/coordhost/coordhost/primitives/lease"
	"github.com/redis/rueidis"
)

// delayConn holds back any write that contains marker for delay, as a slow
// network would: bytes already sent still reach the server after the
// sender closes its end, so Close waits for them.
type delayConn struct {
	net.Conn
	marker []byte
	delay  time.Duration
	held   sync.WaitGroup
}

func (c *delayConn) Write(b []byte) (int, error) {
	if !bytes.Contains(b, c.marker) || !bytes.Contains(b, acquireSHA) {
		return c.Conn.Write(b)
	}
	held := bytes.Clone(b)
	c.held.Add(1)
	time.AfterFunc(c.delay, func() {
		defer c.held.Done()
		c.Conn.SetWriteDeadline(time.Time{}) // these bytes already left
		c.Conn.Write(held)
	})
	return len(b), nil
}

func (c *delayConn) Close() error {
	go func() {
		c.held.Wait()
		c.Conn.Close()
	}()
	return nil
}

// acquireSHA marks the acquire command (EVALSHA of lease_acquire.lua), so
// only it is held back, not the cleanup that follows.
var acquireSHA = func() []byte {
	sum := sha1.Sum([]byte(lua.LeaseAcquire))
	return []byte(hex.EncodeToString(sum[:]))
}()

// An acquire whose reply is lost is fenced: its connection is killed before
// the owner-checked release, so the command, still in flight, can never
// create the lease after its cleanup. The control run without fencing
// shows the ghost lease that would otherwise appear.
func TestUncertainAcquireIsFenced(t *testing.T) {
	s := redistest.Start(t, redistest.Version(8))
	const marker = "ghost-field"
	c := s.Client(t, func(o *rueidis.ClientOption) {
		o.DisableRetry = true
		o.DialCtxFn = func(ctx context.Context, addr string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
			conn, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			return &delayConn{Conn: conn, marker: []byte(marker), delay: 300 * time.Millisecond}, nil
		}
	})
	ls := newLeases(t, c, lease.Options{})
	ctx := xtest.Ctx(t, 10*time.Second)
	// Load the script, so the held-back EVALSHA would succeed on arrival.
	warm, err := ls.TryAcquire(ctx, "h", "warm", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	warm.Release(ctx)
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = ls.TryAcquire(short, "h", marker, time.Minute)
	if err == nil {
		t.Fatal("acquired although the command was held back")
	}
	t.Logf("uncertain acquire: %v", err)
	time.Sleep(500 * time.Millisecond) // the held-back command would have arrived by now
	if got := s.MustCmd(t, "HEXISTS", "h", marker); got != "0" {
		t.Fatalf("the delayed acquire created the lease after its cleanup (HEXISTS %s)", got)
	}
	l, err := ls.TryAcquire(ctx, "h", "other", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	l.Release(ctx)
}

// Without the CLIENT commands, acquiring refuses before writing and says
// what permission is missing.
func TestNoClientPermission(t *testing.T) {
	s := redistest.Start(t, redistest.Version(8))
	s.MustCmd(t, "ACL", "SETUSER", "limited", "on", ">pw", "~*", "&*", "+@all", "-client")
	c := s.Client(t, func(o *rueidis.ClientOption) { o.Username, o.Password, o.DisableCache = "limited", "pw", true })
	ls := newLeases(t, c, lease.Options{})
	ctx := xtest.Ctx(t, 10*time.Second)
	_, err := ls.TryAcquire(ctx, "h", "f", time.Second)
	if !errors.Is(err, lease.ErrNoClientPermission) {
		t.Fatalf("got %v", err)
	}
	t.Logf("%v", err)
	if n := s.MustCmd(t, "DBSIZE"); n != "0" {
		t.Fatalf("DBSIZE %s", n)
	}
}

// An uncertain acquire that cannot be fenced (CLIENT KILL refused) says so:
// the error matches ErrUncertain and ErrNoPermission, and Acquire stops
// instead of retrying into a second grant nobody holds.
func TestUnsettledAcquireSaysWhy(t *testing.T) {
	s := redistest.Start(t, redistest.Version(8))
	s.MustCmd(t, "ACL", "SETUSER", "nokill", "on", ">pw", "~*", "&*", "+@all", "-client|kill")
	p := faulttest.New(t)
	c := s.Client(t, p.Option(), func(o *rueidis.ClientOption) {
		o.Username, o.Password, o.DisableCache, o.DisableRetry = "nokill", "pw", true, true
	})
	ls := newLeases(t, c, lease.Options{})
	ctx := xtest.Ctx(t, 10*time.Second)
	for _, call := range []func() error{
		func() error { _, err := ls.TryAcquire(ctx, "h", "f", time.Minute); return err },
		func() error { _, err := ls.Acquire(ctx, "h", "g", time.Minute); return err },
	} {
		// A pooled fenced connection, so the dropped reply is the acquire's.
		warm, err := ls.TryAcquire(ctx, "h", "warm", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		warm.Release(ctx)
		p.DropReplies(1)
		err = call()
		if !errors.Is(err, primitives.ErrUncertain) || !errors.Is(err, primitives.ErrNoPermission) || !strings.Contains(err.Error(), "not settled") {
			t.Fatalf("unsettled acquire: %v", err)
		}
	}
}
