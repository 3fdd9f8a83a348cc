#!/usr/bin/env bash
# tidemark benchmark on local etcd 3.5 clusters, in one run:
#   (a) raw target ingest ceiling: batched Txns of OPS puts, one in flight and DEPTH in flight
#   (b) tidemark genesis of N keys (VALUE_BYTES-byte values)
#   (c) etcdctl make-mirror copying the same N keys, time-boxed to MM_SECONDS, rate measured
#   (d) tail lag p50/p99: single-key writers at RATE writes/s, then TAIL_RATE keys/s in
#       TAIL_OPS-op Txns
#   (e) the agent's peak RSS (VmHWM) over (b) and (d)
#   (f) the source's own put latency (LAT_RATE puts/s for LAT_SECONDS): with no mirror
#       running, then while a second genesis runs into a fresh target etcd; p99 ratio, puts
#       over SLOW_MS and, in the JSON, when each stall of the source began and how long it was
#   (g) WAN (skip with WAN=0): a fresh target etcd behind a userspace delay line of RTT_MS
#       (`tidemark-bench delay-proxy`); raw ingest through it at depth 1 and DEPTH
#       (WAN_RAW_N keys), a genesis of N_WAN keys through it, and the tail at TAIL_RATE
#       keys/s in TAIL_OPS-op Txns (lag observed on the target directly)
# For every mirror run it also reports, from the agent's /statusz when present,
# sourceKeysWalked / sourceKeysReturned, chainBreaks, chainReorders (Txns sent again for
# arriving before their predecessor), pageResends (genesis pages sent again after an unknown
# outcome), scanCursorWrites (fence writes that record the order-free pages), appliedTxns and
# readerStallSeconds ("n/a" if absent).
# Prints tables and writes JSON (default target/bench.json, or $OUT). Exits 1 (after
# printing) when a mirror's target did not verify equal to its source.
#
#   bash scripts/bench.sh                      # N=1000000, WAN genesis of N keys
#   N=200000 WAN=0 bash scripts/bench.sh       # quicker, local only
#   N=20000 N_WAN=20000 LAT_SECONDS=3 LAG_SECONDS=5 MM_SECONDS=3 TAIL_RATE=5000 bash scripts/bench.sh
#   PIN=1 N=300000 WAN=0 bash scripts/bench.sh # source and target sides on their own CPUs
#   TARGET_DATA_DIR=/dev/shm PIN=1 N=300000 WAN=0 bash scripts/bench.sh  # ... and disks
#   SYNC_EXTRA='pageKeyLimit: 10000, pageBytes: 4194304' bash scripts/bench.sh   # more sync settings
#
# The mirror reads bounded pages (etcd walks the whole requested range of a limited Range),
# so sourceKeysWalked / sourceKeysReturned stays a small constant; see docs/design.md,
# "Bounded scans". 5M keys fit the targets' --quota-backend-bytes (8 GiB) below.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"

N="${N:-1000000}"
VALUE_BYTES="${VALUE_BYTES:-256}"
OPS="${OPS:-127}"          # puts per Txn; the mirror's Txns carry 127 ops + the fence put
DEPTH="${DEPTH:-16}"       # Txns in flight for the second raw ceiling (SYNC_EXTRA='maxTxnsInFlight: 16' to match)
RATE="${RATE:-5000}"       # single-key tail writes/s
TAIL_RATE="${TAIL_RATE:-20000}"  # keys/s of the batched tail (local and WAN)
TAIL_OPS="${TAIL_OPS:-100}"      # puts per source Txn in the batched tail
LAG_SECONDS="${LAG_SECONDS:-10}"
MM_SECONDS="${MM_SECONDS:-20}"
LAT_RATE="${LAT_RATE:-1000}"     # source-latency puts/s
LAT_SECONDS="${LAT_SECONDS:-10}"
SLOW_MS="${SLOW_MS:-20}"         # source puts slower than this are counted and grouped into stalls
WAN="${WAN:-1}"
RTT_MS="${RTT_MS:-50}"
N_WAN="${N_WAN:-$N}"
# Raw ingest through the delay line at depth 1 runs at about OPS keys per RTT (2.5k keys/s
# at 50 ms), so it is measured on fewer keys than N by default.
WAN_RAW_N="${WAN_RAW_N:-$((N_WAN < 50000 ? N_WAN : 50000))}"
GENESIS_TIMEOUT="${GENESIS_TIMEOUT:-3600}"  # seconds, per genesis
SYNC_EXTRA="${SYNC_EXTRA:-}"     # extra `sync:` settings, YAML flow syntax
# Ops per Txn on the WAN target: its --max-txn-ops and the WAN mirror's sync.maxTxnOps
# (default: OPS + 1, etcd's default of 128). Across a long round trip one Txn carries what
# arrives during one RTT; at 20k keys/s and 50 ms that is 1,000 keys, so a target tuned for a
# distant mirror raises both (e.g. WAN_MAX_TXN_OPS=2048).
WAN_MAX_TXN_OPS="${WAN_MAX_TXN_OPS:-$((OPS + 1))}"
OUT="${OUT:-${CARGO_TARGET_DIR:-$ROOT/target}/bench.json}"
# PIN=1 puts the source side (the source etcd and what writes to it: seeding, tail-lag and
# source-latency load) on SOURCE_CPUS and the target side (target etcds, the agent, the raw
# writers, the delay line, make-mirror, verify) on TARGET_CPUS, with taskset. In production
# the source and the target are different clusters on different machines; unpinned on a
# small machine, the source's put latency and the genesis/raw ratio measure how the target
# etcd and the source's reads compete for the same cores, more than what the mirror costs.
PIN="${PIN:-0}"
SOURCE_CPUS="${SOURCE_CPUS:-0}"
TARGET_CPUS="${TARGET_CPUS:-$(( $(nproc) > 1 ? 1 : 0 ))-$(( $(nproc) - 1 ))}"
# Where the target etcds keep their data (default: with the source's, in the bench's work
# directory). On one machine the source and the target otherwise share a disk, and the
# target's fsyncs during a genesis queue with the source's own: TARGET_DATA_DIR=/dev/shm
# keeps them apart, as different machines would (the target's data is then in memory).
TARGET_DATA_DIR="${TARGET_DATA_DIR:-}"
# Command prefixes; both exec the command, so `$!` of a background one is its pid.
SRC_SIDE=(env)
TGT_SIDE=(env)
if [ "$PIN" = 1 ]; then
  SRC_SIDE=(taskset -c "$SOURCE_CPUS")
  TGT_SIDE=(taskset -c "$TARGET_CPUS")
