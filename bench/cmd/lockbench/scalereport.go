package main

// Section 12's report (scaleout.go runs it).

import (
	"fmt"
	"maps"
	"math"
	"runtime"
	"slices"
	"strings"
	"time"
)

// c12SpreadDev is the spread goal: each master's share of the keys, and
// of the commands, within ±10% of a third.
const c12SpreadDev = 0.10

// c12RatioGoal is the throughput goal: cluster ≥ 0.9× standalone.
const c12RatioGoal = 0.9

// c12CmdTolerance is how far apart the commands per operation of the two
// topologies may be and still count as equal (relative).
const c12CmdTolerance = 0.01

// c12ZipfS is the exponent of the Zipf distribution whose spread over the
// masters the report computes (YCSB's default).
const c12ZipfS = 0.99

func (r *c12Result) totalOps() int64 {
	var n int64
	for _, o := range r.ops {
		n += o
	}
	return n
}

// perOp is every node's calls over the measured windows per operation.
func (r *c12Result) perOp() float64 {
	var calls int64
	for _, d := range r.deltas {
		calls += d.totalCalls()
	}
	if n := r.totalOps(); n > 0 {
		return float64(calls) / float64(n)
	}
	return 0
}

// byCmd is the calls per operation of each command, summed over the
// nodes and the measured windows.
func (r *c12Result) byCmd() map[string]float64 {
	out := map[string]float64{}
	n := float64(max(r.totalOps(), 1))
	for _, d := range r.deltas {
		for _, m := range d.calls {
			for k, v := range m {
				out[k] += float64(v) / n
			}
		}
	}
	return out
}

// nodeShares is each node's share of the calls over the measured windows.
func (r *c12Result) nodeShares() []float64 {
	if len(r.deltas) == 0 {
		return nil
	}
	out := make([]float64, len(r.deltas[0].calls))
	var total float64
	for _, d := range r.deltas {
		for i := range d.calls {
			c := float64(d.nodeCalls(i))
			out[i] += c
			total += c
		}
	}
	for i := range out {
		out[i] /= max(total, 1)
	}
	return out
}

// cpuShares is each node's share of the Redis CPU over the measured
// windows.
func (r *c12Result) cpuShares() []float64 {
	if len(r.deltas) == 0 {
		return nil
	}
	out := make([]float64, len(r.deltas[0].cpu))
	var total float64
	for _, d := range r.deltas {
		for i, c := range d.cpu {
			out[i] += c
			total += c
		}
	}
	for i := range out {
		out[i] /= max(total, 1e-9)
	}
	return out
}

// nodeCPUPerOp is each node's Redis CPU per operation over the measured
// windows, µs.
func (r *c12Result) nodeCPUPerOp() []float64 {
	if len(r.deltas) == 0 {
		return nil
	}
	out := make([]float64, len(r.deltas[0].cpu))
	n := float64(max(r.totalOps(), 1))
	for _, d := range r.deltas {
		for i, c := range d.cpu {
			out[i] += c * 1e6 / n
		}
	}
	return out
}

// keyShares is each master's share of the row's keys.
func (r *c12Result) keyShares(masters int) []float64 {
	out := make([]float64, masters)
	for _, o := range r.owners {
		out[o]++
	}
	for i := range out {
		out[i] /= float64(max(len(r.owners), 1))
	}
	return out
}

// redirects are the MOVED and ASK replies over the measured windows.
func (r *c12Result) redirects() (moved, ask int64) {
	for _, d := range r.deltas {
		m, a := d.redirects()
		moved += m
		ask += a
	}
	return moved, ask
}

// cpuPerOp is the median over the repetitions of Redis' CPU (all nodes)
// and this process' CPU per operation, µs.
func (r *c12Result) cpuPerOp() (redis, self float64) {
	var rs, ss []float64
	for i, d := range r.deltas {
		ops := float64(max(r.ops[i], 1))
		var c float64
		for _, x := range d.cpu {
			c += x
		}
		rs = append(rs, c*1e6/ops)
		ss = append(ss, float64(d.self.Microseconds())/ops)
	}
	return median(rs), median(ss)
}

