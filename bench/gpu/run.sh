#!/usr/bin/env bash
# Builds, tests and measures saturate's GPU path (issue 7) in one command on a lent GPU machine
# (H100, 16 cores, no package registry), from the repository root:
#
#   bash bench/gpu/fetch-deps.sh     # once, on a machine with network: fills bench/gpu/.deps
#   bash bench/gpu/run.sh            # there, with bench/gpu/.deps carried
#   bash bench/gpu/run.sh --dry-run  # here, without a GPU: the same unpack + build (into
#                                    # build/gpu-dry) and the CPU-runnable steps
#
# Steps (each timed; a failure is reported, later steps that do not need it still run, and
# the exit code is 1 if any step failed), most informative first:
#   deps        check bench/gpu/.deps against its SHA256SUMS
#   machine     GPU, driver, cores, compilers, Python packages (read only)
#   unpack      dpkg -x the .debs into a prefix (/tmp/satdeps); repoint absolute symlinks and
#               the .pc files into it; a pkg-config wrapper around the prefix's pkgconf; the
#               Boost headers and libnvjpeg (from the nvidia-nvjpeg wheel) beside them
#   configure   CMake Release, CUDA (sm_90), Python module, tests, bench -> build/gpu, without
#               libcurl, libarchive and libhdf5 (SATURATE_WITH_*=OFF: too many runtime libraries
#               to carry; the GPU steps do not use s3://, tar shards or HDF5)
#   build       only the tool, the module, h2d_bench and the GPU tests (gpu_test_targets.txt)
#   provenance  every library CMake found lies in the prefix (--dry-run: also no header or
#               library of those packages came from this machine's /usr)
#   ctest-gpu   ctest -L gpu (the CUDA loader, nvJPEG decode)
#   imports     import saturate before and after torch, each in a fresh interpreter; where the
#               module's libraries came from; if the first order dies, what tells the cause
#               apart (the Debian copies loaded first, one at a time) and its native stack
#   pytest-gpu  pytest -m gpu python/tests (CUDA batches, both import orders, GPM counters,
#               GPU decode, the checkpoint pool's page-locking)
#   nvjpeg      device_loader_nvjpeg_gpu_test run directly: the pixel differences it prints
#   diagnosis   doctor's accuracy suite, GPU scenarios (bench/diagnosis/run.py --gpu --quick,
#               ~2 minutes): pageable copies, host syncs, small kernels, AMP off, a healthy
#               loop; each under saturate doctor with GPU sampling, its fix applied and run
#               again -> diagnosis_gpu.json (rows, goals, tables); run dirs in logs.tar.gz.
#               --dry-run: the no-GPU message, and run.py --smoke (shrunk, on the CPU)
#   photos      3,000 ImageNet-like JPEGs (scripts/make-photo-dataset, from the carried
#               wallpapers)
#   pack        saturate pack folder -> a .sat dataset
#   feed        saturate bench feed --device cuda, CPU / GPU / auto decode, 2 threads and all,
#               and --device cpu: the pipeline alone, no model; nvJPEG on the same photos
#               stored whole (no restart markers: not cut to the crop); then Fashion-MNIST-shaped
#               arrays (random pixels) converted to float on the host, --device cuda and cpu
#   example     examples/train_resnet18_photos.py as a user runs it (device="cuda"), 100 steps;
#               if it dies, again under cuda-gdb for the native stacks
#   checkpoint  bench/gpu_checkpoint_bench.py: saturate vs torch.save vs dcp.async_save while
#               ResNet-50 and a 1.2 GiB GPT train -> checkpoint_bench.json
#   matrix      bench/gpu_train_bench.py --matrix default: ResNet-50 / ResNet-18 fed from 2, 4
#               and 8 cores, CPU vs GPU decode, DataLoader, DALI if installed, vs the
#               GPU-resident ceiling -> matrix.json
#   sanitizer   compute-sanitizer memcheck on device_loader_gpu_test
#   h2d         build/gpu/bench/h2d_bench --json -> h2d.json
#   train       bench/gpu_train_bench.py: ResNet-50 with bf16 autocast fed by saturate,
#               DataLoader (normalizing on the CPU workers, and on the GPU) and GPU-resident
#               synthetic data -> train_bench.json
#   train-fp16  the same with fp16 autocast + GradScaler -> train_bench_fp16.json
# Earlier runs measured sanitizer, h2d, train and train-fp16 (docs/benchmarks.md); with one
# 10-minute call, leave them out: SKIP="sanitizer h2d train train-fp16".
# --dry-run runs each step only as far as a machine without a GPU can (listing the GPU tests,
# checking the programs were built), makes 200 photos and runs the benches' --smoke modes.
#
# Output: $OUT (the device tool's folder) or runs/gpu (runs/gpu-dry): run.log (everything),
# summary.txt, diagnosis_gpu.json, checkpoint_bench.json, matrix.json, h2d.json,
# train_bench.json, train_bench_fp16.json, logs.tar.gz (one log per step, CTest's log, the
# diagnosis run directories) -- nine files with every step run, one more than the device
# tool brings back: SKIP one of the earlier runs' (h2d, train, train-fp16).
#
# usage: bash bench/gpu/run.sh [--dry-run] [--help]
# environment:
#   PYTHON        the Python that holds torch (default: python3; --dry-run: .venv/bin/python)
#   PHOTOS        training images to make (default 3000; --dry-run 200)
#   RUN_BUDGET    seconds the whole run may take (default 570: one 10-minute device call);
#                 the training bench gets what the earlier steps left
#   SATDEPS       where to unpack the .debs (default /tmp/satdeps; --dry-run /tmp/satdeps-dry)
#   BUILD         the build folder (default build/gpu; --dry-run build/gpu-dry)
#   UNTIL         stop after this step (e.g. pack: build, test and make the data, then a
#                 command of your own can use them); the later steps are reported skipped
#   SKIP          steps not to run, space-separated (e.g. "h2d train train-fp16": what an
#                 earlier run measured); they are reported skipped
#   TRAIN_ARGS    more arguments for the training bench, after run.sh's own (which they
#                 override), e.g. "--amp bf16"; split on spaces
# (The step functions are called through run_step, which shellcheck cannot follow.)
# shellcheck disable=SC2317
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed '/^# *(The step functions/,$d; s/^# \{0,1\}//'; }
dry=0
for arg in "$@"; do
  case $arg in
    --dry-run) dry=1 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "run.sh: unknown argument: $arg (see --help)" >&2; exit 2 ;;
  esac
