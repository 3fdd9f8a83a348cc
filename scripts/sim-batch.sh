#!/usr/bin/env bash
# CI simulator batch: a fixed block of generated seeds (every fault kind, drift, reconciliation
# and drain in the swarm mix), each run twice to check determinism. Fails on any violation,
# printing the shrunk schedule of the first failure and how to replay it.
#   SIM_SEEDS=300 SIM_FIRST_SEED=0 scripts/sim-batch.sh
# Release build: the seeds run much faster than in debug, which pays for the extra compile.
set -euo pipefail
cd "$(dirname "$0")/.."
SEEDS=${SIM_SEEDS:-300}
FIRST=${SIM_FIRST_SEED:-0}
cargo build --release -p tidemark-sim --bin tidemark-sim
BIN="${CARGO_TARGET_DIR:-target}/release/tidemark-sim"
# Every fault kind is in the mix, the source restore included. SIM_RESTORE=0 leaves the
# restore out (to tell a restore finding from another while bisecting).
drop=()
if [ "${SIM_RESTORE:-1}" = 0 ]; then drop=(--drop-fault restore_source); fi
exec "$BIN" run --seeds "$SEEDS" --seed "$FIRST" --determinism \
  --shrink-first 1 --shrink-budget 100 "${drop[@]}"