fi

say() { printf '\n\033[1m==> %s\033[0m\n' "$*" >&2; }

say "installing what is missing"
eval "$(bash scripts/install-etcd.sh | grep '^export ')"
ETCD="$TIDEMARK_ETCD_35"
ETCDCTL="${TIDEMARK_ETCDCTL_35:-$(command -v etcdctl)}"

say "building (release)"
cargo build --release -p tidemark-etcd --bins >&2
BIN_DIR="${CARGO_TARGET_DIR:-$ROOT/target}/release"
MIRROR="$BIN_DIR/tidemark-mirror"
BENCH="$BIN_DIR/tidemark-bench"

WORK="$(mktemp -d -t tidemark-bench.XXXXXX)"
TGT_DATA="$WORK"
if [ -n "$TARGET_DATA_DIR" ]; then
  TGT_DATA="$(mktemp -d "$TARGET_DATA_DIR/tidemark-bench-target.XXXXXX")"
fi
PIDS=()
cleanup() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK" "$TGT_DATA"
}
trap cleanup EXIT INT TERM

statusz() { # HOST:PORT -> the /statusz body (bash /dev/tcp: no curl needed)
  local hp="$1"
  exec 3<>"/dev/tcp/${hp%:*}/${hp##*:}" || return 1
  printf 'GET /statusz HTTP/1.0\r\nHost: x\r\n\r\n' >&3
  sed '1,/^\r$/d' <&3
  exec 3<&-
}