done

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
t_run=$(date +%s)
deps=$root/bench/gpu/.deps
cores=$(nproc)
if ((dry)); then
  build=${BUILD:-$root/build/gpu-dry}
  prefix=${SATDEPS:-/tmp/satdeps-dry}
  out=${OUT:-$root/runs/gpu-dry}
  data=/tmp/saturate-gpu-dry-data
  photos_n=${PHOTOS:-200}
  default_py=python3
  [[ -x $root/.venv/bin/python ]] && default_py=$root/.venv/bin/python
else
  build=${BUILD:-$root/build/gpu}
  prefix=${SATDEPS:-/tmp/satdeps}
  out=${OUT:-$root/runs/gpu}
  data=/tmp/saturate-gpu-data
  photos_n=${PHOTOS:-3000}
  default_py=python3
fi
py=$(command -v "${PYTHON:-$default_py}" || true)
budget=${RUN_BUDGET:-570}
mkdir -p "$out"
logs=$(mktemp -d "${TMPDIR:-/tmp}/saturate-gpu-logs.XXXXXX")
trap 'rm -rf "$logs"' EXIT
# Everything also goes to run.log, which comes back even when the call is cut off.
exec > >(tee "$out/run.log") 2>&1
tee_pid=$!

# The toolkit may sit outside PATH (scripts/common.sh does the same).
if ! command -v nvcc >/dev/null 2>&1 && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
# CMake 4 (PyPI's) refuses config files that declare policies older than 3.5; Debian 12's
# GTest and CLI11 configs are generated with `cmake_policy(VERSION 2.6...)`.
export CMAKE_POLICY_VERSION_MINIMUM=3.5
export PYTHONUNBUFFERED=1

arch=x86_64-linux-gnu
libdirs="$prefix/usr/lib/$arch:$prefix/lib/$arch"

# ------------------------------------------------------------------------ step runner

names=() statuses=() seconds=() notes=()
declare -A status_of=()

# run_step NAME VERBOSE FUNCTION [ARGS]: runs FUNCTION in a subshell with errexit, its output
# in logs/NAME.log (and on the terminal when VERBOSE=1, else the log's tail on failure).
# Exit 0 = ok, 77 = skipped (the step says why on its last line), else failed.
stopped=0  # set once the step named by UNTIL has run

run_step() {
  local name=$1 verbose=$2 rc t0 t1 note=""
  shift 2
  if ((stopped)); then
    record "$name" skip 0.0 "after UNTIL=$UNTIL"
    return
  fi
  if [[ " ${SKIP:-} " == *" $name "* ]]; then
    record "$name" skip 0.0 "SKIP names it"
    return
  fi
  [[ $name == "${UNTIL:-}" ]] && stopped=1
  local log=$logs/$name.log
  printf '\n==> [%s] %s\n' "$name" "$(date -u +%H:%M:%S)"
  t0=$(date +%s.%N)
  set +e
  if ((verbose)); then
    (set -e; "$@") 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
  else
    (set -e; "$@") >"$log" 2>&1
    rc=$?
  fi
  set -e
  t1=$(date +%s.%N)
  local status
  case $rc in
    0) status=ok ;;
    77) status=skip; note=$(tail -n 1 "$log") ;;
    124 | 137) status=FAIL; note="timed out" ;;
    *) status=FAIL; note="exit $rc: $(tail -n 1 "$log" | cut -c1-80)" ;;
  esac
  if [[ $status == FAIL ]] && ((!verbose)); then
    echo "--- last lines of $name.log:"
    tail -n 40 "$log"
  fi
  record "$name" "$status" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')" "$note"
}

record() {  # record NAME STATUS SECONDS NOTE
  names+=("$1"); statuses+=("$2"); seconds+=("$3"); notes+=("$4")
  status_of[$1]=$2
  printf '<== [%s] %s (%ss)%s\n' "$1" "$2" "$3" "${4:+: $4}"
}

ok() { [[ ${status_of[$1]:-} == ok ]]; }

# needs NAME DEP...: records NAME as skipped unless every DEP succeeded.
needs() {
  local name=$1 dep
  shift
  for dep in "$@"; do
    if ! ok "$dep"; then
      printf '\n==> [%s] skipped: needs %s (%s)\n' "$name" "$dep" "${status_of[$dep]:-not run}"
      record "$name" skip 0.0 "needs $dep"
      return 1
    fi
  done
}

skip() { echo "$*"; return 77; }  # the last line is the summary's note

left() { echo $((budget - ($(date +%s) - t_run))); }  # seconds left of RUN_BUDGET

# ------------------------------------------------------------------------------ steps

step_deps() {
  if [[ ! -f $deps/SHA256SUMS ]]; then
    echo "no $deps/SHA256SUMS: run bash bench/gpu/fetch-deps.sh on a machine with network"
    echo "and carry bench/gpu/.deps with the call"
    return 1
  fi
  (cd "$deps" && sha256sum --quiet -c SHA256SUMS)
  echo "$(find "$deps/debs" -name '*.deb' | wc -l) .debs, $(find "$deps/wallpapers" -name '*.jpg' | wc -l) photos, $(du -sh "$deps" | cut -f1)"
}

