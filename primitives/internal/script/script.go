// Package script runs coordhost's Lua scripts: EVALSHA first, EVAL on
// NOSCRIPT, and never an automatic retry, because a retried grant can
// increment a fencing counter twice (DESIGN.md §3).
package script

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"
	"time"

	"github.com/coordhost/coordhost/primitives/internal/base"
	"github.com/redis/rueidis"
)

// Script is one Lua script with its precomputed SHA1. Safe for concurrent use.
type Script struct {
	name string
	src  string
	sha  string
	wait time.Duration // refusal bound of Run; 0 means RefusedWait
}

// New returns a Script named name (used in errors) with source src.
func New(name, src string) *Script {
	sum := sha1.Sum([]byte(src))
	return &Script{name: name, src: src, sha: hex.EncodeToString(sum[:])}
}

// Name returns the script's name.
func (s *Script) Name() string { return s.name }

// RefusedWait bounds how long Run keeps resending a script the server
// refused without running it (TRYAGAIN, CLUSTERDOWN, LOADING: see
// IsRefusal), unless WithRefusedWait set another bound. A refusal that
// outlasts it comes back as the reply, which Classify turns into an *Error
// of CodeRefused (matching base.ErrUnavailable).
const RefusedWait = time.Second

// ReleaseRefusedWait is the bound of release scripts (WithRefusedWait): a
// release is owner-checked, so resending it is always safe, and a
// cluster stays down (CLUSTERDOWN) from the moment it declares a master
// failed until a replica takes over, about the cluster-node-timeout.
const ReleaseRefusedWait = 10 * time.Second

// refusedBackoff is the first pause before resending a refused command; it
// doubles up to refusedBackoffMax.
const (
	refusedBackoff    = 5 * time.Millisecond
	refusedBackoffMax = 100 * time.Millisecond
)

// WithRefusedWait returns a copy of s whose Run resends refused commands
// for up to d (still never past ctx).
func (s *Script) WithRefusedWait(d time.Duration) *Script {
	c := *s
	c.wait = d
	return &c
}

// Run executes the script on c (a client or a dedicated connection) with
// keys and args. On NOSCRIPT it sends the full source once. The command is
// never marked retryable, so rueidis never resends it after a lost reply;
// a reply that says the server refused it before running it (TRYAGAIN
// while its slot migrates with its keys split between two nodes,
// CLUSTERDOWN, LOADING) is certain to have changed nothing, and Run
// resends it, with a backoff from 5ms to 100ms, until it runs, ctx ends or
// RefusedWait (or the bound WithRefusedWait set) has passed. (A cluster
// client follows MOVED and ASK itself; on a dedicated connection they come
// back for the caller to re-route.) Error replies the script raises on
// purpose come back as *Error; transport errors as they are.
func (s *Script) Run(ctx context.Context, c rueidis.CoreClient, keys, args []string) rueidis.RedisResult {
	wait := s.wait
	if wait == 0 {
		wait = RefusedWait
	}
	return resend(ctx, wait, func() rueidis.RedisResult { return s.run(ctx, c, keys, args) })
}

// Do sends the command build makes on c, resending it as Run does while
// the server refuses it, for up to RefusedWait. build is called for every
// send (rueidis recycles a command once it has been answered).
func Do(ctx context.Context, c rueidis.CoreClient, build func() rueidis.Completed) rueidis.RedisResult {
	return resend(ctx, RefusedWait, func() rueidis.RedisResult { return c.Do(ctx, build()) })
}

// resend calls send until its reply is not a refusal to wait out, ctx
// ends, or wait has passed since the first refusal.
func resend(ctx context.Context, wait time.Duration, send func() rueidis.RedisResult) rueidis.RedisResult {
	b := Backoff{Bound: wait}
	for {
		resp := send()
		if !retryLater(resp.Error()) || ctx.Err() != nil {
			return resp
		}
		if ok, _ := b.Wait(ctx); !ok {
			return resp
		}
	}
}

// Backoff paces the resends of a command the server refused for now (a
// refusal that is not a redirection: TRYAGAIN, CLUSTERDOWN, LOADING), as
// Run paces its own: pauses of 5ms doubling up to 100ms, none ending more
// than Bound after the first.
type Backoff struct {
	Bound time.Duration
	start time.Time // the first Wait
	pause time.Duration
}

// Wait pauses before the next resend. It returns false at once when the
// pause would end more than Bound after the first Wait, and false with
// ctx.Err() when ctx ends during the pause.
func (b *Backoff) Wait(ctx context.Context) (bool, error) {
	if b.start.IsZero() {
		b.start, b.pause = time.Now(), refusedBackoff
	}
	if time.Since(b.start)+b.pause > b.Bound {
		return false, nil
	}
	t := time.NewTimer(b.pause)
	select {
	case <-ctx.Done():
		t.Stop()
		return false, ctx.Err()
	case <-t.C:
	}
	b.pause = min(2*b.pause, refusedBackoffMax)
	return true, nil
}

