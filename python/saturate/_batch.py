"""find_batch_size: the largest batch that fits with headroom, and the smallest
that gets (nearly) all the throughput, by measured probes.

Unlike halving on out-of-memory alone, it fits peak memory against batch size
(memory is not proportional to the batch: weights and optimizer state stay),
keeps headroom for allocator fragmentation (measured reserved - allocated on
CUDA) and for the largest sample, and stops growing once doubling the batch
no longer buys throughput.

The decision (`plan_batch_size`) is a pure function of the probes; the probing
(`find_batch_size`) runs the user's step function.
"""

from __future__ import annotations

import dataclasses
import ctypes
import gc
import math
import time
from typing import Callable, Optional, Sequence


@dataclasses.dataclass
class Probe:
    batch_size: int
    ok: bool                         # False: out of memory
    samples_per_s: float = 0.0
    peak_bytes: int = 0              # peak memory of one step (device, or host RSS on CPU)
    fragmentation_bytes: int = 0     # CUDA: reserved - allocated at the peak; 0 elsewhere
    error: str = ""


@dataclasses.dataclass
class BatchSizeResult:
    batch_size: int                  # the recommendation
    max_fitting: Optional[int]       # the largest batch the memory fit allows (None: unknown)
    reason: str                      # why this one, in a sentence
    probes: list[Probe]
    memory_fit: Optional[tuple[float, float]]  # peak_bytes ~= fixed + per_sample * batch
    accumulation_steps: int = 1      # to keep `target_batch_size`, if given


def _fit_line(points: Sequence[tuple[float, float]]) -> Optional[tuple[float, float]]:
    """Least-squares (intercept, slope), or None with fewer than two distinct x."""
    if len({x for x, _ in points}) < 2:
        return None
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx
    return my - slope * mx, max(slope, 0.0)