// busPerOp is, per operation over the measured windows: PUBLISH messages
// and all messages the nodes sent on the bus, and the bus' bytes (-1 when
// unknown).
func (r *c12Result) busPerOp() (pub, all, bytes float64) {
	n := float64(max(r.totalOps(), 1))
	var b int64
	known := true
	for _, d := range r.deltas {
		pub += float64(d.busSum("publish_sent")) / n
		all += float64(d.busSum("sent")) / n
		if d.busBytes < 0 {
			known = false
		}
		b += d.busBytes
	}
	if !known {
		return pub, all, -1
	}
	return pub, all, float64(b) / n
}

func maxDev(shares []float64) float64 {
	var m float64
	if len(shares) == 0 {
		return math.Inf(1)
	}
	third := 1 / float64(len(shares))
	for _, s := range shares {
		m = max(m, math.Abs(s/third-1))
	}
	return m
}

func pctList(shares []float64) string {
	parts := make([]string, len(shares))
	for i, s := range shares {
		parts[i] = fmt.Sprintf("%.1f", 100*s)
	}
	return strings.Join(parts, " / ") + " %"
}

// ratio is the cluster's throughput against the standalone server's: of
// the medians, and the same-repetition ratios (min–max, median).
func (c *c12Results) ratio(row string) (ofMedians, pairedMedian float64, paired string) {
	s, k := c.cells[c12Key{row, "standalone"}], c.cells[c12Key{row, "cluster"}]
	if s == nil || k == nil || median(s.rates) == 0 {
		return 0, 0, "–"
	}
	p, pm := pairedOf(k.rates, s.rates)
	return median(k.rates) / median(s.rates), pm, p
}

func (c *c12Results) cell(row, topo string) *c12Result { return c.cells[c12Key{row, topo}] }

