#!/usr/bin/env bash
# Runs one cargo-fuzz target for a while:
#
#   scripts/fuzz.sh TARGET [SECONDS] [extra libFuzzer flags...]
#
# TARGET is one of: checkpoint_decode config_parse batcher inventory_select manifest_parse
# mirror_core (see fuzz/src/*.rs for what each checks). SECONDS defaults to 60.
# New interesting inputs go to fuzz/target/work-corpus/TARGET (not checked in); the seeds in
# fuzz/corpus/TARGET are only read. A crash leaves its input in fuzz/artifacts/TARGET/ and
# exits non-zero; replay it on stable with
#   (cd fuzz && cargo run --example replay -- TARGET artifacts/TARGET/crash-...)
# and keep it as fuzz/regressions/TARGET/<what-it-caught> once fixed.
#
# Environment: FUZZ_JOBS=N runs N fuzzing processes in parallel (default 1);
# FUZZ_WORK_CORPUS=DIR collects new inputs there instead of target/work-corpus/TARGET;
# FUZZ_SANITIZER=address builds with ASan (default none: the workspace forbids unsafe code).
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

target=${1:?usage: scripts/fuzz.sh TARGET [SECONDS] [libFuzzer flags...]}
secs=${2:-60}
shift $(( $# < 2 ? $# : 2 ))

# cargo-fuzz passes nightly-only flags (-Z sanitizer, -C passes=sancov-module); this lets
# the stable toolchain accept them.
export RUSTC_BOOTSTRAP=1
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "installing cargo-fuzz" >&2
  cargo install cargo-fuzz --locked >&2
fi

work="${FUZZ_WORK_CORPUS:-target/work-corpus/$target}"
mkdir -p "$work"
jobs=${FUZZ_JOBS:-1}
extra=()
if [ "$jobs" -gt 1 ]; then
  extra+=("-fork=$jobs")
fi
dict="dict/$target.dict"
if [ -f "$dict" ]; then
  extra+=("-dict=$dict")
fi
exec cargo fuzz run -O -s "${FUZZ_SANITIZER:-none}" "$target" "$work" "corpus/$target" -- \
  -max_total_time="$secs" -print_final_stats=1 "${extra[@]}" "$@"