step_machine() {
  echo "mode: $( ((dry)) && echo dry-run || echo gpu); cores: $cores; $(uname -srm)"
  grep PRETTY_NAME /etc/os-release || true
  if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,power.limit \
      --format=csv || true
  else
    echo "nvidia-smi: none"
  fi
  echo "nvcc: $(nvcc --version 2>/dev/null | tail -n 1 || echo none)"
  echo "c++: $(c++ --version 2>/dev/null | head -n 1 || echo none)"
  echo "cmake: $(cmake --version | head -n 1); ninja: $(ninja --version 2>/dev/null || echo none)"
  echo "compute-sanitizer: $(sanitizer_path || echo none)"
  echo "python: ${py:-none}"
  [[ -n $py ]] || return 1
  "$py" - <<'EOF'
import importlib, os, platform, sysconfig
include = sysconfig.get_paths()["include"]
print("  python", platform.python_version(), "headers:", include,
      "(Python.h present)" if os.path.exists(os.path.join(include, "Python.h"))
      else "(NO Python.h: the Python module cannot build)")
for name in ("torch", "torchvision", "nanobind", "numpy", "PIL", "pytest", "xxhash"):
    try:
        m = importlib.import_module(name)
        print(f"  {name} {getattr(m, '__version__', '?')}")
    except Exception as e:  # noqa: BLE001 - report, do not fail: later steps say what they need
        print(f"  {name}: MISSING ({e})")
try:
    import torch
    print("  torch.cuda:", torch.cuda.is_available(),
          torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
except Exception as e:  # noqa: BLE001
    print("  torch.cuda: n/a", e)
EOF
}

step_unpack() {
  rm -rf "$prefix"
  mkdir -p "$prefix/bin" "$prefix/rt"
  local deb
  for deb in "$deps"/debs/*.deb; do
    if command -v dpkg >/dev/null 2>&1; then
      dpkg -x "$deb" "$prefix"
    else  # not a Debian-like image: a .deb is an ar archive holding data.tar.*
      "$py" - "$deb" "$prefix" <<'EOF'
import io, sys, tarfile
deb, dest = sys.argv[1:]
with open(deb, "rb") as f:
    data = f.read()
assert data[:8] == b"!<arch>\n", f"{deb}: not an ar archive"
pos = 8
while pos < len(data):
    name, size = data[pos:pos + 16].decode().strip().rstrip("/"), int(data[pos + 48:pos + 58])
    body = data[pos + 60:pos + 60 + size]
    if name.startswith("data.tar"):
        with tarfile.open(fileobj=io.BytesIO(body)) as t:
            t.extractall(dest, **({"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}))
        break
    pos += 60 + size + size % 2
else:
    sys.exit(f"{deb}: no data.tar member")
EOF
    fi
  done
  # The Boost headers fetch-deps.sh took out of libboost1.74-dev (boost/crc.hpp's closure).
  cp -a "$deps/boost/usr" "$prefix/"
  # libnvjpeg.so.13 from PyPI's nvidia-nvjpeg wheel, for decode="gpu" (dlopened at run time).
  "$py" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
    "$(echo "$deps"/wheels/nvidia_nvjpeg-*.whl)" "$prefix/nvjpeg"
  ln -sfn "$prefix/nvjpeg/nvidia/cu13/lib/libnvjpeg.so.13" "$prefix/rt/libnvjpeg.so.13"
  # Absolute symlinks point at this machine's files (zlib1g-dev's libz.so ->
  # /lib/x86_64-linux-gnu/libz.so.1.2.13): point them at the prefix's copy instead.
  local link target cand
  while IFS= read -r link; do
    target=$(readlink "$link")
    [[ $target == /* ]] || continue
    for cand in "$prefix$target" "$prefix/usr$target"; do
      if [[ -e $cand ]]; then ln -sfn "$cand" "$link"; break; fi
    done
  done < <(find "$prefix" -type l)
  # The .pc files say prefix=/usr (or libdir=/usr/...): rewrite them into the prefix.
  find "$prefix" -name '*.pc' -exec sed -i -E "s#^([A-Za-z_]+)=/usr(/|\$)#\\1=$prefix/usr\\2#" {} +
  # pkgconf from the prefix (the image may have no pkg-config), with its library beside it;
  # PKG_CONFIG_LIBDIR confines it to the prefix's .pc files.
  cat >"$prefix/bin/pkg-config" <<EOF
#!/bin/sh
# pkgconf unpacked from bench/gpu/.deps; it sees only the prefix's .pc files.
export LD_LIBRARY_PATH="$libdirs\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export PKG_CONFIG_LIBDIR="$prefix/usr/lib/$arch/pkgconfig:$prefix/usr/share/pkgconfig"
unset PKG_CONFIG_PATH
exec "$prefix/usr/bin/pkgconf" "\$@"
EOF
  chmod +x "$prefix/bin/pkg-config"
  # Runtime libraries this machine's loader does not know (libjpeg.so.62 on Ubuntu, say) go
  # into rt/ for LD_LIBRARY_PATH; the others keep resolving to the system's own copies.
  local ldconfig so soname known
  ldconfig=$(command -v ldconfig || echo /sbin/ldconfig)
  known=$("$ldconfig" -p 2>/dev/null | awk '{print $1}' || true)
  while IFS= read -r so; do
    soname=$(readelf -d "$so" 2>/dev/null | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
    [[ -n $soname ]] || continue
    if ! grep -qxF "$soname" <<<"$known"; then ln -sfn "$so" "$prefix/rt/$soname"; fi
  done < <(find "$prefix/usr/lib/$arch" "$prefix/lib/$arch" -maxdepth 1 -type f -name 'lib*.so.*' 2>/dev/null)
  "$prefix/bin/pkg-config" --modversion libxxhash cpp-httplib
  echo "unpacked $(find "$deps/debs" -name '*.deb' | wc -l) packages into $prefix;" \
    "rt/ (not on this machine): $(find "$prefix/rt" -mindepth 1 -printf '%f ')"
}

# The environment every build and run step uses: headers, libraries and pkg-config from the
# prefix first. At run time only rt/ is on LD_LIBRARY_PATH, and the programs have no RUNPATH
# (CMAKE_SKIP_BUILD_RPATH): a library this machine also has (libssl, libpng, libprotobuf-lite,
# ...) is its own copy, never the Debian one, which would otherwise be loaded into a process
# whose other modules were built against the machine's (see step_imports). CPATH also covers the multiarch include dir (jconfig.h, opensslconf.h) that no
# find module names. (No LIBRARY_PATH: CMake would take its folders for the compiler's
# implicit ones and leave them out of the programs' RUNPATH. Libraries are linked by full
# path; -rpath-link, set at configure, lets ld resolve what they need in turn, e.g.
# libcpp-httplib -> libssl, libbrotli*.)
use_prefix() {
  export CPATH="$prefix/usr/include/$arch:$prefix/usr/include${CPATH:+:$CPATH}"
  export LD_LIBRARY_PATH="$prefix/rt${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PKG_CONFIG="$prefix/bin/pkg-config"
}

step_configure() {
  use_prefix
  local generator=(-G Ninja)
  command -v ninja >/dev/null 2>&1 || generator=(-G "Unix Makefiles")
  local nb_dir
  nb_dir=$("$py" -m nanobind --cmake_dir)
  local link="-Wl,-rpath-link,$libdirs"
  cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DSATURATE_WITH_CUDA=ON -DSATURATE_BUILD_PYTHON=ON -DSATURATE_BUILD_TESTS=ON \
    -DSATURATE_BUILD_BENCH=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DSATURATE_WITH_REMOTE=OFF -DSATURATE_WITH_WEBDATASET=OFF -DSATURATE_WITH_HDF5=OFF \
    -DBoost_ROOT="$prefix/usr" -DBoost_INCLUDE_DIR="$prefix/usr/include" -DBoost_NO_BOOST_CMAKE=ON \
    -DBoost_NO_SYSTEM_PATHS=ON \
    -DCMAKE_PREFIX_PATH="$prefix/usr;$prefix" \
    -DPKG_CONFIG_EXECUTABLE="$prefix/bin/pkg-config" \
    -DPython_EXECUTABLE="$py" -Dnanobind_DIR="$nb_dir" \
    -DCMAKE_EXE_LINKER_FLAGS="$link" -DCMAKE_SHARED_LINKER_FLAGS="$link" \
    -DCMAKE_MODULE_LINKER_FLAGS="$link" -DCMAKE_SKIP_BUILD_RPATH=ON
}

step_build() {
  use_prefix
  local t=$(($(left) - 240))  # keep ~4 minutes for the tests and the bench
  ((dry)) && t=3600           # 2 cores here: no device budget to keep
  ((t >= 60)) || t=60
  # Only what the later steps run: the tool, the module, the GPU tests (CMake lists them)
  # and h2d_bench. -k 0: one target that fails to build does not stop the others.
  local targets=(saturate saturate_python h2d_bench)
  mapfile -t -O 3 targets < <(grep . "$build/gpu_test_targets.txt")
  echo "build: ${targets[*]}; $cores jobs, timeout ${t}s"
  local keep_going=(-k)
  [[ -f $build/build.ninja ]] && keep_going=(-k 0)
  timeout --kill-after=10 "$t" cmake --build "$build" -j "$cores" --target "${targets[@]}" \
    -- "${keep_going[@]}"
}

# CMake's cache says where each library of the .debs was found; all of them must be in the
# prefix, or the GPU machine would lack them.
step_provenance() {
  local bad=0 line
  while IFS= read -r line; do
    local value=${line#*=}
    [[ -z $value || $value == *-NOTFOUND ]] && continue
    if [[ $value == "$prefix"/* ]]; then echo "  prefix  $line"; else echo "  OTHER   $line"; bad=1; fi
  done < <(grep -E '^(JPEG_(INCLUDE_DIR|LIBRARY_RELEASE)|PNG_(PNG_INCLUDE_DIR|LIBRARY_RELEASE)|ZLIB_(INCLUDE_DIR|LIBRARY_RELEASE)|(nlohmann_json|CLI11|GTest|benchmark)_DIR|Protobuf_(INCLUDE_DIR|LITE_LIBRARY_RELEASE|PROTOC_EXECUTABLE)|Boost_INCLUDE_DIR|pkgcfg_lib_[A-Z]+_[a-z_-]+):' \
    "$build/CMakeCache.txt" | sed -E 's/:[A-Z]+=/=/')
  ((bad == 0)) || { echo "some dependencies were found outside $prefix"; return 1; }
  echo "libraries of the built programs:"
  local f
  for f in "$build/tools/saturate/saturate" "$build"/python/saturate/_core*.so; do
    [[ -e $f ]] || continue
    echo "  $(basename "$f"):"
    ldd "$f" | grep -E 'jpeg|png|libz|xxhash|httplib|ssl|crypto|brotli|benchmark' | sed 's/^\s*/    /'
  done
  if ((dry)) && command -v dpkg >/dev/null 2>&1 && command -v ninja >/dev/null 2>&1; then
    # Here the same packages are also installed in /usr: prove the build did not use them.
    # Every header the compiler read (ninja's deps log) and every library the link lines name
    # that belongs to a package of .deps must come from the prefix.
    local pkgs headers owned
    pkgs=$(for d in "$deps"/debs/*.deb; do dpkg-deb -f "$d" Package; done | sort -u)
    headers=$(ninja -C "$build" -t deps | awk '$1 ~ /^\/usr\// && $1 !~ /^\/usr\/(local|lib\/gcc|include\/c\+\+)/ {print $1}' | sort -u)
    owned=$(xargs -r dpkg -S <<<"$headers" 2>/dev/null | awk -F': ' '{split($1, p, ", "); for (i in p) print p[i] "\t" $2}' |
      sed 's/:amd64//' | awk -F'\t' 'NR == FNR {want[$1] = 1; next} want[$1]' <(echo "$pkgs") - || true)
    echo "headers read from /usr: $(wc -l <<<"$headers"); of them from .deps' packages: $(grep -c . <<<"$owned" || true)"
    if [[ -n $owned ]]; then echo "$owned" | head -n 20; bad=1; fi
    local libs
    libs=$(ninja -C "$build" -t commands | grep -oE "(^| )(/usr)?/lib/$arch/lib(jpeg|png|z|xxhash|gtest|gmock|benchmark|cpp-httplib|ssl|crypto|brotli)[^ ]*" | sort -u || true)
    echo "system copies of those libraries on link lines: ${libs:-none}"
    [[ -z $libs ]] || bad=1
  fi
  return "$bad"
}

sanitizer_path() {
  command -v compute-sanitizer 2>/dev/null && return 0
  local c
  for c in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
    [[ -x $c ]] && { echo "$c"; return 0; }
  done
  return 1
}

step_ctest_gpu() {
  use_prefix
  if ((dry)); then
    ctest --test-dir "$build" -L gpu -N
    skip "dry run: $(ctest --test-dir "$build" -L gpu -N | grep -oE 'Total Tests: [0-9]+') labelled gpu, listed, not run"
  fi
  timeout --kill-after=10 150 ctest --test-dir "$build" -L gpu --output-on-failure --no-tests=error
}

step_sanitizer() {
  use_prefix
  local test_bin=$build/src/feed/device_loader_gpu_test cs
  [[ -x $test_bin ]] || { echo "$test_bin was not built"; return 1; }
  cs=$(sanitizer_path) || skip "compute-sanitizer not found"
  ((dry)) && skip "dry run: $test_bin built; memcheck needs a GPU"
  # --error-exitcode: without it memcheck reports errors and still exits 0.
  timeout --kill-after=10 150 "$cs" --tool memcheck --error-exitcode 86 "$test_bin"
}

# `import saturate` before `import torch` (the H200 runs' free(): invalid pointer, docs/gpu.md),
# each try in a fresh interpreter: where each library of the module came from, both import
# orders (these must pass), then what tells the cause apart: the prefix's Debian copies first
# on LD_LIBRARY_PATH (what a RUNPATH into the prefix, as earlier runs were built, loads), and
# each Debian copy of a library this machine also has loaded alone (RTLD_LOCAL, as a module's
# dependencies are) before `import torch`, without saturate.
step_imports() {
  use_prefix
  export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}"
  local so
  so=$(echo "$build"/python/saturate/_core*.so)
  [[ -f $so ]] || { echo "the module was not built"; return 1; }
  echo "RUNPATH of $(basename "$so"): $(readelf -d "$so" | sed -n 's/.*(R[UN]*PATH).*\[\(.*\)\]/\1/p')"
  echo "libraries import saturate loads:"
  { LD_DEBUG=libs "$py" -c 'import saturate' 2>&1 || true; } | sed -n 's/.*calling init: /  /p' | sort -u
  local bad=0 results=()
  import_try "saturate, then torch" 'import saturate, torch' || bad=1
  import_try "torch, then saturate" 'import torch, saturate' || bad=1
  local first=${results[0]}
  # What `import saturate` imports before torch does, without saturate.
  import_try "numpy, hashlib, then torch (no saturate)" 'import numpy, hashlib, torch' || true
  import_try "saturate, then torch; Debian copies first" 'import saturate, torch' \
    LD_LIBRARY_PATH="$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" || true
  local known soname lib
  known=$("$(command -v ldconfig || echo /sbin/ldconfig)" -p 2>/dev/null | awk '{print $1}' || true)
  for soname in $(readelf -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    grep -qxF "$soname" <<<"$known" || continue
    for lib in "$prefix/usr/lib/$arch/$soname" "$prefix/lib/$arch/$soname"; do
      [[ -e $lib ]] || continue
      import_try "Debian $soname alone, then torch" \
        "import ctypes; ctypes.CDLL('$lib'); import torch" || true
      break
    done
  done
  if [[ $first != ok ]] && ((!dry)) && command -v cuda-gdb >/dev/null 2>&1; then
    echo "saturate, then torch, under cuda-gdb (native stack, libraries):"
    timeout --kill-after=10 90 cuda-gdb -q -batch -ex run -ex "bt 40" -ex "info sharedlibrary" \
      --args "$py" -c 'import saturate, torch' 2>&1 | tail -n 120 || true
  fi
  echo "saturate first: $first; torch first: ${results[1]}; Debian copies first: ${results[3]}"
  return "$bad"
}

# import_try LABEL CODE [VAR=VALUE...]: runs CODE in a fresh interpreter with those variables
# set; prints ok or how it died, and appends that to the caller's `results`.
import_try() {
  local label=$1 code=$2 rc=0 out
  shift 2
  out=$(env "$@" timeout --kill-after=10 120 "$py" -X faulthandler -c "$code" 2>&1) || rc=$?
  local result=ok
  if ((rc != 0)); then
    result="FAILED (exit $rc: $(grep -m1 -E 'free\(\)|Error|error|Fatal|Abort' <<<"$out" | cut -c1-90))"
  fi
  printf '  %-58s %s\n' "$label" "$result"
  ((rc == 0)) || tail -n 15 <<<"$out" | sed 's/^/    /'
  results+=("$result")
  ((rc == 0))
}

step_pytest_gpu() {
  use_prefix
  export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}"
  "$py" -c 'import saturate, sys; print("saturate from", saturate.__file__)'
  if ((dry)); then
    set +e
    local listed
    listed=$("$py" -m pytest -q -p no:cacheprovider python/tests -m gpu --collect-only 2>&1)
    set -e
    echo "$listed" | tail -n 30
    skip "dry run: $(echo "$listed" | grep -E 'collected|selected' | tail -n 1 | sed -E 's/=//g; s/ in [0-9.]+s.*//; s/^ +//') (-m gpu); not run"
  fi
  # Exit 5 = nothing selected: the GPU tests are missing their mark, a failure here.
  timeout --kill-after=10 150 "$py" -m pytest -q -p no:cacheprovider python/tests -m gpu
}

step_h2d() {
  use_prefix
  local bin=$build/bench/h2d_bench
  [[ -x $bin ]] || { echo "$bin was not built"; return 1; }
  ((dry)) && skip "dry run: $bin built; needs a GPU"
  timeout --kill-after=10 120 "$bin" --json >"$out/h2d.json"
  cat "$out/h2d.json"
}

step_photos() {
  local marker=$data/photos/.made-$photos_n
  if [[ -f $marker ]]; then echo "reusing $data/photos ($photos_n images)"; return 0; fi
  rm -rf "$data/photos"
  mkdir -p "$data"
  # make-photo-dataset reads /usr/share/wallpapers; point it at the carried copy instead of
  # unpacking into / (the module's WALLPAPERS is read when it runs).
  SATURATE_MAKE_PHOTO_DATASET_REEXEC=1 "$py" - "$root/scripts/make-photo-dataset" \
    "$deps/wallpapers" "$data/photos" --train "$photos_n" --val 0 -j "$cores" <<'EOF'
import importlib.machinery, importlib.util, sys
script, wallpapers, *argv = sys.argv[1:]
loader = importlib.machinery.SourceFileLoader("make_photo_dataset", script)
spec = importlib.util.spec_from_loader(loader.name, loader)
mpd = importlib.util.module_from_spec(spec)
sys.modules[loader.name] = mpd  # the worker pool pickles make_image by module name
loader.exec_module(mpd)
mpd.WALLPAPERS = wallpapers
sys.exit(mpd.main(argv))
EOF
  touch "$marker"
  echo "$(find "$data/photos/train" -name '*.jpg' | wc -l) JPEGs, $(du -sh "$data/photos" | cut -f1)"
}

step_pack() {
  use_prefix
  rm -rf "$data/photos-train.sat" "$data/photos-train.sat.partial"
  "$build/tools/saturate/saturate" pack folder "$data/photos/train" "$data/photos-train.sat" \
    --threads "$cores"
}

# The input pipeline alone, no model: how fast batches reach the GPU (--device cuda: pinned
# buffers, side-stream copies, conversion kernels) against the same pipeline into host memory.
step_feed() {
  use_prefix
  ((dry)) && skip "dry run: --device cuda needs a GPU"
  local sat=$build/tools/saturate/saturate
  local t=image:crop=random,size=224,flip=0.5,dtype=float16,normalize,layout=channels_last
  # CPU decode on every core, then 2 loader threads (few cores per GPU) decoding on the CPU,
  # on the GPU (nvJPEG) and split by measured rates; last, the same pipeline into host memory.
  local runs=("cuda cpu 0" "cuda cpu 2" "cuda gpu 2" "cuda auto 2" "cpu cpu 0") run device decode th
  for run in "${runs[@]}"; do
    read -r device decode th <<<"$run"
    local threads=()
    ((th > 0)) && threads=(--threads "$th")
    echo "bench feed --device $device --decode $decode ${threads[*]}:"
    timeout --kill-after=10 60 "$sat" bench feed "$data/photos-train.sat" --batch 256 --epochs 1 \
      --warmup 2 --json -t "$t" --device "$device" --decode "$decode" "${threads[@]}" || true
  done
  # nvJPEG on the same photos stored byte for byte (no restart markers): each JPEG reaches the
  # GPU whole, where the packed ones above reach it cut to their crop (gpu_decode_cut). The
  # two --decode gpu runs' gpu_decode_images_per_s give what the cut is worth on this GPU.
  local whole=$data/photos-train-whole.sat
  [[ -d $whole ]] || "$sat" pack folder "$data/photos/train" "$whole" --keep-jpeg-bytes \
    --threads "$cores" -q
  echo "bench feed --device cuda --decode gpu --threads 2, JPEGs stored whole:"
  timeout --kill-after=10 60 "$sat" bench feed "$whole" --batch 256 --epochs 1 --warmup 2 --json \
    -t "$t" --device cuda --decode gpu --threads 2 || true
  # Small fixed-size records converted to float on the host, into the pinned buffers the copy
  # engine reads (written with streaming stores: BatchAllocator::read_by_device), and into host
  # memory. Fashion-MNIST's shape with random pixels: the GPU machine has no dataset package.
  local arrays=$data/arrays.sat
  if [[ ! -d $arrays ]]; then
    "$py" - "$data" <<'EOF'
import sys
import numpy as np
data, n = sys.argv[1], 60000
rng = np.random.default_rng(0)
with open(f"{data}/arrays-images-idx3-ubyte", "wb") as f:  # IDX: magic, dims (big-endian)
    f.write(np.array([0x803, n, 28, 28], ">u4").tobytes())
    f.write(rng.integers(0, 256, (n, 28, 28), dtype=np.uint8).tobytes())
with open(f"{data}/arrays-labels-idx1-ubyte", "wb") as f:
    f.write(np.array([0x801, n], ">u4").tobytes())
    f.write(rng.integers(0, 10, n, dtype=np.uint8).tobytes())
EOF
    "$sat" pack idx "$data/arrays-images-idx3-ubyte" "$data/arrays-labels-idx1-ubyte" "$arrays" -q
  fi
  for device in cuda cpu; do
    echo "bench feed arrays (60,000 x 28x28 uint8 -> float) --device $device:"
    timeout --kill-after=10 60 "$sat" bench feed "$arrays" --batch 256 --epochs 5 --warmup 2 \
      --json -t image:to-float,mean=0.2860,std=0.3530 --device "$device" || true
  done
}

# nvJPEG's GPU tests, run directly: they print the measured pixel differences and the backend
# (hardware engine or not), which ctest keeps only on failure.
step_nvjpeg() {
  use_prefix
  local bin=$build/src/feed/device_loader_nvjpeg_gpu_test
  [[ -x $bin ]] || { echo "$bin was not built"; return 1; }
  ((dry)) && skip "dry run: $bin built; needs a GPU"
  timeout --kill-after=10 120 "$bin"
}

# doctor's accuracy suite on the GPU (issue 28, point 4; docs/diagnosis.md, "GPU scenarios"):
# one planted cause per scenario in bench/diagnosis/train_gpu.py, run under saturate doctor
# with GPU sampling (NVML, GPM), the top finding's fix applied as the script's flag and run
# again -> diagnosis_gpu.json. --quick: 6 s of training per run, 9 runs; --budget skips
# what would not fit. The run directories go into logs.tar.gz for re-analysis.
step_diagnosis() {
  use_prefix
  local suite=$root/bench/diagnosis/run.py sat=$build/tools/saturate/saturate
  local rundirs=/tmp/saturate-diagnosis-gpu rc=0
  [[ -x $sat ]] || { echo "$sat was not built"; return 1; }
  "$py" "$suite" --gpu --quick --list
  if ((dry)); then
    # Without a GPU run.py --gpu must stop with a message (exit 2), not a traceback.
    local err=$logs/diagnosis-nogpu.txt
    "$py" "$suite" --gpu --quick --saturate "$sat" --runs "$rundirs" 2>"$err" || rc=$?
    cat "$err"
    if ((rc != 2)) || grep -q Traceback "$err"; then
      echo "run.py --gpu without a GPU: exit $rc, expected 2 and a message"
      return 1
    fi
    # The driver's whole path on the CPU: each scenario shrunk, under doctor, its fix re-run.
    "$py" "$suite" --smoke --quick --saturate "$sat" --runs "$rundirs" \
      --json "$out/diagnosis_gpu.json"
    "$py" - "$out/diagnosis_gpu.json" <<'EOF'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
bad = ["%s: %s" % (r["scenario"], r.get("error") or r.get("after_error") or r.get("skipped"))
       for r in rows if r.get("error") or r.get("after_error") or r.get("skipped")]
sys.exit("smoke runs failed: %s" % bad if bad else 0)
EOF
    skip "dry run: GPU scenarios listed, run.py --gpu stops cleanly without a GPU, --smoke ran"
  fi
  local t=$(($(left) - 10))
  ((t <= diagnosis_seconds)) || t=$diagnosis_seconds
  ((t >= 60)) || skip "no time left of RUN_BUDGET"
  rm -rf "$rundirs"
  timeout --kill-after=10 "$t" "$py" "$suite" --gpu --quick --budget $((t - 10)) \
    --saturate "$sat" --runs "$rundirs" --json "$out/diagnosis_gpu.json" || rc=$?
  if [[ -d $rundirs ]]; then
    mkdir -p "$logs/diagnosis-gpu"
    cp -r "$rundirs"/. "$logs/diagnosis-gpu/"
    du -sh "$logs/diagnosis-gpu"
  fi
  return "$rc"
}

# Checkpoints while ResNet-50 and a 1.2 GiB GPT train: saturate vs torch.save vs
# dcp.async_save (issue 25, point 4) -> checkpoint_bench.json.
step_checkpoint() {
  use_prefix
  export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}"
  if ((dry)); then
    "$py" "$root/bench/gpu_checkpoint_bench.py" --smoke --json "$out/checkpoint_bench.json"
    return
  fi
  local t=$(($(left) - 10 - matrix_seconds))
  ((t <= checkpoint_seconds)) || t=$checkpoint_seconds
  ((t >= 60)) || skip "no time left of RUN_BUDGET"
  timeout --kill-after=10 "$t" "$py" "$root/bench/gpu_checkpoint_bench.py" --budget $((t - 20)) \
    --json "$out/checkpoint_bench.json"
}

# Feeding from few cores (issue 25, point 5): ResNet-50 from 2 and 4 cores, ResNet-18 from 8,
# CPU vs GPU decode, the DataLoader and DALI (when installed) beside each model's
# GPU-resident ceiling -> matrix.json.
step_matrix() {
  use_prefix
  export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}"
  local args=(--dataset "$data/photos-train.sat" --images-root "$data/photos/train"
              --json "$out/matrix.json" --amp bf16)
  if ((dry)); then
    "$py" "$root/bench/gpu_train_bench.py" --smoke --matrix default "${args[@]}"
    return
  fi
  local t=$(($(left) - 10))
  ((t >= 60)) || skip "no time left of RUN_BUDGET"
  timeout --kill-after=5 "$t" "$py" "$root/bench/gpu_train_bench.py" --matrix default \
    --budget $((t - 25)) "${args[@]}"
}

