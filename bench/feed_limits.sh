#!/usr/bin/env bash
# saturate's feed at the machine's limits (issue 29), in one run of about
# 9 minutes on 2 cores:
#
#   A. Fashion-MNIST, batch 256, float normalized: the torch DataLoader's best
#      run (every num_workers, every repeat) vs `saturate bench feed` at every
#      fixed thread count and auto, beside the memory-bandwidth bounds
#      (bench/memcpy_bound: with streaming stores and with the cached stores
#      the loader uses).
#   B. The photo set, RandomResizedCrop 224 uint8, batch 64, over 2 and 8
#      epochs: every fixed thread count vs --threads auto, then the best fixed
#      count and auto head to head in alternated pairs (median of the ratios).
#
# What is timed and how the bound is computed: bench/feed_limits.py.
# Results: docs/benchmarks.md.
#
# Needs what bench/feed_vs_torch.sh needs (a Python with torch, Debian's
# plasma-workspace-wallpapers and dataset-fashion-mnist) and shares its
# datasets (BENCH_DATA).
#
# usage: PYTHON=/path/to/python bench/feed_limits.sh
#
# environment:
#   PYTHON          Python with torch (default: python3)
#   BENCH_DATA      dataset cache (default: /tmp/saturate-bench-data)
#   BUILD_DIR       build folder (default: build-bench in the repository)
#   OUT             JSON results (default: $BUILD_DIR/feed_limits.json)
#   REPEATS         alternating repeats of every configuration (default: 3)
#   PAIRS           head-to-head pairs of the best fixed setting and auto (default: 16)
#   FMNIST_WORKERS  num_workers swept for the DataLoader (default: "0 1 2")
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build-bench}
data=${BENCH_DATA:-/tmp/saturate-bench-data}
python=${PYTHON:-python3}
out=${OUT:-$build/feed_limits.json}

"$python" -c 'import torch, torchvision, PIL, numpy' 2>/dev/null || {
  echo "feed_limits.sh: $python lacks torch/torchvision/pillow/numpy (see bench/feed_vs_torch.sh)" >&2
  exit 2
}

echo "== configure and build ($build)"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSATURATE_BUILD_BENCH=ON \
  -DSATURATE_BUILD_TESTS=OFF -DSATURATE_WITH_CUDA=OFF >/dev/null
cmake --build "$build" --target saturate memcpy_bound
sat=$build/tools/saturate/saturate

source "$root/bench/bench_data.sh"
[[ -f $fmnist_dir/train-images-idx3-ubyte.gz ]] || {
  echo "feed_limits.sh: no Fashion-MNIST in $fmnist_dir: apt-get install dataset-fashion-mnist" >&2
  exit 2
}

echo "== machine: $(nproc) cores; $(lscpu | grep 'Model name' | sed 's/  */ /g'); $(date -u)"
echo "load before: $(uptime)"
"$python" "$root/bench/feed_limits.py" --saturate "$sat" \
  --memcpy-bound "$build/bench/memcpy_bound" --photos-sat "$data/photos.sat" \
  --fmnist-images "$fmnist_dir/train-images-idx3-ubyte.gz" \
  --fmnist-labels "$fmnist_dir/train-labels-idx1-ubyte.gz" \
  --fmnist-sat "$data/fmnist.sat" --out "$out"
echo "load after: $(uptime)"
