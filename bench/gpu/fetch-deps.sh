#!/usr/bin/env bash
# Fetches, on a machine with network access (Debian 12: apt), everything a lent GPU machine
# lacks to build and benchmark saturate there, into bench/gpu/.deps/ (git-ignored):
#
#   .deps/debs/        Debian 12 .deb files of the build dependencies (the libraries of
#                      scripts/install-deps.sh that CMakeLists.txt finds, their runtime
#                      libraries, and pkgconf). bench/gpu/run.sh unpacks them with `dpkg -x`
#                      into a prefix; nothing is installed into / there.
#   .deps/wallpapers/  the source photos of scripts/make-photo-dataset: the largest JPEG of
#                      each wallpaper of Debian's plasma-workspace-wallpapers, in the
#                      package's own layout. The whole .deb is 94 MB (every wallpaper at a
#                      dozen sizes), more than a call may carry; make-photo-dataset only
#                      ever reads the largest JPEG of each, so the dataset made there is
#                      the same as here.
#   .deps/SHA256SUMS   run.sh checks it, so a partial carry fails loudly at the start.
#
# No Python wheels: the GPU image already has torch, torchvision, nanobind, pytest, numpy,
# xxhash and pillow (/work/.library/device/KINDS.md, "Python packages already there").
#
# The GPU machine reaches no registry, and a call carries at most 64 MiB (working tree
# included), so this prints the total and what would travel.
#
# usage: bash bench/gpu/fetch-deps.sh          (then carry bench/gpu/.deps to the GPU run)
#        bash bench/gpu/fetch-deps.sh --help
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
case "${1:-}" in
  -h | --help) usage; exit 0 ;;
  "") ;;
  *) echo "fetch-deps: unknown argument: $1 (see --help)" >&2; exit 2 ;;
esac

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
deps=$root/bench/gpu/.deps
limit_mib=45   # leaves ~19 MiB of the 64 MiB a call carries for the working tree and slack

packages=(
  # find_package(JPEG/PNG/ZLIB): headers, the .so link and the runtime library
  libjpeg62-turbo libjpeg62-turbo-dev libpng16-16 libpng-dev zlib1g zlib1g-dev
  # header-only, found through their CMake configs
  nlohmann-json3-dev libcli11-dev
  # pkg_check_modules(libxxhash)
  libxxhash0 libxxhash-dev
  # find_package(GTest): static libgtest/libgtest_main; GTestTargets.cmake also checks
  # that libgmock*.a exist, so libgmock-dev is needed although nothing links gmock.
  # (libgtest-dev's dependency `googletest` only holds the sources: not needed.)
  libgtest-dev libgmock-dev
  # find_package(benchmark) for -DSATURATE_BUILD_BENCH=ON
  libbenchmark1debian libbenchmark-dev
  # pkg_check_modules(cpp-httplib) in src/watch: Debian builds it as a shared library
  # whose .pc has Requires.private openssl, zlib and brotli, so pkg-config needs their
  # .pc files too, and the linker their runtime libraries.
  libcpp-httplib0.11 libcpp-httplib-dev libssl3 libssl-dev libbrotli1 libbrotli-dev
  # find_package(Protobuf): protoc generates the tf.Example code, the formats part links
  # protobuf-lite (TFRecord read in place)
  libprotobuf-dev libprotobuf32 libprotobuf-lite32 protobuf-compiler libprotoc32
  # pkg-config itself (the GPU image may have none)
  pkgconf pkgconf-bin libpkgconf3
)
# Not carried: libcurl, libarchive and libhdf5 pull in some 30 runtime libraries (GnuTLS,
# Kerberos, ICU, ...) that a 64 MiB call cannot hold; run.sh builds with
# SATURATE_WITH_REMOTE/WEBDATASET/HDF5=OFF (s3://, tar shards and HDF5 packing are then
# Unavailable there), which the GPU benchmarks do not use. Boost is header-only and only
# <boost/crc.hpp> is used: its 31 headers are taken out of libboost1.74-dev (9 MB) below.
boost_deb=libboost1.74-dev
nvjpeg_wheel=nvidia-nvjpeg==13.3.2.43  # libnvjpeg.so.13 for decode="gpu" (CUDA 13, 3.8 MB)

# A fresh folder: two versions of one package would both be unpacked.
rm -rf "$deps/debs" "$deps/wallpapers" "$deps/boost" "$deps/wheels" "$deps/SHA256SUMS"
mkdir -p "$deps/debs" "$deps/boost" "$deps/wheels"

download() {  # apt-get download into the current folder; refresh the lists once if needed
  if ! apt-get -q download "$@"; then
    echo "fetch-deps: apt-get download failed; refreshing the package lists once" >&2
    apt-get -q update
    apt-get -q download "$@"
  fi
}

