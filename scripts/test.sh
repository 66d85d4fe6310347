#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls this):
#   1. installs missing dependencies (Debian packages; PyPI for the Python venv),
#   2. builds with warnings as errors (CUDA code and the Python module too)
#      and runs every unit and end-to-end test,
#   2b. installs the Python package with `pip install .` into .venv (built in build/ci, the
#       same build as step 2), makes .venv-torch2
#       (PyPI torch >= 2, for torchrun; scripts/torch2-env.sh) and runs pytest,
#   3. rebuilds with ASan+UBSan and runs every test again,
#   4. rebuilds the threaded parts with TSan and runs their tests,
#   5. builds the libFuzzer targets with clang and runs each for a bounded time,
#   6. checks formatting.
# usage: scripts/test.sh            (FUZZ_SECONDS=30 by default)
set -euo pipefail
source "$(dirname "$0")/common.sh"
FUZZ_SECONDS=${FUZZ_SECONDS:-30}

step "dependencies"
scripts/install-deps.sh

step "Python environment and package (pip install . into .venv, built in build/ci)"
# The package is built in build/ci with the test build's settings, so the next step only
# re-checks it: one build of the C++ code for the package and the tests, not two.
SATURATE_PIP_BUILD_DIR=build/ci scripts/python-env.sh .venv

step "build (warnings as errors) and test"
cmake -S . -B build/ci -G Ninja -DSATURATE_WERROR=ON -DSATURATE_BUILD_BENCH=ON \
  -DSATURATE_BUILD_PYTHON=ON -DPython_EXECUTABLE="$PWD/.venv/bin/python" >/dev/null
cmake --build build/ci -j "$JOBS"
ctest --test-dir build/ci --output-on-failure -j "$JOBS"

step "torch 2 environment for the torchrun tests (scripts/torch2-env.sh: .venv-torch2, once)"
scripts/torch2-env.sh .venv-torch2
export SATURATE_TORCH2_PYTHON="$PWD/.venv-torch2/bin/python"

step "Python tests (pytest, against the installed package)"
# The fleet and deploy tests run exporters over the fake NVML (no GPU here).
export SATURATE_FAKE_NVML="$PWD/build/ci/src/watch/libfake_nvml.so"
# -rs: a real component that cannot start here (Slurm, a GPU) is skipped with its reason printed.
.venv/bin/python -m pytest -q -rs

step "ASan + UBSan build and test"
cmake -S . -B build/asan -G Ninja -DSATURATE_WERROR=ON -DSATURATE_WITH_CUDA=OFF \
  -DSATURATE_SANITIZE='address;undefined' >/dev/null
cmake --build build/asan -j "$JOBS"
ctest --test-dir build/asan --output-on-failure -j "$JOBS"

step "TSan build and test of the threaded parts"
cmake -S . -B build/tsan -G Ninja -DSATURATE_WERROR=ON -DSATURATE_WITH_CUDA=OFF \
  -DSATURATE_SANITIZE=thread >/dev/null
cmake --build build/tsan -j "$JOBS" --target format_test pack_test base_test loader_test feed_core_test \
  device_loader_test device_test watch_test trace_test checkpoint_test job_test remote_test
for t in base/base_test format/format_test pack/pack_test feed/loader_test feed/feed_core_test \
  feed/device_loader_test device/device_test watch/watch_test trace/trace_test \
  checkpoint/checkpoint_test job/job_test remote/remote_test; do
  build/tsan/src/$t
done

step "fuzz (${FUZZ_SECONDS}s per target)"
scripts/fuzz.sh "$FUZZ_SECONDS"

step "format"
git ls-files '*.cc' '*.h' '*.cu' | xargs clang-format --dry-run --Werror

step "all test stages passed"