free_port() {
  local p
  while :; do
    p=$((20000 + RANDOM % 30000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return; fi
  done
}

# start_etcd NAME VAR: starts etcd NAME and sets VAR to its client URL. Not run in $(...):
# the pid must reach PIDS in this shell for the trap to kill it.
declare -A ETCD_PID
start_etcd() { # NAME VAR [EXTRA_FLAG...]
  local name="$1" var="$2" cport pport url
  shift 2
  cport="$(free_port)"; pport="$(free_port)"
  local side=("${TGT_SIDE[@]}") data="$TGT_DATA/$name"
  [ "$name" = source ] && side=("${SRC_SIDE[@]}") && data="$WORK/$name"
  "${side[@]}" "$ETCD" --name "$name" --data-dir "$data" \
    --listen-client-urls "http://127.0.0.1:$cport" --advertise-client-urls "http://127.0.0.1:$cport" \
    --listen-peer-urls "http://127.0.0.1:$pport" --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
    --initial-cluster "$name=http://127.0.0.1:$pport" --logger zap --log-level error \
    --quota-backend-bytes $((8 * 1024 * 1024 * 1024)) \
    --experimental-watch-progress-notify-interval 1s "$@" \
    >"$WORK/$name.log" 2>&1 &
  PIDS+=($!)
  ETCD_PID[$name]=$!
  url="http://127.0.0.1:$cport"
  for _ in $(seq 1 100); do
    if ETCDCTL_API=3 "$ETCDCTL" --endpoints "$url" endpoint health >/dev/null 2>&1; then
      printf -v "$var" '%s' "$url"; return
    fi
    sleep 0.1
  done
  cat "$WORK/$name.log" >&2; exit 1
}

stop_etcd() { # NAME: kill it and free its disk
  local pid="${ETCD_PID[$1]}"
  kill -9 "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true
  rm -rf "${WORK:?}/$1" "${TGT_DATA:?}/$1"
}

# start_proxy UPSTREAM_URL: a delay line of RTT_MS in front of it; sets PROXY (URL), PROXY_PID.
start_proxy() {
  "${TGT_SIDE[@]}" "$BENCH" delay-proxy --listen 127.0.0.1:0 --upstream "${1#http://}" --rtt-ms "$RTT_MS" \
    >"$WORK/proxy.addr" 2>"$WORK/proxy.log" &
  PROXY_PID=$!
  PIDS+=("$PROXY_PID")
  for _ in $(seq 1 100); do [ -s "$WORK/proxy.addr" ] && break; sleep 0.05; done
  [ -s "$WORK/proxy.addr" ] || { cat "$WORK/proxy.log" >&2; exit 1; }
  PROXY="http://$(head -1 "$WORK/proxy.addr")"
}

# start_mirror TAG SRC SRC_PREFIX TGT TGT_PREFIX: writes $WORK/TAG.yaml, starts an agent on
# it; sets AGENT, ADMIN, T0 and waits until its admin server answers.
start_mirror() {
  local tag="$1"
  cat >"$WORK/$tag.yaml" <<EOF
source: {endpointList: ["$2"], prefix: $3}
target: {endpointList: ["$4"], prefix: $5}
initialSync: {mode: RequireEmpty}
sync: {maxTxnOps: ${MIRROR_TXN_OPS:-$((OPS + 1))}, progressInterval: 1s${SYNC_EXTRA:+, $SYNC_EXTRA}}
EOF
  ADMIN="127.0.0.1:$(free_port)"
  T0="$(date +%s.%N)"
  "${TGT_SIDE[@]}" "$MIRROR" run -c "$WORK/$tag.yaml" --admin-addr "$ADMIN" --control-socket "$WORK/$tag.sock" --no-progress --log-format json \
    2>"$WORK/agent-$tag.log" &
  AGENT=$!
  PIDS+=("$AGENT")
  for _ in $(seq 1 200); do
    statusz "$ADMIN" >/dev/null 2>&1 && return
    kill -0 "$AGENT" 2>/dev/null || break
    sleep 0.05
  done
  tail -50 "$WORK/agent-$tag.log" >&2; echo "agent $tag did not come up" >&2; exit 1
}

# wait_genesis TAG: until the agent reports InitialSyncComplete; sets GEN_SECS (since T0)
# and GEN_DONE (epoch seconds).
wait_genesis() {
  local deadline=$(($(date +%s) + GENESIS_TIMEOUT))
  while [ "$(date +%s)" -lt "$deadline" ]; do
    if statusz "$ADMIN" 2>/dev/null | grep -q '"InitialSyncComplete":{[^}]*"status":true'; then
      GEN_DONE="$(date +%s.%N)"
      GEN_SECS="$(calc "$GEN_DONE - $T0")"
      return
    fi
    kill -0 "$AGENT" 2>/dev/null || { tail -50 "$WORK/agent-$1.log" >&2; echo "agent $1 exited" >&2; exit 1; }
    sleep 0.05
  done
  echo "genesis $1 did not finish in ${GENESIS_TIMEOUT}s" >&2; exit 1
}

# verify_mirror TAG [TGT]: compares source and target (TGT overrides the config's target
# endpoint, e.g. to bypass the delay line); sets VERIFIED_<TAG> to true or false.
VERIFY_FAILED=0
verify_mirror() {
  local tag="$1" cfg="$WORK/$1.yaml" ok=true
  if [ -n "${2:-}" ]; then
    sed "s|^target: {endpointList: \[\"[^\"]*\"\]|target: {endpointList: [\"$2\"]|" "$cfg" >"$WORK/$tag-verify.yaml"
    cfg="$WORK/$tag-verify.yaml"
  fi
  "${TGT_SIDE[@]}" "$MIRROR" verify -c "$cfg" --wait 60s >"$WORK/verify-$tag.json" || { ok=false; VERIFY_FAILED=1; }
  printf -v "VERIFIED_$tag" '%s' "$ok"
}

calc() { awk "BEGIN { printf \"%.6f\", $* }"; }

num() { [[ "${1:-}" =~ ^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$ ]]; }

# ratio A B -> A/B, or empty when either is missing or B is 0.
ratio() { if num "$1" && num "$2" && [ "$(calc "$2 != 0")" = "1.000000" ]; then calc "$1 / $2"; fi; }

# field FILE NAME -> the first scalar "NAME": value anywhere in the JSON, or empty (absent or
# null). Works on nested objects, so it does not matter where /statusz keeps a field.
field() {
  local v
  v="$( (grep -o "\"$2\": *[^,}]*" "$1" 2>/dev/null || true) | head -1 | cut -d: -f2- | tr -d ' "')"
  [ "$v" = null ] || printf '%s' "$v"
}
json() { field "$@"; }  # results of tidemark-bench subcommands

