#!/usr/bin/env bash
# Install the Debian packages saturate needs to build, test and make its sample
# data sets -- only those not installed yet.  Safe to run again: with everything
# present it touches nothing and just says so.
#
# usage: scripts/install-deps.sh        (as root, or as a user with sudo)
set -euo pipefail

packages=(
  # toolchain
  build-essential cmake ninja-build pkg-config git
  clang libclang-rt-14-dev clang-format
  # tests and benchmarks (gdb: a hung test's child is reported with its stacks)
  libgtest-dev libgmock-dev libbenchmark-dev gdb
  # libraries
  libjpeg62-turbo-dev libpng-dev zlib1g-dev libxxhash-dev
  libcli11-dev nlohmann-json3-dev libcpp-httplib-dev
  # saturate fleet talks to https:// Prometheus servers
  libssl-dev
  # remote datasets (s3://, http(s)://): libcurl with AWS SigV4; the curl tool sets up their tests
  libcurl4-openssl-dev curl
  # WebDataset tar shards and TFRecord files (src/formats): tar headers, tf.Example, CRC-32C
  libarchive-dev libprotobuf-dev protobuf-compiler libboost-dev
  # HDF5 files for saturate pack hdf5 (src/formats/hdf5.cc)
  libhdf5-dev
  # sample data (scripts/make-photo-dataset, Fashion-MNIST)
  python3 python3-pil dataset-fashion-mnist plasma-workspace-wallpapers
  # the Python package, its tests and examples (scripts/python-env.sh): Debian's
  # CPU build of torch 1.13 is ~50 MB where PyPI's torch 2.x pulls GBs of CUDA wheels
  python3-dev python3-venv python3-numpy python3-pytest python3-torch python3-torchvision
  # saturate watch's tests: a real Prometheus server scrapes it, and its parser reads the page
  prometheus python3-prometheus-client
  # saturate doctor's test loads report.html in a real headless browser
  chromium
  # multi-rank tests start a one-node Slurm cluster (scripts/slurm-cluster.sh)
  slurm-wlm munge
)

missing=()
for pkg in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  if [[ "$status" != "install ok installed" ]]; then
    missing+=("$pkg")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all dependencies present (${#packages[@]} packages)"
  exit 0
fi

sudo=()
if ((EUID != 0)); then
  if command -v sudo >/dev/null 2>&1; then
    sudo=(sudo)
  else
    echo "install-deps: not root and no sudo; as root run:" >&2
    echo "  apt-get update && apt-get install -y --no-install-recommends ${missing[*]}" >&2
    exit 1
  fi
fi

"${sudo[@]}" apt-get update
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y --no-install-recommends "${missing[@]}"

echo "install-deps: installed ${#missing[@]} package(s): ${missing[*]}"
