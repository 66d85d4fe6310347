"""saturate.watch: sample GPUs and host around a block of training code.

    with saturate.watch("runs/exp1", prometheus=9400) as w:
        train()
    print(w.stats())

Samples this process and its children (e.g. DataLoader workers), the host and
every GPU NVML sees, on a C++ thread, every ``interval`` seconds (default 0.1).
The run directory gets ``meta.json`` and ``samples.jsonl`` as with ``saturate
watch`` (schema: docs/watch.md). Without an NVIDIA driver it samples zero GPUs;
``gpu_status`` says why.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Dict, Optional, Union

from . import _core


class watch:  # noqa: N801 - used as a function: `with saturate.watch(...)`
    """A context manager (or call ``start()`` / ``stop()``) around code to watch.

    Args:
      run_dir: where to record; None keeps nothing on disk.
      interval: seconds between samples (>= 0.001).
      prometheus: serve metrics at http://127.0.0.1:PORT/metrics: an int port, or
        "ADDR:PORT" to choose the address.
      gpus: False skips NVML.
      nvml_library: path of libnvidia-ml ("" searches the usual names).
    """

    def __init__(
        self,
        run_dir: Optional[Union[str, os.PathLike]] = None,
        *,
        interval: float = 0.1,
        prometheus: Optional[Union[int, str]] = None,
        gpus: bool = True,
        nvml_library: str = "",
    ):
        if not interval >= 0.001:
            raise ValueError(f"interval: {interval!r} (use seconds >= 0.001)")
        self._args = dict(
            run_dir=os.fspath(run_dir) if run_dir is not None else "",
            interval_ns=int(interval * 1e9),
            pid=os.getpid(),
            command=list(sys.argv),
            gpus=gpus,
            nvml_library=nvml_library,
            prometheus=str(prometheus) if prometheus is not None else None,
        )
        self._core: Optional[_core.Watcher] = None

    def start(self) -> "watch":
        if self._core is None:
            self._core = _core.Watcher(**self._args)
        return self

    def stop(self, exit_code: Optional[int] = 0) -> None:
        """Stops sampling and finishes the run directory (idempotent)."""
        if self._core is not None:
            self._core.stop(exit_code)

    def __enter__(self) -> "watch":
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        self.stop(0 if exc_type is None else 1)

    def _started(self) -> _core.Watcher:
        if self._core is None:
            raise RuntimeError("saturate.watch: not started (use `with` or start())")
        return self._core

    @property
    def gpu_status(self) -> str:
        """E.g. "2 GPUs (driver 550.54, libnvidia-ml.so.1)", or why there are none."""
        return self._started().gpu_status

    @property
    def metrics_url(self) -> Optional[str]:
        return self._started().metrics_url

    def latest(self) -> Dict[str, Any]:
        """The latest sample (a samples.jsonl object); {} before the first."""
        return json.loads(self._started().latest_json())

    def prometheus_text(self) -> str:
        return self._started().prometheus_text()

    def render(self, screen: bool = False) -> str:
        """The latest values as one line, or as the one-screen live view."""
        return self._started().render(screen)

    def stats(self) -> Dict[str, Any]:
        """samples, elapsed_ns, sampler_cpu_ns (the sampler's own CPU use), last_error."""
        return self._started().stats()
