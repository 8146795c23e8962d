// Package faulttest injects network faults between a rueidis client and a
// Redis server, records operation histories under those faults, and checks
// them for linearizability with porcupine against a lease/lock model. It is
// for tests only; production code never imports it (make depcheck).
//
// # The fault layer
//
// A Proxy is an in-process TCP proxy on 127.0.0.1. A client reaches it
// through rueidis' ClientOption.DialCtxFn (Proxy.Option sets it): every dial
// to a server address goes to a proxy listener for that address, which
// opens its own connection to the real server and forwards bytes in both
// directions with four goroutines per connection. Faults, all controlled
// programmatically and safe to change while traffic flows:
//
//   - SetLatency / SetLatencyDir: a delay line per direction (bytes read at
//     t are written at t+d, in order, without throttling pipelined traffic).
//   - ResetAll / Conn.Reset: close both sides at once (RST to the client).
//   - Blackhole (Proxy-wide or per Conn): stop forwarding in both
//     directions without closing; bytes are held, as TCP retransmission
//     would, and delivered on heal.
//   - DropReplies(n): let commands through, discard the next n replies the
//     server sends, then reset each connection that lost one. Replies are
//     framed with a RESP2/RESP3 parser, so exactly those replies (and what
//     follows them on that connection) are lost; push messages are not
//     replies and are not counted. DropRepliesFor(d) is the window form:
//     every server-to-client byte is discarded for d, then the connections
//     that lost bytes are reset. Dropping silently without the reset would
//     desynchronise rueidis' pipelined reply stream; a lost reply followed
//     by a dead connection is what a client really sees.
//
// A peer's close is passed on after the bytes it sent, as TCP delivers
// them: a client that gives up on a connection (rueidis closes it when a
// deadline passes on an otherwise idle connection) may still have its last
// command executed later, possibly after commands it sent on a new
// connection. Only a reset discards what the proxy holds.
//
// Chaos turns a seed into a schedule of such faults (math/rand/v2 PCG) and
// applies it to a set of proxies. Seed logs the seed of every run and reads
// $COORDHOST_FAULT_SEED to replay one. A seed replays the fault schedule,
// not the interleaving of operations, which real scheduling decides.
//
// Why in process and not toxiproxy: no extra process, binary or dependency
// to install on CI (this module may only use what the Go module proxy
// serves); control per connection and per reply that is synchronous with
// the test (a fault is in force when the call returns, a reset names the
// connection); and drop-reply, which toxiproxy lacks (its toxics delay,
// limit, slice or cut streams, but cannot let a request through and lose
// exactly its reply).
//
// # INCREX
//
// IncrexShim is a loopback RESP server in front of a real Redis that gives
// it Redis 8.8's INCREX, which no server in the test fleet has: it rewrites
// INCREX into an EVAL of one Lua script on the same upstream connection
// (atomic, and in order with pipelined commands and push messages) and
// passes everything else through. SetMode makes it answer INCREX like a
// server without it ("unknown command", in Redis 7's words) or like a
// partial implementation ("syntax error").
//
// # Histories and the lease model
//
// History records operations with call and return times (monotonic, from
// the history's start). An operation that timed out or hit a transport error
// gets Return = Infinity: it may take effect at any point after its call.
// LeaseModel checks lock/lease histories: at most one holder at a time in
// the linearized order, fencing tokens strictly increasing across grants, a
// release reports Released only for the current owner, with lease expiry
// modelled from the operations' real times (see LeaseModel). SettleLeases
// turns unknown acquisitions into definite grants or definite non-grants
// using a grant log written atomically with every grant, so the checker
// works on a history whose only open ends are unknown releases.
package faulttest
