#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan+UBSan) and runs each for SECONDS.
# Crashes are saved under build/fuzz/artifacts/ and fail the script.
# usage: scripts/fuzz.sh [SECONDS]
set -euo pipefail
source "$(dirname "$0")/common.sh"
seconds=${1:-30}
CC=clang CXX=clang++ cmake -S . -B build/fuzz -G Ninja -DSATURATE_BUILD_FUZZ=ON \
  -DSATURATE_BUILD_TESTS=OFF -DSATURATE_WITH_CUDA=OFF \
  -DSATURATE_SANITIZE='address;undefined' >/dev/null
targets=(shard_fuzz manifest_fuzz idx_fuzz table_fuzz image_fuzz procfs_fuzz run_fuzz job_fuzz manifest_ckpt_fuzz remote_url_fuzz
  tar_index_fuzz tfrecord_fuzz)
cmake --build build/fuzz -j "$JOBS" --target "${targets[@]}"
mkdir -p build/fuzz/artifacts
for t in "${targets[@]}"; do
  corpus=build/fuzz/corpus/$t
  mkdir -p "$corpus"
  [[ -d fuzz/seeds/$t ]] && cp -n fuzz/seeds/$t/* "$corpus"/ 2>/dev/null || true
  echo "fuzz: $t for ${seconds}s"
  log=build/fuzz/$t.log
  if ! build/fuzz/fuzz/$t "$corpus" -max_total_time="$seconds" -rss_limit_mb=2048 \
    -artifact_prefix=build/fuzz/artifacts/$t- -print_final_stats=1 >"$log" 2>&1; then
    tail -n 60 "$log"
    echo "fuzz: $t FAILED; the crashing input is in build/fuzz/artifacts/" >&2
    exit 1
  fi
  grep -E 'stat::number_of_executed_units|stat::new_units_added' "$log" | tr -s ' ' | paste -sd' '

done
