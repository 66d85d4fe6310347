"""Checkpoint bench: training time blocked by a save, saturate.Checkpointer vs torch.save,
and the background write throughput vs the disk's sequential write speed (dd, same run).

usage: PYTHONPATH=build/<py>/python python bench/checkpoint_bench.py [--gib 1] [--dir DIR] [--repeat 3]

Rows (one run, same machine, same directory):
  torch.save        the call's wall time (it writes the whole file before returning; no fsync)
  saturate save     the call's wall time (snapshot into the reused host pool), first and steady
  saturate write    the background write to commit (files fsynced, dir fsynced, renamed)
  dd conv=fsync     dd if=/dev/zero of=F bs=16M count=N conv=fsync over the same bytes
Ratios: torch.save / saturate blocking (bar >= 10x for >= 1 GiB) and
saturate write MB/s / dd MB/s (bar >= 0.70). GPU bars are not measured here.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import time

import torch

import saturate


def make_state(gib: float):
    """A model-like state: 16 float32 tensors filling `gib` GiB, plus small extras."""
    total = int(gib * (1 << 30))
    per = total // 16 // 4
    g = torch.Generator().manual_seed(0)
    tensors = {f"layer{i}.weight": torch.empty(per).uniform_(generator=g) for i in range(16)}
    return {"model": tensors, "step": 0, "rng": torch.get_rng_state()}


def state_bytes(state) -> int:
    return sum(t.numel() * t.element_size() for t in state["model"].values())


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def dd_mb_per_s(path: str, nbytes: int) -> float:
    count = max(1, nbytes // (16 << 20))
    start = time.perf_counter()
    subprocess.run(["dd", "if=/dev/zero", f"of={path}", "bs=16M", f"count={count}", "conv=fsync"],
                   check=True, capture_output=True)
    elapsed = time.perf_counter() - start
    os.remove(path)
    return count * (16 << 20) / elapsed / 1e6


def drop_dirty():
    os.sync()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--gib", type=float, default=1.0)
    p.add_argument("--dir", default="build/checkpoint-bench")
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    shutil.rmtree(args.dir, ignore_errors=True)
    os.makedirs(args.dir)
    state = make_state(args.gib)
    nbytes = state_bytes(state)
    print(f"state: {nbytes / (1 << 30):.2f} GiB in {len(state['model'])} tensors; "
          f"dir {args.dir}; {os.cpu_count()} cores; torch {torch.__version__}")

    torch_s, block_s, write_mb, dd_mb = [], [], [], []
    first_block_s = None
    ckpt = saturate.Checkpointer(os.path.join(args.dir, "ckpt"), keep=1)
    for r in range(args.repeat):
        drop_dirty()
        path = os.path.join(args.dir, "torch.pt")
        torch_s.append(timed(lambda: torch.save(state, path)))
        os.remove(path)
        drop_dirty()
        dd_mb.append(dd_mb_per_s(os.path.join(args.dir, "dd.bin"), nbytes))
        drop_dirty()
        state["step"] = r
        s = timed(lambda: ckpt.save(state, r))
        if first_block_s is None:
            first_block_s = s
        else:
            block_s.append(s)
        ckpt.wait()
        write_mb.append(ckpt.stats()["write_bytes_per_s"] / 1e6)
    if not block_s:
        block_s = [first_block_s]
    stats = ckpt.stats()
    ckpt.close()
    shutil.rmtree(args.dir, ignore_errors=True)

    med = statistics.median
    rows = [
        ("torch.save (blocks for the whole write)", f"{med(torch_s) * 1e3:9.1f} ms"),
        ("saturate save, first (pool allocated)", f"{first_block_s * 1e3:9.1f} ms"),
        ("saturate save, steady (pool reused)", f"{med(block_s) * 1e3:9.1f} ms"),
        ("saturate background write to commit", f"{stats['last_write_ns'] / 1e6:9.1f} ms"),
        ("saturate write throughput", f"{med(write_mb):9.1f} MB/s"),
        ("dd bs=16M conv=fsync", f"{med(dd_mb):9.1f} MB/s"),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"{'measure (median of ' + str(args.repeat) + ')':<{width}}  value")
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    print(f"blocking ratio torch.save / saturate (steady): {med(torch_s) / med(block_s):.1f}x "
          f"(first save: {med(torch_s) / first_block_s:.1f}x; bar >= 10x)")
    print(f"write throughput saturate / dd: {med(write_mb) / med(dd_mb):.2f} (bar >= 0.70)")
    print("GPU bars (blocking <= 1.2x pinned D2H copy, <= 2% throughput loss): unmeasured, no GPU")


if __name__ == "__main__":
    main()
