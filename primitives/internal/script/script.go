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
	"regexp"
	"strings"

	"github.com/redis/rueidis"
)

// Script is one Lua script with its precomputed SHA1. Safe for concurrent use.
type Script struct {
	name string
	src  string
	sha  string
}

// New returns a Script named name (used in errors) with source src.
func New(name, src string) *Script {
	sum := sha1.Sum([]byte(src))
	return &Script{name: name, src: src, sha: hex.EncodeToString(sum[:])}
}

// Name returns the script's name.
func (s *Script) Name() string { return s.name }

// Run executes the script on c (a client or a dedicated connection) with
// keys and args. On NOSCRIPT it sends the full source once. The command is
// never marked retryable. Error replies the script raises on purpose come
// back as *Error; transport errors as they are.
func (s *Script) Run(ctx context.Context, c rueidis.CoreClient, keys, args []string) rueidis.RedisResult {
	resp := c.Do(ctx, c.B().Evalsha().Sha1(s.sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
	if rerr, ok := rueidis.IsRedisErr(resp.Error()); ok && rerr.IsNoScript() {
		resp = c.Do(ctx, c.B().Eval().Script(s.src).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
	}
	return resp
}

// RunThen is Run followed by the command then builds, both in one DoMulti,
// so that on a client they travel on one connection, in order, and then
// runs after the script (replica.Wait sends WAIT this way: WAIT covers
// only the writes of its own connection). then is called once per send:
// on NOSCRIPT the pair goes again with EVAL, and the first then has run
// after a script that did nothing. Neither command is marked retryable.
func (s *Script) RunThen(ctx context.Context, c rueidis.CoreClient, keys, args []string, then func() rueidis.Completed) (rueidis.RedisResult, rueidis.RedisResult) {
	rs := c.DoMulti(ctx, c.B().Evalsha().Sha1(s.sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build(), then())
	if rerr, ok := rueidis.IsRedisErr(rs[0].Error()); ok && rerr.IsNoScript() {
		rs = c.DoMulti(ctx, c.B().Eval().Script(s.src).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build(), then())
	}
	return rs[0], rs[1]
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
)

// Error is a Redis error reply from a script, classified.
type Error struct {
	Script string
	Code   Code
	Msg    string // the reply text without its code word for coordhost codes
}

func (e *Error) Error() string {
	return fmt.Sprintf("script %s: %s", e.Script, e.Msg)
}

// Classify turns an error reply from Run into *Error and leaves other errors
// (transport, context) untouched. It returns nil for nil.
func (s *Script) Classify(err error) error {
	if err == nil {
		return nil
	}
	rerr, ok := rueidis.IsRedisErr(err)
	if !ok || rerr == nil || rueidis.IsRedisNil(err) {
		return err
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
// written. A Redis error reply is certain: the server answered.
func IsUncertain(err error) bool {
	if err == nil {
		return false
	}
	var se *Error
	if errors.As(err, &se) {
		return false
	}
	_, ok := rueidis.IsRedisErr(err)
	return !ok
}
