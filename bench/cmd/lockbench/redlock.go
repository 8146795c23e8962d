package main

// Section 9: Redlock over three independent servers (issue 9 §6):
// coordhost's redlock.Group on three rueidis clients against redsync on
// three go-redis pools, uncontended acquire + release cycles.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/coordhost/coordhost/primitives/redlock"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// redlockTTL is the lease of every Redlock cycle (never reached), and the
// coordhost Group's MaxTTL: the restart guard keeps a node out of quorums
// until its uptime passes MaxTTL + drift, so a small MaxTTL lets the two
// servers this section starts count after a few seconds.
const redlockTTL = 2 * time.Second

// redlockNodes is how many servers section 9 uses: the Redis 7 server of
// the other sections and two more started the same way.
const redlockNodes = 3

func redlockRows() []primRow {
	return []primRow{
		{name: "coordhost redlock", base: "redsync, 3 pools",
			note: fmt.Sprintf("`redlock.New(clients, redlock.Options{MaxTTL: %v})` on %d default rueidis clients, one per server (other options default: NodeTimeout %v, drift %v + %.0f%% of the ttl); `Group.TryAcquire(ctx, key, %v)` + `Lock.Release`: the acquire script (`SET NX PX` with the restart guard's run_id check) on every node at once, granted on a majority with positive validity; release on every node at once", redlockTTL, redlockNodes, redlock.DefaultNodeTimeout, redlock.DefaultDrift, redlock.DefaultDriftFactor*100, redlockTTL)},
		{name: "redsync, 3 pools",
			note: fmt.Sprintf("`redsync.New(pool1, pool2, pool3)`, one goredis/v9 pool per server on a default go-redis client; `NewMutex(key, WithExpiry(%v), WithTries(1))` per acquire, `TryLockContext` + `UnlockContext` (its defaults: drift factor 1%%, `SET NX PX` on each pool in parallel, quorum 2)", redlockTTL)},
	}
}

// sectionRedlock starts the two extra servers with bin (register hands them
// to main, which stops them), waits until the restart guard trusts them,
// and measures the rows.
func sectionRedlock(srv *server, bin string, o options, register func(*server)) (primResults, []*server) {
	nodes := []*server{srv}
	for range redlockNodes - 1 {
		s, err := startServer(bin)
		if err != nil {
			fatalf("9: %v", err)
		}
		register(s)
		nodes = append(nodes, s)
		logf("9: redis %s (%s) on %s", s.version, s.bin, s.addr)
	}
	// The restart guard: a node first met with an uptime below MaxTTL +
	// drift sits out of quorums until then. Wait for a whole second more
	// than that (INFO's uptime is whole seconds, rounded down) before the
	// Group's first call.
	guard := redlockTTL + redlock.DefaultDrift + time.Duration(redlock.DefaultDriftFactor*float64(redlockTTL))
	for _, s := range nodes {
		for {
			info := s.mustDo("INFO", "server")
			up, _ := strconv.Atoi(infoField(info, "uptime_in_seconds"))
			if time.Duration(up)*time.Second > guard+time.Second {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	for _, s := range nodes {
		s.mustDo("FLUSHALL")
	}
	addrs := make([]string, len(nodes))
	for i, s := range nodes {
		addrs[i] = s.addr
	}
	res := runPrimThroughput(srv, o, "9", redlockRows(), func(row primRow) (impl, error) {
		if row.base == "" {
			return newRedsync3(addrs)
		}
		return newRedlock(addrs)
	})
	return res, nodes[1:]
}

// ---- coordhost redlock ----

type redlockImpl struct {
	clients []rueidis.Client
	g       *redlock.Group
}

func newRedlock(addrs []string) (impl, error) {
	var clients []rueidis.Client
	closeAll := func() {
		for _, c := range clients {
			c.Close()
		}
	}
	for _, a := range addrs {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{a}})
		if err != nil {
			closeAll()
			return nil, err
		}
		clients = append(clients, c)
	}
	g, err := redlock.New(clients, redlock.Options{MaxTTL: redlockTTL})
	if err != nil {
		closeAll()
		return nil, err
	}
	return &redlockImpl{clients: clients, g: g}, nil
}

// TryLock ignores ttl: every Redlock cycle uses redlockTTL (the Group's
// MaxTTL).
func (i *redlockImpl) TryLock(ctx context.Context, key string, _ time.Duration) (held, error) {
	l, err := i.g.TryAcquire(ctx, key, redlockTTL)
	if err != nil {
		return nil, err
	}
	return primHeld{l}, nil
}

func (i *redlockImpl) Lock(ctx context.Context, key string, _ time.Duration) (held, error) {
	l, err := i.g.Acquire(ctx, key, redlockTTL)
	if err != nil {
		return nil, err
	}
	return primHeld{l}, nil
}

func (i *redlockImpl) Close() {
	_ = i.g.Close()
	for _, c := range i.clients {
		c.Close()
	}
}

// ---- redsync on three pools ----

type redsync3Impl struct {
	rdbs []*goredis.Client
	rs   *redsync.Redsync
}

func newRedsync3(addrs []string) (impl, error) {
	var rdbs []*goredis.Client
	var pools []redsyncredis.Pool
	for _, a := range addrs {
		rdb := goredis.NewClient(&goredis.Options{Addr: a})
		rdbs = append(rdbs, rdb)
		pools = append(pools, redsyncgoredis.NewPool(rdb))
	}
	return &redsync3Impl{rdbs: rdbs, rs: redsync.New(pools...)}, nil
}

func (i *redsync3Impl) TryLock(ctx context.Context, key string, _ time.Duration) (held, error) {
	m := i.rs.NewMutex(key, redsync.WithExpiry(redlockTTL), redsync.WithTries(1))
	if err := m.TryLockContext(ctx); err != nil {
		return nil, err
	}
	return redsyncHeld{m}, nil
}

func (i *redsync3Impl) Lock(context.Context, string, time.Duration) (held, error) {
	return nil, errors.New("section 9 measures TryLock only")
}

func (i *redsync3Impl) Close() {
	for _, r := range i.rdbs {
		_ = r.Close()
	}
}

// ---- report ----

func (r *report) sectionRedlock(w func(string, ...any)) {
	o := r.opts
	w("## 9. Redlock over %d servers\n\n", redlockNodes)
	w("Cycles/s (one cycle = one non-waiting acquire + one release on a majority of %d independent servers: the Redis 7 server of the other sections and %d more started the same way for this section, all on this machine), N goroutines each on its own key, one instance per row. Median of %d × %v after %v warm-up per cell, rows rotating, after one untimed 8-goroutine pass; [min–max] over the repetitions; coordhost against redsync as the ratio of the medians and the min–max and median of the same-repetition ratios. The CPU figures' Redis part is the first server's only. Before the first call, the section waits until every server's uptime passes the coordhost Group's MaxTTL (%v) + drift, so that its restart guard counts every node. No target: the issue asks for the numbers.\n\n",
		redlockNodes, redlockNodes-1, o.primReps, o.primDur, o.warm, redlockTTL)
	if len(r.redlockServers) > 0 {
		w("Extra servers: ")
		for i, s := range r.redlockServers {
			if i > 0 {
				w(", ")
			}
			w("%s (`%s`)", s.version, s.bin)
		}
		w(".\n\n")
	}
	rows := redlockRows()
	r.primTable(w, rows, r.redlock)
	for _, row := range rows {
		w("- **%s**: %s.\n", row.name, row.note)
	}
	w("\n")
}
