#!/usr/bin/env bash
# CI fuzz smoke: builds every cargo-fuzz target, replays every kept crash input
# (fuzz/regressions/<target>/), then fuzzes each target for a short fixed time.
# Exits non-zero on any crash. FUZZ_SMOKE_SECONDS overrides the per-target time (15 s).
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${FUZZ_SMOKE_SECONDS:-15}
targets=(checkpoint_decode config_parse batcher inventory_select manifest_parse mirror_core)
export RUSTC_BOOTSTRAP=1
start=$SECONDS

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "installing cargo-fuzz" >&2
  cargo install cargo-fuzz --locked >&2
fi

echo "fuzz smoke: building ${#targets[@]} targets" >&2
(cd fuzz && cargo fuzz build -O -s none)
# cargo fuzz honours CARGO_TARGET_DIR (absolute, or relative to fuzz/ where it builds).
target_dir=${CARGO_TARGET_DIR:-target}
case "$target_dir" in /*) ;; *) target_dir="fuzz/$target_dir" ;; esac
bin="$target_dir/x86_64-unknown-linux-gnu/release"

for t in "${targets[@]}"; do
  kept=(fuzz/regressions/"$t"/*)
  if [ -e "${kept[0]}" ]; then
    echo "fuzz smoke: $t: replaying ${#kept[@]} kept crash input(s)" >&2
    "$bin/$t" "${kept[@]}" 2>&1 | tail -n 3 >&2
  fi
done

for t in "${targets[@]}"; do
  echo "fuzz smoke: $t for ${secs}s" >&2
  log=$(mktemp)
  # A fresh work corpus: the run starts from the checked-in seeds only, so its length and
  # result do not depend on earlier local campaigns.
  work=$(mktemp -d)
  if ! FUZZ_WORK_CORPUS="$work" bash scripts/fuzz.sh "$t" "$secs" >"$log" 2>&1; then
    grep -E "panicked|Failing input|artifacts/|ERROR" "$log" | head -n 20 >&2 || true
    tail -n 40 "$log" >&2
    rm -rf "$log" "$work"
    echo "fuzz smoke: $t crashed (input kept under fuzz/artifacts/$t/)" >&2
    exit 1
  fi
  grep -E "stat::average_exec_per_sec|stat::number_of_executed_units" "$log" | sed "s/^/  $t /" >&2 || true
  rm -rf "$log" "$work"
done
echo "fuzz smoke: all targets clean in $((SECONDS - start))s" >&2
