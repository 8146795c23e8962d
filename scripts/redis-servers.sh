#!/usr/bin/env bash
# redis-servers.sh makes sure the Redis and Valkey servers the tests need
# exist, and writes their absolute paths to .cache/redis-env.sh:
#
#   Redis 7.0   Debian bookworm's redis-server, installed with apt-get (the
#               system service is never left running because of us).
#   Redis 8.0   Debian trixie's redis-server, in .cache/redis-8.
#   Valkey 8.1  Debian trixie's valkey-server, in .cache/valkey-8.
#   Redis 8.6   Debian experimental's redis-server, with trixie's loader and
#               libraries, in .cache/redis-86.
#
# All but Redis 7.0 are downloaded with a private apt configuration (its own
# sources list, lists and cache under .cache/apt-debian, Release signatures
# verified with the machine's debian-archive-keyring), unpacked with dpkg -x
# together with trixie's loader and the libraries they need, and run by a
# wrapper that execs that loader with --library-path. Nothing
# from trixie or experimental is installed system-wide.
#
# Idempotent; a second run does no network I/O and takes well under 2 s.
# Runs as root on Debian bookworm (amd64 or arm64) with apt.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE="$ROOT/.cache"
R8="$CACHE/redis-8"
R86="$CACHE/redis-86"
VK8="$CACHE/valkey-8"
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

# ------------------------------------- Redis 8.0, Valkey 8.1, Redis 8.6

ARCH='' TRIPLET='' LOADER=''
arch_init() {
	[ -n "$ARCH" ] && return
	ARCH=$(dpkg --print-architecture)
	case "$ARCH" in
	amd64) TRIPLET=x86_64-linux-gnu LOADER=ld-linux-x86-64.so.2 ;;
	arm64) TRIPLET=aarch64-linux-gnu LOADER=ld-linux-aarch64.so.1 ;;
	*) die "unsupported architecture $ARCH (amd64 and arm64 are supported)" ;;
	esac
}

