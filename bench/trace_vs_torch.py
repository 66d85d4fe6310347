"""What marking a phase costs a Python training loop: saturate.phase versus
torch.profiler.record_function, each while its recorder is on, side by side.

    PYTHONPATH=build/python python bench/trace_vs_torch.py [--n 200000] [--rounds 5]

Rounds alternate the two (A B A B ...) so that machine noise hits both; the
table gives the median ns per span and the ratio.
"""

import argparse
import os
import statistics
import tempfile
import time

import saturate
import torch


def per_span_ns(make_span, n):
    start = time.perf_counter_ns()
    for _ in range(n):
        with make_span("forward"):
            pass
    return (time.perf_counter_ns() - start) / n


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=200_000, help="spans per round")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    sat, prof = [], []
    with tempfile.TemporaryDirectory() as run_dir:
        saturate.trace.start(run_dir)
        for _ in range(args.rounds):
            sat.append(per_span_ns(saturate.phase, args.n))
            # A fresh profiler per round keeps its in-memory event list bounded.
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
                prof.append(per_span_ns(torch.profiler.record_function, args.n))
        saturate.trace.stop()
        written = sum(os.path.getsize(os.path.join(run_dir, f)) for f in os.listdir(run_dir))
    s, t = statistics.median(sat), statistics.median(prof)
    print(f"torch {torch.__version__}, {args.rounds} rounds x {args.n} spans")
    print(f"{'recorder':<38} {'ns/span':>9}")
    print(f"{'saturate.phase (recording)':<38} {s:>9.0f}")
    print(f"{'torch.profiler.record_function':<38} {t:>9.0f}")
    print(f"ratio (torch / saturate): {t / s:.1f}x; saturate wrote {written / 1e6:.1f} MB of spans")


if __name__ == "__main__":
    main()
