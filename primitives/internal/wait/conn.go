package wait

import (
	"context"
	"errors"
	"sort"
	"strings"
	"time"

	"github.com/coordhost/coordhost/primitives/internal/fence"
	"github.com/redis/rueidis"
)

// ConnName is the CLIENT SETNAME of the engine's dedicated connection, so
// operators (and fault tests) can find it in CLIENT LIST.
const ConnName = "coordhost-wait"

// setupTimeout bounds the commands that prepare a dedicated connection.
const setupTimeout = 5 * time.Second

// dconn is the engine's dedicated connection: pub/sub for every channel
// waiter and, in track mode, client tracking for every key waiter.
type dconn struct {
	c      rueidis.DedicatedClient
	cancel func()
	errc   <-chan error
	mode   Mode
	who    fence.Identity      // from CLIENT INFO; ID 0 if unknown
	subs   map[string]struct{} // channels confirmed subscribed
	// unsubbing holds channels whose UNSUBSCRIBE is in flight; the channel
	// closes when it completed.
	unsubbing map[string]chan struct{}
}

func (d *dconn) close() {
	// Close the wire rather than returning it to the pool: it carries our
	// tracking and subscriptions.
	d.c.Close()
	d.cancel()
}

// dial opens a dedicated connection and decides the mode: track when the
// client is not a cluster client and the connection speaks RESP3 and accepts
// CLIENT TRACKING; channel otherwise; poll when want says so.
func dial(client rueidis.Client, want Mode, onMsg func(rueidis.PubSubMessage), onInval func([]rueidis.RedisMessage)) (*dconn, error) {
	var c rueidis.DedicatedClient
	var cancel func()
	cluster := client.Mode() == rueidis.ClientModeCluster
	if cluster {
		// A cluster-wide PUBLISH reaches every node, so one connection to
		// any node carries every channel. Pick the same node every time.
		nodes := client.Nodes()
		addrs := make([]string, 0, len(nodes))
		for a := range nodes {
			addrs = append(addrs, a)
		}
		if len(addrs) == 0 {
			return nil, errors.New("wait: cluster client knows no nodes")
		}
		sort.Strings(addrs)
		c, cancel = nodes[addrs[0]].Dedicate()
	} else {
		c, cancel = client.Dedicate()
	}
	d := &dconn{c: c, cancel: cancel, subs: map[string]struct{}{}, unsubbing: map[string]chan struct{}{}, mode: ModeChannel}
	ctx, stop := context.WithTimeout(context.Background(), setupTimeout)
	defer stop()

	// Naming needs the CLIENT permission; the engine works without it. A
	// transport error means no server: give up now rather than hand out a
	// connection whose death would wake every waiter at once, again and
	// again.
	if err := c.Do(ctx, c.B().ClientSetname().ConnectionName(ConnName).Build()).Error(); isTransport(err) {
		d.close()
		return nil, err
	}

	if want == ModePoll {
		d.mode = ModePoll
	} else if !cluster && want != ModeChannel {
		info, err := c.Do(ctx, c.B().ClientInfo().Build()).ToString()
		if err == nil {
			d.who, _ = fence.ParseClientInfo(info)
		}
		if err == nil && strings.Contains(info, " resp=3") {
			// Turn tracking off first: a pooled connection may carry the
			// client's OPTIN tracking, and we need every read tracked.
			_ = c.Do(ctx, c.B().ClientTracking().Off().Build()).Error()
			if err := c.Do(ctx, c.B().ClientTracking().On().Build()).Error(); err == nil {
				d.mode = ModeTrack
			}
		} else if err != nil && isTransport(err) {
			d.close()
			return nil, err
		}
	}
	d.errc = c.SetPubSubHooks(rueidis.PubSubHooks{OnMessage: onMsg})
	if d.mode == ModeTrack {
		d.errc = c.SetOnInvalidations(onInval)
	}
	return d, nil
}

func isTransport(err error) bool {
	_, ok := rueidis.IsRedisErr(err)
	return err != nil && !ok
}