func (s *Script) run(ctx context.Context, c rueidis.CoreClient, keys, args []string) rueidis.RedisResult {
	resp := c.Do(ctx, c.B().Evalsha().Sha1(s.sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
	if rerr, ok := rueidis.IsRedisErr(resp.Error()); ok && rerr.IsNoScript() {
		resp = c.Do(ctx, c.B().Eval().Script(s.src).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
	}
	return resp
}

// RunThen is Run followed by the command then builds, both in one DoMulti,
// so that on a client they travel on one connection, in order, and then
// runs after the script (replica.Wait sends WAIT this way: WAIT covers
// only the writes of its own connection). With asking, ASKING goes first
// (on a connection an ASK redirection sent to the importing node). then is
// called once per send: on NOSCRIPT the commands go again with EVAL, and
// the first then has run after a script that did nothing. None is marked
// retryable; a refusal (TRYAGAIN, CLUSTERDOWN, LOADING) is resent as Run
// resends it. MOVED and ASK come back for the caller to re-route: give c
// as a dedicated connection, since a cluster client would follow them for
// the script alone and send then to the node it left.
func (s *Script) RunThen(ctx context.Context, c rueidis.CoreClient, asking bool, keys, args []string, then func() rueidis.Completed) (res, thenRes rueidis.RedisResult) {
	send := func(script rueidis.Completed) []rueidis.RedisResult {
		if asking {
			return c.DoMulti(ctx, c.B().Asking().Build(), script, then())[1:]
		}
		return c.DoMulti(ctx, script, then())
	}
	res = resend(ctx, RefusedWait, func() rueidis.RedisResult {
		rs := send(c.B().Evalsha().Sha1(s.sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
		if rerr, ok := rueidis.IsRedisErr(rs[0].Error()); ok && rerr.IsNoScript() {
			rs = send(c.B().Eval().Script(s.src).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
		}
		thenRes = rs[1]
		return rs[0]
	})
	return res, thenRes
}

// noSlot is the Word of a Refusal for a command never sent (notSent).
const noSlot = "NOTSENT"

// notSent reports whether err says the client never sent the command: it
// had no node for the slot (rueidis.ErrNoSlot), or could not connect to
// the node (a dial error: a cluster client's slot map still names a
// master that died, until it refreshes).
func notSent(err error) bool {
	if errors.Is(err, rueidis.ErrNoSlot) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// Refusal is what IsRefusal found in an error reply.
type Refusal struct {
	// Word is the reply's first word: MOVED, ASK, TRYAGAIN, CLUSTERDOWN or
	// LOADING; or NOTSENT when the client sent nothing: its slot map had
	// no node for the slot (rueidis.ErrNoSlot), or it could not connect to
	// the node (a master that died, until the client's map follows the
	// failover).
	Word string
	// Addr is where MOVED and ASK send the command ("host:port").
	Addr string
}

// Redirect reports whether the command belongs on another node (MOVED or
// ASK, with Addr); the other refusals ask to try the same node later.
func (r Refusal) Redirect() bool { return r.Word == "MOVED" || r.Word == "ASK" }

// IsRefusal reports whether err is an error reply (raw, or an *Error from
// Classify) with which the server refused a command before running any of
// it: a cluster redirection (MOVED, ASK), a slot whose keys are split
// between two nodes by a migration (TRYAGAIN), a cluster without a quorum
// or a slot without a master (CLUSTERDOWN), or a server still loading its
// data (LOADING); or that the client sent nothing, having no node for the
// slot (rueidis.ErrNoSlot) or no connection to it (a dial error). Redis answers these before a script starts; a script
// that hits a cluster problem midway fails with a message that starts
// otherwise ("Script attempted to access a non local key ..."), which is
// not a refusal: its earlier writes stay.
func IsRefusal(err error) (Refusal, bool) {
	if err == nil {
		return Refusal{}, false
	}
	if notSent(err) {
		return Refusal{Word: noSlot}, true
	}
	var msg string
	var se *Error
	if errors.As(err, &se) {
		if se.Code != CodeRefused {
			return Refusal{}, false
		}
		msg = se.Msg
		if se.notSent {
			return Refusal{Word: noSlot}, true
		}
	} else if rerr, ok := rueidis.IsRedisErr(err); ok && rerr != nil && !rueidis.IsRedisNil(err) {
		msg = rerr.Error()
	} else {
		return Refusal{}, false
	}
	word, rest, _ := strings.Cut(msg, " ")
	switch word {
	case "MOVED", "ASK":
		// "MOVED <slot> <host:port>"
		f := strings.Fields(rest)
		if len(f) != 2 {
			return Refusal{}, false
		}
		return Refusal{Word: word, Addr: f[1]}, true
	case "TRYAGAIN", "CLUSTERDOWN", "LOADING":
		return Refusal{Word: word}, true
	}
	return Refusal{}, false
}

// retryLater reports whether err is a refusal to resend to the same node.
func retryLater(err error) bool {
	r, ok := IsRefusal(err)
	return ok && !r.Redirect()
}

// Code classifies an error reply raised by a script or by Redis inside it.
type Code int

const (
	// CodeOther is an error reply with no special meaning to coordhost.
	CodeOther Code = iota
	// CodeWrongType is Redis' WRONGTYPE: a key holds a foreign value.
	CodeWrongType
	// CodeBadCounter is COORDHOST_BADCOUNTER: a fencing counter is unusable.
	CodeBadCounter
	// CodeKeyTTL is COORDHOST_KEYTTL: a hash of field leases has a key TTL.
	CodeKeyTTL
	// CodeUnsupported is COORDHOST_UNSUPPORTED: the server lacks a
	// command the script needs (found before any write).
	CodeUnsupported
	// CodeWrongKind is COORDHOST_WRONGKIND: a key holds a value of the
	// right Redis type that the primitive did not write (e.g. another
	// rate-limit algorithm's state).
	CodeWrongKind
	// CodeBadArg is COORDHOST_BADARG: the script refused an argument
	// before writing anything (the callers validate first, so this means
	// a caller's bug).
	CodeBadArg
	// CodeRefused is a reply with which the server refused to run the
	// script at all (IsRefusal): nothing was written, and sending it
	// again later (or, for MOVED and ASK, to the node named) is safe.
	// The *Error matches base.ErrUnavailable.
	CodeRefused
)

// Error is a Redis error reply from a script, classified.
type Error struct {
	Script string
	Code   Code
	Msg    string // the reply text without its code word for coordhost codes
	// notSent (CodeRefused) marks a command the client never sent.
	notSent bool
}

func (e *Error) Error() string {
	return fmt.Sprintf("script %s: %s", e.Script, e.Msg)
}

// Unwrap returns base.ErrUnavailable for CodeRefused, else nil.
func (e *Error) Unwrap() error {
	if e.Code == CodeRefused {
		return base.ErrUnavailable
	}
	return nil
}

// Classify turns an error reply from Run into *Error and leaves other errors
// (transport, context) untouched. It returns nil for nil.
func (s *Script) Classify(err error) error {
	if err == nil {
		return nil
	}
	if notSent(err) {
		return &Error{Script: s.name, Code: CodeRefused, Msg: err.Error(), notSent: true}
	}
	rerr, ok := rueidis.IsRedisErr(err)
	if !ok || rerr == nil || rueidis.IsRedisNil(err) {
		return err
	}
	if _, refused := IsRefusal(rerr); refused {
		return &Error{Script: s.name, Code: CodeRefused, Msg: rerr.Error()}
	}
	msg := Clean(rerr.Error())
	for _, c := range []struct {
		word string
		code Code
	}{{"COORDHOST_BADCOUNTER", CodeBadCounter}, {"COORDHOST_KEYTTL", CodeKeyTTL}, {"COORDHOST_BADARG", CodeBadArg}, {"COORDHOST_UNSUPPORTED", CodeUnsupported}, {"COORDHOST_WRONGKIND", CodeWrongKind}} {
		if i := strings.Index(msg, c.word); i >= 0 {
			return &Error{Script: s.name, Code: c.code, Msg: strings.TrimSpace(msg[i+len(c.word):])}
		}
	}
	if strings.Contains(msg, "WRONGTYPE") {
		return &Error{Script: s.name, Code: CodeWrongType, Msg: "the key holds a value of another type (WRONGTYPE)"}
	}
	return &Error{Script: s.name, Code: CodeOther, Msg: msg}
}

// Script locations that Redis adds to error replies: "... script: <sha>, on
// @user_script:60." (Redis 7+, Valkey) and "Error running script (call to
// f_<sha>): @user_script:60: ..." (older servers). They name a SHA and a
// line of a file the caller never sees.
var (
	scriptSuffix = regexp.MustCompile(`\s*script: [0-9a-f]{40}, on @user_script:[0-9]+\.?\s*$`)
	scriptPrefix = regexp.MustCompile(`(?:ERR )?Error running script \(call to f_[0-9a-f]{40}\): @user_script:[0-9]+: `)
)

// Clean strips the script location Redis adds to an error reply raised
// inside a script, leaving the error itself.
func Clean(msg string) string {
	return strings.TrimSpace(scriptPrefix.ReplaceAllString(scriptSuffix.ReplaceAllString(msg, ""), ""))
}

// IsUncertain reports whether err leaves the outcome of a command unknown:
// a transport error, timeout or cancellation after the command may have been
// written. A Redis error reply is certain: the server answered; so is
// a command the client never sent (rueidis.ErrNoSlot, a dial error).
func IsUncertain(err error) bool {
	if err == nil {
		return false
	}
	var se *Error
	if errors.As(err, &se) || notSent(err) {
		return false
	}
	_, ok := rueidis.IsRedisErr(err)
	return !ok
}
