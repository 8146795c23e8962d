# coordhost — see README.md. Every target works on a fresh Debian bookworm
# machine with Go, gcc and apt; `make test` installs the Redis servers and the
# end-to-end tests' clients first.

GO          ?= go
BIN         := bin/coordhost
REDIS_ENV   := .cache/redis-env.sh
CLIENTS_ENV := .cache/clients-env.sh

.PHONY: all build test test-short redis clients run bench lint depcheck clean wasm proto plugin-example

all: build

build:
	$(GO) build -o $(BIN) ./cmd/coordhost

# redis makes sure Redis 7.0 (Debian bookworm), Redis 8.0 and Valkey 8.1
# (Debian trixie, unpacked into .cache/redis-8 and .cache/valkey-8) and Redis
# 8.6 (Debian experimental, .cache/redis-86) exist, and writes their paths to
# $(REDIS_ENV).
redis:
	bash scripts/redis-servers.sh

# clients makes sure the third-party clients the end-to-end tests
# (internal/e2e) drive the daemon with exist: grpcurl, grpc-health-probe and
# envoyproxy/ratelimit's client_cmd (pinned in tools/clients/go.mod, built
# into .cache/clients/bin), Debian's curl and python3-grpcio; it writes
# their paths to $(CLIENTS_ENV).
clients:
	bash scripts/test-clients.sh

test: redis clients lint depcheck
	. ./$(REDIS_ENV) && . ./$(CLIENTS_ENV) && $(GO) test -race -count=1 -timeout 20m ./...

test-short: redis
	. ./$(REDIS_ENV) && $(GO) test -count=1 -short ./...

# run installs the Redis servers like test does (the demo's dev mode runs the
# Redis 8 named in $(REDIS_ENV), not whatever PATH holds), then the demo.
run: redis build plugin-example
	bash scripts/demo.sh $(BIN)

bench: redis
	. ./$(REDIS_ENV) && cd bench && $(GO) run ./cmd/lockbench -out RESULTS.md

lint:
	@out="$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))"; \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd bench && $(GO) vet ./...

depcheck:
	$(GO) run ./internal/depcheck

# wasm rebuilds the example WASM policies reproducibly (the built .wasm files
# are committed); proto regenerates the plugin protocol stubs and the
# coordhost.v1 network API (proto/ -> gen/, with buf and the generators pinned
# in tools/), all committed.
wasm:
	bash scripts/build-wasm.sh

proto:
	bash scripts/gen-proto.sh
	bash scripts/gen-api.sh

plugin-example:
	$(GO) build -trimpath -o bin/coordhost-example-plugin ./plugins/examples/plugin

clean:
	rm -rf bin
