#!/usr/bin/env bash
# build-wasm.sh rebuilds every committed .wasm file from its source, twice,
# checks that both builds are byte-identical (sha256), and installs them
# next to their sources:
#
#   plugins/examples/wasm/gobackoff/gobackoff.wasm   (Go, wasip1 reactor)
#   plugins/examples/wasm/gotenant/gotenant.wasm     (Go, wasip1 reactor)
#   plugins/examples/wasm/gostarve/gostarve.wasm     (Go, wasip1 reactor)
#   plugins/examples/wasm/wat/*.wasm                 (wat2wasm)
#   policies/wasm/testdata/*.wasm                    (wat2wasm)
#   host/testdata/*.wasm                             (wat2wasm)
#
# Usage: scripts/build-wasm.sh [--verify]
#   --verify  build and compare with the committed files instead of
#             installing; exits 1 if any differs.
#
# The Go builds are reproducible for a given Go toolchain: CGO off, fixed
# GOFLAGS, -trimpath, an empty build ID, no VCS stamping. wat2wasm comes from
# Debian's wabt package, installed with apt-get when missing.
set -euo pipefail

cd "$(dirname "$0")/.."
root=$(pwd)

verify=false
case "${1:-}" in
--verify) verify=true ;;
"") ;;
*) echo "usage: $0 [--verify]" >&2; exit 2 ;;
esac

go=${GO:-go}

if ! command -v wat2wasm >/dev/null 2>&1; then
	echo "build-wasm: wat2wasm missing; installing Debian's wabt package" >&2
	sudo=""
	if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
	$sudo apt-get install -y wabt >/dev/null 2>&1 ||
		{ $sudo apt-get update >/dev/null && $sudo apt-get install -y wabt >/dev/null; }
fi

go_modules=(gobackoff gotenant gostarve)
wat_files=(plugins/examples/wasm/wat/*.wat policies/wasm/testdata/*.wat host/testdata/*.wat)

# build DIR [GOCACHE]: writes every output under DIR, at its repository
# path; with GOCACHE, the Go builds start from that (empty) build cache.
build() {
	local out=$1 cache=${2:-$($go env GOCACHE)} m f
	for m in "${go_modules[@]}"; do
		mkdir -p "$out/plugins/examples/wasm/$m"
		env \
			CGO_ENABLED=0 GOOS=wasip1 GOARCH=wasm GOWASM= \
			GOFLAGS="-mod=readonly -buildvcs=false" GOTOOLCHAIN=local GOCACHE="$cache" \
			"$go" build -buildmode=c-shared -trimpath -ldflags=-buildid= \
			-o "$out/plugins/examples/wasm/$m/$m.wasm" "./plugins/examples/wasm/$m"
	done
	for f in "${wat_files[@]}"; do
		mkdir -p "$out/$(dirname "$f")"
		wat2wasm --debug-names "$f" -o "$out/${f%.wat}.wasm"
	done
}

tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
# The second build starts from an empty Go build cache, so it really
# compiles everything again.
build "$tmp/a"
build "$tmp/b" "$tmp/gocache"

(cd "$tmp/a" && find . -name '*.wasm' -type f | sort | xargs sha256sum) >"$tmp/a.sum"
(cd "$tmp/b" && find . -name '*.wasm' -type f | sort | xargs sha256sum) >"$tmp/b.sum"
if ! cmp -s "$tmp/a.sum" "$tmp/b.sum"; then
	echo "build-wasm: two builds differ:" >&2
	diff "$tmp/a.sum" "$tmp/b.sum" >&2 || true
	exit 1
fi
n=$(wc -l <"$tmp/a.sum")
echo "build-wasm: $n modules, two builds (the second from an empty Go build cache) byte-identical ($($go version | cut -d' ' -f3), $(wat2wasm --version))"

if $verify; then
	if (cd "$root" && sha256sum --quiet -c "$tmp/a.sum"); then
		echo "build-wasm: committed .wasm files match their sources"
		exit 0
	fi
	echo "build-wasm: committed .wasm files are stale; run scripts/build-wasm.sh" >&2
	exit 1
fi

(cd "$tmp/a" && find . -name '*.wasm' -type f -exec cp --parents {} "$root" \;)
sed 's|  \./|  |' "$tmp/a.sum"