// cmdDiff lists the commands whose calls per operation differ between the
// topologies by more than 0.005, as "+2.00 exists".
func (c *c12Results) cmdDiff(row string) string {
	s, k := c.cell(row, "standalone").byCmd(), c.cell(row, "cluster").byCmd()
	names := map[string]bool{}
	for n := range s {
		names[n] = true
	}
	for n := range k {
		names[n] = true
	}
	var parts []string
	for _, n := range slices.Sorted(maps.Keys(names)) {
		if d := k[n] - s[n]; math.Abs(d) > 0.005 {
			parts = append(parts, fmt.Sprintf("%+.2f `%s`", d, cmdName(n)))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// cmdName is a commandstats name as a command: "client|info" is CLIENT
// INFO (a "|" would also split a Markdown table cell).
func cmdName(n string) string {
	return strings.ToUpper(strings.ReplaceAll(n, "|", " "))
}

// breakdown is a cell's calls per operation by command, largest first.
func breakdown(m map[string]float64) string {
	type kv struct {
		n string
		v float64
	}
	var l []kv
	for k, v := range m {
		if v >= 0.005 {
			l = append(l, kv{k, v})
		}
	}
	slices.SortFunc(l, func(a, b kv) int {
		if a.v != b.v {
			if a.v > b.v {
				return -1
			}
			return 1
		}
		return strings.Compare(a.n, b.n)
	})
	parts := make([]string, len(l))
	for i, x := range l {
		parts[i] = fmt.Sprintf("%s %.2f", cmdName(x.n), x.v)
	}
	return strings.Join(parts, ", ")
}

func (r *report) scaleTargets(w func(string, ...any)) {
	c := r.scale
	var cmds, ratios, keySpread, cmdSpread []string
	cmdsOK, ratioOK, keyOK, cmdOK := true, true, true, true
	var moved, ask, warmMoved, warmAsk, ops int64
	var keyDevs []float64
	for _, row := range c.rows {
		s, k := c.cell(row.name, "standalone"), c.cell(row.name, "cluster")
		for _, x := range []*c12Result{s, k} {
			m, a := x.redirects()
			moved += m
			ask += a
			wm, wa := x.warm.redirects()
			warmMoved += wm
			warmAsk += wa
			ops += x.totalOps()
		}
		ks := k.keyShares(c12Masters)
		keyDevs = append(keyDevs, maxDev(ks))
		if maxDev(ks) > c12SpreadDev {
			keyOK = false
			keySpread = append(keySpread, fmt.Sprintf("%s %s", row.name, pctList(ks)))
		}
		if row.control {
			continue
		}
		sp, kp := s.perOp(), k.perOp()
		eq := sp > 0 && math.Abs(kp/sp-1) <= c12CmdTolerance
		cmdsOK = cmdsOK && eq
		if eq {
			cmds = append(cmds, fmt.Sprintf("%s %.2f = %.2f", row.name, sp, kp))
		} else {
			cmds = append(cmds, fmt.Sprintf("%s %.2f vs **%.2f** (%s)", row.name, sp, kp, c.cmdDiff(row.name)))
		}
		ns := k.nodeShares()
		ok := maxDev(ns) <= c12SpreadDev
		cmdOK = cmdOK && ok
		mark := ""
		if !ok {
			mark = " (miss)"
		}
		cmdSpread = append(cmdSpread, fmt.Sprintf("%s %s%s", row.name, pctList(ns), mark))
		om, pm, _ := c.ratio(row.name)
		ok = om >= c12RatioGoal && pm >= c12RatioGoal
		ratioOK = ratioOK && ok
		mark = ""
		if !ok {
			mark = " (miss)"
		}
		ratios = append(ratios, fmt.Sprintf("%s %.2f / %.2f%s", row.name, om, pm, mark))
	}
	if len(c.rows) == 0 {
		return
	}
	w("| section 12: Redis commands per operation on the 3-master cluster equal to standalone after warm-up (every node's INFO commandstats, all calls incl. those inside scripts; equal = within %.0f%%), every coordhost row | standalone vs cluster: %s | %s |\n",
		100*c12CmdTolerance, strings.Join(cmds, "; "), verdict(cmdsOK))
	w("| section 12: no MOVED or ASK redirection after warm-up (INFO errorstats of every node, every row and topology) | %d MOVED, %d ASK over %d measured operations (during the warm-ups: %d MOVED, %d ASK) | %s |\n",
		moved, ask, ops, warmMoved, warmAsk, verdict(moved == 0 && ask == 0))
	keyMeas := fmt.Sprintf("largest deviation from a third over the rows: %.1f%%–%.1f%%", 100*slices.Min(keyDevs), 100*slices.Max(keyDevs))
	if len(keySpread) > 0 {
		keyMeas += "; outside: " + strings.Join(keySpread, "; ")
	}
	w("| section 12: keys per master within ±%.0f%% of a third (each row's %d keys, by CLUSTER KEYSLOT) | %s | %s |\n", 100*c12SpreadDev, r.opts.cKeys, keyMeas, verdict(keyOK))
	w("| section 12: commands per master within ±%.0f%% of a third, every coordhost row | share of all calls per master: %s | %s |\n", 100*c12SpreadDev, strings.Join(cmdSpread, "; "), verdict(cmdOK))
	w("| section 12: %d goroutines: cluster ≥ %.1f× standalone, every coordhost row (ratio of the medians / median of the same-repetition ratios) | %s | %s |\n",
		r.opts.cConc, c12RatioGoal, strings.Join(ratios, "; "), verdict(ratioOK))
	if c.cell(c12RawDel, "cluster") != nil {
		om, pm, _ := c.ratio(c12RawDel)
		w("| section 12: the same ratio for the raw control (`SET NX` + `DEL`, no coordhost: the topology's own cost on this machine) | %.2f / %.2f | control, no goal |\n", om, pm)
	}
}

func (r *report) sectionScaleOut(w func(string, ...any)) {
	c := r.scale
	o := r.opts
	w("## 12. Scale-out: a 3-master cluster against one server\n\n")
	v7 := c.version[false]
	w("Two topologies in the same run, both started by the program: the standalone Redis %s server above, and a cluster of three masters of the same binary started beside it (`--cluster-enabled yes --cluster-node-timeout 5000`, `--save '' --appendonly no`, no replicas), the slots split in three contiguous ranges (0–5460, 5461–10922, 10923–16383, `CLUSTER ADDSLOTSRANGE` after distinct `CLUSTER SET-CONFIG-EPOCH`s), joined with `CLUSTER MEET` and used once every node reported `cluster_state:ok`, three known nodes and the same slot map.", v7)
	if _, ok := c.version[true]; ok {
		w(" The lease row (hash-field expiry needs Redis ≥ 7.4) runs on a second pair started the same way from `%s` (Redis %s): a standalone server and a 3-master cluster.", c.bin[true], c.version[true])
	} else {
		w(" The hash-field lease needs Redis ≥ 7.4 and was not measured: %s.", c.noR8)
	}
	w(" Starting and joining took %v. Every row has a fresh default rueidis client per topology; given the three masters, rueidis makes a cluster client that routes each command by its key's slot (one pipelined connection per master).\n\n", c.setup.Round(10*time.Millisecond))
	w("**Key set**: %d keys per row, `<tag>:order:<i>`, used **uniformly**: goroutine g of %d picks uniformly at random among the keys i ≡ g (mod %d), so no two goroutines contend and every key is in use. **Warm-up**, untimed, once per row and topology: every goroutine visits each of its keys once (script caches on every node, connections, rate-limit windows and fencing counters exist), then %v at random. **Cells**: %v warm-up, all goroutines stopped, every node read (`INFO commandstats errorstats cpu`, `CLUSTER INFO`, the bus sockets' byte counts from `ss -ti`), %v measured, stopped, read again, so the counts cover exactly the operations counted; %d repetitions. Rows run one after the other, each on two clients of its own made before its warm-up and closed after its cells (rueidis PINGs a connection idle for a second, so other rows' idle clients would count in a row's commands); within a row the topology that goes first alternates. An operation is one acquire + release (`TryAcquire`, never waiting), or one rate-limit decision. Commands are every node's `INFO commandstats` calls (those inside scripts included; this program's own `INFO`/`CLUSTER INFO` left out). The Go program and the servers (the standalone one and the three cluster nodes of the pair in use) share the machine's %d CPUs.\n\n",
		o.cKeys, o.cConc, o.cConc, o.cWarm, o.cWarm, o.cDur, o.cReps, runtime.NumCPU())
	w("Load average (1, 5, 15 min) at the section's start %s, at its end %s; at each row's start: %s. The section took %v.\n\n", c.loadStart, c.loadEnd, strings.Join(c.load, "; "), c.elapsed.Round(time.Second))

	w("### Throughput at %d goroutines\n\n", o.cConc)
	w("Operations/s, median [min–max]; *× standalone* = ratio of the medians / median of the same-repetition ratios [their range]. CPU per operation, median µs: Redis (all nodes of the topology, `INFO cpu`) and this program (getrusage).\n\n")
	w("| row | standalone | cluster | cluster × standalone | Redis CPU µs/op: standalone / cluster | this program µs/op: standalone / cluster | errors |\n|---|---:|---:|---:|---:|---:|---:|\n")
	var errNotes []string
	for _, row := range c.rows {
		s, k := c.cell(row.name, "standalone"), c.cell(row.name, "cluster")
		om, pm, paired := c.ratio(row.name)
		sr, ss := s.cpuPerOp()
		kr, ks := k.cpuPerOp()
		name := row.name
		if row.control {
			name += " *(control)*"
		}
		w("| %s | %s [%s–%s] | %s [%s–%s] | %.2f / %.2f [%s] | %.1f / %.1f | %.1f / %.1f | %d / %d |\n", name,
			num(median(s.rates)), num(slices.Min(s.rates)), num(slices.Max(s.rates)),
			num(median(k.rates)), num(slices.Min(k.rates)), num(slices.Max(k.rates)),
			om, pm, paired[:max(0, strings.Index(paired, ", median"))],
			sr, kr, ss, ks, s.errs, k.errs)
		for _, x := range []struct {
			t string
			r *c12Result
		}{{"standalone", s}, {"cluster", k}} {
			if x.r.first != nil {
				errNotes = append(errNotes, fmt.Sprintf("- %s on the %s: %d errors, the first: %v", row.name, x.t, x.r.errs, x.r.first))
			}
		}
	}
	w("\n")
	for _, n := range errNotes {
		w("%s\n", n)
	}
	if len(errNotes) > 0 {
		w("\n")
	}

	w("### Commands per operation and redirections\n\n")
	w("All calls on every node over the measured windows, divided by the operations; *differences*: the commands whose calls per operation differ between the topologies (cluster − standalone). MOVED / ASK: error replies counted by every node's `INFO errorstats`, during the untimed warm-up and over the measured windows.\n\n")
	w("| row | standalone | cluster | differences | MOVED / ASK, warm-up: standalone, cluster | MOVED / ASK, measured |\n|---|---:|---:|---|---:|---:|\n")
	for _, row := range c.rows {
		s, k := c.cell(row.name, "standalone"), c.cell(row.name, "cluster")
		swm, swa := s.warm.redirects()
		kwm, kwa := k.warm.redirects()
		sm, sa := s.redirects()
		km, ka := k.redirects()
		w("| %s | %.2f | %.2f | %s | %d / %d, %d / %d | %d / %d |\n", row.name, s.perOp(), k.perOp(), c.cmdDiff(row.name), swm, swa, kwm, kwa, sm+km, sa+ka)
	}
	var fenced []string
	cleanup := false
	for _, row := range c.rows {
		s, k := c.cell(row.name, "standalone").byCmd(), c.cell(row.name, "cluster").byCmd()
		if k["client|info"]-s["client|info"] > 0.5 && k["exists"]-s["exists"] > 0.5 {
			fenced = append(fenced, "*"+row.name+"*")
			cleanup = cleanup || k["discard"] > 0 || k["unsubscribe"] > 0
		}
	}
	if len(fenced) > 0 {
		w("\n%s: on a cluster, `primitives/internal/fence`'s Pool keeps no idle connection (its Put hands a cluster connection back to rueidis, as it is bound to one node), so every acquire takes a dedicated connection and binds and identifies it with `EXISTS key` + `CLIENT INFO` (one more round trip) before its script; on the standalone server the Pool reuses connections it has identified.", strings.Join(fenced, ", "))
		if cleanup {
			w(" The cluster's `PING`, `DISCARD` and `*UNSUBSCRIBE` calls come from the same path: rueidis PINGs a dedicated connection idle for a second in its pool, and cleans some it gets back with `UNSUBSCRIBE`, `PUNSUBSCRIBE`, `SUNSUBSCRIBE`, `DISCARD`.")
		}
		w("\n")
	}
	w("\nBy command (cluster): ")
	var bd []string
	for _, row := range c.rows {
		bd = append(bd, fmt.Sprintf("*%s*: %s", row.name, breakdown(c.cell(row.name, "cluster").byCmd())))
	}
	w("%s.\n\n", strings.Join(bd, "; "))

	w("### Spread over the masters\n\n")
	w("Per master, in slot order: its share of the row's keys (`CLUSTER KEYSLOT` of each), of the calls (`INFO commandstats`) and of the Redis CPU (`INFO cpu`) over the measured windows; *largest deviation* from a third, keys / calls. The CPU includes what each node spends on the cluster bus.\n\n")
	w("*Projection* (computed from this table, not measured): Redis CPU per operation of the busiest master and of the standalone server, and the ratio of the ceilings they imply when each master has a CPU of its own, as on a real cluster (1 / the busiest master's CPU per operation, against 1 / the standalone server's). It leaves out the clients and the network, and the CPU per operation measured here is inflated by this machine: three servers and the client take turns on 2 CPUs, so each wake-up serves a smaller batch.\n\n")
	w("| row | keys | calls | Redis CPU | largest deviation from a third: keys / calls | Redis CPU µs/op: busiest master / standalone | projected ceiling, a CPU per master |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for _, row := range c.rows {
		k := c.cell(row.name, "cluster")
		ks, ns := k.keyShares(c12Masters), k.nodeShares()
		busiest := slices.Max(k.nodeCPUPerOp())
		sr := c.cell(row.name, "standalone").nodeCPUPerOp()[0]
		w("| %s | %s | %s | %s | %.1f%% / %.1f%% | %.1f / %.1f | %.2f× one server |\n", row.name, pctList(ks), pctList(ns), pctList(k.cpuShares()), 100*maxDev(ks), 100*maxDev(ns), busiest, sr, sr/busiest)
	}
	w("\n")
	for _, redis8 := range []bool{false, true} {
		if sz, ok := c.dbsize[redis8]; ok {
			w("Keys left on the %s cluster's masters after its rows (`DBSIZE`: fencing counters, rate-limit windows): %s.\n", c.version[redis8], joinInts(sz))
		}
	}
	if lk := c.cell(c12LockRow, "cluster"); lk != nil && len(lk.owners) > 0 {
		z := zipfShares(lk.owners, c12Masters, c12ZipfS)
		w("\n*Computed, not measured*: had the %s row's %d keys been drawn with a Zipf distribution (s = %.2f, key i the (i+1)-th most popular, as YCSB draws), the masters would receive %s of the operations (largest deviation %.1f%%), and the single hottest key alone %.1f%% of them: a hot key's master carries its load whatever the cluster's size.\n",
			c12LockRow, len(lk.owners), c12ZipfS, pctList(z), 100*maxDev(z), 100*zipfTop(len(lk.owners), c12ZipfS))
	}
	w("\n")

	w("### The cluster bus\n\n")
	w("Every release of a coordhost lock, rwlock, semaphore and lease PUBLISHes on the key's channel from its script: a plain `PUBLISH` (channels have no slot; one dedicated connection per client hears every channel, DESIGN.md §3), not a sharded `SPUBLISH`. A cluster forwards each PUBLISH to every other node over the cluster bus, whoever subscribes, as one bus message per node whose header carries, among other things, the sender's 16384-bit slot bitmap. Per operation, over the measured windows: PUBLISH calls, PUBLISH and all bus messages the nodes sent (`CLUSTER INFO` `cluster_stats_messages_publish_sent`, `cluster_stats_messages_sent`, summed over the nodes), and the bytes the bus connections carried (kernel counters of the bus sockets, `ss -ti`, both directions; pings included).\n\n")
	w("| row | `PUBLISH` calls per op | bus messages per op: PUBLISH / all | bus bytes per op |\n|---|---:|---:|---:|\n")
	for _, row := range c.rows {
		k := c.cell(row.name, "cluster")
		pub, all, bytes := k.busPerOp()
		b := "–"
		if bytes >= 0 {
			b = fmt.Sprintf("%.0f", bytes)
		}
		w("| %s | %.2f | %.2f / %.2f | %s |\n", row.name, k.byCmd()["publish"], pub, all, b)
	}
	w("\n")
	if s1, k1, s2, k2 := c.cell(c12RawScript, "standalone"), c.cell(c12RawScript, "cluster"), c.cell(c12RawPub, "standalone"), c.cell(c12RawPub, "cluster"); s1 != nil && k1 != nil && s2 != nil && k2 != nil {
		sr1, ss1 := s1.cpuPerOp()
		kr1, ks1 := k1.cpuPerOp()
		sr2, ss2 := s2.cpuPerOp()
		kr2, ks2 := k2.cpuPerOp()
		pub, _, _ := k2.busPerOp()
		w("**What the PUBLISH costs**, from the two raw release-script rows (the same operation with and without the `PUBLISH`): Redis CPU per operation %+.1f µs standalone and %+.1f µs on the cluster (all nodes), this program %+.1f / %+.1f µs; throughput with the PUBLISH %.2f× the row without it standalone and %.2f× on the cluster (ratios of the medians).",
			sr2-sr1, kr2-kr1, ss2-ss1, ks2-ks1, median(s2.rates)/median(s1.rates), median(k2.rates)/median(k1.rates))
		if pub > 0 {
			w(" The cluster's extra over the standalone server's, %.1f µs per release over %.2f bus messages, is about %.1f µs of Redis CPU per message forwarded (built and sent by one node, read and handled by another) on this machine.", (kr2-kr1)-(sr2-sr1), pub, ((kr2-kr1)-(sr2-sr1))/pub)
		}
		w("\n\n")
	}

	w("### Rows\n\n")
	for _, row := range c.rows {
		w("- **%s**: %s.\n", row.name, row.note)
	}
	w("\n")
}

func joinInts(v []int64) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = fmt.Sprint(x)
	}
	return strings.Join(parts, " / ")
}

// zipfShares is each master's share of operations drawn from a Zipf
// distribution over the keys (key i has weight 1/(i+1)^s).
func zipfShares(owners []int, masters int, s float64) []float64 {
	out := make([]float64, masters)
	var total float64
	for i, o := range owners {
		p := 1 / math.Pow(float64(i+1), s)
		out[o] += p
		total += p
	}
	for i := range out {
		out[i] /= total
	}
	return out
}

// zipfTop is the hottest key's share under zipfShares' distribution.
func zipfTop(n int, s float64) float64 {
	var total float64
	for i := range n {
		total += 1 / math.Pow(float64(i+1), s)
	}
	return 1 / total
}