# JSON numbers (null when missing) and table cells ("n/a" when missing).
f0() { if num "${1:-}"; then printf '%.0f' "$1"; else printf null; fi; }
f2() { if num "${1:-}"; then printf '%.2f' "$1"; else printf null; fi; }
t0() { if num "${1:-}"; then printf '%.0f' "$1"; else printf 'n/a'; fi; }
t2() { if num "${1:-}"; then printf '%.2f' "$1"; else printf 'n/a'; fi; }

STATUS_FIELDS=(sourceKeysWalked sourceKeysReturned sourceLongestWalk chainBreaks chainReorders chainSendGapSeconds pageResends scanCursorWrites appliedTxns readerStallSeconds)

# collect_mirror TAG: the agent's /statusz fields and peak RSS, into TAG_<field> variables,
# then stops the agent.
collect_mirror() {
  local tag="$1" f kb
  statusz "$ADMIN" >"$WORK/statusz-$tag.json" 2>/dev/null || : >"$WORK/statusz-$tag.json"
  for f in "${STATUS_FIELDS[@]}"; do
    printf -v "${tag}_$f" '%s' "$(field "$WORK/statusz-$tag.json" "$f")"
  done
  local walked="${tag}_sourceKeysWalked" returned="${tag}_sourceKeysReturned"
  printf -v "${tag}_walkedOverReturned" '%s' "$(ratio "${!walked}" "${!returned}")"
  kb="$(awk '/^VmHWM/ {print $2}' "/proc/$AGENT/status" 2>/dev/null || true)"
  printf -v "${tag}_rssMiB" '%s' "$(if num "$kb"; then calc "$kb / 1024"; fi)"
  kill -TERM "$AGENT" 2>/dev/null || true; wait "$AGENT" || true
}

# mirror_json TAG -> a JSON object of TAG's collected fields.
mirror_json() {
  local tag="$1" v="VERIFIED_$1" w="${1}_walkedOverReturned" r="${1}_rssMiB" f n
  printf '{'
  for f in "${STATUS_FIELDS[@]}"; do
    n="${tag}_$f"
    if [ "$f" = readerStallSeconds ]; then printf '"%s": %s, ' "$f" "$(f2 "${!n}")"
    else printf '"%s": %s, ' "$f" "$(f0 "${!n}")"; fi
  done
  printf '"walkedOverReturned": %s, "peakRssMiB": %s, "verified": %s}' \
    "$(f2 "${!w}")" "$(f2 "${!r}")" "${!v:-null}"
}

say "starting source and target etcd ($("$ETCD" --version | head -1))"
start_etcd source SRC
start_etcd target TGT

say "seeding the source with $N keys ($VALUE_BYTES B values)"
"${SRC_SIDE[@]}" "$BENCH" load --endpoint "$SRC" --prefix /bench/k --count "$N" --value-bytes "$VALUE_BYTES" --ops-per-txn "$OPS" --concurrency 4 >"$WORK/seed.json"

# Each ceiling is measured into a fresh, empty target etcd, as the genesis below is: etcd's
# writes slow as its database grows, so a genesis into a target that already held the raw
# runs' keys would be compared with ceilings measured on a smaller one.
say "(a) raw target ingest ceiling: $N keys, $OPS puts per Txn, one Txn in flight"
start_etcd target-raw1 TGTR
"${TGT_SIDE[@]}" "$BENCH" load --endpoint "$TGTR" --prefix /raw1/k --count "$N" --value-bytes "$VALUE_BYTES" --ops-per-txn "$OPS" --concurrency 1 >"$WORK/raw.json"
stop_etcd target-raw1
RAW_RATE="$(json "$WORK/raw.json" keysPerSecond)"

say "(a) raw target ingest ceiling: $N keys, $OPS puts per Txn, $DEPTH Txns in flight"
start_etcd target-rawd TGTR
"${TGT_SIDE[@]}" "$BENCH" load --endpoint "$TGTR" --prefix /rawd/k --count "$N" --value-bytes "$VALUE_BYTES" --ops-per-txn "$OPS" --concurrency "$DEPTH" >"$WORK/raw-depth.json"
stop_etcd target-rawd
RAW_DEPTH_RATE="$(json "$WORK/raw-depth.json" keysPerSecond)"

say "(b) tidemark genesis of $N keys"
start_mirror local "$SRC" /bench/ "$TGT" /mirror/
wait_genesis local
LGEN_SECS="$GEN_SECS"
GEN_RATE="$(calc "$N / $LGEN_SECS")"
verify_mirror local
RSS_GENESIS_KB="$(awk '/^VmHWM/ {print $2}' "/proc/$AGENT/status")"

say "(d) tail lag at $RATE writes/s for ${LAG_SECONDS}s"
"${SRC_SIDE[@]}" "$BENCH" tail-lag --source "$SRC" --target "$TGT" --source-prefix /bench/lag/ --target-prefix /mirror/lag/ \
  --rate "$RATE" --seconds "$LAG_SECONDS" >"$WORK/lag.json"