def plan_batch_size(probes: Sequence[Probe], memory_limit_bytes: Optional[int], *,
                    headroom: float = 0.10, largest_sample_factor: float = 1.0,
                    flat_gain: float = 0.05, multiple_of: int = 8,
                    target_batch_size: Optional[int] = None) -> BatchSizeResult:
    """Picks a batch size from measured probes.

    - Fits: peak memory is fitted as fixed + per_sample * batch over the probes
      that ran; the limit is memory_limit_bytes * (1 - headroom) minus the
      largest fragmentation seen, and each sample is counted
      `largest_sample_factor` times (e.g. longest / probed sequence length).
    - Pays: among the batches that fit, the smallest whose throughput is within
      `flat_gain` of the best measured one (a larger batch buys nothing but
      memory and optimisation risk).
    """
    ran = sorted((p for p in probes if p.ok), key=lambda p: p.batch_size)
    if not ran:
        raise ValueError("no batch size ran: even the smallest probe failed")
    fit = _fit_line([(p.batch_size, p.peak_bytes) for p in ran if p.peak_bytes > 0])
    oom = min((p.batch_size for p in probes if not p.ok), default=None)
    max_fitting = None
    if fit and memory_limit_bytes:
        fixed, per_sample = fit
        frag = max(p.fragmentation_bytes for p in ran)
        usable = memory_limit_bytes * (1 - headroom) - frag - fixed
        per = per_sample * largest_sample_factor
        max_fitting = int(usable / per) if per > 0 else None
        if max_fitting is not None:
            max_fitting = max(multiple_of, max_fitting // multiple_of * multiple_of)
    if oom is not None:  # measured beats fitted
        below = oom - 1
        max_fitting = below if max_fitting is None else min(max_fitting, below)
    fitting = [p for p in ran if max_fitting is None or p.batch_size <= max_fitting]
    candidates = fitting or ran[:1]
    best = max(candidates, key=lambda p: p.samples_per_s)
    pick = next(p for p in candidates if p.samples_per_s >= (1 - flat_gain) * best.samples_per_s)
    if pick.batch_size < best.batch_size:
        reason = (f"throughput flattens: batch {pick.batch_size} gets "
                  f"{pick.samples_per_s / best.samples_per_s:.0%} of the best "
                  f"({best.samples_per_s:.0f} samples/s at {best.batch_size})")
    elif max_fitting is not None and pick.batch_size >= max(p.batch_size for p in candidates):
        reason = f"the largest probed batch that fits (the memory fit allows up to {max_fitting})"
    else:
        reason = f"the fastest probe ({pick.samples_per_s:.0f} samples/s)"
    if oom is not None:
        reason += f"; batch {oom} ran out of memory"
    accumulation = 1
    if target_batch_size:
        accumulation = max(1, math.ceil(target_batch_size / pick.batch_size))
    return BatchSizeResult(pick.batch_size, max_fitting, reason, list(probes), fit, accumulation)


# ---------------------------------------------------------------- probing


def _is_oom(error: BaseException) -> bool:
    if isinstance(error, MemoryError):
        return True
    text = str(error).lower()
    return isinstance(error, RuntimeError) and ("out of memory" in text or
                                                "can't allocate memory" in text)


def _trim_heap() -> None:
    """Hands freed heap pages back to the OS (glibc's malloc_trim), so the RSS
    is what is live. Without it a process that once held large buffers keeps
    their freed pages resident, a step's allocations reuse them without the
    RSS growing, and every probe would read the same peak."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


class _Memory:
    """Peak memory of a step: CUDA's allocator stats, or the process's peak RSS
    (VmHWM, reset through /proc/self/clear_refs) on the CPU."""

    def __init__(self, device):
        self.cuda = device is not None and str(device).startswith("cuda")
        self.device = device

    def limit_bytes(self) -> Optional[int]:
        if self.cuda:
            import torch
            return torch.cuda.mem_get_info(self.device)[1]
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024 + self._rss_bytes("VmRSS")
        return None

    def reset(self) -> None:
        if self.cuda:
            import torch
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            _trim_heap()
            try:
                with open("/proc/self/clear_refs", "w") as f:
                    f.write("5")  # resets VmHWM to the current RSS
            except OSError:
                pass

    def peak(self) -> tuple[int, int]:
        """(peak bytes, fragmentation bytes) since reset()."""
        if self.cuda:
            import torch
            torch.cuda.synchronize(self.device)
            allocated = torch.cuda.max_memory_allocated(self.device)
            reserved = torch.cuda.max_memory_reserved(self.device)
            return reserved, max(0, reserved - allocated)
        return self._rss_bytes("VmHWM"), 0

    def free(self) -> None:
        gc.collect()
        if self.cuda:
            import torch
            torch.cuda.empty_cache()

    @staticmethod
    def _rss_bytes(key: str) -> int:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
        return 0


def _probe(step_fn, batch_size: int, memory: _Memory, warmup: int, steps: int) -> Probe:
    try:
        for _ in range(warmup):
            step_fn(batch_size)
        memory.reset()
        start = time.perf_counter()
        for _ in range(steps):
            step_fn(batch_size)
        if memory.cuda:
            import torch
            torch.cuda.synchronize(memory.device)
        seconds = time.perf_counter() - start
        peak, frag = memory.peak()
        return Probe(batch_size, True, batch_size * steps / seconds, peak, frag)
    except Exception as e:  # noqa: BLE001 - only OOM is expected; others re-raise
        if not _is_oom(e):
            raise
        return Probe(batch_size, False, error=str(e).splitlines()[0][:200])
    finally:
        memory.free()  # an OOM leaves nothing cached behind for the next probe


def find_batch_size(step_fn: Callable[[int], object], *, start: int = 8,
                    max_batch_size: int = 1 << 16, device=None, warmup: int = 1,
                    steps: int = 3, headroom: float = 0.10, largest_sample_factor: float = 1.0,
                    flat_gain: float = 0.05, target_batch_size: Optional[int] = None,
                    memory_limit_bytes: Optional[int] = None) -> BatchSizeResult:
    """Probes step_fn(batch_size) at start, 2*start, 4*start, ... and picks a batch size.

    `step_fn(b)` runs one full training step (forward, backward, optimizer) on a
    batch of `b` samples, ideally of the largest shape the data has (or say
    how much larger the largest sample is with `largest_sample_factor`).
    Growth stops at the first out-of-memory (caught, memory freed), when
    doubling gains less than `flat_gain` throughput twice in a row, or at
    `max_batch_size`. `device`: "cuda[:N]" measures the CUDA allocator; None
    or "cpu" measures the process's peak RSS against available RAM.
    With `target_batch_size`, the result says how many accumulation steps
    keep that effective batch.
    """
    if start <= 0 or max_batch_size < start:
        raise ValueError(f"start={start}, max_batch_size={max_batch_size}: need 0 < start <= max")
    memory = _Memory(device)
    probes: list[Probe] = []
    flat = 0
    b = start
    while b <= max_batch_size:
        probe = _probe(step_fn, b, memory, warmup, steps)
        probes.append(probe)
        if not probe.ok:
            break
        ran = [p for p in probes if p.ok]
        if len(ran) >= 2 and ran[-1].samples_per_s < (1 + flat_gain) * ran[-2].samples_per_s:
            flat += 1
            if flat >= 2:
                break
        else:
            flat = 0
        b *= 2
    limit = memory_limit_bytes if memory_limit_bytes is not None else memory.limit_bytes()
    return plan_batch_size(probes, limit, headroom=headroom,
                           largest_sample_factor=largest_sample_factor, flat_gain=flat_gain,
                           target_batch_size=target_batch_size)
