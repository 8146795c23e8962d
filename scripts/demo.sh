#!/usr/bin/env bash
# demo.sh BIN: shows `coordhost lock hold` keeping two workers apart.
#
# Starts a private redis-server with `BIN dev-redis` on a unix socket in a
# temporary directory, runs two `BIN lock hold` workers on the same lock at
# the same time, each entering a critical section for one second, and
# prints when each enters and leaves. Exits 0 if the sections never
# overlapped, non-zero otherwise. Cleans up everything it started.
# `make run` calls it as `bash scripts/demo.sh bin/coordhost`.
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

TMP=$(mktemp -d "${TMPDIR:-/tmp}/coordhost-demo.XXXXXX")
SOCK=$TMP/redis.sock
EVENTS=$TMP/events
REDIS_PID=

cleanup() {
	local status=$?
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

# ms since the epoch, and the time of day with ms, from one clock reading.
now_ms() { date +%s%3N; }

"$BIN" dev-redis -socket "$SOCK" 2>"$TMP/dev-redis.log" &
REDIS_PID=$!
for _ in $(seq 100); do
	grep -q "started private redis-server" "$TMP/dev-redis.log" 2>/dev/null && break
	kill -0 "$REDIS_PID" 2>/dev/null || break
	sleep 0.05
done
if ! grep -q "started private redis-server" "$TMP/dev-redis.log" 2>/dev/null; then
	echo "demo: dev-redis did not start:" >&2
	cat "$TMP/dev-redis.log" >&2
	exit 1
fi
sed 's/^/[redis]    /' "$TMP/dev-redis.log"

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
	W=$1 EVENTS=$EVENTS "$BIN" lock hold -redis "$SOCK" -fencing -ttl 3s -wait 8s demo -- sh -c "$SECTION" \
		2> >(sed -u "s/^/[worker $1] /")
}

echo "demo: starting workers A and B at $(date +%H:%M:%S.%3N); both want lock \"demo\""
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
if [ "$status" -eq 0 ]; then
	echo "demo: OK: the two critical sections never overlapped"
else
	echo "demo: FAILED" >&2
fi
exit "$status"
