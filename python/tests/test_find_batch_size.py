"""saturate.find_batch_size: the decision on synthetic probes, and real probing
on the CPU (time per step, peak RSS, a real out-of-memory under RLIMIT_AS)."""

import time

import pytest

import saturate
from saturate._batch import Probe, plan_batch_size
from conftest import run_python

GiB = 1 << 30
MiB = 1 << 20


def probes(batches, *, fixed=1 * GiB, per_sample=10 * MiB, overhead_s=0.005, per_sample_s=1e-5,
           frag=0, oom_from=None):
    """Probes of a model whose step costs overhead + b * per_sample seconds."""
    out = []
    for b in batches:
        if oom_from is not None and b >= oom_from:
            out.append(Probe(b, False, error="CUDA out of memory"))
            continue
        out.append(Probe(b, True, b / (overhead_s + b * per_sample_s), fixed + b * per_sample, frag))
    return out


def test_memory_fit_keeps_headroom():
    r = plan_batch_size(probes([8, 16, 32, 64]), 8 * GiB, headroom=0.1)
    fixed, per = r.memory_fit
    assert fixed == pytest.approx(1 * GiB) and per == pytest.approx(10 * MiB)
    # (8 GiB * 0.9 - 1 GiB) / 10 MiB = 634.9 -> 632 (a multiple of 8)
    assert r.max_fitting == 632
    # Throughput still grows with the batch here, so the largest probe is picked.
    assert r.batch_size == 64 and "fits" in r.reason


def test_fragmentation_and_the_largest_sample_shrink_the_fit():
    base = plan_batch_size(probes([8, 16, 32]), 8 * GiB).max_fitting
    fragmented = plan_batch_size(probes([8, 16, 32], frag=1 * GiB), 8 * GiB).max_fitting
    long_samples = plan_batch_size(probes([8, 16, 32]), 8 * GiB, largest_sample_factor=2).max_fitting
    assert fragmented < base - 100  # 1 GiB of 10 MiB samples
    assert long_samples == pytest.approx(base / 2, abs=8)


def test_stops_where_throughput_flattens_not_where_memory_ends():
    # 5 ms of fixed cost per step: throughput flattens before 1 TiB fills.
    r = plan_batch_size(probes([2 ** k for k in range(6, 16)]), 1024 * GiB)
    best = max(p.samples_per_s for p in r.probes)
    pick = next(p for p in r.probes if p.batch_size == r.batch_size)
    assert pick.samples_per_s >= 0.95 * best
    assert r.batch_size < 2 ** 15 and r.batch_size < r.max_fitting
    assert "flattens" in r.reason


def test_an_out_of_memory_caps_the_batch_and_accumulation_keeps_the_target():
    r = plan_batch_size(probes([64, 128, 256, 512], oom_from=512), None, target_batch_size=1024)
    assert r.max_fitting == 511 and r.batch_size == 256
    assert "512 ran out of memory" in r.reason
    assert r.accumulation_steps == 4


def test_nothing_ran_is_an_error():
    with pytest.raises(ValueError, match="smallest probe"):
        plan_batch_size(probes([8], oom_from=8), 8 * GiB)


def test_probes_a_real_step_on_the_cpu():
    """A step with a fixed 4 ms cost and 20 us per sample, holding b * 64 KiB."""
    def step(b):
        held = bytearray(b * 64 * 1024)  # zeroed, so resident: counts in RSS
        time.sleep(0.004 + b * 2e-5)
        return held

    r = saturate.find_batch_size(step, start=8, max_batch_size=4096, steps=2)
    ran = [p for p in r.probes if p.ok]
    assert [p.batch_size for p in ran][:3] == [8, 16, 32]
    assert ran[-1].samples_per_s > 3 * ran[0].samples_per_s
    assert r.memory_fit is not None and r.memory_fit[1] > 32 * 1024  # ~64 KiB a sample
    assert r.batch_size in [p.batch_size for p in ran]


FREED_HEAP_SCRIPT = r"""
import time
import saturate
big = bytearray(31 << 20); del big  # glibc's mmap threshold rises to 31 MiB
chunks = [bytes([1]) * (30 << 20) for _ in range(14)]  # 420 MB resident on the heap
keep = bytearray(1 << 20)  # live above them, so freeing them does not shrink the heap
del chunks
def step(b):
    held = bytearray(b * 64 * 1024)
    time.sleep(0.004 + b * 2e-5)
    return held
r = saturate.find_batch_size(step, start=8, max_batch_size=256, steps=2)
print(r.memory_fit[1])
"""


def test_memory_is_measured_in_a_process_with_freed_heap():
    """Freed but resident heap pages would absorb the steps' allocations: every probe
    would read the same peak RSS (seen in a long pytest process)."""
    r = run_python(["-c", FREED_HEAP_SCRIPT])
    assert r.returncode == 0, r.stderr
    assert float(r.stdout.split()[-1]) > 32 * 1024, r.stdout  # ~64 KiB a sample


OOM_SCRIPT = r"""
import resource, sys, time
import numpy as np
import saturate

def vm_bytes():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmSize:"))

# Address space for about 400 MiB more than the process holds now.
limit = vm_bytes() + (400 << 20)
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

def step(b):
    x = np.empty((b, 1 << 20), dtype=np.uint8)  # b MiB of address space: real allocations
    # Touch only the ends: touching every row costs time in proportion to b where
    # transparent huge pages are on (each touch zeroes 2 MiB), which flattens the
    # throughput curve and ends the search before memory does.
    x[0, 0] = x[-1, 0] = 1
    time.sleep(0.05)  # a fixed cost, so throughput keeps growing until memory ends
    return x.shape[0]

r = saturate.find_batch_size(step, start=32, max_batch_size=1 << 14, steps=1, warmup=0)
failed = [p for p in r.probes if not p.ok]
assert failed and failed[0].batch_size <= 2048, r.probes
assert r.batch_size < failed[0].batch_size and r.max_fitting < failed[0].batch_size
assert step(r.batch_size) == r.batch_size  # the OOM left nothing poisoned behind
print("ok", r.batch_size, failed[0].batch_size)
"""


def test_a_real_out_of_memory_is_caught_and_freed():
    result = run_python(["-c", OOM_SCRIPT], timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("ok")