# train_bench JSON AMP FEEDS SECONDS: the training bench on the photo set.
train_bench() {
  local json=$1 amp=$2 feeds=$3 t=$4
  local args=(--json "$out/$json" --dataset "$data/photos-train.sat" --amp "$amp"
              --images-root "$data/photos/train")
  if ((dry)); then
    "$py" "$root/bench/gpu_train_bench.py" --smoke --feeds "$feeds" "${args[@]}"
    return
  fi
  local extra=()
  read -r -a extra <<<"${TRAIN_ARGS:-}"
  echo "feeds: $feeds; AMP $amp; time: ${t}s"
  timeout --kill-after=10 "$t" "$py" "$root/bench/gpu_train_bench.py" --feeds "$feeds" \
    --budget $((t - 10)) --workers "8,12,16" "${args[@]}" "${extra[@]}"
}

feeds_for_train() {  # the feeds the earlier steps made possible (and FEEDS allows)
  local feeds=synthetic
  ok photos && feeds+=,dataloader,dataloader-gpu
  ok pack && feeds+=,saturate
  ((dry)) && ok pack && feeds+=,saturate-host  # the saturate code path that runs on a CPU
  echo "$feeds"
}

fp16_seconds=110       # what train-fp16 needs: two feeds of ~25 s, model builds, warmups
diagnosis_seconds=120  # run.py --gpu --quick: 9 doctor runs of 6 s training + ~5 s start
example_seconds=50     # the example: 100 steps of ResNet-18, imports, cuDNN autotuning
checkpoint_seconds=90  # gpu_checkpoint_bench at its default sizes: ~65 s on an H100
matrix_seconds=150     # gpu_train_bench --matrix default: 10 cells of ~6 s, two model builds

