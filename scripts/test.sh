#!/usr/bin/env bash
# The single test command: installs what is missing, then format, lint and test everything.
# CI runs exactly this (via .ci/run). Safe to run repeatedly; builds are incremental.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*" >&2; }

# A clean CI clone builds everything once: incremental caches there only cost disk (about
# 9 GB for this workspace) and time. Developers keep cargo's default.
if [ "${CI:-}" = true ]; then export CARGO_INCREMENTAL=0; fi

step "installing what is missing (etcd 3.4 + 3.5, protoc, kubectl)"
# install-etcd.sh prints `export TIDEMARK_ETCD_34=...` / `export TIDEMARK_ETCD_35=...`.
eval "$(bash scripts/install-etcd.sh | grep '^export ')"
export TIDEMARK_ETCD_34 TIDEMARK_ETCD_35
# install-etcd.sh installed kubectl when it was missing: the operator test must not skip.
export TIDEMARK_REQUIRE_KUBECTL=1
for tool in rustfmt clippy-driver; do
  command -v "$tool" >/dev/null 2>&1 || rustup component add "${tool%-driver}" >&2
done

step "cargo fmt --check"
cargo fmt --all --check

step "cargo clippy (all targets, -D warnings)"
cargo clippy --workspace --all-targets -- -D warnings

step "cargo test --workspace"
# Every real-server test bounds its own waits; this outer bound makes any hang nobody
# foresaw a red run with output, well inside CI's limit, instead of a run that never ends.
timeout --signal=TERM --kill-after=30s "${TIDEMARK_TEST_TIMEOUT:-45m}" \
  cargo test --workspace --no-fail-fast

step "fuzz regressions on stable (seed corpus and every kept crash)"
# fuzz/ is a workspace of its own (its targets need nightly flags); its tests replay the
# same checks as the targets, without libFuzzer.
(cd fuzz && cargo test --quiet)

if [ -x scripts/sim-batch.sh ]; then
  step "simulator seed batch"
  bash scripts/sim-batch.sh
fi

if [ -x scripts/fuzz-smoke.sh ]; then
  step "fuzz smoke"
  bash scripts/fuzz-smoke.sh
fi

step "all checks passed"
