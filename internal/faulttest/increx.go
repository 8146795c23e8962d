package faulttest

import (
	"bytes"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// IncrexMode selects how an IncrexShim answers INCREX.
type IncrexMode int

const (
	// IncrexNative implements INCREX (the default).
	IncrexNative IncrexMode = iota
	// IncrexUnknown answers "ERR unknown command 'INCREX', with args
	// beginning with: ..." in Redis 7's format, like a server without it.
	IncrexUnknown
	// IncrexSyntaxError answers "ERR syntax error", like a partial
	// implementation.
	IncrexSyntaxError
	// IncrexNoPerm answers Redis 7.2's ACL refusal, "NOPERM User default
	// has no permissions to run the 'increx' command": the server has
	// INCREX, the user may not run it.
	IncrexNoPerm
	// IncrexReadOnly answers "READONLY You can't write against a read
	// only replica.", like a replica (e.g. after a failover the client has
	// not seen yet).
	IncrexReadOnly
	// IncrexOOM answers "OOM command not allowed when used memory >
	// 'maxmemory'.", like a full server with maxmemory-policy noeviction.
	IncrexOOM
	// IncrexProxyUnsupported answers "unsupported command 'INCREX'" with
	// no code word, as Envoy's redis_proxy filter answers a command it
	// does not know (it never reaches a server that might have it).
	IncrexProxyUnsupported
)

// IncrexShim is a loopback RESP server that gives a real Redis the INCREX
// command of Redis 8.8 (no server in the test fleet has it). Every command
// passes through to the upstream server unchanged, except INCREX, which is
// rewritten into an EVAL of one Lua script on the same upstream connection:
// it is atomic, and its reply keeps its place among pipelined replies and
// RESP3 push messages. Argument errors become an EVAL that returns the error,
// for the same reason.
//
// Semantics (Redis 8.8's documentation and tests/unit/type/increx.tcl):
// INCREX key [NX|XX] [EX s|PX ms|EXAT s|PXAT ms|PERSIST] [ENX] [BYINT n]
// [LBOUND l] [UBOUND u] [SATURATE], options in any order and case. The reply
// is [new value, increment applied], both integers; the increment is 0 when
// nothing changed and the clamped difference under SATURATE. A result
// outside [LBOUND, UBOUND] (by default the int64 range, so an overflow too)
// changes nothing, not even a missing key or a TTL, and replies [current,
// 0]; with SATURATE it is clamped to the bound and applied. Without ENX an
// expiry option is set on every applied increment; with ENX only when the
// key has no TTL. NX and XX are Valkey 9.2's conditions (Redis 8.8 answers
// them with a syntax error); when one fails the reply is [current, 0].
//
// Limits: BYFLOAT answers "ERR syntax error" (coordhost counts integers
// only); error texts that Redis's tests match by a fragment only are a best
// guess; from an inline command on, a connection passes bytes through
// without rewriting; in MULTI the mode errors are queued, where a server
// rejects an unknown command at once.
//
// All methods are safe for concurrent use.
type IncrexShim struct {
	ln       net.Listener
	upstream string
	mode     atomic.Int64
	calls    atomic.Int64

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// StartIncrexShim listens on 127.0.0.1:0 and forwards each accepted
// connection to upstream (host:port of a real Redis); t.Cleanup closes it and
// every connection. A failure to listen fails the test.
func StartIncrexShim(t testing.TB, upstream string) *IncrexShim {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("faulttest: increx shim: listen: %v", err)
	}
	s := &IncrexShim{ln: ln, upstream: upstream, conns: map[net.Conn]struct{}{}}
	s.wg.Add(1)
	go s.serve()
	t.Cleanup(s.Close)
	return s
}

// Addr returns the host:port to give rueidis.ClientOption.InitAddress.
func (s *IncrexShim) Addr() string { return s.ln.Addr().String() }

// SetMode takes effect for INCREX commands read after it returns.
func (s *IncrexShim) SetMode(m IncrexMode) { s.mode.Store(int64(m)) }

// Calls returns how many INCREX commands the shim received, in any mode.
func (s *IncrexShim) Calls() int64 { return s.calls.Load() }

// Close stops the listener, closes every connection and waits for the
// shim's goroutines. Idempotent.
func (s *IncrexShim) Close() {
	s.mu.Lock()
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.ln.Close()
	s.wg.Wait()
}

func (s *IncrexShim) serve() {
	defer s.wg.Done()
	for {
		cc, err := s.ln.Accept()
		if err != nil {
			return
		}
		uc, err := net.DialTimeout("tcp", s.upstream, UpstreamDialTimeout)
		if err != nil {
			cc.Close()
			continue
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			cc.Close()
			uc.Close()
			return
		}
		s.conns[cc], s.conns[uc] = struct{}{}, struct{}{}
		s.wg.Add(2)
		s.mu.Unlock()
		done := func() {
			s.mu.Lock()
			delete(s.conns, cc)
			delete(s.conns, uc)
			s.mu.Unlock()
			cc.Close()
			uc.Close()
		}
		go s.pump(cc, uc, s.commands, func() {
			// The client is done sending: let the server answer what it
			// has, then close; the down direction ends the pair.
			if tc, ok := uc.(*net.TCPConn); !ok || tc.CloseWrite() != nil {
				done()
			}
		})
		go s.pump(uc, cc, fixReply, done)
	}
}

// pump copies complete RESP messages from src to dst, passing each through
// rewrite. From the first bytes that do not frame as RESP (an inline
// command), it copies bytes as they come, without rewriting.
func (s *IncrexShim) pump(src, dst net.Conn, rewrite func(out, msg []byte) []byte, eof func()) {
	defer s.wg.Done()
	buf := make([]byte, 32<<10)
	var pending, out []byte
	raw := false
	for {
		n, err := src.Read(buf)
		pending, out = append(pending, buf[:n]...), out[:0]
		done := 0
		for !raw && done < len(pending) {
			m, _, ferr := messageLen(pending[done:])
			raw = ferr != nil
			if m == 0 {
				break
			}
			out = rewrite(out, pending[done:done+m])
			done += m
		}
		if raw {
			done, out = len(pending), append(out, pending[done:]...)
		}
		pending = append(pending[:0], pending[done:]...)
		if len(out) > 0 {
			if _, werr := dst.Write(out); werr != nil {
				eof()
				return
			}
		}
		if err != nil {
			eof()
			return
		}
	}
}

// increxMarker heads the script's reply, [marker, value, increment] as bulk
// strings, which fixReply turns into [:value, :increment]. Lua numbers are
// doubles: only a string carries every int64 exactly.
const increxMarker = "\x00coordhost-increx-shim\x00"

var markerBulk = []byte("$" + strconv.Itoa(len(increxMarker)) + "\r\n" + increxMarker + "\r\n")

// increxScript runs INCREX on KEYS[1] with the arguments increxArgv
// validated. ARGV: marker, increment, LBOUND, UBOUND, SATURATE, NX or XX,
// PX or PXAT or PERSIST, milliseconds, ENX (an empty string for what is
// absent). Integers are pairs {h, l} = h*1e9 + l with 0 <= l < 1e9, exact
// in doubles far beyond the int64 range, so sums, bounds and overflow are
// decided exactly.
const increxScript = `
local B = 1e9
local function num(s)
  local neg = s:sub(1, 1) == '-'
  local d = neg and s:sub(2) or s
  local h, l = 0, tonumber(d)
  if #d > 9 then h, l = tonumber(d:sub(1, -10)), tonumber(d:sub(-9)) end
  if not neg then return {h, l} end
  if l == 0 then return {-h, 0} end
  return {-h - 1, B - l}
end
local function neg(a)
  if a[2] == 0 then return {-a[1], 0} end
  return {-a[1] - 1, B - a[2]}
end
local function add(a, b)
  local h, l = a[1] + b[1], a[2] + b[2]
  if l >= B then return {h + 1, l - B} end
  return {h, l}
end
local function lt(a, b) return a[1] < b[1] or (a[1] == b[1] and a[2] < b[2]) end
local function str(a)
  if a[1] < 0 then return '-' .. str(neg(a)) end
  if a[1] == 0 then return string.format('%d', a[2]) end
  return string.format('%.0f%09d', a[1], a[2])
end
local MIN, MAX = num('-9223372036854775808'), num('9223372036854775807')
local function reply(v, d) return {ARGV[1], str(v), str(d)} end
local k = KEYS[1]
local cur = redis.pcall('GET', k)
if type(cur) == 'table' then return cur end
local c = {0, 0}
if cur then
  local d = cur:match('^%-?([1-9]%d*)$')
  if cur ~= '0' and not (d and #d <= 19) then c = nil else c = num(cur) end
  if not c or lt(c, MIN) or lt(MAX, c) then
    return redis.error_reply('ERR value is not an integer or out of range')
  end
end
if (ARGV[6] == 'NX' and cur) or (ARGV[6] == 'XX' and not cur) then return reply(c, {0, 0}) end
local lb = ARGV[3] == '' and MIN or num(ARGV[3])
local ub = ARGV[4] == '' and MAX or num(ARGV[4])
local n = add(c, num(ARGV[2]))
if lt(n, lb) or lt(ub, n) then
  if ARGV[5] == '' then return reply(c, {0, 0}) end
  n = lt(n, lb) and lb or ub
end
local d = add(n, neg(c))
if lt(d, MIN) or lt(MAX, d) then return redis.error_reply('ERR applied increment would overflow') end
local r
if ARGV[7] == '' or (ARGV[9] ~= '' and redis.call('PTTL', k) >= 0) then
  r = redis.pcall('SET', k, str(n), 'KEEPTTL')
elseif ARGV[7] == 'PERSIST' then
  r = redis.pcall('SET', k, str(n))
else
  r = redis.pcall('SET', k, str(n), ARGV[7], ARGV[8])
end
if type(r) == 'table' and r.err then
  if r.err:find('invalid expire time', 1, true) then
    return redis.error_reply("ERR invalid expire time in 'increx' command")
  end
  return r
end
return reply(n, d)
`

// errorScript answers with ARGV[1] as the error, verbatim: a reply in order
// on the pipeline without a reply of our own to inject.
const errorScript = "return redis.error_reply(ARGV[1])"

// commands is the client-to-server rewrite: INCREX becomes an EVAL.
func (s *IncrexShim) commands(out, msg []byte) []byte {
	args, ok := commandArgs(msg)
	if !ok || !bytes.EqualFold(args[0], []byte("INCREX")) {
		return append(out, msg...)
	}
	s.calls.Add(1)
	var errMsg string
	switch IncrexMode(s.mode.Load()) {
	case IncrexUnknown:
		errMsg = unknownCommand(args)
	case IncrexSyntaxError:
		errMsg = "ERR syntax error"
	case IncrexNoPerm:
		errMsg = "NOPERM User default has no permissions to run the 'increx' command"
	case IncrexReadOnly:
		errMsg = "READONLY You can't write against a read only replica."
	case IncrexOOM:
		errMsg = "OOM command not allowed when used memory > 'maxmemory'."
	case IncrexProxyUnsupported:
		errMsg = "unsupported command '" + string(args[0]) + "'"
	default:
		var argv []string
		if argv, errMsg = increxArgv(args); errMsg == "" {
			return appendCommand(out, append([]string{"EVAL", increxScript, "1", string(args[1]), increxMarker}, argv...)...)
		}
	}
	return appendCommand(out, "EVAL", errorScript, "0", errMsg)
}

// increxArgv checks INCREX's arguments as Redis 8.8 does (syntax first,
// then values) and returns the script's ARGV after the marker, or the text
// of the error reply.
func increxArgv(args [][]byte) ([]string, string) {
	const syntax = "ERR syntax error"
	if len(args) < 2 {
		return nil, "ERR wrong number of arguments for 'increx' command"
	}
	group := map[string]string{"NX": "cond", "XX": "cond", "EX": "exp", "PX": "exp", "EXAT": "exp",
		"PXAT": "exp", "PERSIST": "exp", "BYINT": "by", "BYFLOAT": "by", "LBOUND": "lb", "UBOUND": "ub",
		"SATURATE": "sat", "ENX": "enx"}
	seen := map[string]string{} // group -> the option given for it
	vals := map[string][]byte{} // option -> its argument
	for i := 2; i < len(args); i++ {
		opt := strings.ToUpper(string(args[i]))
		g, ok := group[opt]
		if !ok || seen[g] != "" || opt == "BYFLOAT" { // the shim counts integers only
			return nil, syntax
		}
		seen[g] = opt
		switch opt {
		case "BYINT", "LBOUND", "UBOUND", "EX", "PX", "EXAT", "PXAT":
			if i++; i == len(args) {
				return nil, syntax
			}
			vals[opt] = args[i]
		}
	}
	exp := seen["exp"]
	switch {
	case seen["enx"] != "" && exp == "PERSIST":
		return nil, syntax
	case seen["enx"] != "" && exp == "":
		return nil, "ERR ENX flag requires an expiration"
	}
	by := "1"
	if v, ok := vals["BYINT"]; ok {
		if _, ok := strictInt(v); !ok {
			return nil, "ERR Increment is not an integer or out of range"
		}
		by = string(v)
	}
	lb, lbOK := strictInt(vals["LBOUND"])
	ub, ubOK := strictInt(vals["UBOUND"])
	if (vals["LBOUND"] != nil && !lbOK) || (vals["UBOUND"] != nil && !ubOK) {
		return nil, "ERR value is not an integer or out of range"
	}
	if lbOK && ubOK && lb > ub {
		return nil, "ERR LBOUND can't be greater than UBOUND"
	}
	ms := ""
	if v := vals[exp]; v != nil {
		n, ok := strictInt(v)
		if !ok {
			return nil, "ERR value is not an integer or out of range"
		}
		seconds := exp == "EX" || exp == "EXAT"
		if n <= 0 || (seconds && n > math.MaxInt64/1000) {
			return nil, "ERR invalid expire time in 'increx' command"
		}
		if seconds {
			n *= 1000
			exp = strings.Replace(exp, "E", "P", 1)
		}
		ms = strconv.FormatInt(n, 10)
	}
	return []string{by, string(vals["LBOUND"]), string(vals["UBOUND"]), seen["sat"], seen["cond"], exp, ms, seen["enx"]}, ""
}

// strictInt parses b as Redis' string2ll does: no sign but '-', no leading
// zeros, no spaces, within int64.
func strictInt(b []byte) (int64, bool) {
	d := bytes.TrimPrefix(b, []byte("-"))
	if len(d) == 0 || (d[0] == '0' && len(b) != 1) || bytes.ContainsFunc(d, func(r rune) bool { return r < '0' || r > '9' }) {
		return 0, false
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	return n, err == nil
}

// unknownCommand formats Redis 7.0's reply to a command it does not know
// (processCommand): the name, then quoted arguments while the list is
// shorter than 128 bytes, each cut to what is left of 128; arguments are C
// strings (cut at a NUL); CR and LF become spaces.
func unknownCommand(args [][]byte) string {
	cstr := func(b []byte, limit int) string {
		if i := bytes.IndexByte(b, 0); i >= 0 {
			b = b[:i]
		}
		return string(b[:min(len(b), limit)])
	}
	var list strings.Builder
	for _, a := range args[1:] {
		if list.Len() >= 128 {
			break
		}
		fmt.Fprintf(&list, "'%s' ", cstr(a, 128-list.Len()))
	}
	msg := fmt.Sprintf("ERR unknown command '%s', with args beginning with: %s", cstr(args[0], 128), list.String())
	return strings.NewReplacer("\r", " ", "\n", " ").Replace(msg)
}

// fixReply is the server-to-client rewrite: every [marker, value,
// increment] array in the message, at the top or inside arrays (an EXEC
// reply), becomes [:value, :increment].
func fixReply(out, msg []byte) []byte {
	if msg[0] != '*' || !bytes.Contains(msg, markerBulk) {
		return append(out, msg...)
	}
	i := bytes.IndexByte(msg, '\n')
	n, _ := strconv.Atoi(string(msg[1 : i-1]))
	body := msg[i+1:]
	if v, ok := bulkStrings(body, 3); ok && n == 3 && string(v[0]) == increxMarker {
		return fmt.Appendf(out, "*2\r\n:%s\r\n:%s\r\n", v[1], v[2])
	}
	out = append(out, msg[:i+1]...)
	for range n {
		end, _ := valueEnd(body, 0, 0)
		out, body = fixReply(out, body[:end]), body[end:]
	}
	return out
}

// commandArgs returns the arguments of a complete message that is an array
// of bulk strings, as clients send commands.
func commandArgs(msg []byte) ([][]byte, bool) {
	if msg[0] != '*' {
		return nil, false
	}
	i := bytes.IndexByte(msg, '\n')
	n, err := strconv.Atoi(string(msg[1 : i-1]))
	if err != nil || n < 1 {
		return nil, false
	}
	return bulkStrings(msg[i+1:], n)
}

// bulkStrings reads n bulk strings from the start of b (framed by
// messageLen, so their headers parse).
func bulkStrings(b []byte, n int) ([][]byte, bool) {
	out := make([][]byte, 0, n)
	for range n {
		if len(b) == 0 || b[0] != '$' {
			return nil, false
		}
		i := bytes.IndexByte(b, '\n')
		l, err := strconv.Atoi(string(b[1 : i-1]))
		if err != nil || l < 0 || i+1+l+2 > len(b) {
			return nil, false
		}
		out, b = append(out, b[i+1:i+1+l]), b[i+1+l+2:]
	}
	return out, true
}

func appendCommand(out []byte, args ...string) []byte {
	out = fmt.Appendf(out, "*%d\r\n", len(args))
	for _, a := range args {
		out = fmt.Appendf(out, "$%d\r\n%s\r\n", len(a), a)
	}
	return out
}
