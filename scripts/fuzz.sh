#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan+UBSan) and runs each for SECONDS.
# Crashes are saved under BUILD/artifacts/ and fail the script.
# usage: scripts/fuzz.sh [SECONDS]   (BUILD: $FUZZ_BUILD_DIR, else build/fuzz)
set -euo pipefail
source "$(dirname "$0")/common.sh"
seconds=${1:-30}
# FUZZ_BUILD_DIR: a build already configured with SATURATE_BUILD_FUZZ (scripts/test.sh's
# build/asan, whose tests share its libraries); default: build/fuzz, configured here.
build=${FUZZ_BUILD_DIR:-build/fuzz}
if [[ -z ${FUZZ_BUILD_DIR:-} ]]; then
  CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DSATURATE_BUILD_FUZZ=ON \
    -DSATURATE_BUILD_TESTS=OFF -DSATURATE_WITH_CUDA=OFF \
    -DSATURATE_SANITIZE='address;undefined' >/dev/null
fi
targets=(shard_fuzz manifest_fuzz idx_fuzz table_fuzz image_fuzz jpeg_entries_fuzz procfs_fuzz run_fuzz job_fuzz
  manifest_ckpt_fuzz remote_url_fuzz tar_index_fuzz tfrecord_fuzz)
cmake --build "$build" -j "$JOBS" --target "${targets[@]}"
mkdir -p "$build/artifacts"

# Runs target $1 for $seconds; its log is $build/$1.log, its exit status $build/$1.rc.
fuzz_one() {
  local t=$1 corpus=$build/corpus/$1
  mkdir -p "$corpus"
  [[ -d fuzz/seeds/$t ]] && cp -n fuzz/seeds/$t/* "$corpus"/ 2>/dev/null || true
  local rc=0
  "$build/fuzz/$t" "$corpus" -max_total_time="$seconds" -rss_limit_mb=2048 \
    -artifact_prefix="$build/artifacts/$t-" -print_final_stats=1 >"$build/$t.log" 2>&1 || rc=$?
  echo "$rc" >"$build/$t.rc"
}

# Each fuzzer is one process on one core: run $JOBS at a time.
echo "fuzz: ${#targets[@]} targets, ${seconds}s each, $JOBS at a time"
for t in "${targets[@]}"; do
  if (($(jobs -rp | wc -l) >= JOBS)); then wait -n || true; fi
  fuzz_one "$t" &
done
wait
failed=()
for t in "${targets[@]}"; do
  if [[ $(cat "$build/$t.rc") != 0 ]]; then
    tail -n 60 "$build/$t.log"
    failed+=("$t")
  fi
  echo "fuzz: $t: $(grep -E 'stat::number_of_executed_units|stat::new_units_added' \
    "$build/$t.log" | tr -s ' ' | paste -sd' ')"
done
if ((${#failed[@]})); then
  echo "fuzz: FAILED: ${failed[*]}; the crashing inputs are in $build/artifacts/" >&2
  exit 1
fi
