"""saturate.trace: step-phase spans beside the run's metrics (docs/trace.md).

    import saturate

    for batch in loader:                     # the loader records its own waits
        with saturate.phase("forward"):
            loss = model(batch["image"])
        with saturate.phase("backward"):
            loss.backward()
        optimizer.step()
        saturate.step()                      # marks the end of a training step

    @saturate.phase("checkpoint", category="checkpoint")
    def save(): ...

Recording is on when the process runs under ``saturate doctor`` or ``saturate
watch`` (they set ``SATURATE_RUN_DIR``), or after ``saturate.trace.start(dir)``.
Otherwise a phase costs a few hundred nanoseconds and records nothing (with
CUDA it still opens an NVTX range for Nsight). Spans go to
``RUN_DIR/spans-<pid>.jsonl``; ``saturate trace export RUN`` turns them into a
Chrome trace for Perfetto.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Callable, TypeVar, Union

from . import _core

F = TypeVar("F", bound=Callable)

#: ``saturate.phase(name, category="user")``: a span from entering to leaving a
#: ``with`` block, or around every call of a function it decorates. Category is
#: "user" (the default), "loader" or "checkpoint". One object is entered by
#: one thread at a time; nest new ones.
phase = _core.Phase


def _wrap(name: str, category: str, fn: F) -> F:
    """The decorator form of ``phase``: a fresh span per call."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with _core.Phase(name, category):
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def step() -> int:
    """Marks the end of a training step; returns its number (1, 2, ... per process)."""
    global _auto_told
    if not _auto_told:
        _auto_told = True
        # The auto-instrumentation, when present, leaves step marks and phases
        # to this process from now on (doctor prefers them anyway).
        auto = sys.modules.get("saturate_autotrace")
        if auto is not None and hasattr(auto, "explicit_steps"):
            auto.explicit_steps()
    return _core.trace_step()


_auto_told = False


def start(run_dir: Union[str, os.PathLike]) -> None:
    """Records spans into ``run_dir`` (created if missing) from now on."""
    _core.trace_start(os.fspath(run_dir))


def stop() -> None:
    """Writes what is buffered and stops recording (also happens at exit)."""
    _core.trace_stop()


def flush() -> None:
    """Writes buffered spans now (a background thread does so every 100 ms)."""
    _core.trace_flush()


def enabled() -> bool:
    """Whether spans are being recorded."""
    return _core.trace_enabled()


def run_dir() -> str:
    """The directory spans go to; "" when not recording."""
    return _core.trace_run_dir()


def now_ns() -> int:
    """CLOCK_MONOTONIC in nanoseconds: the clock of the spans files."""
    return _core.trace_now_ns()


__all__ = ["phase", "step", "start", "stop", "flush", "enabled", "run_dir", "now_ns"]
