# Sourced by the scripts in this folder: repository root, CUDA on PATH, job count.
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# The CUDA toolkit installs nvcc outside PATH; CMake finds it through PATH.
if ! command -v nvcc >/dev/null 2>&1 && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
JOBS=$(nproc)
step() { printf '\n==> %s  [%d s]\n' "$*" "$SECONDS"; }  # seconds since the script started
