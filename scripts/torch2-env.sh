#!/usr/bin/env bash
# A second Python environment with PyPI's torch >= 2 (CPU works), for the tests
# that need what Debian's torch 1.13 lacks (its torchrun is broken on Python
# 3.11): multi-rank jobs under torchrun in python/tests/test_auto.py. A plain
# venv over Debian's Python, without system site packages, so that it never
# mixes with Debian's torch; saturate is not installed into it (the jobs it
# runs are unmodified scripts). Made only when missing: running it again does
# nothing but print the versions.
#
# usage: scripts/torch2-env.sh [VENV]     (default: .venv-torch2)
# Then: SATURATE_TORCH2_PYTHON=$PWD/.venv-torch2/bin/python for pytest.
set -euo pipefail
source "$(dirname "$0")/common.sh"
VENV=${1:-.venv-torch2}
PY=/usr/bin/python3

check() {
  "$VENV/bin/python" -c 'import torch, torchvision, numpy, pytest
import torch.distributed.run
assert int(torch.__version__.split(".")[0]) >= 2, torch.__version__
print("torch2-env:", "torch", torch.__version__, "torchvision", torchvision.__version__, "in", __import__("sys").prefix)'
}

if [[ -x $VENV/bin/python ]] && check 2>/dev/null; then
  exit 0
fi
if [[ ! -x $VENV/bin/python ]]; then
  $PY -m venv "$VENV"
fi
"$VENV/bin/python" -m pip --disable-pip-version-check -q install torch torchvision numpy pytest
check
