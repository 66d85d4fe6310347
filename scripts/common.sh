# Sourced by the scripts in this folder: repository root, CUDA on PATH, job count.
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# The CUDA toolkit installs nvcc outside PATH; CMake finds it through PATH.
if ! command -v nvcc >/dev/null 2>&1 && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
JOBS=$(nproc)
step() { printf '\n==> %s  [%d s]\n' "$*" "$SECONDS"; }  # seconds since the script started

# Runs a build ("$@", e.g. pip -v) with its whole output in the log file $1 and
# a line on the terminal per tenth of ninja's steps done; on failure, the
# log's last lines. A quiet pip build shows nothing for many minutes.
build_with_progress() {
  local log=$1 rc
  shift
  mkdir -p "$(dirname "$log")"
  echo "  (full output: $log)"
  set +e
  "$@" 2>&1 | _progress_lines "$log"
  rc=${PIPESTATUS[0]}
  set -e
  if ((rc != 0)); then
    echo "build failed (exit $rc); the end of $log:" >&2
    tail -n 40 "$log" >&2
  fi
  return "$rc"
}

_progress_lines() {
  local line shown=-1 tenth
  exec 3>"$1"
  while IFS= read -r line; do
    printf '%s\n' "$line" >&3
    if [[ $line =~ ^[[:space:]]*\[([0-9]+)/([0-9]+)\] ]] && ((BASH_REMATCH[1] > 0)); then
      tenth=$((BASH_REMATCH[1] * 10 / BASH_REMATCH[2]))
      if ((tenth > shown)); then
        shown=$tenth
        printf '  building: %3d%%  [%s/%s]\n' $((tenth * 10)) "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}"
      fi
    fi
  done
  exec 3>&-
}
