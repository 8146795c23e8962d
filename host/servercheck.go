package host

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// ServerCheckTimeout bounds ServerHazards.
const ServerCheckTimeout = 5 * time.Second

// ServerHazards reads the settings of every server behind client that can
// break what coordhost promises, and returns one sentence per hazard found
// (none: nil). It writes nothing. The hazards:
//
//   - maxmemory set with a maxmemory-policy other than noeviction: when
//     memory runs out Redis evicts coordhost's keys (TestHazardEviction in
//     internal/hazards measures which; docs/hazards.md has the table). The
//     sentence names what the policy can evict: a volatile-* policy takes
//     keys with a TTL (held locks, so another client is granted a lock its
//     holder still uses; rwlock and semaphore holder sets, latches, FIFO
//     queues, rate-limit windows, sessions) and spares fencing counters
//     and hash-field lease hashes, which have none; an allkeys-* policy
//     takes any key, fencing counters too, and fencing tokens restart at
//     1. A policy this code does not know gets the allkeys-* sentence.
//   - no append-only file (appendonly no): a restart forgets every lock,
//     lease and fencing counter written since the last snapshot (all of
//     them without save points), so fencing tokens go back; and
//     appendfsync no, which leaves the flush to the OS (a crash can lose
//     about 30 seconds).
//   - replicas: replication is asynchronous, so a failover can lose the
//     latest grants and counter increments (the blocks' replicas = N
//     confirms them on N replicas: docs/failover.md).
//
// Servers that refuse CONFIG (an ACL, or a managed service that renames
// it) give an error that says so; callers log it and go on.
func ServerHazards(ctx context.Context, client rueidis.Client) ([]string, error) {
	if ctx == nil || client == nil {
		return nil, errors.New("host: ServerHazards needs a context and a client")
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("host: checking Redis settings: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, ServerCheckTimeout)
	defer cancel()
	nodes := client.Nodes()
	addrs := make([]string, 0, len(nodes))
	for a := range nodes {
		addrs = append(addrs, a)
	}
	slices.Sort(addrs)
	var hazards []string
	var infoErr error
	seen := map[string]bool{}
	for _, addr := range addrs {
		n := nodes[addr]
		cfg, err := configGet(ctx, n, "maxmemory", "maxmemory-policy", "appendonly", "appendfsync", "save")
		if err != nil {
			return hazards, fmt.Errorf("host: checking the settings of Redis at %s: %w", addr, err)
		}
		add := func(h string) {
			if !seen[h] {
				seen[h] = true
				hazards = append(hazards, h)
			}
		}
		if h := evictionHazard(cfg["maxmemory-policy"], cfg["maxmemory"]); h != "" {
			add(h)
		}
		switch {
		case cfg["appendonly"] == "no" && strings.TrimSpace(cfg["save"]) == "":
			add("no persistence (appendonly no, no save points): a Redis restart forgets every lock, lease and fencing counter, and fencing tokens restart from 1; turn on appendonly (appendfsync everysec or always)")
		case cfg["appendonly"] == "no":
			add(fmt.Sprintf("snapshots only (appendonly no, save %q): a Redis restart forgets every lock, lease and fencing counter written since the last snapshot, so a lock can be granted twice and fencing tokens go back; turn on appendonly (appendfsync everysec or always)", cfg["save"]))
		case cfg["appendfsync"] == "no":
			add("appendfsync no: the OS decides when the append-only file reaches the disk, so a crash can lose the last ~30 seconds of grants and fencing counter increments; use appendfsync everysec or always")
		}
		info, err := n.Do(ctx, n.B().Info().Section("replication").Build()).ToString()
		if err != nil {
			// CONFIG answered: report what it said, and that replicas
			// went unchecked.
			infoErr = fmt.Errorf("host: checking the replicas of Redis at %s: INFO replication: %w", addr, err)
			continue
		}
		if replicas := infoInt(info, "connected_slaves"); replicas > 0 {
			add(fmt.Sprintf("%s has %d replica(s): replication is asynchronous, so a failover can lose the latest grants and fencing counter increments; set replicas = N in the lock, rwlock, semaphore and lease blocks to confirm them on N replicas (docs/failover.md)", addr, replicas))
		}
	}
	return hazards, infoErr
}

// evictionOrder says which keys a maxmemory-policy evicts first, by
// policy; the policies of Redis 7.0 to 8.6 and Valkey 8.1 (the *-lrm
// pair is Redis 8.6's).
var evictionOrder = map[string]string{
	"volatile-lru":    "least recently used first",
	"volatile-lfu":    "least frequently used first",
	"volatile-lrm":    "least recently modified first",
	"volatile-random": "at random",
	"volatile-ttl":    "nearest their expiry first",
	"allkeys-lru":     "least recently used first; a lock held long without a renewal, and the fencing counter of a lock not taken lately, go early",
	"allkeys-lfu":     "least frequently used first",
	"allkeys-lrm":     "least recently modified first; a lock held long without a renewal, and the fencing counter of a lock not taken lately, go early",
	"allkeys-random":  "at random",
}

// evictionHazard is the hazard sentence for maxmemory-policy policy with
// maxmemory mm, or "" when Redis evicts nothing (noeviction, or no
// maxmemory). What each policy evicts was measured (TestHazardEviction).
func evictionHazard(policy, mm string) string {
	if mm == "" || mm == "0" || policy == "noeviction" {
		return ""
	}
	head := fmt.Sprintf("maxmemory-policy is %q with maxmemory %q: when memory runs out Redis evicts ", policy, mm)
	const fix = "; set maxmemory-policy noeviction (a full server then refuses new grants with OOM and evicts nothing)"
	order, known := evictionOrder[policy]
	if known && strings.HasPrefix(policy, "volatile-") {
		return head + "keys that have a TTL (" + order + "): held locks (another client is then granted a lock its holder still uses), " +
			"rwlock holder sets, semaphores whose permits all expire, latches, FIFO queues, rate-limit windows (more permits than the limit) and sessions; " +
			"fencing counters and hash-field lease hashes have no TTL and stay, so fencing tokens keep increasing" + fix
	}
	if !known {
		order = "by a policy coordhost does not know"
	}
	return head + "any key (" + order + "): held locks (another client is then granted a lock its holder still uses), leases, " +
		"rwlock holder sets, semaphores, latches, rate-limit windows (more permits than the limit), sessions, and fencing counters, " +
		"after which fencing tokens restart at 1 (a fenced resource then refuses every new holder until the tokens pass the last one it saw)" + fix
}

// redlockNodeHazards reads the settings of one Redlock node (a client of
// a single server) that can break a Redlock and returns one sentence per
// hazard: a maxmemory-policy that can evict the node's lock keys (they
// all have a TTL, so every policy but noeviction can), and replicas that
// could be promoted behind its address. Persistence is not one: the
// restart guard of package redlock keeps a node that may have forgotten
// grants out of quorums until they have expired.
func redlockNodeHazards(ctx context.Context, client rueidis.Client) ([]string, error) {
	var hazards []string
	for addr, n := range client.Nodes() {
		cfg, err := configGet(ctx, n, "maxmemory", "maxmemory-policy")
		if err != nil {
			return hazards, fmt.Errorf("host: checking the settings of Redlock node %s: %w", addr, err)
		}
		if mm, policy := cfg["maxmemory"], cfg["maxmemory-policy"]; mm != "" && mm != "0" && policy != "noeviction" {
			hazards = append(hazards, fmt.Sprintf("Redlock node %s: maxmemory-policy is %q with maxmemory %q: when memory runs out Redis evicts Redlock's keys (they have a TTL), and a node that evicts a holder's key can give another client a majority; set maxmemory-policy noeviction", addr, policy, mm))
		}
		info, err := n.Do(ctx, n.B().Info().Section("replication").Build()).ToString()
		if err != nil {
			return hazards, fmt.Errorf("host: checking the replicas of Redlock node %s: INFO replication: %w", addr, err)
		}
		if replicas := infoInt(info, "connected_slaves"); replicas > 0 {
			hazards = append(hazards, fmt.Sprintf("Redlock node %s has %d replica(s): a replica promoted behind its address may lack the latest grants; the restart guard sees only a changed run_id, and a Group that first meets the node after the promotion cannot tell", addr, replicas))
		}
	}
	return hazards, nil
}

// serverHazards is ServerHazards of the Host's client followed by
// redlockNodeHazards of every Redlock node client (checked at once, each
// bounded by ServerCheckTimeout), without repeats.
func (h *Host) serverHazards(ctx context.Context) ([]string, error) {
	hazards, err := ServerHazards(ctx, h.client)
	nodes := h.nodes.clients()
	found := make([][]string, len(nodes))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, c := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nctx, cancel := context.WithTimeout(ctx, ServerCheckTimeout)
			defer cancel()
			found[i], errs[i] = redlockNodeHazards(nctx, c)
		}()
	}
	wg.Wait()
	for i := range nodes {
		for _, hz := range found[i] {
			if !slices.Contains(hazards, hz) {
				hazards = append(hazards, hz)
			}
		}
		err = errors.Join(err, errs[i])
	}
	return hazards, err
}

