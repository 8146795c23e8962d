#!/usr/bin/env bash
# gen-proto.sh regenerates the Go code of the plugin wire protocol:
#
#   plugins/sdk/proto/coordhost/policy/v1/policy.proto
#     -> plugins/sdk/proto/policyv1/policy.pb.go, policy_grpc.pb.go
#
# The generated files are committed; run this after editing the .proto.
# Tools: protoc from Debian's protobuf-compiler (installed with apt-get when
# missing), protoc-gen-go and protoc-gen-go-grpc at pinned versions installed
# with `go install` into .cache/bin (repo-local; nothing in GOPATH/bin).
# Idempotent; a second run does no network I/O.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN="$ROOT/.cache/bin"
GO=${GO:-go}

# protoc-gen-go must match google.golang.org/protobuf in go.mod; v1.5.1 of
# protoc-gen-go-grpc emits code for grpc >= 1.64 (go.mod has v1.85.0).
PROTOC_GEN_GO_VERSION=v1.36.12
PROTOC_GEN_GO_GRPC_VERSION=v1.5.1

log() { printf 'gen-proto: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

if ! command -v protoc >/dev/null 2>&1; then
	if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then
		SUDO=sudo
	else
		SUDO=
	fi
	command -v apt-get >/dev/null 2>&1 || die "protoc is missing and apt-get is not available; install protoc (protobuf-compiler) yourself"
	log "installing protobuf-compiler with apt-get"
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq protobuf-compiler >/dev/null
fi

# install_tool BINARY MODULE_PATH VERSION: go install into $BIN unless the
# binary there already reports VERSION (go version -m reads the build info).
install_tool() {
	local bin=$1 pkg=$2 version=$3
	if [ -x "$BIN/$bin" ] && "$GO" version -m "$BIN/$bin" 2>/dev/null | grep -q "[[:space:]]mod[[:space:]].*[[:space:]]$version[[:space:]]"; then
		return
	fi
	log "installing $pkg@$version into $BIN"
	GOBIN="$BIN" GOFLAGS= "$GO" install "$pkg@$version"
}

mkdir -p "$BIN"
install_tool protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go "$PROTOC_GEN_GO_VERSION"
install_tool protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc "$PROTOC_GEN_GO_GRPC_VERSION"

cd "$ROOT"
log "$(protoc --version)"
PATH="$BIN:$PATH" protoc \
	-I plugins/sdk/proto \
	--go_out=. --go_opt=module=github.com/coordhost/coordhost \
	--go-grpc_out=. --go-grpc_opt=module=github.com/coordhost/coordhost \
	plugins/sdk/proto/coordhost/policy/v1/policy.proto
log "wrote plugins/sdk/proto/policyv1/policy.pb.go and policy_grpc.pb.go"