echo "== Debian packages (${#packages[@]})"
# apt's _apt sandbox user may not write into a user's folder; root then warns and goes on.
# (The count below catches a failed download; grep only drops that warning.)
(
  cd "$deps/debs"
  download "${packages[@]}" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true
)
got=$(find "$deps/debs" -name '*.deb' | wc -l)
if ((got != ${#packages[@]})); then
  echo "fetch-deps: expected ${#packages[@]} .deb files, got $got" >&2
  exit 1
fi

echo "== boost/crc.hpp and the headers it includes ($boost_deb)"
boost_tmp=$(mktemp -d)
(cd "$boost_tmp" && download "$boost_deb" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
dpkg -x "$boost_tmp"/"$boost_deb"_*.deb "$boost_tmp/x"
printf '#include <boost/crc.hpp>\n#include <boost/version.hpp>\n' |
  g++ -std=c++20 -M -I"$boost_tmp/x/usr/include" -x c++ - 2>/dev/null |
  tr ' \\' '\n\n' | grep "^$boost_tmp/x/usr/include/boost/" | sort -u |
  while IFS= read -r h; do
    rel=${h#"$boost_tmp/x/"}
    mkdir -p "$deps/boost/$(dirname "$rel")"
    cp "$h" "$deps/boost/$rel"
  done
mkdir -p "$deps/boost/usr/share/doc/$boost_deb"
cp "$boost_tmp/x/usr/share/doc/$boost_deb/copyright" "$deps/boost/usr/share/doc/$boost_deb/"
rm -rf "$boost_tmp"
echo "$(find "$deps/boost" -name '*.hpp' | wc -l) headers"
[[ -f $deps/boost/usr/include/boost/crc.hpp ]] || { echo "fetch-deps: no boost/crc.hpp" >&2; exit 1; }

echo "== $nvjpeg_wheel (PyPI)"
pip_py=""
for candidate in "$root/.venv/bin/python" python3; do
  if "$candidate" -m pip --version >/dev/null 2>&1; then pip_py=$candidate; break; fi
done
[[ -n $pip_py ]] || { echo "fetch-deps: no python with pip for $nvjpeg_wheel" >&2; exit 1; }
"$pip_py" -m pip download -q --no-deps --only-binary=:all: --platform manylinux2014_x86_64 \
  -d "$deps/wheels" "$nvjpeg_wheel"

echo "== source photos (plasma-workspace-wallpapers)"
# Take them from the installed package when it is there (dpkg checked its files), else
# download the .deb into a temporary folder and unpack it there.
src=/usr/share/wallpapers
tmp=""
trap '[[ -n $tmp ]] && rm -rf "$tmp"' EXIT
if ! compgen -G "$src/*/contents/images/*.jpg" >/dev/null; then
  tmp=$(mktemp -d)
  (cd "$tmp" && download plasma-workspace-wallpapers)
  dpkg -x "$tmp"/plasma-workspace-wallpapers_*.deb "$tmp/x"
  src=$tmp/x/usr/share/wallpapers
fi
# The selection is make-photo-dataset's own (find_photos): the same photos, the same classes.
# Importing it needs Pillow: take the first python3 that has it (the guard keeps the script
# from re-executing itself under /usr/bin/python3 at import).
py=""
for candidate in python3 /usr/bin/python3; do
  if "$candidate" -c 'import PIL' 2>/dev/null; then py=$candidate; break; fi
done
if [[ -z $py ]]; then
  echo "fetch-deps: no python3 with Pillow (apt-get install python3-pil)" >&2
  exit 1
fi
SATURATE_MAKE_PHOTO_DATASET_REEXEC=1 \
  "$py" - "$root/scripts/make-photo-dataset" "$src" "$deps/wallpapers" <<'EOF'
import importlib.machinery, importlib.util, os, shutil, sys
script, src, dst = sys.argv[1:]
loader = importlib.machinery.SourceFileLoader("make_photo_dataset", script)
spec = importlib.util.spec_from_loader(loader.name, loader)
mpd = importlib.util.module_from_spec(spec)
loader.exec_module(mpd)
mpd.WALLPAPERS = src
photos = mpd.find_photos()
if not photos:
    sys.exit(f"fetch-deps: no photos under {src}")
for _, path in photos:
    rel = os.path.relpath(path, src)
    os.makedirs(os.path.join(dst, os.path.dirname(rel)), exist_ok=True)
    shutil.copy2(path, os.path.join(dst, rel))
print(f"{len(photos)} photos (one per class) copied to {dst}")
EOF

(cd "$deps" && find debs wallpapers boost wheels -type f | LC_ALL=C sort | xargs sha256sum >SHA256SUMS)

total_kib=$(du -sk "$deps" | cut -f1)
tree_kib=$(cd "$root" && { git ls-files -z; git ls-files -z --others --exclude-standard; } |
  du --files0-from=- -ck 2>/dev/null | tail -1 | cut -f1)
echo "== sizes"
du -sh "$deps/debs" "$deps/wallpapers" "$deps/boost" "$deps/wheels"
awk -v d="$total_kib" -v t="$tree_kib" -v l="$limit_mib" 'BEGIN {
  printf "bench/gpu/.deps: %.1f MiB (limit %d MiB)\n", d / 1024, l
  printf "a call carries: %.1f MiB (working tree %.1f + .deps) of 64 MiB\n", (d + t) / 1024, t / 1024 }'
if ((total_kib > limit_mib * 1024)); then
  echo "fetch-deps: .deps is over ${limit_mib} MiB" >&2
  exit 1
fi
echo "next, on the GPU machine (carry bench/gpu/.deps): bash bench/gpu/run.sh"
