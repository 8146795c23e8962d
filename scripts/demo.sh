#!/usr/bin/env bash
# demo.sh BIN: a tour of coordhost with examples/coordhost.hcl.
#
#  1. `BIN validate` checks examples/coordhost.hcl (all three policy
#     drivers: builtin, the WebAssembly modules
#     plugins/examples/wasm/gobackoff/gobackoff.wasm and
#     gostarve/gostarve.wasm, and the go-plugin
#     binary bin/coordhost-example-plugin, pinned by its sha256).
#  2. `BIN dev-redis` starts a private redis-server on a unix socket in a
#     temporary directory; everything below shares it (the example's redis
#     block takes its addresses from -var redis_addresses).
#  3. `BIN serve` runs the daemon on a free port; the demo fetches /readyz
#     and a few lines of /metrics.
#  4. Two `BIN lock hold -config` workers contend for the example's lock
#     "invoice" (fencing, builtin retry policy), each holding it for one
#     second; the demo checks that their critical sections never overlapped.
#     Then one holder of the partitioned lock "report" (-attr tenant=acme:
#     the partition key comes from the plugin, the retry policy is the WASM
#     module).
#  5. A stream of `BIN rwlock hold -read -config` readers of the example's
#     rwlock "report_cache" (one starts every 150 ms and holds 400 ms, so
#     one is always inside), and a `BIN rwlock hold -write` writer. Its
#     starvation policy writers_wasm, the WebAssembly module
#     plugins/examples/wasm/gostarve/gostarve.wasm with bound_ms 300, holds
#     new readers off once the writer has waited 300 ms; the demo tells when
#     each got in, and fails if the writer overlapped a reader or did not
#     get in within 3 s.
#  6. Four `BIN limit check -config` calls for tenant acme against the
#     example's rate_limit "checkout" (3 per minute per tenant, a sliding
#     window; the partition key from the builtin template policy "tenant"):
#     three are granted (exit 0), the fourth refused (exit 1) with the time
#     to retry; tenant globex is still granted.
#  7. The network API with curl (installed with apt-get when missing), in
#     Connect JSON on serve's port: Envoy's ShouldRateLimit for one client
#     address in domain "edge" (2 per minute: OK, OK, OVER_LIMIT);
#     LockService.Acquire of "invoice" (a grant with a fencing token), a
#     second client's TryAcquire refused (aborted), Release by grant id.
#  8. SIGHUP makes serve reload the file; the demo shows the log line.
#  9. SIGTERM stops serve gracefully; the demo stops redis and cleans up.
#
# Exits 0 if every step worked, non-zero otherwise. Takes about ten seconds.
# `make run` calls it as `bash scripts/demo.sh bin/coordhost`, after
# building the example plugin.
set -euo pipefail

