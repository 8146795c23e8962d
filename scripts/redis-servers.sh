#!/usr/bin/env bash
# redis-servers.sh makes sure the Redis servers the tests need exist, and
# writes their absolute paths to .cache/redis-env.sh:
#
#   Redis 7.0  Debian bookworm's redis-server, installed with apt-get (the
#              system service is never left running because of us).
#   Redis 8.0  Debian trixie's redis-server, downloaded with a private apt
#              configuration and unpacked into .cache/redis-8 together with
#              trixie's loader and libraries (DESIGN.md §8). Nothing from
#              trixie is installed system-wide.
#
# Idempotent; a second run does no network I/O and takes well under 2 s.
# Runs as root on Debian bookworm (amd64 or arm64) with apt.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE="$ROOT/.cache"
R8="$CACHE/redis-8"
ENV_FILE="$CACHE/redis-env.sh"

log() { printf 'redis-servers: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then
	SUDO=sudo
else
	SUDO=
fi

mkdir -p "$CACHE"
# One run at a time per checkout (e.g. two `make test` started together).
if command -v flock >/dev/null 2>&1; then
	exec 9>"$CACHE/.redis-servers.lock"
	flock 9
fi

# ---------------------------------------------------------------- Redis 7.0

port_6379_busy() {
	if command -v ss >/dev/null 2>&1; then
		ss -Hltn 'sport = :6379' 2>/dev/null | grep -q .
	else
		(exec 3<>/dev/tcp/127.0.0.1/6379) 2>/dev/null
	fi
}

install_redis7() {
	log "installing Redis 7 (redis-server, redis-tools) from the system's apt sources"
	local was_busy=0 policy=/usr/sbin/policy-rc.d created_policy=0
	port_6379_busy && was_busy=1
	# Keep invoke-rc.d / deb-systemd-invoke from starting the service.
	if [ ! -e "$policy" ]; then
		printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
		$SUDO chmod 755 "$policy"
		created_policy=1
	fi
	# shellcheck disable=SC2064
	trap "[ $created_policy = 1 ] && $SUDO rm -f $policy" EXIT
	local apt=($SUDO env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300)
	local pkgs=(redis-server redis-tools)
	if ! apt-cache show "${pkgs[@]}" >/dev/null 2>&1 ||
		! "${apt[@]}" install -y --no-install-recommends "${pkgs[@]}"; then
		"${apt[@]}" update
		"${apt[@]}" install -y --no-install-recommends "${pkgs[@]}"
	fi
	if [ "$created_policy" = 1 ]; then
		$SUDO rm -f "$policy"
	fi
	trap - EXIT
	# Belt and braces: if the service got started (or enabled) anyway, stop
	# and disable it; with or without systemd.
	if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
		$SUDO systemctl disable --now redis-server >/dev/null 2>&1 || true
	fi
	if [ "$was_busy" = 0 ] && port_6379_busy; then
		$SUDO service redis-server stop >/dev/null 2>&1 || true
		if [ -x /etc/init.d/redis-server ]; then
			$SUDO /etc/init.d/redis-server stop >/dev/null 2>&1 || true
		fi
		for _ in $(seq 50); do port_6379_busy || break; sleep 0.1; done
		port_6379_busy && die "a redis-server started by the install still listens on 6379"
	fi
	if command -v update-rc.d >/dev/null 2>&1; then
		$SUDO update-rc.d redis-server disable >/dev/null 2>&1 || true
	fi
	command -v redis-server >/dev/null 2>&1 || die "redis-server still not on PATH after install"
}

if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
	install_redis7
fi
REDIS7_SERVER=$(command -v redis-server)
REDIS_CLI=$(command -v redis-cli)
case "$("$REDIS7_SERVER" --version)" in
*" v=7."*) ;;
*) log "warning: $REDIS7_SERVER is not Redis 7: $("$REDIS7_SERVER" --version)" ;;
esac

# ---------------------------------------------------------------- Redis 8.0

redis8_ok() {
	[ -x "$R8/bin/redis-server" ] && [ -x "$R8/bin/redis-cli" ] &&
		"$R8/bin/redis-server" --version 2>/dev/null | grep -q ' v=8\.'
}

# The Debian mirror already used by this machine's own apt sources
# (deb822 .sources files or one-line .list files); default deb.debian.org.
debian_mirror() {
	local f m
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -f "$f" ] || continue
		m=$(awk 'tolower($1)=="uris:" { for (i=2;i<=NF;i++) print $i }' "$f" |
			grep -E '^https?://[^ ]*/debian/?$' | head -n1 || true)
		[ -n "$m" ] && { echo "${m%/}"; return; }
	done
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[ -f "$f" ] || continue
		m=$(grep -E '^[[:space:]]*deb[[:space:]]' "$f" | sed -E 's/\[[^]]*\]//' |
			awk '{print $2}' | grep -E '^https?://[^ ]*/debian/?$' | head -n1 || true)
		[ -n "$m" ] && { echo "${m%/}"; return; }
	done
	echo "http://deb.debian.org/debian"
}

