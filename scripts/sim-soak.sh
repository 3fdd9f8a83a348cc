#!/usr/bin/env bash
# Long simulator batches: runs seed blocks in release until SOAK_SECONDS elapse (default 1h),
# saving shrunk failing schedules under target-sim/soak-failures/ for `tidemark-sim replay`.
#   SOAK_SECONDS=600 SOAK_BLOCK=500 SOAK_FIRST_SEED=100000 scripts/sim-soak.sh [--replicator reference]
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target-sim}"
cargo build --release -p tidemark-sim --bin tidemark-sim
BIN="$CARGO_TARGET_DIR/release/tidemark-sim"
END=$(( $(date +%s) + ${SOAK_SECONDS:-3600} ))
SEED=${SOAK_FIRST_SEED:-$(( $(date +%s) * 1000 ))}
BLOCK=${SOAK_BLOCK:-500}
OUT="$CARGO_TARGET_DIR/soak-failures"
FAILED=0
while [ "$(date +%s)" -lt "$END" ]; do
  echo "== seeds $SEED..$(( SEED + BLOCK - 1 ))"
  if ! "$BIN" run --seeds "$BLOCK" --seed "$SEED" --save-failures "$OUT" "$@"; then
    FAILED=1
  fi
  SEED=$(( SEED + BLOCK ))
done
if [ "$FAILED" = 1 ]; then
  echo "failures saved in $OUT (replay: $BIN replay FILE)"
  exit 1
fi
