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
# The source-restore fault is left out of the gating batch until the open findings in
# sim/regressions/open/ (a false promise after a restore in shared history) are fixed; its
# scripted scenarios and teeth run in `cargo test -p tidemark-sim --test restore`. Run it
# with SIM_RESTORE=1 to include it.
drop=(--drop-fault restore_source)
if [ "${SIM_RESTORE:-0}" = 1 ]; then drop=(); fi
exec "$BIN" run --seeds "$SEEDS" --seed "$FIRST" --determinism \
  --shrink-first 1 --shrink-budget 100 "${drop[@]}"