if [ $# -ne 1 ]; then
	echo "usage: $0 BIN" >&2
	exit 2
fi
BIN=$1
case $BIN in
/*) ;;
*) BIN=$PWD/$BIN ;;
esac
[ -x "$BIN" ] || { echo "demo: $BIN is not an executable" >&2; exit 2; }

# Run from the repository root so that paths in messages are short.
cd "$(dirname "$0")/.."
CONFIG=examples/coordhost.hcl
WASM=plugins/examples/wasm/gobackoff/gobackoff.wasm
STARVE_WASM=plugins/examples/wasm/gostarve/gostarve.wasm
PLUGIN=bin/coordhost-example-plugin

fail() {
	echo "demo: FAILED: $*" >&2
	exit 1
}

[ -f "$CONFIG" ] || fail "$CONFIG is missing"
for m in "$WASM" "$STARVE_WASM"; do
	[ -f "$m" ] || fail "$m is missing: build it with 'make wasm' (scripts/build-wasm.sh)"
done
[ -x "$PLUGIN" ] || fail "$PLUGIN is missing: build it with 'make plugin-example'"

# The redis-server for dev mode: $COORDHOST_REDIS_SERVER if set, else the
# Redis 8 that `make redis` (scripts/redis-servers.sh) installed and named
# in .cache/redis-env.sh (Redis 8 has the hash-field expiry leases need),
# else redis-server on PATH. The demo never depends on PATH holding one.
if [ -z "${COORDHOST_REDIS_SERVER:-}" ] && [ -f .cache/redis-env.sh ]; then
	# shellcheck disable=SC1091
	. ./.cache/redis-env.sh
	export COORDHOST_REDIS_SERVER=${COORDHOST_REDIS8_SERVER:-${COORDHOST_REDIS7_SERVER:-}}
fi
if [ -z "${COORDHOST_REDIS_SERVER:-}" ] && ! command -v redis-server >/dev/null; then
	fail "no redis-server: run 'make redis' (scripts/redis-servers.sh) or set COORDHOST_REDIS_SERVER"
fi

# http_get ADDR PATH prints the body of an HTTP GET when the status is 200
# (bash's /dev/tcp: no curl needed on a fresh machine).
http_get() {
	local host=${1%:*} port=${1##*:} status body
	exec 3<>"/dev/tcp/$host/$port" || return 1
	printf 'GET %s HTTP/1.0\r\nHost: %s\r\nConnection: close\r\n\r\n' "$2" "$1" >&3
	body=$(cat <&3)
	exec 3<&-
	status=$(head -1 <<<"$body" | tr -d '\r')
	[[ $status == HTTP/1.?" 200"* ]] || { echo "demo: GET $2: $status" >&2; return 1; }
	sed '1,/^\r\{0,1\}$/d' <<<"$body"
}

TMP=$(mktemp -d "${TMPDIR:-/tmp}/coordhost-demo.XXXXXX")
SOCK=$TMP/redis.sock
EVENTS=$TMP/events
SERVE_LOG=$TMP/serve.log
REDIS_PID=
SERVE_PID=
SERVE_SHOWN=0 # lines of $SERVE_LOG printed so far

# show_serve_log prints the lines serve logged since the last call.
show_serve_log() {
	[ -f "$SERVE_LOG" ] || return 0
	local n
	n=$(wc -l <"$SERVE_LOG")
	if [ "$n" -gt "$SERVE_SHOWN" ]; then
		sed -n "$((SERVE_SHOWN + 1)),${n}p" "$SERVE_LOG" | sed 's/^/[serve]    /'
		SERVE_SHOWN=$n
	fi
}

cleanup() {
	local status=$?
	if [ -n "$SERVE_PID" ] && kill -0 "$SERVE_PID" 2>/dev/null; then
		kill -TERM "$SERVE_PID" 2>/dev/null || true
		wait "$SERVE_PID" 2>/dev/null || true
		show_serve_log
	fi
	if [ -n "$REDIS_PID" ] && kill -0 "$REDIS_PID" 2>/dev/null; then
		kill -TERM "$REDIS_PID" 2>/dev/null || true
		wait "$REDIS_PID" 2>/dev/null || true
		sed '1d; s/^/[redis]    /' "$TMP/dev-redis.log" 2>/dev/null || true
	fi
	rm -rf "$TMP"
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# wait_log FILE PATTERN PID SECONDS: waits until FILE has a line matching
# the extended regexp PATTERN; fails if PID exits or SECONDS pass first.
wait_log() {
	local file=$1 pattern=$2 pid=$3 i
	for ((i = 0; i < $4 * 20; i++)); do
		grep -Eq -- "$pattern" "$file" 2>/dev/null && return 0
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.05
	done
	grep -Eq -- "$pattern" "$file" 2>/dev/null
}

SHA=$(sha256sum "$PLUGIN" | cut -d' ' -f1)
# The variables of the example: the plugin's checksum pin, and Redis (set
# once dev-redis runs).
VARS=(-var "plugin_sha256=$SHA")

echo "demo: 1. validate $CONFIG"
"$BIN" validate "${VARS[@]}" "$CONFIG" || fail "validate found errors"

echo "demo: 2. a private redis-server for the demo"
"$BIN" dev-redis -socket "$SOCK" 2>"$TMP/dev-redis.log" &
REDIS_PID=$!
wait_log "$TMP/dev-redis.log" "started private redis-server" "$REDIS_PID" 10 ||
	{ cat "$TMP/dev-redis.log" >&2; fail "dev-redis did not start"; }
sed 's/^/[redis]    /' "$TMP/dev-redis.log"
VARS+=(-var "redis_addresses=[\"$SOCK\"]")

echo "demo: 3. serve -config $CONFIG -listen 127.0.0.1:0"
"$BIN" serve -config "$CONFIG" "${VARS[@]}" -listen 127.0.0.1:0 2>"$SERVE_LOG" &
SERVE_PID=$!
if ! wait_log "$SERVE_LOG" '"msg":"listening"' "$SERVE_PID" 15; then
	show_serve_log
	fail "serve did not start listening"
fi
show_serve_log
ADDR=$(grep -o '"msg":"listening","addr":"[^"]*"' "$SERVE_LOG" | head -1 | sed 's/.*"addr":"//; s/"$//')
[ -n "$ADDR" ] || fail "no address in serve's log"
echo "demo: GET http://$ADDR/readyz"
READY=$(http_get "$ADDR" /readyz) || fail "/readyz did not answer 200"
sed 's/^/[http]     /' <<<"$READY"
echo "demo: GET http://$ADDR/metrics (some coordhost_ metrics, without histogram buckets)"
METRICS=$(http_get "$ADDR" /metrics) || fail "/metrics did not answer 200"
awk '/^coordhost_/ && !/_bucket\{/ && n++ < 6 { print "[http]     " $0 }' <<<"$METRICS"
grep -q '^coordhost_config_generation 1$' <<<"$METRICS" || fail "/metrics lacks coordhost_config_generation 1"

# The critical section: runs as CMD under the lock. It logs enter/leave
# with millisecond timestamps to the terminal and to the events file.
# shellcheck disable=SC2016
SECTION='
	t=$(date +%s%3N); printf "[worker %s] enter %s.%s  fencing token %s\n" "$W" "$(date -d @"${t%???}" +%H:%M:%S)" "${t#"${t%???}"}" "$COORDHOST_FENCING_TOKEN"
	echo "$t enter $W" >> "$EVENTS"
	sleep 1
	t=$(date +%s%3N)
	echo "$t leave $W" >> "$EVENTS"
	printf "[worker %s] leave %s.%s\n" "$W" "$(date -d @"${t%???}" +%H:%M:%S)" "${t#"${t%???}"}"
'

worker() {
	W=$1 EVENTS=$EVENTS "$BIN" lock hold -config "$CONFIG" "${VARS[@]}" -wait 10s invoice -- sh -c "$SECTION" \
		2> >(sed -u "s/^/[worker $1] /")
}

echo "demo: 4. workers A and B at $(date +%H:%M:%S.%3N); both want lock \"invoice\" of $CONFIG"
worker A &
A_PID=$!
worker B &
B_PID=$!
status=0
wait "$A_PID" || { echo "demo: worker A failed ($?)" >&2; status=1; }
wait "$B_PID" || { echo "demo: worker B failed ($?)" >&2; status=1; }
sleep 0.1 # let the stderr filters finish

# Check: events alternate enter X / leave X, and each enter comes at or
# after the previous leave.
if ! awk '
	{ t = $1; ev = $2; w = $3 }
	ev == "enter" { if (inside != "") { bad = 1; print "demo: " w " entered at " t " while " inside " was inside" }
	                if (t < last_leave) { bad = 1; print "demo: " w " entered at " t " before the previous leave at " last_leave }
	                inside = w; enters++ }
	ev == "leave" { if (inside != w) { bad = 1; print "demo: " w " left at " t " but " (inside == "" ? "nobody" : inside) " was inside" }
	                inside = ""; last_leave = t }
	END { if (enters != 2) { bad = 1; print "demo: expected 2 critical sections, saw " enters+0 }
	      exit bad }
' "$EVENTS"; then
	status=1
fi
[ "$status" -eq 0 ] || fail "the workers failed or their critical sections overlapped"
echo "demo: OK: the two critical sections never overlapped"

echo "demo: lock \"report\" for tenant acme (partition key from the plugin, retry policy in WASM)"
# shellcheck disable=SC2016
"$BIN" lock hold -config "$CONFIG" "${VARS[@]}" -attr tenant=acme -wait 10s report -- \
	sh -c 'echo "[report]   holding $COORDHOST_LOCK_NAME"' 2> >(sed -u "s/^/[report]   /") ||
	fail "lock hold report failed"
sleep 0.1

# Step 5: a stream of overlapping readers of rwlock "report_cache", and a
# writer. Each reader holds a read lease for READ_MS; one starts every
# 150 ms, so one is always live and, without a starvation policy, the writer
# would wait forever. writers_wasm (gostarve.wasm) says: once the writer has
# waited bound_ms, hold new readers off; the readers inside finish, the
# writer gets in, then the held-off readers.
BOUND_MS=300 # writers_wasm's bound_ms in $CONFIG
READ_MS=400  # how long each reader holds its lease (sleep 0.4)
RW_EVENTS=$TMP/rw-events
RW_STOP=$TMP/rw-stop
# shellcheck disable=SC2016
READ_SECTION='echo "$(date +%s%3N) enter $R" >>"$RW_EVENTS"; sleep 0.4; echo "$(date +%s%3N) leave $R" >>"$RW_EVENTS"'
# shellcheck disable=SC2016
WRITE_SECTION='echo "$(date +%s%3N) enter W" >>"$RW_EVENTS"; printf "[writer]   rebuilding the report at %s\n" "$(date +%H:%M:%S.%3N)"; sleep 0.2; echo "$(date +%s%3N) leave W" >>"$RW_EVENTS"'

reader() {
	echo "$(date +%s%3N) ask R$1" >>"$RW_EVENTS"
	R=R$1 RW_EVENTS=$RW_EVENTS "$BIN" rwlock hold -read -config "$CONFIG" "${VARS[@]}" -wait 10s report_cache -- \
		sh -c "$READ_SECTION" 2>>"$TMP/readers.log" ||
		echo "$(date +%s%3N) failed R$1 $?" >>"$RW_EVENTS"
}

# readers starts reader 1, 2, ... every 150 ms until $RW_STOP exists (at
# most 40), then waits for them.
readers() {
	local i
	for ((i = 1; i <= 40; i++)); do
		[ -e "$RW_STOP" ] && break
		reader "$i" &
		sleep 0.15
	done
	wait
}

echo "demo: 5. readers and a writer share rwlock \"report_cache\"; its starvation policy writers_wasm runs $(basename "$STARVE_WASM") (bound_ms $BOUND_MS)"
# An uncontended write first: how long coordhost takes from its start to
# CMD (loading the file, the plugin and the WASM modules, connecting), so
# that the writer's wait below can be told apart from its start.
: >"$RW_EVENTS"
echo "$(date +%s%3N) start S" >>"$RW_EVENTS"
RW_EVENTS=$RW_EVENTS "$BIN" rwlock hold -write -config "$CONFIG" "${VARS[@]}" -wait 3s report_cache -- \
	sh -c 'echo "$(date +%s%3N) started S" >>"$RW_EVENTS"' 2>/dev/null || fail "an uncontended write of report_cache failed"
readers &
READERS_PID=$!
sleep 0.6 # a few readers are in
echo "$(date +%s%3N) ask W" >>"$RW_EVENTS"
writer_status=0
RW_EVENTS=$RW_EVENTS "$BIN" rwlock hold -write -config "$CONFIG" "${VARS[@]}" -wait 3s report_cache -- \
	sh -c "$WRITE_SECTION" 2> >(sed -u 's/^/[writer]   /') || writer_status=$?
sleep 0.5 # the held-off readers get in, and a few more
touch "$RW_STOP"
wait "$READERS_PID"
sleep 0.1 # let the stderr filter finish

# The story, from the events (ms timestamps): when readers and the writer
# asked, entered and left. Fails on an overlap, a failed reader, or a writer
# that did not get in within 3 s.
if ! sort -n -s -k1,1 "$RW_EVENTS" | awk -v bound="$BOUND_MS" -v hold="$READ_MS" -v slack=100 '
	function at(t) { return sprintf("+%.2f s", (t - t0) / 1000) }
	{ t = $1; ev = $2; who = $3; r = substr(who, 2) + 0 }
	ev == "start" { start = t; next }
	ev == "started" { startup = t - start; next }
	!t0 { t0 = t }
	ev == "ask" && who == "W" { wask = t; live_at_ask = live; next }
	ev == "ask" { ask[r] = t; if (r > nr) nr = r; next }
	ev == "enter" && who == "W" { went = t; if (live > 0) { bad = 1; print "demo: the writer entered while " live " reader(s) were inside" }; next }
	ev == "leave" && who == "W" { wleft = t; next }
	ev == "enter" { live++; enter[r] = t
	                if (went && !wleft) { bad = 1; print "demo: reader " who " entered while the writer was inside" }
	                next }
	ev == "leave" { live--; next }
	ev == "failed" { bad = 1; print "demo: reader " who " failed (exit status " $4 ")" }
	END {
		for (i = 1; i <= nr; i++) {
			if (!(i in enter)) continue
			n++
			if (enter[i] < wask) { before++; if (!first) first = enter[i] }
			else if (!went || enter[i] < went) letin = letin " R" i " (" at(enter[i]) ")"
			else if (ask[i] < went) { heldoff = heldoff " R" i; if (!hoask) hoask = ask[i]; if (!hofirst || enter[i] < hofirst) hofirst = enter[i] }
		}
		printf "[rwlock]   coordhost takes %d ms from its start to CMD (an uncontended write, just before)\n", startup
		if (before) printf "[rwlock]   %d readers in from %s, each holding %d ms, one starting every 150 ms; %d inside when the writer started at %s\n", before, at(first), hold, live_at_ask, at(wask)
		else printf "[rwlock]   no reader got in before the writer started at %s (a slow start: the stream of readers came late)\n", at(wask)
		if (letin != "") printf "[rwlock]   let in while the writer waited, before its bound_ms %d took effect:%s\n", bound, letin
		if (!went) { print "demo: the writer never got in"; exit 1 }
		waited = went - wask - startup
		if (heldoff != "") printf "[rwlock]   held off (started from %s) until the writer left:%s\n", at(hoask), heldoff
		else print "[rwlock]   no reader had to be held off (the writer found a gap)"
		printf "[rwlock]   writer granted at %s: it waited about %d ms after its start (%s bound %d + reader hold %d + %d ms), and left at %s\n", at(went), waited, (waited <= bound + hold + slack ? "within" : "MORE than"), bound, hold, slack, at(wleft)
		if (hofirst) printf "[rwlock]   held-off readers in from %s; %d readers in all, none inside with the writer\n", at(hofirst), n
		if (went - wask > 3000) { bad = 1; print "demo: the writer got in " went - wask " ms after its start, more than 3 s" }
		exit bad
	}'; then
	sed 's/^/[readers]  /' "$TMP/readers.log" >&2
	fail "readers and the writer of report_cache overlapped, failed, or the writer did not get in"
fi
[ "$writer_status" -eq 0 ] || fail "the writer of report_cache failed (exit status $writer_status)"
echo "demo: OK: the writer got in under a steady stream of readers, and never overlapped them"

echo "demo: 6. rate_limit \"checkout\" of $CONFIG (3 per minute per tenant): four checks for tenant acme, one for globex"
# check TENANT WANT: one decision; fails unless the exit status is WANT (0
# granted, 1 refused).
check() {
	local out code=0
	out=$("$BIN" limit check -config "$CONFIG" "${VARS[@]}" -attr "tenant=$1" checkout 2>"$TMP/limit.err") || code=$?
	[ -z "$out" ] || printf '[limit]    %s\n' "$out"
	sed 's/^/[limit]    /' "$TMP/limit.err"
	[ "$code" -eq "$2" ] || fail "limit check for tenant $1: exit status $code, want $2"
}
check acme 0
check acme 0
check acme 0
check acme 1
check globex 0
echo "demo: OK: three grants and a refusal for acme; globex has its own limit"

echo "demo: 7. the network API over Connect JSON, with curl"
if ! command -v curl >/dev/null 2>&1; then
	echo "demo: installing curl with apt-get"
	apt-get install -y -qq curl >/dev/null 2>&1 || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq curl >/dev/null; } ||
		fail "curl is missing and apt-get could not install it"
fi
# api RPC JSON: POSTs JSON to http://$ADDR/RPC; prints the HTTP status,
# a space and the body.
api() {
	curl -sS -o "$TMP/api.out" -w '%{http_code}' -H 'Content-Type: application/json' -d "$2" "http://$ADDR/$1" >"$TMP/api.code" ||
		fail "curl could not reach serve for $1"
	printf '%s %s' "$(cat "$TMP/api.code")" "$(tr -d '\n' <"$TMP/api.out")"
}
rls='{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"192.0.2.7"}]}]}'
for want in OK OK OVER_LIMIT; do
	out=$(api envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit "$rls")
	echo "[api]      ShouldRateLimit remote_address=192.0.2.7 -> $out"
	[[ $out == "200 "*"\"overallCode\":\"$want\""* ]] || fail "ShouldRateLimit answered $out, want overallCode $want"
done
out=$(api coordhost.v1.LockService/Acquire '{"name":"invoice","wait":"5s"}')
echo "[api]      LockService/Acquire invoice -> $out"
[[ $out == "200 "*'"fencingToken":"'* ]] || fail "Acquire answered $out, want a grant with a fencing token"
grant=$(sed -n 's/.*"grantId":"\([^"]*\)".*/\1/p' <<<"$out")
out=$(api coordhost.v1.LockService/TryAcquire '{"name":"invoice"}')
echo "[api]      LockService/TryAcquire invoice (another client) -> $out"
[[ $out == "409 "*'"code":"aborted"'* ]] || fail "TryAcquire of a held lock answered $out, want aborted"
out=$(api coordhost.v1.LockService/Release "{\"grantId\":\"$grant\"}")
echo "[api]      LockService/Release -> $out"
[[ $out == "200 "*RELEASE_RESULT_RELEASED* ]] || fail "Release answered $out"
echo "demo: OK: two requests allowed and the third over the limit; a lock granted, refused to another, released"

echo "demo: 8. SIGHUP: serve reloads $CONFIG"
kill -HUP "$SERVE_PID"
if ! wait_log "$SERVE_LOG" '"msg":"(configuration reloaded|reload failed)' "$SERVE_PID" 15; then
	show_serve_log
	fail "serve logged no reload"
fi
show_serve_log
grep -q '"msg":"configuration reloaded","generation":2' "$SERVE_LOG" || fail "the reload failed"

echo "demo: 9. SIGTERM: serve shuts down"
kill -TERM "$SERVE_PID"
serve_status=0
wait "$SERVE_PID" || serve_status=$?
SERVE_PID=
show_serve_log
[ "$serve_status" -eq 0 ] || fail "serve exited with status $serve_status"
echo "demo: OK"
