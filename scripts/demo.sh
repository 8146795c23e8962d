#!/usr/bin/env bash
# demo.sh BIN: a tour of coordhost with examples/coordhost.hcl.
#
#  1. `BIN validate` checks examples/coordhost.hcl (all three policy
#     drivers: builtin, the WebAssembly module
#     plugins/examples/wasm/gobackoff/gobackoff.wasm and the go-plugin
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
#  5. SIGHUP makes serve reload the file; the demo shows the log line.
#  6. SIGTERM stops serve gracefully; the demo stops redis and cleans up.
#
# Exits 0 if every step worked, non-zero otherwise. Takes a few seconds.
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
PLUGIN=bin/coordhost-example-plugin

fail() {
	echo "demo: FAILED: $*" >&2
	exit 1
}

[ -f "$CONFIG" ] || fail "$CONFIG is missing"
[ -f "$WASM" ] || fail "$WASM is missing: build it with 'make wasm' (scripts/build-wasm.sh)"
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

echo "demo: 5. SIGHUP: serve reloads $CONFIG"
kill -HUP "$SERVE_PID"
if ! wait_log "$SERVE_LOG" '"msg":"(configuration reloaded|reload failed)' "$SERVE_PID" 15; then
	show_serve_log
	fail "serve logged no reload"
fi
show_serve_log
grep -q '"msg":"configuration reloaded","generation":2' "$SERVE_LOG" || fail "the reload failed"

echo "demo: 6. SIGTERM: serve shuts down"
kill -TERM "$SERVE_PID"
serve_status=0
wait "$SERVE_PID" || serve_status=$?
SERVE_PID=
show_serve_log
[ "$serve_status" -eq 0 ] || fail "serve exited with status $serve_status"
echo "demo: OK"
