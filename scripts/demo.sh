#!/usr/bin/env bash
# tidemark demo: mirror a live etcd 3.4 key range into an etcd 3.5 cluster.
#
#   bash scripts/demo.sh            # N=200000 keys
#   N=20000 bash scripts/demo.sh
#
# Installs what is missing (scripts/install-etcd.sh), builds tidemark-mirror (release),
# starts two etcd servers on loopback in a temp dir, loads N keys, then runs a live
# workload (puts, deletes, multi-key Txns and a compaction) while the agent copies and
# tails. The agent is SIGKILLed mid-way and restarted; it resumes from the checkpoint in
# the target. Finally the target is compared with the source key by key and the
# watermark is printed. Everything is cleaned up on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"

N="${N:-200000}"
VALUE_BYTES="${VALUE_BYTES:-128}"

say() { printf '\n\033[1m==> %s\033[0m\n' "$*" >&2; }

say "installing what is missing (etcd 3.4 + 3.5, protoc)"
eval "$(bash scripts/install-etcd.sh | grep '^export ')"
ETCD_SRC="$TIDEMARK_ETCD_34"
ETCD_TGT="$TIDEMARK_ETCD_35"
ETCDCTL="${TIDEMARK_ETCDCTL_35:-$(command -v etcdctl)}"

say "building tidemark-mirror (release)"
cargo build --release -p tidemark-etcd --bins >&2
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/tidemark-mirror"
LOADER="${CARGO_TARGET_DIR:-$ROOT/target}/release/tidemark-bench"

WORK="$(mktemp -d -t tidemark-demo.XXXXXX)"
PIDS=()
cleanup() {
  for p in "${PIDS[@]:-}"; do
    [ -n "$p" ] && kill -9 "$p" 2>/dev/null || true
  done
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
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "$p"
      return
    fi
  done
}

start_etcd() { # name bin -> echoes client URL
  local name="$1" bin="$2" cport pport
  cport="$(free_port)"
  pport="$(free_port)"
  "$bin" --name "$name" --data-dir "$WORK/$name" \
    --listen-client-urls "http://127.0.0.1:$cport" --advertise-client-urls "http://127.0.0.1:$cport" \
    --listen-peer-urls "http://127.0.0.1:$pport" --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
    --initial-cluster "$name=http://127.0.0.1:$pport" --logger zap --log-level error \
    >"$WORK/$name.log" 2>&1 &
  PIDS+=($!)
  local url="http://127.0.0.1:$cport"
  for _ in $(seq 1 100); do
    if ETCDCTL_API=3 "$ETCDCTL" --endpoints "$url" endpoint health >/dev/null 2>&1; then
      echo "$url"
      return
    fi
    sleep 0.1
  done
  echo "etcd $name did not start; log:" >&2
  cat "$WORK/$name.log" >&2
  exit 1
}

ctl() { ETCDCTL_API=3 "$ETCDCTL" --endpoints "$1" "${@:2}"; }

say "starting source etcd ($("$ETCD_SRC" --version | head -1)) and target etcd ($("$ETCD_TGT" --version | head -1))"
SRC="$(start_etcd source "$ETCD_SRC")"
TGT="$(start_etcd target "$ETCD_TGT")"
echo "source $SRC   target $TGT   workdir $WORK" >&2

say "loading $N keys of $VALUE_BYTES bytes under /app/ (batched Txns)"
"$LOADER" load --endpoint "$SRC" --prefix /app/key --count "$N" --value-bytes "$VALUE_BYTES" --ops-per-txn 100 --concurrency 4 >/dev/null
ctl "$SRC" put /unrelated/x "not mirrored" >/dev/null

cat >"$WORK/mirror.yaml" <<EOF
source: {endpointList: ["$SRC"], prefix: /app/}
target: {endpointList: ["$TGT"], prefix: /mirror/}
initialSync: {mode: RequireEmpty}
sync:
  progressInterval: 2s
  reconnectBackoff: {initialDelay: 200ms, maxDelay: 2s}
EOF

workload() {
  local i
  for i in $(seq 1 400); do
    ctl "$SRC" put "/app/live/$((i % 50))" "update-$i" >/dev/null
    if ((i % 7 == 0)); then ctl "$SRC" del "/app/key$(printf %09d $((i * 13 % N)))" >/dev/null; fi
    if ((i % 25 == 0)); then
      printf '\nput /app/txn/a%s one\nput /app/txn/b%s two\ndel /app/live/%s\n\n\n' "$i" "$i" "$((i % 50))" | ctl "$SRC" txn >/dev/null
    fi
    if ((i == 200)); then
      rev="$(ctl "$SRC" endpoint status -w json | grep -o '"revision":[0-9]*' | head -1 | cut -d: -f2)"
      ctl "$SRC" compact "$rev" >/dev/null
      echo "   workload: compacted the source at revision $rev" >&2
    fi
  done
  ctl "$SRC" del --prefix /app/txn/ >/dev/null
  echo "   workload: done" >&2
}

run_agent() { # tag
  # stderr stays the terminal, so genesis draws its progress line there.
  "$BIN" run -c "$WORK/mirror.yaml" --admin-addr "127.0.0.1:$ADMIN_PORT" --control-socket "$WORK/control.sock" &
  AGENT=$!
  PIDS+=("$AGENT")
}

ADMIN_PORT="$(free_port)"
say "starting tidemark-mirror (admin: http://127.0.0.1:$ADMIN_PORT/statusz) with a live workload"
workload &
WL=$!
PIDS+=("$WL")
run_agent 1
sleep "${KILL_AFTER:-1.5}"
say "SIGKILL the agent mid-way (pid $AGENT), then restart it: it resumes from the checkpoint"
kill -9 "$AGENT" 2>/dev/null || true
wait "$AGENT" 2>/dev/null || true
"$BIN" checkpoint -c "$WORK/mirror.yaml" | sed 's/^/   checkpoint: /' >&2 || true
run_agent 2
wait "$WL"

say "verifying target == source, key by key"
"$BIN" verify -c "$WORK/mirror.yaml" --wait 60s >"$WORK/verify.json"
cat "$WORK/verify.json" >&2
STATUS="$(statusz "127.0.0.1:$ADMIN_PORT" || true)"
WATERMARK="$(echo "$STATUS" | grep -o '"lastAppliedRevision":[0-9]*' | cut -d: -f2)"
SRCREV="$(ctl "$SRC" endpoint status -w json | grep -o '"revision":[0-9]*' | head -1 | cut -d: -f2)"
say "graceful stop (SIGTERM)"
kill -TERM "$AGENT"
wait "$AGENT" && echo "   agent exited 0" >&2
"$BIN" checkpoint -c "$WORK/mirror.yaml" >&2
echo
echo "demo OK: target == source ($(grep -o '"sourceKeys": [0-9]*' "$WORK/verify.json" | cut -d' ' -f2) keys); watermark ${WATERMARK:-?} (source revision $SRCREV)"