P50="$(json "$WORK/lag.json" p50Ms)"
P99="$(json "$WORK/lag.json" p99Ms)"
MISSING="$(json "$WORK/lag.json" unobserved)"
ACHIEVED="$(json "$WORK/lag.json" achievedRate)"

say "(d) tail lag at $TAIL_RATE keys/s in $TAIL_OPS-op Txns for ${LAG_SECONDS}s"
"${SRC_SIDE[@]}" "$BENCH" tail-lag --source "$SRC" --target "$TGT" --source-prefix /bench/lagb/ --target-prefix /mirror/lagb/ \
  --rate "$TAIL_RATE" --ops-per-txn "$TAIL_OPS" --seconds "$LAG_SECONDS" >"$WORK/lagb.json"
BP50="$(json "$WORK/lagb.json" p50Ms)"
BP99="$(json "$WORK/lagb.json" p99Ms)"
BACHIEVED="$(json "$WORK/lagb.json" achievedRate)"
BMISSING="$(json "$WORK/lagb.json" unobserved)"
collect_mirror local
# VmHWM can read a little lower later (the kernel syncs per-thread RSS counts lazily).
RSS_KB="$(awk "BEGIN { a = $local_rssMiB * 1024; b = $RSS_GENESIS_KB; printf \"%d\", (a > b ? a : b) }")"
local_rssMiB="$(calc "$RSS_KB / 1024")"

say "(c) etcdctl make-mirror of the same $N keys, time-boxed to ${MM_SECONDS}s"
MM_T0="$(date +%s.%N)"
ETCDCTL_API=3 "${TGT_SIDE[@]}" timeout "$MM_SECONDS" "$ETCDCTL" --command-timeout=60s --endpoints "$SRC" make-mirror --prefix /bench/k --dest-prefix /mm/k "$TGT" >/dev/null 2>&1 || true
MM_SECS="$(calc "$(date +%s.%N) - $MM_T0")"
MM_KEYS="$("$BENCH" count --endpoint "$TGT" --prefix /mm/)"
MM_RATE="$(calc "$MM_KEYS / $MM_SECS")"

say "(f) source put latency, no mirror running: $LAT_RATE puts/s for ${LAT_SECONDS}s"
"${SRC_SIDE[@]}" "$BENCH" source-latency --endpoint "$SRC" --prefix /bench/lat/base/ --seconds "$LAT_SECONDS" \
  --rate "$LAT_RATE" --value-bytes "$VALUE_BYTES" --slow-ms "$SLOW_MS" >"$WORK/lat-base.json"

say "(f) source put latency during a genesis into a fresh target etcd"
start_etcd target2 TGT2
GEN2_KEYS="$("$BENCH" count --endpoint "$SRC" --prefix /bench/)"
start_mirror latgen "$SRC" /bench/ "$TGT2" /mirror/
LAT_T0="$(date +%s.%N)"
"${SRC_SIDE[@]}" "$BENCH" source-latency --endpoint "$SRC" --prefix /bench/lat/gen/ --seconds "$LAT_SECONDS" \
  --rate "$LAT_RATE" --value-bytes "$VALUE_BYTES" --slow-ms "$SLOW_MS" >"$WORK/lat-gen.json" &
LAT_PID=$!
PIDS+=("$LAT_PID")
wait_genesis latgen
GEN2_SECS="$GEN_SECS"
# Share of the latency window the genesis was running for (< 1: raise N to cover it all).
LAT_COVER="$(calc "($GEN_DONE - $LAT_T0) / $LAT_SECONDS")"
LAT_COVER="$(awk "BEGIN { c = $LAT_COVER; print (c > 1 ? 1 : (c < 0 ? 0 : c)) }")"
wait "$LAT_PID"
verify_mirror latgen
collect_mirror latgen
stop_etcd target2
LAT_BASE_P50="$(json "$WORK/lat-base.json" p50Ms)"
LAT_BASE_P99="$(json "$WORK/lat-base.json" p99Ms)"
LAT_BASE_MAX="$(json "$WORK/lat-base.json" maxMs)"
LAT_BASE_RATE="$(json "$WORK/lat-base.json" achievedRate)"
LAT_GEN_P50="$(json "$WORK/lat-gen.json" p50Ms)"
LAT_GEN_P99="$(json "$WORK/lat-gen.json" p99Ms)"
LAT_GEN_MAX="$(json "$WORK/lat-gen.json" maxMs)"
LAT_GEN_RATE="$(json "$WORK/lat-gen.json" achievedRate)"
LAT_ERRORS="$(( $(json "$WORK/lat-base.json" errors) + $(json "$WORK/lat-gen.json" errors) ))"
LAT_RATIO="$(ratio "$LAT_GEN_P99" "$LAT_BASE_P99")"
LAT_BASE_SLOW="$(json "$WORK/lat-base.json" slowCount)"
LAT_GEN_SLOW="$(json "$WORK/lat-gen.json" slowCount)"
# [start ms, worst ms] per stall of the source during the genesis, earliest first.
LAT_GEN_STALLS="$(grep -o '"stalls":\[\(\[[^]]*\],\?\)*\]' "$WORK/lat-gen.json" | cut -d: -f2-)"

