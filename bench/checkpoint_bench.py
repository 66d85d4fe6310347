"""Checkpoint bench: training time blocked by a save, saturate.Checkpointer vs torch.save,
and the background write throughput vs the disk's sequential write speed (dd, same run).

usage: PYTHONPATH=build/<py>/python python bench/checkpoint_bench.py [--gib 1] [--dir DIR] [--repeat 3]
       PYTHONPATH=build/<py>/python python bench/checkpoint_bench.py --first-save [--gib 1] [--repeat 3]

Rows (one run, same machine, same directory):
  torch.save        the call's wall time (it writes the whole file before returning; no fsync)
  saturate save     the call's wall time (snapshot into the reused host pool), first and steady
  saturate write    the background write to commit (files fsynced, dir fsynced, renamed)
  dd conv=fsync     dd if=/dev/zero of=F bs=16M count=N conv=fsync over the same bytes
Ratios: torch.save / saturate blocking (bar >= 10x for >= 1 GiB) and
saturate write MB/s / dd MB/s (bar >= 0.70). GPU bars are not measured here.

--first-save (issue 30, point 5): the first save of a fresh process, where pools and staging
buffers are allocated. Each variant runs in its own process (same state, same directory), the
variants alternated in a rotating order, `repeat` rounds:
  saturate            Checkpointer(dir).save(state): the first save allocates the pool
  saturate+prepare    Checkpointer(dir); prepare(state) (timed apart, before the loop); save(state)
  dcp.async_save      torch.distributed.checkpoint.async_save(state): the call's blocking part
                      (torch >= 2; skipped when the module or the call is missing)
  torch.save          the whole write
and the second save of the same process for each, so first/second shows what the first pays.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import json
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


FIRST_VARIANTS = ["saturate", "saturate+prepare", "dcp.async_save", "torch.save"]


def first_save_child(variant: str, gib: float, dir: str) -> dict:
    """One fresh process: the first and the second save of `variant`, in seconds."""
    state = make_state(gib)
    out = {"variant": variant}
    path = os.path.join(dir, "ckpt")
    if variant.startswith("saturate"):
        ckpt = saturate.Checkpointer(path, keep=1)
        if variant == "saturate+prepare":
            out["prepare_s"] = timed(lambda: ckpt.prepare(state))
        for key, step in (("first_s", 0), ("second_s", 1)):
            drop_dirty()
            state["step"] = step
            out[key] = timed(lambda: ckpt.save(state, step))
            ckpt.wait()
        out["pool_allocations"] = ckpt.stats()["pool_allocations"]
        ckpt.close()
    elif variant == "dcp.async_save":
        try:
            import torch.distributed.checkpoint as dcp
            async_save = dcp.async_save
        except (ImportError, AttributeError) as e:
            return {"variant": variant, "skipped": f"{type(e).__name__}: {e}"}
        futures = []
        for key, step in (("first_s", 0), ("second_s", 1)):
            drop_dirty()
            state["step"] = step
            target = os.path.join(dir, f"dcp-{step}")
            out[key] = timed(lambda: futures.append(async_save(state, checkpoint_id=target)))
            futures[-1].result()
    elif variant == "torch.save":
        for key, step in (("first_s", 0), ("second_s", 1)):
            drop_dirty()
            out[key] = timed(lambda: torch.save(state, path + ".pt"))
    shutil.rmtree(dir, ignore_errors=True)
    return out


def first_save_main(args) -> None:
    """Runs every variant in its own process, alternated, and prints medians and ratios."""
    load = os.getloadavg()
    print(f"first save: {args.gib:g} GiB in 16 tensors; dir {args.dir}; {os.cpu_count()} cores; "
          f"torch {torch.__version__}; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    results = {v: [] for v in FIRST_VARIANTS}
    for r in range(args.repeat):
        order = FIRST_VARIANTS[r % len(FIRST_VARIANTS):] + FIRST_VARIANTS[:r % len(FIRST_VARIANTS)]
        for v in order:
            child_dir = os.path.join(args.dir, "first")
            shutil.rmtree(child_dir, ignore_errors=True)
            os.makedirs(child_dir)
            proc = subprocess.run(
                [sys.executable, __file__, "--first-child", v, "--gib", str(args.gib),
                 "--dir", child_dir], check=True, capture_output=True, text=True)
            res = json.loads(proc.stdout.strip().splitlines()[-1])
            results[v].append(res)
            print(f"  round {r + 1} {v:<17} " + " ".join(
                f"{k}={x * 1e3:.0f}ms" if k.endswith("_s") else f"{k}={x}"
                for k, x in res.items() if k != "variant"), flush=True)
    shutil.rmtree(args.dir, ignore_errors=True)

    med = statistics.median
    def m(v, key):
        xs = [x[key] for x in results[v] if key in x]
        return med(xs) if xs else None
    ref_name = "dcp.async_save" if m("dcp.async_save", "first_s") else "torch.save"
    ref = m(ref_name, "first_s")
    print(f"{'measure (median of ' + str(args.repeat) + ', ms)':<28} {'first':>8} {'second':>8} "
          f"{'first/second':>12} {'first vs ' + ref_name + ' first':>28}")
    for v in FIRST_VARIANTS:
        first, second = m(v, "first_s"), m(v, "second_s")
        if first is None:
            why = results[v][0].get("skipped", "no result") if results[v] else "not run"
            print(f"{v:<28} skipped: {why}")
            continue
        print(f"{v:<28} {first * 1e3:8.0f} {second * 1e3:8.0f} {first / second:12.2f} "
              f"{first / ref:27.3f}x")
    prep = m("saturate+prepare", "prepare_s")
    if prep is not None:
        print(f"saturate prepare() itself (before the loop): {prep * 1e3:.0f} ms")
    print(f"goal (issue 30): every save, the first included, blocks <= 1/5 of DCP's "
          f"(ratio <= 0.200 in the last column)")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--gib", type=float, default=1.0)
    p.add_argument("--dir", default="build/checkpoint-bench")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--first-save", action="store_true",
                   help="first save of a fresh process, with and without prepare, vs DCP")
    p.add_argument("--first-child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.first_child:
        print(json.dumps(first_save_child(args.first_child, args.gib, args.dir)))
        return
    if args.first_save:
        first_save_main(args)
        return
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
