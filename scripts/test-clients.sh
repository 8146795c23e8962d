#!/usr/bin/env bash
# test-clients.sh makes sure the third-party clients that the end-to-end
# tests (internal/e2e) drive the daemon with exist, and writes their
# absolute paths to .cache/clients-env.sh:
#
#   grpcurl            github.com/fullstorydev/grpcurl/cmd/grpcurl
#   grpc-health-probe  github.com/grpc-ecosystem/grpc-health-probe
#   client_cmd         github.com/envoyproxy/ratelimit/src/client_cmd
#                      (envoyproxy/ratelimit's own RLS test client)
#       Go programs pinned in tools/clients/go.mod (their own module, so
#       none of their dependencies enters the main go.sum), built with
#       `go build` into .cache/clients/bin.
#   python3            /usr/bin/python3 with Debian's python3-grpcio and
#                      python3-protobuf (not a pyenv or venv python on PATH)
#   curl               Debian's curl
#       installed with apt-get when missing.
#
# The first run downloads the tools' modules (about 200 MB) through the Go
# module proxy and compiles them: about 5 minutes on two cores with empty
# module and build caches, 3 of them compiling. A run with nothing changed
# (same go.mod, go.sum and Go version, binaries present) does no network
# I/O, builds nothing and takes about a second. Runs as root on Debian
# bookworm.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
GO=${GO:-go}
CACHE="$ROOT/.cache"
BIN="$CACHE/clients/bin"
STAMP="$CACHE/clients/STAMP"
ENV_FILE="$CACHE/clients-env.sh"
PYTHON=/usr/bin/python3
export GOWORK=off

log() { printf 'test-clients: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then
	SUDO=sudo
else
	SUDO=
fi

mkdir -p "$BIN"
# One run at a time per checkout.
if command -v flock >/dev/null 2>&1; then
	exec 9>"$CACHE/.test-clients.lock"
	flock 9
fi

# ------------------------------------------------------------ Go clients

# Package path -> binary name (go build names each after its last element).
GO_TOOLS=(
	github.com/fullstorydev/grpcurl/cmd/grpcurl
	github.com/grpc-ecosystem/grpc-health-probe
	github.com/envoyproxy/ratelimit/src/client_cmd
)

stamp() {
	{
		"$GO" version
		sha256sum "$ROOT/tools/clients/go.mod" "$ROOT/tools/clients/go.sum" | awk '{print $1}'
	} | tr '\n' ' '
}

go_tools_ok() {
	local p
	[ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$(stamp)" ] || return 1
	for p in "${GO_TOOLS[@]}"; do
		[ -x "$BIN/${p##*/}" ] || return 1
	done
}

if ! go_tools_ok; then
	log "building ${GO_TOOLS[*]##*/} (pinned in tools/clients/go.mod) into $BIN"
	start=$(date +%s)
	rm -f "$STAMP"
	# Static binaries, no cgo: they need neither gcc nor the machine's libc.
	CGO_ENABLED=0 "$GO" -C "$ROOT/tools/clients" build -trimpath -o "$BIN/" "${GO_TOOLS[@]}"
	stamp >"$STAMP"
	log "built in $(($(date +%s) - start))s"
fi

# ------------------------------------------------- Debian: python3, curl

python_ok() {
	[ -x "$PYTHON" ] && "$PYTHON" -c 'import grpc, google.protobuf' >/dev/null 2>&1
}

apt_install() {
	local apt=($SUDO env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300)
	log "installing $* with apt-get"
	if ! apt-cache show "$@" >/dev/null 2>&1 ||
		! "${apt[@]}" install -y --no-install-recommends "$@" >"$CACHE/clients/apt.log" 2>&1; then
		"${apt[@]}" update >"$CACHE/clients/apt.log" 2>&1 || { cat "$CACHE/clients/apt.log" >&2; die "apt-get update failed"; }
		"${apt[@]}" install -y --no-install-recommends "$@" >>"$CACHE/clients/apt.log" 2>&1 ||
			{ cat "$CACHE/clients/apt.log" >&2; die "apt-get install $* failed"; }
	fi
}

want=()
python_ok || want+=(python3 python3-grpcio python3-protobuf)
command -v curl >/dev/null 2>&1 || want+=(curl)
if [ "${#want[@]}" -gt 0 ]; then
	apt_install "${want[@]}"
fi
python_ok || die "$PYTHON cannot import grpc and google.protobuf after installing python3-grpcio and python3-protobuf"
CURL=$(command -v curl) || die "curl still not on PATH after installing it"

# ---------------------------------------------------------------- env file

new_env=$(
	cat <<ENV
# Written by scripts/test-clients.sh; sourced by the Makefile before go test.
export COORDHOST_GRPCURL='$BIN/grpcurl'
export COORDHOST_GRPC_HEALTH_PROBE='$BIN/grpc-health-probe'
export COORDHOST_RLS_CLIENT='$BIN/client_cmd'
export COORDHOST_PYTHON3='$PYTHON'
export COORDHOST_CURL='$CURL'
ENV
)
if [ ! -f "$ENV_FILE" ] || [ "$(cat "$ENV_FILE")" != "$new_env" ]; then
	printf '%s\n' "$new_env" >"$ENV_FILE.tmp.$$"
	mv "$ENV_FILE.tmp.$$" "$ENV_FILE"
fi
pyver=$("$PYTHON" -c 'import grpc, google.protobuf as p; print("grpcio", grpc.__version__, "protobuf", p.__version__)')
modver() { "$GO" version -m "$BIN/$1" | awk '$1 == "mod" { print $3 }'; }
log "grpcurl $(modver grpcurl), grpc-health-probe $(modver grpc-health-probe), client_cmd (envoyproxy/ratelimit $(modver client_cmd)), $pyver, curl $("$CURL" --version | awk 'NR==1{print $2}') -> $ENV_FILE"