if [ "$WAN" = 1 ]; then
  say "(g) WAN: a fresh target etcd (--max-txn-ops $WAN_MAX_TXN_OPS) behind a ${RTT_MS} ms RTT delay line"
  start_etcd target-wan TGTW --max-txn-ops "$WAN_MAX_TXN_OPS"
  start_proxy "$TGTW"

  say "(g) raw ingest through the delay line: $WAN_RAW_N keys, one Txn in flight"
  "${TGT_SIDE[@]}" "$BENCH" load --endpoint "$PROXY" --prefix /raw1/k --count "$WAN_RAW_N" --value-bytes "$VALUE_BYTES" --ops-per-txn "$OPS" --concurrency 1 >"$WORK/wraw.json"
  WRAW_RATE="$(json "$WORK/wraw.json" keysPerSecond)"
  say "(g) raw ingest through the delay line: $WAN_RAW_N keys, $DEPTH Txns in flight"
  "${TGT_SIDE[@]}" "$BENCH" load --endpoint "$PROXY" --prefix /rawd/k --count "$WAN_RAW_N" --value-bytes "$VALUE_BYTES" --ops-per-txn "$OPS" --concurrency "$DEPTH" >"$WORK/wraw-depth.json"
  WRAW_DEPTH_RATE="$(json "$WORK/wraw-depth.json" keysPerSecond)"
  # One Txn in flight: OPS keys per (RTT + the local Txn time measured in (a)).
  WRAW_EXPECT="$(calc "$OPS / ($RTT_MS / 1000 + $OPS / $RAW_RATE)")"

  say "(g) seeding $N_WAN keys under /wan/ in the source"
  "${SRC_SIDE[@]}" "$BENCH" load --endpoint "$SRC" --prefix /wan/k --count "$N_WAN" --value-bytes "$VALUE_BYTES" --ops-per-txn "$OPS" --concurrency 4 >"$WORK/seed-wan.json"

  say "(g) tidemark genesis of $N_WAN keys through the delay line"
  MIRROR_TXN_OPS="$WAN_MAX_TXN_OPS" start_mirror wan "$SRC" /wan/ "$PROXY" /mirror/
  wait_genesis wan
  WGEN_SECS="$GEN_SECS"
  WGEN_RATE="$(calc "$N_WAN / $WGEN_SECS")"
  verify_mirror wan "$TGTW"

  say "(g) WAN tail lag at $TAIL_RATE keys/s in $TAIL_OPS-op Txns for ${LAG_SECONDS}s"
  "${SRC_SIDE[@]}" "$BENCH" tail-lag --source "$SRC" --target "$TGTW" --source-prefix /wan/lag/ --target-prefix /mirror/lag/ \
    --rate "$TAIL_RATE" --ops-per-txn "$TAIL_OPS" --seconds "$LAG_SECONDS" >"$WORK/wlag.json"
  WP50="$(json "$WORK/wlag.json" p50Ms)"
  WP99="$(json "$WORK/wlag.json" p99Ms)"
  WACHIEVED="$(json "$WORK/wlag.json" achievedRate)"
  WMISSING="$(json "$WORK/wlag.json" unobserved)"
  collect_mirror wan
  kill -TERM "$PROXY_PID"; wait "$PROXY_PID" || true
  stop_etcd target-wan
fi

R_RAW="$(ratio "$GEN_RATE" "$RAW_RATE")"
R_RAW_DEPTH="$(ratio "$GEN_RATE" "$RAW_DEPTH_RATE")"
R_MM="$(ratio "$GEN_RATE" "$MM_RATE")"
R_WAN="$(ratio "${WGEN_RATE:-}" "$RAW_DEPTH_RATE")"

wan_json() {
  if [ "$WAN" != 1 ]; then printf null; return; fi
  cat <<EOF
{
    "rttMs": $RTT_MS, "maxTxnOps": $WAN_MAX_TXN_OPS, "n": $N_WAN, "rawKeys": $WAN_RAW_N,
    "rawIngestKeysPerSecond": $(f0 "$WRAW_RATE"),
    "rawIngestKeysPerSecondExpected": $(f0 "$WRAW_EXPECT"),
    "rawIngestDepthKeysPerSecond": $(f0 "$WRAW_DEPTH_RATE"),
    "genesisSeconds": $(f2 "$WGEN_SECS"),
    "genesisKeysPerSecond": $(f0 "$WGEN_RATE"),
    "genesisOverLocalRawDepth": $(f2 "$R_WAN"),
    "tailRateTarget": $TAIL_RATE, "tailOpsPerTxn": $TAIL_OPS,
    "tailRateAchieved": $(f0 "$WACHIEVED"),
    "tailLagP50Ms": $(f2 "$WP50"), "tailLagP99Ms": $(f2 "$WP99"), "tailUnobserved": $(f0 "$WMISSING")
  }
EOF
}