# server_ok DIR PATTERN TOOLS: DIR/bin holds a wrapper for every tool in
# TOOLS (the server first) and the server's --version matches PATTERN (ERE).
server_ok() {
	local dir=$1 pattern=$2 tool
	for tool in $3; do
		[ -x "$dir/bin/$tool" ] || return 1
	done
	"$dir/bin/${3%% *}" --version 2>/dev/null | grep -qE "$pattern"
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

# The private apt state: one sources list with trixie and experimental, and
# its own lists and cache. Packages are always named with their suite
# (redis-tools/experimental, libc6/trixie), so which suite supplies what
# never depends on apt's priorities.
APTD="$CACHE/apt-debian"
APT_OPTS=(
	-o "Dir::Etc::SourceList=$APTD/sources.list"
	-o Dir::Etc::SourceParts=/dev/null
	-o Dir::Etc::Preferences=/dev/null
	-o Dir::Etc::PreferencesParts=/dev/null
	-o "Dir::State::Lists=$APTD/lists"
	-o "Dir::Cache=$APTD/cache"
	-o APT::Sandbox::User=root
	-o Acquire::Languages=none
	-o APT::Get::List-Cleanup=false
	-o Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false
)
APT_READY=0

apt_update_verified() {
	apt-get "${APT_OPTS[@]}" update >"$APTD/update.log" 2>&1 &&
		! grep -qE '^(W|E): .*(NO_PUBKEY|not signed|EXPKEYSIG|BADSIG|GPG error)' "$APTD/update.log"
}

# apt_prepare fetches the indexes of trixie and experimental once per run and
# makes sure their Release signatures verify with the archive keyring.
apt_prepare() {
	[ "$APT_READY" = 1 ] && return
	local mirror keyring=/usr/share/keyrings/debian-archive-keyring.gpg
	mirror=$(debian_mirror)
	mkdir -p "$APTD/lists/partial" "$APTD/cache/archives/partial"
	printf 'deb [signed-by=%s] %s %s main\n' \
		"$keyring" "$mirror" trixie "$keyring" "$mirror" experimental >"$APTD/sources.list"
	log "fetching the package indexes of Debian trixie and experimental from $mirror"
	# Does the machine's archive keyring verify them? bookworm's
	# debian-archive-keyring 2023.3+deb12u2 carries the keys that sign
	# trixie and experimental; older ones do not, so upgrade it from
	# bookworm itself (a verified path).
	if ! apt_update_verified; then
		log "the archive keyring does not verify trixie/experimental; upgrading debian-archive-keyring from bookworm"
		$SUDO env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 update >/dev/null 2>&1 || true
		$SUDO env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 \
			install -y --no-install-recommends --only-upgrade debian-archive-keyring >/dev/null 2>&1 || true
		if ! apt_update_verified; then
			# Never fall back to unverified packages: they run as root
			# in make test and make run, and the mirror may be plain HTTP.
			sed -n '1,20p' "$APTD/update.log" >&2
			die "cannot fetch or verify the Release files of Debian trixie and experimental with $keyring (log above: $APTD/update.log); install a debian-archive-keyring that carries their keys (bookworm's 2023.3+deb12u2 or newer) and run again"
		fi
	fi
	APT_READY=1
}

# Maintainer-script helpers: packages Depend on them, but a server run from a
# private root by our wrapper does without.
NOT_NEEDED=" adduser init-system-helpers lsb-base "
# One dependency: name, optional :arch, optional (op version).
DEP_RE='^[[:space:]]*([a-z0-9.+-]+)(:[a-z0-9]+)?[[:space:]]*(\(([<>=]+)[[:space:]]*([^[:space:])]+)[[:space:]]*\))?[[:space:]]*$'

# check_depends DEBS ORIGIN PACKAGE...: every Depends and Pre-Depends of each
# PACKAGE (a server or tools package) is satisfied by a downloaded package at
# a version that satisfies it, or is in NOT_NEEDED. Libraries' own
# dependencies are checked by check_libs, on what the loader really loads.
check_depends() {
	local debs=$1 origin=$2 deb p field item alt name op ver ok
	shift 2
	local -A have=()
	for deb in "$debs"/*.deb; do
		have[$(dpkg-deb -f "$deb" Package)]=$(dpkg-deb -f "$deb" Version)
	done
	for p in "$@"; do
		deb=$(find "$debs" -maxdepth 1 -name "${p}_*.deb" | head -n1)
		[ -n "$deb" ] || die "$origin: apt-get download left no $p package"
		for field in Pre-Depends Depends; do
			local items=()
			IFS=',' read -ra items <<<"$(dpkg-deb -f "$deb" "$field")"
			for item in "${items[@]}"; do
				[ -n "${item// /}" ] || continue
				ok=0
				local alts=()
				IFS='|' read -ra alts <<<"$item"
				for alt in "${alts[@]}"; do
					[[ $alt =~ $DEP_RE ]] ||
						die "$p: cannot parse $field item '$alt'"
					name=${BASH_REMATCH[1]} op=${BASH_REMATCH[4]} ver=${BASH_REMATCH[5]}
					if [[ $NOT_NEEDED == *" $name "* ]]; then
						ok=1
					elif [ -n "${have[$name]:-}" ] && { [ -z "$op" ] ||
						dpkg --compare-versions "${have[$name]}" "$op" "$ver"; }; then
						ok=1
					fi
					[ "$ok" = 1 ] && break
				done
				[ "$ok" = 1 ] || die "$p ${have[$p]} ($origin) has $field: ${item# }, which the downloaded packages do not satisfy (${name}: ${have[$name]:-not downloaded}); add the right package to scripts/redis-servers.sh"
			done
		done
	done
}

# check_libs ROOT ORIGIN TOOL: the private loader resolves every shared
# library TOOL needs inside ROOT (none from the machine's own /lib, which
# ld.so.cache would otherwise supply silently).
check_libs() {
	local root=$1 origin=$2 tool=$3 lib="$1/usr/lib/$TRIPLET" out bad
	out=$("$lib/$LOADER" --list --library-path "$lib" "$root/usr/bin/$tool" 2>&1) || true
	grep -q '=>' <<<"$out" || die "$tool ($origin) does not load with its own loader: $out"
	bad=$(awk -v r="$root/" '$2 == "=>" && ($3 == "not" || index($3, r) != 1) { print "  " $1 " => " $3 " " $4 }' <<<"$out")
	[ -z "$bad" ] || die "$tool ($origin) needs shared libraries that its downloaded packages lack; add the Debian packages that ship them to scripts/redis-servers.sh:
$bad"
}

# install_private DIR ORIGIN PATTERN TOOLS SUITE PACKAGES LIBSUITE LIBS
# downloads PACKAGES from SUITE and LIBS (with libc6, whose loader runs the
# tools) from LIBSUITE, unpacks them into DIR/root, writes DIR/bin/<tool>
# wrappers for TOOLS (the server first) and DIR/PACKAGES (name and version
# of every package), and checks that the server reports a version matching
# PATTERN. DIR is replaced only once everything checks out.
install_private() {
	local dir=$1 origin=$2 pattern=$3 tools=$4 suite=$5 main=$6 libsuite=$7 libs=$8
	local name=${dir##*/} server=${tools%% *} p
	arch_init
	apt_prepare
	local debs="$APTD/debs-$name" tmp="$dir.tmp.$$" pkgs=()
	for p in $main; do pkgs+=("$p/$suite"); done
	for p in $libs; do pkgs+=("$p/$libsuite"); done
	log "fetching $server from $origin into $dir"
	rm -rf "$debs"
	mkdir -p "$debs"
	(cd "$debs" && apt-get "${APT_OPTS[@]}" download "${pkgs[@]}") >"$APTD/download-$name.log" 2>&1 ||
		{ cat "$APTD/download-$name.log" >&2; die "apt-get download from $origin failed for: ${pkgs[*]}"; }
	# shellcheck disable=SC2086
	check_depends "$debs" "$origin" $main

	local deb tool lib
	rm -rf "$dir".tmp.*      # left by an earlier run that was killed
	trap "rm -rf '$tmp'" EXIT # and this one's, if a check below fails
	mkdir -p "$tmp/root" "$tmp/bin"
	for deb in "$debs"/*.deb; do
		dpkg -x "$deb" "$tmp/root"
		printf '%s %s\n' "$(dpkg-deb -f "$deb" Package)" "$(dpkg-deb -f "$deb" Version)"
	done | sort >"$tmp/PACKAGES"
	lib="$tmp/root/usr/lib/$TRIPLET"
	[ -e "$lib/$LOADER" ] || die "the packages for $server have no usr/lib/$TRIPLET/$LOADER"
	for tool in $tools; do
		[ -e "$tmp/root/usr/bin/$tool" ] || die "$origin's packages ($main) have no usr/bin/$tool"
		check_libs "$tmp/root" "$origin" "$tool"
		cat >"$tmp/bin/$tool" <<WRAPPER
#!/bin/sh
# $tool from $origin, run with Debian $libsuite's own loader and libraries
# (written by scripts/redis-servers.sh; see the comments at the top of scripts/redis-servers.sh).
D="\$(cd "\$(dirname "\$0")/.." && pwd)/root"
exec "\$D/usr/lib/$TRIPLET/$LOADER" --library-path "\$D/usr/lib/$TRIPLET" "\$D/usr/bin/$tool" "\$@"
WRAPPER
		chmod 755 "$tmp/bin/$tool"
	done
	local got
	got=$("$tmp/bin/$server" --version 2>&1) || die "$server from $origin does not run: $got"
	grep -qE "$pattern" <<<"$got" ||
		die "$server from $origin reports '$got', which does not match '$pattern'; $origin has moved on: update scripts/redis-servers.sh (and internal/redistest)"
	rm -rf "$dir"
	mv "$tmp" "$dir"
	trap - EXIT
	server_ok "$dir" "$pattern" "$tools" || die "$dir/bin/$server does not work after moving it into place"
	rm -rf "$debs"
	log "$dir: $(tr '\n' ' ' <"$dir/PACKAGES")"
}

# The libraries each server loads (check_libs verifies the list on every
# install). Redis 8.0's list is the design notes' list plus zlib1g:
# trixie's libcrypto needs libz.so.1, which would otherwise come from
# bookworm's /lib via ld.so.cache. Its libgcrypt20, liblzma5, liblz4-1 and
# libgpg-error0 are only dlopen()ed by libsystemd for journal files, which
# the servers never touch, so the newer kinds do without them.
LIBS_R8="libc6 libstdc++6 libgcc-s1 libssl3t64 libjemalloc2 liblzf1 libsystemd0
	libatomic1 libcap2 libgcrypt20 liblzma5 libzstd1 liblz4-1 libgpg-error0 zlib1g"
LIBS="libc6 libstdc++6 libgcc-s1 libssl3t64 libjemalloc2 liblzf1 libsystemd0
	libatomic1 libcap2 libzstd1 zlib1g"

R8_PATTERN='^Redis server v=8\.0\.'
R8_TOOLS="redis-server redis-cli redis-benchmark"
VK8_PATTERN='^Valkey server v=8\.1\.'
VK8_TOOLS="valkey-server valkey-cli valkey-benchmark"
R86_PATTERN='^Redis server v=8\.6\.'
R86_TOOLS="redis-server redis-cli redis-benchmark"

if ! server_ok "$R8" "$R8_PATTERN" "$R8_TOOLS"; then
	install_private "$R8" "Debian trixie" "$R8_PATTERN" "$R8_TOOLS" \
		trixie "redis-server redis-tools" trixie "$LIBS_R8"
fi
if ! server_ok "$VK8" "$VK8_PATTERN" "$VK8_TOOLS"; then
	install_private "$VK8" "Debian trixie" "$VK8_PATTERN" "$VK8_TOOLS" \
		trixie "valkey-server valkey-tools" trixie "$LIBS"
fi
# experimental's redis is built in sid, but its Depends (libc6 >= 2.38,
# libstdc++6 >= 13.1, libssl3t64 >= 3.0.0, ...) are met by trixie, which
# does not move under us as sid does; check_depends re-checks them on
# every install.
if ! server_ok "$R86" "$R86_PATTERN" "$R86_TOOLS"; then
	install_private "$R86" "Debian experimental" "$R86_PATTERN" "$R86_TOOLS" \
		experimental "redis-server redis-tools" trixie "$LIBS"
fi
if [ "$APT_READY" = 1 ]; then
	rm -rf "$APTD/lists" "$APTD/cache"
fi
rm -rf "$CACHE/apt-trixie" # this script's apt state before Valkey and 8.6
REDIS8_SERVER="$R8/bin/redis-server"
VALKEY8_SERVER="$VK8/bin/valkey-server"
REDIS86_SERVER="$R86/bin/redis-server"

# ---------------------------------------------------------------- env file

new_env=$(
	cat <<EOF
# Written by scripts/redis-servers.sh; sourced by the Makefile before go test.
export COORDHOST_REDIS7_SERVER='$REDIS7_SERVER'
export COORDHOST_REDIS8_SERVER='$REDIS8_SERVER'
export COORDHOST_REDIS86_SERVER='$REDIS86_SERVER'
export COORDHOST_VALKEY8_SERVER='$VALKEY8_SERVER'
export COORDHOST_REDIS_CLI='$REDIS_CLI'
EOF
)
if [ ! -f "$ENV_FILE" ] || [ "$(cat "$ENV_FILE")" != "$new_env" ]; then
	printf '%s\n' "$new_env" >"$ENV_FILE.tmp.$$"
	mv "$ENV_FILE.tmp.$$" "$ENV_FILE"
fi
v() { "$1" --version | awk '{print $3}'; }
log "Redis 7: $(v "$REDIS7_SERVER"), Redis 8: $(v "$REDIS8_SERVER"), Redis 8.6: $(v "$REDIS86_SERVER"), Valkey 8: $(v "$VALKEY8_SERVER") -> $ENV_FILE"
