"""A one-line progress bar on stderr, drawn only when stderr is a terminal.

The same bar as the C++ tool's (tools/saturate/cli.h): label, bar, count,
percent, rate, bytes when given, and the time left. Called by the C++ code's
progress callbacks (at most ten times a second, see python/core.cc).
"""

from __future__ import annotations

import sys
import time
from typing import Optional

_WIDTH = 28


class Bar:
    def __init__(self, label: str, unit: str):
        self.label, self.unit = label, unit
        self.start, self.drawn = time.monotonic(), False

    def __call__(self, done: int, total: int, bytes_written: Optional[int] = None) -> None:
        if not sys.stderr.isatty():
            return
        elapsed = time.monotonic() - self.start
        frac = done / total if total else 0
        rate = done / elapsed if elapsed > 0 else 0
        eta = (total - min(done, total)) / rate if rate > 0 else 0
        filled = int(frac * _WIDTH)
        bar = "=" * filled + (">" + " " * (_WIDTH - 1 - filled) if filled < _WIDTH else "")
        size = f" {bytes_written / 2**20:.1f} MiB" if bytes_written is not None else ""
        sys.stderr.write(f"\r{self.label} [{bar}] {done}/{total} {frac * 100:5.1f}% "
                         f"{rate:.0f} {self.unit}/s{size} ETA {eta:.0f}s\033[K")
        sys.stderr.flush()
        self.drawn = True

    def finish(self) -> None:
        """Clears the line, if a bar was drawn."""
        if self.drawn:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
            self.drawn = False
