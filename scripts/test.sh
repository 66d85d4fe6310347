#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls this):
#   1. installs missing dependencies (Debian packages; PyPI for the Python venv),
#   2. builds with warnings as errors (CUDA code and the Python module too)
#      and runs every unit and end-to-end test,
#   2b. builds the Python package as a wheel in build/ci (the same build as step 2), repairs
#       it with auditwheel (manylinux: the libraries it links inside) and installs that wheel
#       into .venv (Debian's torch 1.13) and .venv-torch2 (PyPI's torch 2, Lightning,
#       Accelerate; no system site packages; scripts/torch2-env.sh), and runs pytest in both,
#   3. rebuilds with clang, ASan+UBSan (and the fuzz targets) and runs every test again,
#   4. rebuilds the threaded parts with TSan and runs their tests,
#   5. runs each libFuzzer target (built in step 3) for a bounded time,
#   6. checks formatting.
# usage: scripts/test.sh            (FUZZ_SECONDS=10 by default; longer runs: scripts/fuzz.sh)
set -euo pipefail
source "$(dirname "$0")/common.sh"
FUZZ_SECONDS=${FUZZ_SECONDS:-10}

step "dependencies"
scripts/install-deps.sh

step "Python environment and package (a repaired wheel, built in build/ci, into .venv)"
# The wheel is built in build/ci with the test build's settings, so the next step only
# re-checks it: one build of the C++ code for the package and the tests, not two.
# auditwheel repairs it into build/ci/wheelhouse; .venv and .venv-torch2 get that file.
SATURATE_PIP_BUILD_DIR=build/ci scripts/python-env.sh .venv
SATURATE_WHEEL=$(echo "$PWD"/build/ci/wheelhouse/saturate-*.whl)
export SATURATE_WHEEL  # python/tests/test_wheel.py checks it and what was installed from it

step "build (warnings as errors) and test"
cmake -S . -B build/ci -G Ninja -DSATURATE_WERROR=ON -DSATURATE_BUILD_BENCH=ON \
  -DSATURATE_BUILD_PYTHON=ON -DPython_EXECUTABLE="$PWD/.venv/bin/python" >/dev/null
cmake --build build/ci -j "$JOBS"
ctest --test-dir build/ci --output-on-failure -j "$JOBS"

step "torch 2 environment (scripts/torch2-env.sh: .venv-torch2 once; the repaired wheel each run)"
scripts/torch2-env.sh .venv-torch2 "$SATURATE_WHEEL"
export SATURATE_TORCH2_PYTHON="$PWD/.venv-torch2/bin/python"
# Tests that need torch >= 2 run in line 2 below; line 1 skips them instead of re-running
# each in a torch 2 subprocess.
export SATURATE_TORCH2_LINE=1

# Two PyTorch lines, both against the repaired wheel as installed (no build tree on the path):
#  1. Debian's torch 1.13 (.venv): the whole suite. Its multi-rank tests (torchrun, Slurm,
#     hang, ranks) already run their jobs under torch 2 (SATURATE_TORCH2_PYTHON), and the
#     Lightning/Accelerate tests skip, saying so (those packages are not in .venv).
#  2. PyPI's torch 2 (.venv-torch2: no system site packages; made once, the wheel reinstalled
#     every run; test_wheel.py also installs the wheel into a brand-new venv): what depends on
#     the torch version, in-process or in jobs run with this interpreter: the wheel checks,
#     Lightning (also DDP) and Accelerate (2 CPU ranks under accelerate launch), the examples,
#     the loader's tensors and transforms, checkpoints of torch state, and the
#     auto-instrumentation's hooks (test_auto.py). Left out (-k), as run once in line 1
#     already: the torchrun jobs (torch 2 there too), doctor's analyses of what was recorded
#     (test_doctor_*: the same C++ whatever the torch; the hooks they read are tested here),
#     and the kill -9 crash loop (the commit protocol, not torch). Torch-free tests (pack,
#     watch, fleet, remote, trace, formats, doctor scenarios, the diagnosis suite) run once.
#     Line 2 takes ~3-4 min (its jobs import PyPI's CUDA build of torch 2, ~3 s each), line 1
#     ~9.
# A failure in either line fails CI; both run before it does.
TORCH2_TESTS=(test_wheel.py test_lightning.py test_accelerate.py test_examples.py
              test_loader.py test_transforms.py test_device.py test_checkpoint.py
              test_checkpoint_dist.py test_auto.py)
TORCH2_SKIP="not torchrun and not test_doctor_ and not kill_9 and not save_at_2_ranks"
# The fleet and deploy tests run exporters over the fake NVML (no GPU here).
export SATURATE_FAKE_NVML="$PWD/build/ci/src/watch/libfake_nvml.so"
python_failed=()
step "Python tests, line 1: Debian's torch 1.13 (.venv, the whole suite)"
# -rs: a real component that cannot start here (Slurm, a GPU) is skipped with its reason printed.
.venv/bin/python -m pytest -q -rs --durations=15 || python_failed+=("torch 1.13 (.venv)")
step "Python tests, line 2: PyPI's torch 2 (.venv-torch2, the torch-dependent tests)"
.venv-torch2/bin/python -m pytest -q -rs --durations=10 -k "$TORCH2_SKIP" \
  "${TORCH2_TESTS[@]/#/python/tests/}" || python_failed+=("torch 2 (.venv-torch2)")
if ((${#python_failed[@]})); then
  echo "pytest failed in: ${python_failed[*]}" >&2
  exit 1
fi

step "ASan + UBSan build (clang, with the libFuzzer targets) and test"
# One clang build serves the ASan/UBSan tests and the fuzzers (step 5): the libraries are
# compiled once, with ASan, UBSan and the fuzzers' coverage hooks.
CC=clang CXX=clang++ cmake -S . -B build/asanfuzz -G Ninja -DSATURATE_WERROR=ON \
  -DSATURATE_WITH_CUDA=OFF -DSATURATE_BUILD_FUZZ=ON -DSATURATE_SANITIZE='address;undefined' >/dev/null
cmake --build build/asanfuzz -j "$JOBS"
ctest --test-dir build/asanfuzz --output-on-failure -j "$JOBS"

step "TSan build and test of the threaded parts"
cmake -S . -B build/tsan -G Ninja -DSATURATE_WERROR=ON -DSATURATE_WITH_CUDA=OFF \
  -DSATURATE_SANITIZE=thread >/dev/null
cmake --build build/tsan -j "$JOBS" --target format_test formats_test pack_test base_test loader_test \
  feed_core_test device_loader_test device_test watch_test trace_test checkpoint_test job_test \
  remote_test
for t in base/base_test format/format_test formats/formats_test pack/pack_test feed/loader_test \
  feed/feed_core_test \
  feed/device_loader_test device/device_test watch/watch_test trace/trace_test \
  checkpoint/checkpoint_test job/job_test remote/remote_test; do
  build/tsan/src/$t
done

step "fuzz (${FUZZ_SECONDS}s per target, built in build/asanfuzz)"
FUZZ_BUILD_DIR=build/asanfuzz scripts/fuzz.sh "$FUZZ_SECONDS"

step "format"
git ls-files '*.cc' '*.h' '*.cu' | xargs clang-format --dry-run --Werror

step "all test stages passed"