step_train() {
  use_prefix
  ok pack && export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}"
  local t=$(($(left) - 15 - fp16_seconds))
  ((t >= 90)) || skip "no time left of RUN_BUDGET"
  train_bench train_bench.json bf16 "$(feeds_for_train)" "$t"
}

step_train_fp16() {
  use_prefix
  export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}"
  local t=$(($(left) - 10))
  ((t <= fp16_seconds)) || t=$fp16_seconds
  ((t >= 60)) || skip "no time left of RUN_BUDGET"
  train_bench train_bench_fp16.json fp16 synthetic,saturate "$t"
}

step_example() {
  use_prefix
  export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}"
  local args=(--data "$data" --max-steps 100 --warmup 5)
  ((dry)) && args=(--data "$data" --max-steps 3 --warmup 1 --image-size 64)
  local rc=0
  timeout --kill-after=10 $((example_seconds + 30)) "$py" -X faulthandler \
    "$root/examples/train_resnet18_photos.py" "${args[@]}" || rc=$?
  if ((rc != 0 && rc != 124 && !dry)) && command -v cuda-gdb >/dev/null 2>&1; then
    # A crash (the H200 run's free(): invalid pointer): the native stacks and what was
    # loaded from where, which tell mismatched allocators or runtimes apart.
    echo "exit $rc: the same run under cuda-gdb"
    timeout --kill-after=10 90 cuda-gdb -q -batch -ex run -ex "thread apply all bt 30" \
      -ex "info sharedlibrary" --args "$py" "$root/examples/train_resnet18_photos.py" \
      "${args[@]}" --max-steps 5 || true
  fi
  return "$rc"
}

