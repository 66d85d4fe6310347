"""``import saturate.auto``: record what an unmodified PyTorch job spends its
steps on, for jobs launched without ``saturate watch``/``doctor``/``tune``
(which inject the same recorder into the job by themselves).

    import saturate.auto                  # records into $SATURATE_RUN_DIR, when it is set
    saturate.auto.install("runs/exp1")    # or into a directory of your choice

It records optimizer steps, DataLoader waits, host syncs with their call
sites, host-to-device copies, torch.save and collectives into
``RUN/spans-<pid>-auto.jsonl``; ``saturate report RUN`` explains them. Import
it before the training loop starts (before the DataLoader and optimizer are
built). See docs/auto.md.
"""

import os
from typing import Optional, Union

from ._bootstrap import saturate_autotrace as _impl


def install(run_dir: Optional[Union[str, os.PathLike]] = None) -> None:
    """Records into ``run_dir`` (default: $SATURATE_RUN_DIR) from now on.
    Raises ValueError when neither is given; a second call does nothing."""
    if run_dir is None:
        run_dir = os.environ.get("SATURATE_RUN_DIR")
        if not run_dir:
            raise ValueError("saturate.auto.install: give a run directory or set SATURATE_RUN_DIR")
    _impl.install(os.fspath(run_dir))


def installed() -> bool:
    """Whether this process records (through this module or the bootstrap)."""
    import sys

    active = sys.modules.get("saturate_autotrace", _impl)
    return active.installed()


_impl.install_from_env()

__all__ = ["install", "installed"]