// maxSettingLen bounds a setting's value as quoted in a hazard: a reply
// from the server is not trusted to be short.
const maxSettingLen = 64

func configGet(ctx context.Context, c rueidis.Client, names ...string) (map[string]string, error) {
	out := make(map[string]string, len(names))
	for _, name := range names {
		m, err := c.Do(ctx, c.B().ConfigGet().Parameter(name).Build()).AsStrMap()
		if err != nil {
			return nil, fmt.Errorf("CONFIG GET %s: %w", name, err)
		}
		v, ok := m[name]
		if !ok {
			return nil, fmt.Errorf("CONFIG GET %s: no value in the reply", name)
		}
		if len(v) > maxSettingLen {
			v = v[:maxSettingLen] + "..."
		}
		out[name] = v
	}
	return out, nil
}

// infoInt reads "name:N" from an INFO section; -1 when absent.
func infoInt(info, name string) int {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			if n, err := strconv.Atoi(v); err == nil {
				return n
			}
		}
	}
	return -1
}

// warnServerHazards logs every server setting that can break coordhost's
// guarantees (see ServerHazards; for Redlock nodes, redlockNodeHazards)
// and remembers them for
// recheckServerHazards. Dev mode's private server has no persistence by
// design and is not checked.
func (h *Host) warnServerHazards(ctx context.Context) {
	if h.dev != nil || h.opts.SkipServerCheck {
		return
	}
	hazards, err := h.serverHazards(ctx)
	for _, hz := range hazards {
		h.log.Warn("redis setting weakens coordhost's guarantees", "hazard", hz)
	}
	if err != nil {
		h.log.Warn("could not check the redis settings coordhost relies on (appendonly, appendfsync, maxmemory-policy; see \"What the guarantees rest on\" in the package documentation of primitives/lock)", "err", err)
	}
	h.hazards = hazards
}