# ------------------------------------------------------------------------------- run

echo "saturate GPU benchmark harness: $( ((dry)) && echo dry run || echo GPU run), output in $out"
echo "repository: $root at $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$root" diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"

run_step deps 1 step_deps
run_step machine 1 step_machine
needs unpack deps && run_step unpack 1 step_unpack
needs configure unpack && run_step configure 0 step_configure
needs build configure && run_step build 0 step_build
needs provenance build && run_step provenance 1 step_provenance
# Most informative first: what is verified only on a GPU, then the benchmarks; the earlier
# runs' measurements (h2d, train, train-fp16) last, for SKIP to leave out.
needs ctest-gpu build && run_step ctest-gpu 1 step_ctest_gpu
needs imports build && run_step imports 1 step_imports
needs pytest-gpu build && run_step pytest-gpu 1 step_pytest_gpu
needs nvjpeg build && run_step nvjpeg 1 step_nvjpeg
needs diagnosis build && run_step diagnosis 1 step_diagnosis
needs photos deps && run_step photos 1 step_photos
needs pack build photos && run_step pack 1 step_pack
needs feed pack && run_step feed 1 step_feed
needs example pack && run_step example 1 step_example
needs checkpoint build && run_step checkpoint 1 step_checkpoint
needs matrix pack && run_step matrix 1 step_matrix
needs sanitizer build && run_step sanitizer 1 step_sanitizer
needs h2d build && run_step h2d 1 step_h2d
run_step train 1 step_train
needs train-fp16 pack && run_step train-fp16 1 step_train_fp16

# ---------------------------------------------------------------------------- summary

failed=0
for s in "${statuses[@]}"; do [[ $s == FAIL ]] && failed=1; done
{
  printf '\n%-11s %-6s %8s  %s\n' step status seconds note
  for i in "${!names[@]}"; do
    printf '%-11s %-6s %8s  %s\n' "${names[$i]}" "${statuses[$i]}" "${seconds[$i]}" "${notes[$i]}"
  done
  printf '%-11s %-6s %8s\n' total "$( ((failed)) && echo FAIL || echo ok)" "$(($(date +%s) - t_run))"
} | tee "$out/summary.txt"
[[ -f $out/train_bench.json ]] && echo "training bench: $out/train_bench.json"
if [[ -d $build/Testing/Temporary ]]; then cp "$build"/Testing/Temporary/LastTest*.log "$logs"/ 2>/dev/null || true; fi
tar -C "$logs" -czf "$out/logs.tar.gz" .
echo "output: $(cd "$out" && echo *)"
# Let tee finish run.log before the call collects $OUT.
exec >&- 2>&-
wait "$tee_pid" 2>/dev/null || true
exit $failed
