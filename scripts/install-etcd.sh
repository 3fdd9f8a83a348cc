#!/usr/bin/env bash
# Installs the two etcd servers tidemark's integration tests and demo run against:
#   - etcd 3.4 from Debian's stable suite (packages etcd-server, etcd-client), system-wide;
#   - etcd 3.5 from Debian's newer suites, downloaded as a .deb and unpacked under a cache
#     dir with `dpkg-deb -x` (never installed over the system one).
# Also installs protobuf-compiler (etcd-client's build script runs protoc) and the openssl
# CLI (the TLS tests generate a throwaway CA), and kubectl (Debian's kubernetes-client) when
# none is on PATH, for the operator test.
#
# Idempotent. Uses only the Debian mirror already configured on this machine.
# Prints `export TIDEMARK_ETCD_34=...` and `export TIDEMARK_ETCD_35=...` on stdout as its last
# lines, so callers can `eval "$(scripts/install-etcd.sh | grep ^export)"`.
set -euo pipefail

log() { echo "install-etcd: $*" >&2; }

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

CACHE_ROOT="${TIDEMARK_CACHE:-${HOME:-/root}/.cache/tidemark}"
CACHE35="$CACHE_ROOT/etcd-3.5"
# Newer Debian suites that carry etcd 3.5, tried in order.
SUITES_35="${TIDEMARK_ETCD35_SUITES:-trixie bookworm-backports}"

apt_updated=0
apt_update_once() {
  if [ "$apt_updated" -eq 0 ]; then
    log "apt-get update"
    $SUDO apt-get update -qq >&2
    apt_updated=1
  fi
}

# --- system packages: etcd 3.4 (server + etcdctl) and protoc -----------------------------
need=()
command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
command -v etcdctl >/dev/null 2>&1 || need+=(etcd-client)
command -v protoc >/dev/null 2>&1 || need+=(protobuf-compiler)
# etcd-client's protos import google/protobuf/*.proto; Debian ships those in libprotobuf-dev
# (only a Recommends of protobuf-compiler, so a minimal image can have protoc without them).
[ -f /usr/include/google/protobuf/descriptor.proto ] || need+=(libprotobuf-dev)
# The binaries' allocator (tikv-jemalloc-sys) builds jemalloc from source with make and cc.
command -v make >/dev/null 2>&1 || need+=(make)
command -v cc >/dev/null 2>&1 || need+=(gcc)
# The TLS integration tests mint a throwaway CA with the openssl CLI.
command -v openssl >/dev/null 2>&1 || need+=(openssl)
# The operator test drives the conformance apiserver with a real kubectl; Debian's is
# kubernetes-client (1.20), enough for apply, get, patch, wait and delete.
command -v kubectl >/dev/null 2>&1 || need+=(kubernetes-client)
if [ "${#need[@]}" -gt 0 ]; then
  apt_update_once
  log "apt-get install ${need[*]}"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
fi
# The Debian package enables an etcd service listening on the default ports; tests bring
# their own servers, so keep it from occupying 2379/2380 (best effort, no systemd in CI).
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet etcd 2>/dev/null; then
  $SUDO systemctl stop etcd >/dev/null 2>&1 || true
fi

ETCD34="${TIDEMARK_ETCD_34:-$(command -v etcd)}"

# --- etcd 3.5 under the cache ------------------------------------------------------------
find_35() {
  local b
  for b in "$CACHE35"/root/usr/bin/etcd "$CACHE35"/root/usr/sbin/etcd; do
    if [ -x "$b" ]; then echo "$b"; return 0; fi
  done
  return 1
}

if ! ETCD35="$(find_35)"; then
  mkdir -p "$CACHE35"
  work="$CACHE35/apt"
  mkdir -p "$work/etc/apt/preferences.d" "$work/etc/apt/apt.conf.d" "$work/state/lists/partial" \
    "$work/cache/archives/partial" "$work/debs"
  # Reuse the machine's configured Debian mirror (no other host), with our own suite list.
  mirror="$(grep -hoE '^URIs:[[:space:]]*https?://[^[:space:]]*/debian/?$' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n1 | awk '{print $2}')"
  if [ -z "$mirror" ]; then
    mirror="$(grep -hoE '^deb[[:space:]]+(\[[^]]*\][[:space:]]+)?https?://[^[:space:]]*/debian/?[[:space:]]' /etc/apt/sources.list 2>/dev/null | head -n1 | awk '{print $NF}')"
  fi
  if [ -z "$mirror" ]; then
    log "no Debian mirror found in /etc/apt sources; cannot fetch etcd 3.5"
    exit 1
  fi
  keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  : >"$work/sources.list"
  for s in $SUITES_35; do
    echo "deb [signed-by=$keyring] $mirror $s main" >>"$work/sources.list"
  done
  opts=(
    -o "Dir::Etc::sourcelist=$work/sources.list"
    -o "Dir::Etc::sourceparts=-"
    -o "Dir::Etc::preferencesparts=$work/etc/apt/preferences.d"
    -o "Dir::State=$work/state"
    -o "Dir::State::status=/var/lib/dpkg/status"
    -o "Dir::Cache=$work/cache"
    -o "APT::Get::List-Cleanup=0"
    -o "Debug::NoLocking=1"
    -o "Acquire::Languages=none"
    -o "APT::Sandbox::User=root"
  )
  log "fetching etcd 3.5 index from: $SUITES_35"
  apt-get "${opts[@]}" update -qq >&2
  # Pick the highest 3.5.x etcd-server the private index offers.
  ver="$(apt-cache "${opts[@]}" madison etcd-server 2>/dev/null | awk -F'|' '{gsub(/ /,"",$2); print $2}' | grep -E '^3\.5\.' | sort -V | tail -n1 || true)"
  if [ -z "$ver" ]; then
    log "no etcd-server 3.5.x in suites: $SUITES_35"
    apt-cache "${opts[@]}" madison etcd-server >&2 || true
    exit 1
  fi
  log "downloading etcd-server=$ver"
  (cd "$work/debs" && apt-get "${opts[@]}" download "etcd-server=$ver" >&2)
  # etcdctl 3.5 is handy for the demo's v3.5 flags; optional.
  (cd "$work/debs" && apt-get "${opts[@]}" download "etcd-client=$ver" >&2) || log "etcd-client=$ver not available (optional)"
  rm -rf "$CACHE35/root"
  mkdir -p "$CACHE35/root"
  for deb in "$work"/debs/etcd-*.deb; do
    dpkg-deb -x "$deb" "$CACHE35/root"
  done
  ETCD35="$(find_35)" || { log "unpacked etcd 3.5 but found no etcd binary under $CACHE35/root"; exit 1; }
fi

# --- verify ------------------------------------------------------------------------------
"$ETCD34" --version >&2 || { log "etcd 3.4 at $ETCD34 does not run"; exit 1; }
"$ETCD35" --version >&2 || { log "etcd 3.5 at $ETCD35 does not run"; exit 1; }
ETCDCTL35=""
for c in "$CACHE35"/root/usr/bin/etcdctl; do [ -x "$c" ] && ETCDCTL35="$c"; done

log "etcd 3.4: $ETCD34"
log "etcd 3.5: $ETCD35"
echo "export TIDEMARK_ETCD_34=$ETCD34"
echo "export TIDEMARK_ETCD_35=$ETCD35"
if [ -n "$ETCDCTL35" ]; then echo "export TIDEMARK_ETCDCTL_35=$ETCDCTL35"; fi
