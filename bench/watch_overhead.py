#!/usr/bin/env python3
"""CPU cost of `saturate watch` sampling, against a psutil monitor doing the same.

What a user would otherwise run to watch host and training process is a Python
loop over psutil (as experiment trackers' system monitors do): per-core CPU,
memory, disk counters and the training process tree's CPU, RSS and threads.
Both watch the same process (a `sleep`) at 10 Hz and 100 Hz, side by side in
one run, for --seconds each. GPU sampling is off (no GPU here); on a GPU
machine pass --gpu to add NVML (saturate) / nothing for psutil.

Reports CPU time as a percent of one core: for saturate the sampling thread
alone (meta.json's sampler_cpu_ns) and the whole `saturate watch` process;
for psutil the whole monitoring process.

usage: bench/watch_overhead.py [--saturate PATH] [--seconds 20] [--gpu]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

PSUTIL_MONITOR = r"""
import sys, time, psutil
pid, interval, seconds = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
root = psutil.Process(pid)
end = time.monotonic() + seconds
next_t = time.monotonic()
while time.monotonic() < end:
    psutil.cpu_times_percent(percpu=True)
    psutil.virtual_memory()
    psutil.disk_io_counters()
    for p in [root] + root.children(recursive=True):
        try:
            p.cpu_percent(); p.memory_info(); p.num_threads()
        except psutil.NoSuchProcess:
            pass
    next_t += interval
    time.sleep(max(0.0, next_t - time.monotonic()))
"""


def cpu_pct_of(cmd, seconds):
    """Runs cmd to completion; returns (its CPU seconds as % of one core over wall time, wall)."""
    start = time.monotonic()
    before = os.times()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = os.times()
    wall = time.monotonic() - start
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return 100.0 * cpu / wall, wall


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--saturate", default="saturate")
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--gpu", action="store_true")
    args = p.parse_args()
    sleeper = subprocess.Popen(["sleep", str(10 * args.seconds + 60)])
    rows = []
    try:
        for hz in (10, 100):
            interval = 1.0 / hz
            with tempfile.TemporaryDirectory() as run:
                cmd = [args.saturate, "watch", "--pid", str(sleeper.pid), "--interval",
                       f"{interval * 1000:g}ms", "--duration", f"{args.seconds:g}s", "-q",
                       "--out", run]
                if not args.gpu:
                    cmd.append("--no-gpu")
                proc_pct, _ = cpu_pct_of(cmd, args.seconds)
                meta = json.load(open(f"{run}/meta.json"))
                elapsed_ns = meta["end_unix_ns"] - meta["start_unix_ns"]
                thread_pct = 100.0 * meta["sampler_cpu_ns"] / elapsed_ns
                achieved_hz = meta["samples"] / (elapsed_ns / 1e9)
            ps_pct, _ = cpu_pct_of([sys.executable, "-c", PSUTIL_MONITOR, str(sleeper.pid),
                                    str(interval), str(args.seconds)], args.seconds)
            rows.append((hz, thread_pct, proc_pct, ps_pct, achieved_hz))
    finally:
        sleeper.kill()
    print(f"{'rate':>6} {'saturate sampler':>17} {'saturate process':>17} {'psutil loop':>12} "
          f"{'psutil/saturate':>16} {'samples/s':>10}")
    for hz, thread_pct, proc_pct, ps_pct, achieved in rows:
        print(f"{hz:>4}Hz {thread_pct:>16.3f}% {proc_pct:>16.3f}% {ps_pct:>11.3f}% "
              f"{ps_pct / max(proc_pct, 1e-9):>15.1f}x {achieved:>10.1f}")


if __name__ == "__main__":
    main()