install_redis8() {
	local arch triplet loader
	arch=$(dpkg --print-architecture)
	case "$arch" in
	amd64) triplet=x86_64-linux-gnu loader=ld-linux-x86-64.so.2 ;;
	arm64) triplet=aarch64-linux-gnu loader=ld-linux-aarch64.so.1 ;;
	*) die "unsupported architecture $arch" ;;
	esac
	local mirror apt8="$CACHE/apt-trixie" debs="$CACHE/redis-8-debs"
	mirror=$(debian_mirror)
	log "fetching Redis 8 from Debian trixie ($mirror) into $R8"
	mkdir -p "$apt8/lists/partial" "$apt8/cache/archives/partial" "$debs"
	local keyring=/usr/share/keyrings/debian-archive-keyring.gpg
	local aptopts=(
		-o "Dir::Etc::SourceList=$apt8/sources.list"
		-o Dir::Etc::SourceParts=/dev/null
		-o Dir::Etc::Preferences=/dev/null
		-o Dir::Etc::PreferencesParts=/dev/null
		-o "Dir::State::Lists=$apt8/lists"
		-o "Dir::Cache=$apt8/cache"
		-o APT::Sandbox::User=root
		-o Acquire::Languages=none
		-o APT::Get::List-Cleanup=false
		-o Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false
	)
	local pkgs=(redis-server redis-tools libc6 libstdc++6 libgcc-s1 libssl3t64
		libjemalloc2 liblzf1 libsystemd0 libatomic1 libcap2 libgcrypt20 liblzma5
		libzstd1 liblz4-1 libgpg-error0 zlib1g)
	# zlib1g is not in DESIGN.md's list: trixie's libcrypto needs libz.so.1,
	# which would otherwise come from bookworm's /lib via ld.so.cache.

	write_sources() { echo "deb [$1] $mirror trixie main" >"$apt8/sources.list"; }
	update8() { apt-get "${aptopts[@]}" "$@" update >"$apt8/update.log" 2>&1; }
	# Does the machine's archive keyring verify trixie? bookworm's
	# debian-archive-keyring 2023.3+deb12u2 carries the trixie keys; older
	# ones do not, so upgrade it from bookworm itself (a verified path).
	write_sources "signed-by=$keyring"
	if ! update8 || grep -qE '^(W|E): .*(NO_PUBKEY|not signed|EXPKEYSIG|BADSIG)' "$apt8/update.log"; then
		log "the archive keyring does not verify trixie; upgrading debian-archive-keyring from bookworm"
		$SUDO env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 update >/dev/null 2>&1 || true
		$SUDO env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 \
			install -y --no-install-recommends --only-upgrade debian-archive-keyring >/dev/null 2>&1 || true
		if ! update8 || grep -qE '^(W|E): .*(NO_PUBKEY|not signed|EXPKEYSIG|BADSIG)' "$apt8/update.log"; then
			# Never fall back to unverified packages: they run as root
			# in make test and make run, and the mirror may be plain HTTP.
			sed -n '1,20p' "$apt8/update.log" >&2
			die "cannot verify Debian trixie's Release signature with $keyring; install a debian-archive-keyring that carries the trixie keys (bookworm's 2023.3+deb12u2 or newer) and run again"
		fi
	fi

	rm -f "$debs"/*.deb
	(cd "$debs" && apt-get "${aptopts[@]}" download "${pkgs[@]}") >"$apt8/download.log" 2>&1 ||
		{ cat "$apt8/download.log" >&2; die "apt-get download from trixie failed"; }

	local tmp="$R8.tmp.$$" deb
	rm -rf "$tmp"
	mkdir -p "$tmp/root" "$tmp/bin"
	for deb in "$debs"/*.deb; do
		dpkg -x "$deb" "$tmp/root"
	done
	[ -x "$tmp/root/usr/bin/redis-server" ] || die "trixie packages have no usr/bin/redis-server"
	[ -e "$tmp/root/usr/lib/$triplet/$loader" ] || die "trixie packages have no $loader"

	local tool
	for tool in redis-server redis-cli redis-benchmark; do
		[ -e "$tmp/root/usr/bin/$tool" ] || continue
		cat >"$tmp/bin/$tool" <<EOF
#!/bin/sh
# $tool from Debian trixie, run with trixie's own loader and libraries
# (written by scripts/redis-servers.sh; see DESIGN.md §8).
D="\$(cd "\$(dirname "\$0")/.." && pwd)/root"
exec "\$D/usr/lib/$triplet/$loader" --library-path "\$D/usr/lib/$triplet" "\$D/usr/bin/$tool" "\$@"
EOF
		chmod 755 "$tmp/bin/$tool"
	done
	rm -rf "$R8"
	mv "$tmp" "$R8"
	redis8_ok || die "$R8/bin/redis-server does not report v=8.: $("$R8/bin/redis-server" --version 2>&1 || true)"
	rm -rf "$debs" "$apt8/cache" "$apt8/lists"
}

if ! redis8_ok; then
	install_redis8
fi
REDIS8_SERVER="$R8/bin/redis-server"

# ---------------------------------------------------------------- env file

new_env=$(
	cat <<EOF
# Written by scripts/redis-servers.sh; sourced by the Makefile before go test.
export COORDHOST_REDIS7_SERVER='$REDIS7_SERVER'
export COORDHOST_REDIS8_SERVER='$REDIS8_SERVER'
export COORDHOST_REDIS_CLI='$REDIS_CLI'
EOF
)
if [ ! -f "$ENV_FILE" ] || [ "$(cat "$ENV_FILE")" != "$new_env" ]; then
	printf '%s\n' "$new_env" >"$ENV_FILE.tmp.$$"
	mv "$ENV_FILE.tmp.$$" "$ENV_FILE"
fi
log "Redis 7: $("$REDIS7_SERVER" --version | awk '{print $3}'), Redis 8: $("$REDIS8_SERVER" --version | awk '{print $3}') -> $ENV_FILE"
