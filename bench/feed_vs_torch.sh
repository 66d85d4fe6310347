#!/usr/bin/env bash
# saturate's input pipeline vs PyTorch's DataLoader, on the same files and the
# same cores, in one run (about 5-8 minutes on 2 cores):
#
#   A. 3,000 photos (JPEG ImageFolder): RandomResizedCrop(224) + flip, batch 64,
#      uint8 and normalized float32: torch DataLoader at num_workers 0-4 vs
#      `saturate bench feed`, next to the decode-only bound (libjpeg-turbo full
#      decode on 2 threads, bench/decode_bound; and PIL decode in a Pool(2)).
#   B. Fashion-MNIST (60,000 28x28): batch 256, float normalized: a
#      tensor-backed torch Dataset at num_workers 0-2 vs `saturate bench feed`.
#   C. Max RSS of `saturate bench feed` over 10 photo epochs vs the bound
#      batch_bytes x (prefetch + max_held_batches) + mapping + decode scratch.
#
# It prints a table and the ratios, and writes all numbers as JSON. Details of
# what is timed: bench/feed_vs_torch.py. Results: docs/benchmarks.md.
#
# Needs:
#   - a Python with torch, torchvision, pillow and numpy, e.g.
#       python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch torchvision pillow
#     (CPU wheels: --index-url https://download.pytorch.org/whl/cpu), passed as PYTHON=...;
#   - the build deps of saturate (scripts/install-deps.sh), Debian's
#     plasma-workspace-wallpapers (for scripts/make-photo-dataset),
#     dataset-fashion-mnist and time (/usr/bin/time).
#
# usage: PYTHON=/path/to/python bench/feed_vs_torch.sh
#
# environment:
#   PYTHON          Python with torch + torchvision (default: python3)
#   BENCH_DATA      where the photos and packed datasets are cached
#                   (default: /tmp/saturate-bench-data; made on first use, ~2 min)
#   BUILD_DIR       build folder (default: build-bench in the repository)
#   OUT             JSON results (default: $BUILD_DIR/feed_vs_torch.json)
#   TORCH_WORKERS   num_workers swept for torch, photos uint8 (default: "0 1 2 3 4")
#   FLOAT_WORKERS   num_workers tried for torch, photos float, besides the best
#                   uint8 one (default: "2 3")
#   FMNIST_WORKERS  num_workers swept for torch, Fashion-MNIST (default: "0 1 2")
#   REPEATS         runs of each head-to-head pair, alternating; best taken (default: 3)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build-bench}
data=${BENCH_DATA:-/tmp/saturate-bench-data}
python=${PYTHON:-python3}
out=${OUT:-$build/feed_vs_torch.json}
fmnist_dir=/usr/share/datasets/fashion-mnist

die() { echo "feed_vs_torch.sh: $*" >&2; exit 2; }

if ! "$python" -c 'import torch, torchvision, PIL, numpy' 2>/dev/null; then
  die "$python lacks torch/torchvision/pillow/numpy: pip install torch torchvision pillow
  (into a venv) and run with PYTHON=/path/to/venv/bin/python"
fi
[[ -f $fmnist_dir/train-images-idx3-ubyte.gz ]] ||
  die "no Fashion-MNIST in $fmnist_dir: apt-get install dataset-fashion-mnist"
skip_rss=()
if [[ ! -x /usr/bin/time ]]; then
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    apt-get install -y -qq time >/dev/null || true
  fi
  if [[ ! -x /usr/bin/time ]]; then
    echo "feed_vs_torch.sh: no /usr/bin/time (apt-get install time): skipping the RSS part" >&2
    skip_rss=(--skip-rss)
  fi
fi

echo "== configure and build ($build)"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSATURATE_BUILD_BENCH=ON \
  -DSATURATE_BUILD_TESTS=OFF -DSATURATE_WITH_CUDA=OFF >/dev/null
cmake --build "$build" --target saturate decode_bound
sat=$build/tools/saturate/saturate

source "$root/bench/bench_data.sh"  # photos.sat and fmnist.sat in $data, page cache warm

echo "== machine"
echo "cores: $(nproc); $(lscpu | grep 'Model name' | sed 's/  */ /g')"
free -g | awk '/^Mem:/ {print "RAM: " $2 " GiB"}'
echo "date: $(date -u)"
echo "load before: $(uptime)"

"$python" "$root/bench/feed_vs_torch.py" --saturate "$sat" \
  --decode-bound "$build/bench/decode_bound" \
  --photos "$photos/train" --photos-sat "$data/photos.sat" \
  --fmnist-images "$fmnist_dir/train-images-idx3-ubyte.gz" \
  --fmnist-labels "$fmnist_dir/train-labels-idx1-ubyte.gz" \
  --fmnist-sat "$data/fmnist.sat" --out "$out" "${skip_rss[@]}"

echo "load after: $(uptime)"