// hazardKind is a hazard's sentence without its figures and addresses, so
// that one hazard found again with another count (replicas) or on another
// address (after a failover) is known as the same.
func hazardKind(hz string) string {
	var b strings.Builder
	for _, f := range strings.Fields(hz) {
		if strings.ContainsAny(f, "0123456789") {
			b.WriteString("# ")
			continue
		}
		b.WriteString(f + " ")
	}
	return b.String()
}

// recheckServerHazards checks the settings again after a reload (a
// handful of CONFIG GET and one INFO per server, bounded by
// ServerCheckTimeout): an operator who changed maxmemory-policy or
// appendonly with CONFIG SET and reloaded is told what changed. New
// hazards are logged as warnings, hazards gone as information; one found
// before is not repeated. A check that fails is logged and leaves the
// remembered hazards as they were. The caller holds reloadMu.
func (h *Host) recheckServerHazards(ctx context.Context) {
	if h.dev != nil || h.opts.SkipServerCheck {
		return
	}
	hazards, err := h.serverHazards(ctx)
	if err != nil {
		h.log.Warn("could not check the redis settings coordhost relies on after the reload", "err", err)
		// CONFIG answered for some servers, perhaps: warn about what is
		// new, forget nothing.
		for _, hz := range hazards {
			if !slices.Contains(h.hazards, hz) {
				h.log.Warn("redis setting weakens coordhost's guarantees", "hazard", hz)
				h.hazards = append(h.hazards, hz)
			}
		}
		return
	}
	kinds := func(hs []string) map[string]bool {
		m := map[string]bool{}
		for _, hz := range hs {
			m[hazardKind(hz)] = true
		}
		return m
	}
	was, now := kinds(h.hazards), kinds(hazards)
	for _, hz := range hazards {
		switch {
		case slices.Contains(h.hazards, hz):
		case was[hazardKind(hz)]:
			// The same hazard with other figures or on another address
			// (a replica added, a failover): still there.
			h.log.Warn("redis setting still weakens coordhost's guarantees, changed", "hazard", hz)
		default:
			h.log.Warn("redis setting weakens coordhost's guarantees", "hazard", hz)
		}
	}
	for _, hz := range h.hazards {
		if !now[hazardKind(hz)] {
			h.log.Info("redis setting no longer weakens coordhost's guarantees", "was", hz)
		}
	}
	h.hazards = hazards
}
