#!/usr/bin/env bash
# tidemark benchmark on one local etcd 3.5 pair (source, target), in one run:
#   (a) raw target ingest ceiling: batched Txns of OPS puts, one in flight (as the mirror)
#   (b) tidemark genesis of N keys (VALUE_BYTES-byte values)
#   (c) etcdctl make-mirror copying the same N keys, time-boxed to MM_SECONDS, rate measured
#   (d) tail lag p50/p99 under concurrent single-key writers at RATE writes/s
#   (e) the agent's peak RSS (VmHWM) over (b) and (d)
# Prints a table and writes JSON (default target/bench.json, or $OUT).
#
#   bash scripts/bench.sh                  # N=200000
#   N=1000000 bash scripts/bench.sh        # the RSS target is for a 1M-key genesis
#   PAGE_KEY_LIMIT=10000 bash scripts/bench.sh   # larger scan pages (see below)
#
# Note: etcd 3.4/3.5 count the whole remaining range on every limited Range, so a scan
# with small pages is quadratic in the range size; sync.pageKeyLimit matters at 1M keys.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"

N="${N:-200000}"
VALUE_BYTES="${VALUE_BYTES:-256}"
OPS="${OPS:-127}"          # puts per Txn; the mirror's Txns carry 127 ops + the fence put
RATE="${RATE:-5000}"
LAG_SECONDS="${LAG_SECONDS:-10}"
MM_SECONDS="${MM_SECONDS:-20}"
OUT="${OUT:-${CARGO_TARGET_DIR:-$ROOT/target}/bench.json}"

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
PIDS=()
cleanup() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
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

start_etcd() {
  local name="$1" cport pport
  cport="$(free_port)"; pport="$(free_port)"
  "$ETCD" --name "$name" --data-dir "$WORK/$name" \
    --listen-client-urls "http://127.0.0.1:$cport" --advertise-client-urls "http://127.0.0.1:$cport" \
    --listen-peer-urls "http://127.0.0.1:$pport" --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
    --initial-cluster "$name=http://127.0.0.1:$pport" --logger zap --log-level error \
    --quota-backend-bytes $((8 * 1024 * 1024 * 1024)) \
    --experimental-watch-progress-notify-interval 1s \
    >"$WORK/$name.log" 2>&1 &
  PIDS+=($!)
  local url="http://127.0.0.1:$cport"
  for _ in $(seq 1 100); do
    ETCDCTL_API=3 "$ETCDCTL" --endpoints "$url" endpoint health >/dev/null 2>&1 && { echo "$url"; return; }
    sleep 0.1
  done
  cat "$WORK/$name.log" >&2; exit 1
}

calc() { awk "BEGIN { printf \"%.6f\", $* }"; }

json() { # file field
  grep -o "\"$2\":[^,}]*" "$1" | head -1 | cut -d: -f2 | tr -d ' "'
}

say "starting source and target etcd ($("$ETCD" --version | head -1))"
SRC="$(start_etcd source)"
TGT="$(start_etcd target)"

say "seeding the source with $N keys ($VALUE_BYTES B values)"
"$BENCH" load --endpoint "$SRC" --prefix /bench/k --count "$N" --value-bytes "$VALUE_BYTES" --ops-per-txn "$OPS" --concurrency 4 >"$WORK/seed.json"

say "(a) raw target ingest ceiling: $N keys, $OPS puts per Txn, one Txn in flight"
"$BENCH" load --endpoint "$TGT" --prefix /raw/k --count "$N" --value-bytes "$VALUE_BYTES" --ops-per-txn "$OPS" --concurrency 1 >"$WORK/raw.json"
RAW_RATE="$(json "$WORK/raw.json" keysPerSecond)"
# /raw/ is left in place: it is outside the mirrored range (deleting 1M keys is slow).

say "(b) tidemark genesis of $N keys"
cat >"$WORK/mirror.yaml" <<EOF
source: {endpointList: ["$SRC"], prefix: /bench/}
target: {endpointList: ["$TGT"], prefix: /mirror/}
initialSync: {mode: RequireEmpty}
sync: {maxTxnOps: $((OPS + 1)), progressInterval: 1s${PAGE_KEY_LIMIT:+, pageKeyLimit: $PAGE_KEY_LIMIT, pageBytes: 4194304}}
EOF
ADMIN="127.0.0.1:$(free_port)"
T0="$(date +%s.%N)"
"$MIRROR" run -c "$WORK/mirror.yaml" --admin-addr "$ADMIN" --no-progress --log-format json 2>"$WORK/agent.log" &
AGENT=$!
PIDS+=("$AGENT")
GEN_SECS=""
for _ in $(seq 1 12000); do
  if statusz "$ADMIN" 2>/dev/null | grep -q '"InitialSyncComplete":{[^}]*"status":true'; then
    GEN_SECS="$(calc "$(date +%s.%N) - $T0")"
    break
  fi
  kill -0 "$AGENT" 2>/dev/null || { cat "$WORK/agent.log" >&2; exit 1; }
  sleep 0.05
