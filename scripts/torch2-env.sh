#!/usr/bin/env bash
# A second Python environment with PyPI's torch >= 2 (CPU works): a plain venv
# over Debian's Python, without system site packages, so that it never mixes
# with Debian's torch 1.13 or any Debian library package. It serves
#  - the second PyTorch line of CI: saturate installed from the repaired wheel
#    (WHEEL, from scripts/python-env.sh) and the torch tests run in it
#    (scripts/test.sh), with PyTorch Lightning, Hugging Face Accelerate and
#    Transformers for their integration tests (doctor on a Trainer script);
#  - the tests that need what Debian's torch lacks (its torchrun is broken on
#    Python 3.11): multi-rank jobs under torchrun, which other tests start with
#    this interpreter.
# torch, lightning, accelerate and transformers are installed only when missing (a run that
# finds them only prints the versions); the wheel, when given, every time.
#
# usage: scripts/torch2-env.sh [VENV [WHEEL]]     (default: .venv-torch2)
# Then: SATURATE_TORCH2_PYTHON=$PWD/.venv-torch2/bin/python for pytest.
set -euo pipefail
source "$(dirname "$0")/common.sh"
VENV=${1:-.venv-torch2}
WHEEL=${2:-}
PY=/usr/bin/python3

check() {
  "$VENV/bin/python" -c 'import torch, torchvision, numpy, pytest, xxhash, lightning, accelerate
import transformers, safetensors.torch, torch.distributed.run
assert int(torch.__version__.split(".")[0]) >= 2, torch.__version__
print("torch2-env:", "torch", torch.__version__, "torchvision", torchvision.__version__,
      "lightning", lightning.__version__, "accelerate", accelerate.__version__,
      "transformers", transformers.__version__,
      "in", __import__("sys").prefix)'
}

pip=("$VENV/bin/python" -m pip --disable-pip-version-check -q)
if ! { [[ -x $VENV/bin/python ]] && check 2>/dev/null; }; then
  if [[ ! -x $VENV/bin/python ]]; then
    $PY -m venv "$VENV"
  fi
  "${pip[@]}" install torch torchvision numpy pytest xxhash "lightning>=2.0" "accelerate>=0.26" \
    "transformers>=4.40"
  check
fi
if [[ -n $WHEEL ]]; then
  # --no-deps: its one dependency, numpy, is here; --force-reinstall: same version, new build.
  "${pip[@]}" install --force-reinstall --no-deps "$WHEEL"
  python=$(cd "$VENV/bin" && pwd)/python
  (cd / && "$python" -c 'import saturate, saturate._core
print("torch2-env: saturate", saturate.__version__, "from", saturate.__file__)')
fi
