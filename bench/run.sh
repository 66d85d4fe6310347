#!/usr/bin/env bash
# Builds bench/format_bench (Release, no tests, no CUDA), makes a sample photo
# ImageFolder if there is none, runs the benchmarks and prints the results.
# The whole run (build and photo set aside) takes well under 3 minutes.
#
# usage: bench/run.sh [extra format_bench / Google Benchmark flags]
#   e.g. bench/run.sh --benchmark_filter='read/.*'
#
# environment:
#   BUILD_DIR              build folder (default: build-bench in the repository)
#   SATURATE_BENCH_PHOTOS  ImageFolder to pack (default: /tmp/saturate-bench-photos/train,
#                          made with scripts/make-photo-dataset --train 1000 --val 0 if missing)
#   MIN_TIME               --benchmark_min_time in seconds (default: 1)
#   REPETITIONS            --benchmark_repetitions (default: 3; the summary uses medians)
#
# Results are also written as JSON to $BUILD_DIR/format_bench.json.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build-bench}
min_time=${MIN_TIME:-1}
repetitions=${REPETITIONS:-3}

echo "== configure and build ($build)"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DSATURATE_BUILD_BENCH=ON -DSATURATE_BUILD_TESTS=OFF -DSATURATE_WITH_CUDA=OFF >/dev/null
cmake --build "$build" --target format_bench

default_photos_root=/tmp/saturate-bench-photos
photos=${SATURATE_BENCH_PHOTOS:-$default_photos_root/train}
if [[ ! -d $photos && -z ${SATURATE_BENCH_PHOTOS:-} ]]; then
  echo "== making a photo ImageFolder in $default_photos_root"
  if ! "$root/scripts/make-photo-dataset" "$default_photos_root" --train 1000 --val 0; then
    echo "run.sh: could not make photos; the pack benchmarks will be skipped" >&2
  fi
fi

# format_bench removes its own temporary datasets at exit; the trap also
# covers a run that is interrupted.
tmp=$(mktemp -d "${TMPDIR:-/tmp}/saturate-bench-run.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

echo "== machine"
echo "cores: $(nproc)"
lscpu | grep 'Model name' | sed 's/  */ /g'
free -g | awk '/^Mem:/ {print "RAM: " $2 " GiB"}'
echo "date: $(date -u)"

echo "== format_bench (min_time ${min_time}s x $repetitions; reads come from the page cache)"
TMPDIR=$tmp "$build/bench/format_bench" --photos="$photos" \
  --benchmark_min_time="$min_time" --benchmark_repetitions="$repetitions" \
  --benchmark_display_aggregates_only=true \
  --benchmark_out="$build/format_bench.json" --benchmark_out_format=json "$@"
