#!/usr/bin/env bash
# gen-api.sh regenerates the Go code of the coordhost.v1 network API:
#
#   proto/coordhost/v1/*.proto
#     -> gen/coordhost/v1/*.pb.go                      (package coordhostv1)
#        gen/coordhost/v1/coordhostv1connect/*.go      (connect-go stubs)
#
# The generated files are committed; run this (make proto) after editing a
# .proto. Usage: gen-api.sh [OUTDIR]: writes OUTDIR/gen (default: the
# repository root); the drift test (scripts/genapi_test.go) passes a temporary
# directory and compares.
#
# Tools: buf (compiles the protos itself: no protoc), protoc-gen-go and
# protoc-gen-connect-go, at the versions pinned in tools/go.mod and
# tools/protocgen/go.mod, built with `go build` into .cache/gen-api/bin. The
# first run downloads their modules through the Go module proxy and compiles
# buf (a few minutes on two cores); later runs link from the module and build
# caches and need no network. buf itself needs none: the protos import only
# the well-known types, which buf carries, and buf.yaml has no remote deps.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
GO=${GO:-go}
OUT=${1:-$ROOT}
BIN=$ROOT/.cache/gen-api/bin
export GOWORK=off

log() { printf 'gen-api: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# protoc-gen-go must be the version of google.golang.org/protobuf that the
# main module builds the generated code with (its code checks the runtime
# version). It lives in its own module, tools/protocgen, because buf
# (tools/go.mod) needs a newer protobuf than the main module's.
modver() { "$GO" -C "$1" list -m -f '{{.Version}}' "$2"; }
for mod in google.golang.org/protobuf connectrpc.com/connect; do
	want=$(modver "$ROOT" "$mod")
	got=$(modver "$ROOT/tools/protocgen" "$mod")
	[ "$want" = "$got" ] || die "$mod is $want in go.mod but $got in tools/protocgen/go.mod: pin the generator to the runtime"
done

mkdir -p "$BIN"
"$GO" -C "$ROOT/tools" build -o "$BIN/" github.com/bufbuild/buf/cmd/buf
"$GO" -C "$ROOT/tools/protocgen" build -o "$BIN/" \
	google.golang.org/protobuf/cmd/protoc-gen-go \
	connectrpc.com/connect/cmd/protoc-gen-connect-go

cd "$ROOT"
export PATH="$BIN:$PATH"
buf format --diff --exit-code proto || die "proto/ is not buf-formatted: run $BIN/buf format -w proto"
buf lint
mkdir -p "$OUT"
buf generate --output "$OUT"
log "wrote $OUT/gen/coordhost/v1 (buf $(buf --version))"