cat >"$OUT" <<EOF
{
  "targetDataDir": $([ -n "$TARGET_DATA_DIR" ] && printf '"%s"' "$TARGET_DATA_DIR" || printf null),
  "pinned": $([ "$PIN" = 1 ] && printf '{"sourceCpus": "%s", "targetCpus": "%s"}' "$SOURCE_CPUS" "$TARGET_CPUS" || printf null),
  "n": $N, "valueBytes": $VALUE_BYTES, "opsPerTxn": $OPS, "depth": $DEPTH, "etcd": "$("$ETCD" --version | head -1 | awk '{print $3}')",
  "rawIngestKeysPerSecond": $(f0 "$RAW_RATE"),
  "rawIngestDepthKeysPerSecond": $(f0 "$RAW_DEPTH_RATE"),
  "genesisSeconds": $(f2 "$LGEN_SECS"),
  "genesisKeysPerSecond": $(f0 "$GEN_RATE"),
  "makeMirrorKeys": $MM_KEYS, "makeMirrorSeconds": $(f2 "$MM_SECS"),
  "makeMirrorKeysPerSecond": $(f0 "$MM_RATE"),
  "genesisOverRaw": $(f2 "$R_RAW"),
  "genesisOverRawDepth": $(f2 "$R_RAW_DEPTH"),
  "genesisOverMakeMirror": $(f2 "$R_MM"),
  "tailRateTarget": $RATE, "tailRateAchieved": $(f0 "$ACHIEVED"),
  "tailLagP50Ms": $(f2 "$P50"), "tailLagP99Ms": $(f2 "$P99"), "tailUnobserved": $(f0 "$MISSING"),
  "tailBatchRateTarget": $TAIL_RATE, "tailBatchOpsPerTxn": $TAIL_OPS,
  "tailBatchRateAchieved": $(f0 "$BACHIEVED"),
  "tailBatchLagP50Ms": $(f2 "$BP50"), "tailBatchLagP99Ms": $(f2 "$BP99"), "tailBatchUnobserved": $(f0 "$BMISSING"),
  "peakRssMiBAfterGenesis": $(f2 "$(calc "$RSS_GENESIS_KB / 1024")"),
  "peakRssMiB": $(f2 "$(calc "$RSS_KB / 1024")"),
  "sourceLatency": {
    "rate": $LAT_RATE, "seconds": $LAT_SECONDS, "errors": $LAT_ERRORS,
    "baselineRateAchieved": $(f0 "$LAT_BASE_RATE"),
    "baselineP50Ms": $(f2 "$LAT_BASE_P50"), "baselineP99Ms": $(f2 "$LAT_BASE_P99"), "baselineMaxMs": $(f2 "$LAT_BASE_MAX"),
    "duringGenesisRateAchieved": $(f0 "$LAT_GEN_RATE"),
    "duringGenesisP50Ms": $(f2 "$LAT_GEN_P50"), "duringGenesisP99Ms": $(f2 "$LAT_GEN_P99"), "duringGenesisMaxMs": $(f2 "$LAT_GEN_MAX"),
    "p99Ratio": $(f2 "$LAT_RATIO"),
    "slowMs": $SLOW_MS, "baselineSlowPuts": $(f0 "$LAT_BASE_SLOW"), "duringGenesisSlowPuts": $(f0 "$LAT_GEN_SLOW"),
    "duringGenesisStalls": ${LAT_GEN_STALLS:-null},
    "genesisKeys": $GEN2_KEYS, "genesisSeconds": $(f2 "$GEN2_SECS"),
    "genesisCoverage": $(f2 "$LAT_COVER")
  },
  "wan": $(wan_json),
  "mirrors": {
    "local": $(mirror_json local),
    "sourceLatency": $(mirror_json latgen),
    "wan": $(if [ "$WAN" = 1 ]; then mirror_json wan; else printf null; fi)
  }
}
EOF

