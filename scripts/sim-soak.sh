#!/usr/bin/env bash
# Long simulator batches: runs seed blocks in release until SOAK_SEEDS seeds have run (default:
# no count) or SOAK_SECONDS elapse (default 1h), whichever comes first, saving shrunk failing
# schedules under $CARGO_TARGET_DIR/soak-failures/ for `tidemark-sim replay`. The last line
# names the seed range that ran and the number of failing blocks.
#   SOAK_SEEDS=20000 SOAK_SECONDS=7200 SOAK_BLOCK=500 SOAK_FIRST_SEED=100000 scripts/sim-soak.sh [--replicator reference]
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target-sim}"
cargo build --release -p tidemark-sim --bin tidemark-sim
BIN="$CARGO_TARGET_DIR/release/tidemark-sim"
END=$(( $(date +%s) + ${SOAK_SECONDS:-3600} ))
FIRST=${SOAK_FIRST_SEED:-$(( $(date +%s) * 1000 ))}
SEED=$FIRST
LAST=$(( FIRST + ${SOAK_SEEDS:-0} ))
BLOCK=${SOAK_BLOCK:-500}
OUT="$CARGO_TARGET_DIR/soak-failures"
FAILED=0
while [ "$(date +%s)" -lt "$END" ] && { [ "${SOAK_SEEDS:-0}" = 0 ] || [ "$SEED" -lt "$LAST" ]; }; do
  N=$BLOCK
  if [ "${SOAK_SEEDS:-0}" != 0 ] && [ $(( SEED + N )) -gt "$LAST" ]; then N=$(( LAST - SEED )); fi
  echo "== seeds $SEED..$(( SEED + N - 1 ))"
  if ! "$BIN" run --seeds "$N" --seed "$SEED" --save-failures "$OUT" "$@"; then
    FAILED=$(( FAILED + 1 ))
  fi
  SEED=$(( SEED + N ))
done
echo "soak: seeds $FIRST..$(( SEED - 1 )) ($(( SEED - FIRST )) seeds), $FAILED failing block(s)"
if [ "$FAILED" != 0 ]; then
  echo "failures saved in $OUT (replay: $BIN replay FILE)"
  exit 1
fi