done
[ -n "$GEN_SECS" ] || { echo "genesis did not finish" >&2; exit 1; }
GEN_RATE="$(calc "$N / $GEN_SECS")"
"$MIRROR" verify -c "$WORK/mirror.yaml" --wait 60s >"$WORK/verify.json"
RSS_GENESIS_KB="$(grep VmHWM "/proc/$AGENT/status" | awk '{print $2}')"

say "(d) tail lag at $RATE writes/s for ${LAG_SECONDS}s"
"$BENCH" tail-lag --source "$SRC" --target "$TGT" --source-prefix /bench/lag/ --target-prefix /mirror/lag/ \
  --rate "$RATE" --seconds "$LAG_SECONDS" >"$WORK/lag.json"
P50="$(json "$WORK/lag.json" p50Ms)"
P99="$(json "$WORK/lag.json" p99Ms)"
ACHIEVED="$(json "$WORK/lag.json" achievedRate)"
RSS_KB="$(grep VmHWM "/proc/$AGENT/status" | awk '{print $2}')"
kill -TERM "$AGENT"; wait "$AGENT" || true

say "(c) etcdctl make-mirror of the same $N keys, time-boxed to ${MM_SECONDS}s"
MM_T0="$(date +%s.%N)"
ETCDCTL_API=3 timeout "$MM_SECONDS" "$ETCDCTL" --command-timeout=60s --endpoints "$SRC" make-mirror --prefix /bench/k --dest-prefix /mm/k "$TGT" >/dev/null 2>&1 || true
MM_SECS="$(calc "$(date +%s.%N) - $MM_T0")"
MM_KEYS="$("$BENCH" count --endpoint "$TGT" --prefix /mm/)"
MM_RATE="$(calc "$MM_KEYS / $MM_SECS")"

R_RAW="$(calc "$GEN_RATE / $RAW_RATE")"
R_MM="$(calc "$GEN_RATE / $MM_RATE")"
f0() { printf '%.0f' "$1"; }
f2() { printf '%.2f' "$1"; }

cat >"$OUT" <<EOF
{
  "n": $N, "valueBytes": $VALUE_BYTES, "opsPerTxn": $OPS, "etcd": "$("$ETCD" --version | head -1 | awk '{print $3}')",
  "rawIngestKeysPerSecond": $(f0 "$RAW_RATE"),
  "genesisSeconds": $(f2 "$GEN_SECS"),
  "genesisKeysPerSecond": $(f0 "$GEN_RATE"),
  "makeMirrorKeys": $MM_KEYS, "makeMirrorSeconds": $(f2 "$MM_SECS"),
  "makeMirrorKeysPerSecond": $(f0 "$MM_RATE"),
  "genesisOverRaw": $(f2 "$R_RAW"),
  "genesisOverMakeMirror": $(f2 "$R_MM"),
  "tailRateTarget": $RATE, "tailRateAchieved": $(f0 "$ACHIEVED"),
  "tailLagP50Ms": $(f2 "$P50"), "tailLagP99Ms": $(f2 "$P99"),
  "peakRssMiBAfterGenesis": $(f2 "$(calc "$RSS_GENESIS_KB / 1024")"),
  "peakRssMiB": $(f2 "$(calc "$RSS_KB / 1024")")
}
EOF

printf '\n%-44s %16s %s\n' "measure" "value" "target"
printf '%-44s %16s %s\n' "--------------------------------------------" "----------------" "------"
printf '%-44s %16s\n' "(a) raw target ingest (keys/s)" "$(f0 "$RAW_RATE")"
printf '%-44s %16s\n' "(b) tidemark genesis, $N keys (keys/s)" "$(f0 "$GEN_RATE")"
printf '%-44s %16s\n' "(b) genesis time (s)" "$(f2 "$GEN_SECS")"
printf '%-44s %16s\n' "(c) etcdctl make-mirror (keys/s)" "$(f0 "$MM_RATE")"
printf '%-44s %16s %s\n' "(b)/(a)" "$(f2 "$R_RAW")" ">= 0.8"
printf '%-44s %16s %s\n' "(b)/(c)" "$(f2 "$R_MM")" ">= 30"
printf '%-44s %16s\n' "(d) tail writes/s achieved" "$(f0 "$ACHIEVED")"
printf '%-44s %16s\n' "(d) tail lag p50 (ms)" "$(f2 "$P50")"
printf '%-44s %16s %s\n' "(d) tail lag p99 (ms)" "$(f2 "$P99")" "<= 100 at 5k/s"
printf '%-44s %16s %s\n' "(e) agent peak RSS (MiB)" "$(f2 "$(calc "$RSS_KB / 1024")")" "<= 64 (1M keys)"
echo
echo "JSON: $OUT"