row() { printf '%-50s %16s %s\n' "$1" "$2" "${3:-}"; }
# Keys a tail wrote that never reached the target in time: their lag is a lower bound.
missing_row() { [ "${2:-0}" = 0 ] || row "$1   keys not on the target in time" "$2" "0 (lag above: lower bound)"; }
if [ -n "$TARGET_DATA_DIR" ]; then printf '\ntarget etcd data in %s (not on the source'"'"'s disk)\n' "$TARGET_DATA_DIR"; fi
if [ "$PIN" = 1 ]; then printf '\npinned: source side on CPUs %s, target side (agent included) on CPUs %s\n' "$SOURCE_CPUS" "$TARGET_CPUS"; fi
printf '\n%-50s %16s %s\n' "measure" "value" "target"
row "--------------------------------------------------" "----------------" "------"
row "(a) raw target ingest, 1 Txn in flight (keys/s)" "$(t0 "$RAW_RATE")"
row "(a) raw target ingest, $DEPTH Txns in flight (keys/s)" "$(t0 "$RAW_DEPTH_RATE")"
row "(b) tidemark genesis, $N keys (keys/s)" "$(t0 "$GEN_RATE")"
row "(b) genesis time (s)" "$(t2 "$LGEN_SECS")"
row "(c) etcdctl make-mirror (keys/s)" "$(t0 "$MM_RATE")"
row "(b)/(a) at 1 in flight" "$(t2 "$R_RAW")"
row "(b)/(a) at $DEPTH in flight" "$(t2 "$R_RAW_DEPTH")" ">= 0.8"
row "(b)/(c)" "$(t2 "$R_MM")" ">= 30"
row "(d) tail writes/s achieved (single puts)" "$(t0 "$ACHIEVED")"
row "(d) tail lag p50 (ms)" "$(t2 "$P50")"
row "(d) tail lag p99 (ms)" "$(t2 "$P99")" "<= 100 at 5k/s"
missing_row "(d)" "$MISSING"
row "(d) tail keys/s achieved ($TAIL_OPS-op Txns)" "$(t0 "$BACHIEVED")"
row "(d) tail lag p50, $TAIL_OPS-op Txns (ms)" "$(t2 "$BP50")"
row "(d) tail lag p99, $TAIL_OPS-op Txns (ms)" "$(t2 "$BP99")"
missing_row "(d)" "$BMISSING"
row "(e) agent peak RSS (MiB)" "$(t2 "$(calc "$RSS_KB / 1024")")" "<= 64 (1M keys)"
row "(f) source put p99, no mirror (ms)" "$(t2 "$LAT_BASE_P99")"
row "(f) source put p99, during genesis (ms)" "$(t2 "$LAT_GEN_P99")"
row "(f) p99 during / no mirror" "$(t2 "$LAT_RATIO")" "<= 2"
row "(f) puts over $SLOW_MS ms, no mirror / during genesis" "$(t0 "$LAT_BASE_SLOW") / $(t0 "$LAT_GEN_SLOW")"
row "(f) share of the window under genesis" "$(t2 "$LAT_COVER")" "1 (else raise N)"
[ "$LAT_ERRORS" = 0 ] || row "(f) put errors" "$LAT_ERRORS" "0"
if [ "$WAN" = 1 ]; then
  row "(g) raw ingest via ${RTT_MS} ms, 1 in flight (keys/s)" "$(t0 "$WRAW_RATE")" "~$(t0 "$WRAW_EXPECT") expected"
  row "(g) raw ingest via ${RTT_MS} ms, $DEPTH in flight (keys/s)" "$(t0 "$WRAW_DEPTH_RATE")"
  row "(g) WAN genesis, $N_WAN keys (keys/s)" "$(t0 "$WGEN_RATE")"
  row "(g) WAN genesis time (s)" "$(t2 "$WGEN_SECS")"
  row "(g)/(a) at $DEPTH in flight" "$(t2 "$R_WAN")" ">= 0.5 (aim 0.8)"
  row "(g) WAN tail keys/s achieved ($TAIL_OPS-op Txns)" "$(t0 "$WACHIEVED")" "$TAIL_RATE"
  row "(g) WAN tail lag p50 (ms)" "$(t2 "$WP50")"
  row "(g) WAN tail lag p99 (ms)" "$(t2 "$WP99")" "<= 250"
  missing_row "(g)" "$WMISSING"
fi

# Per mirror run: the agent's /statusz counters and peak RSS.
TAGS=(local latgen); [ "$WAN" = 1 ] && TAGS+=(wan)
cell() { local n="$1_$2"; if [ "$2" = readerStallSeconds ] || [ "$2" = walkedOverReturned ] || [ "$2" = rssMiB ]; then t2 "${!n}"; else t0 "${!n}"; fi; }
declare -A TAG_LABEL=([local]="(b) local" [latgen]="(f) genesis" [wan]="(g) WAN")
printf '\n%-26s' "per mirror run"; for t in "${TAGS[@]}"; do printf ' %14s' "${TAG_LABEL[$t]}"; done; printf '  %s\n' "target"
for f in "${STATUS_FIELDS[@]}" walkedOverReturned rssMiB verified; do
  tgt=""
  case "$f" in rssMiB) label="peak RSS (MiB)"; tgt="<= 64 (1M keys)";; verified) label="target == source";; *) label="$f";; esac
  printf '%-26s' "$label"
  for t in "${TAGS[@]}"; do
    if [ "$f" = verified ]; then v="VERIFIED_$t"; printf ' %14s' "${!v}"; else printf ' %14s' "$(cell "$t" "$f")"; fi
  done
  printf '  %s\n' "${tgt:-}"
done
echo
echo "JSON: $OUT"
if [ "$VERIFY_FAILED" = 1 ]; then echo "a mirror's target did not verify equal to its source" >&2; exit 1; fi
