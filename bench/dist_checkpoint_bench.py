"""Sharded checkpoint bench (issue 30): saturate.dist_checkpoint vs dcp.async_save, side by side.

usage (torch >= 2, every rank on this machine, gloo):
  PYTHONPATH=build/ci/python OMP_NUM_THREADS=1 .venv-torch2/bin/torchrun --nproc_per_node=2 \
      bench/dist_checkpoint_bench.py [--gib 1] [--saves 3] [--dir DIR] [--no-prepare] [--copy-threads N]

Each rank holds a DTensor state sharded on dim 0 (16 float32 tensors, --gib GiB of local
shards per rank). Save i of each method, alternated (saturate, then DCP, then the next i),
every save in a fresh directory step; between saves the job waits for durability, so saves
never overlap:
  blocking   the save call's wall time on the rank (the training loop's stall): for
             saturate DistCheckpointer.save (snapshot into the host pool), for DCP
             dcp.async_save (planning collectives + staging copy)
  durable    from the save call to the checkpoint committed: saturate: the global manifest
             renamed into place after every rank's files were fsynced (wait() returns);
             DCP: the future's result() (files written and fsynced, .metadata written)
Saturate's pool is prepared before the loop (DistCheckpointer.prepare, timed apart) unless
--no-prepare. Rank 0 prints a table and one JSON line (max over ranks of each number).
"""

import argparse
import json
import os
import shutil
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard

from saturate import dist_checkpoint as dc


def make_state(gib, mesh, world):
    per = int(gib * (1 << 30)) // 16 // 4
    g = torch.Generator().manual_seed(dist.get_rank())
    model = {}
    for i in range(16):
        local = torch.empty(per).uniform_(generator=g)
        model[f"layer{i}.weight"] = DTensor.from_local(local, mesh, [Shard(0)], run_check=False,
                                                       shape=torch.Size([per * world]),
                                                       stride=(1,))
    return {"model": model, "step": 0}


def maxed(x):
    box = [None] * dist.get_world_size()
    dist.all_gather_object(box, x)
    return max(box)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--gib", type=float, default=1.0)
    p.add_argument("--saves", type=int, default=3)
    p.add_argument("--dir", default="/tmp/saturate-dist-ckpt-bench")
    p.add_argument("--no-prepare", action="store_true")
    p.add_argument("--copy-threads", type=int, default=0, help="per rank (0: the default)")
    a = p.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    if rank == 0:
        shutil.rmtree(a.dir, ignore_errors=True)
        os.makedirs(a.dir)
    dist.barrier()
    state = make_state(a.gib, mesh, world)
    sat_dir = os.path.join(a.dir, "saturate")
    ckpt = dc.DistCheckpointer(sat_dir, keep=1, copy_threads=a.copy_threads)
    prepare_s = 0.0
    if not a.no_prepare:
        t = time.perf_counter()
        ckpt.prepare(state)
        prepare_s = time.perf_counter() - t
    dcp_pg = dist.new_group(backend="gloo")  # DCP's advice for async_save: its own group
    rows = []
    for i in range(a.saves):
        state["step"] = i
        dist.barrier()
        t0 = time.perf_counter()
        ckpt.save(state, i)
        t1 = time.perf_counter()
        ckpt.wait()
        t2 = time.perf_counter()
        sat = (maxed(t1 - t0), maxed(t2 - t0))

        dist.barrier()
        path = os.path.join(a.dir, f"dcp-{i}")
        t0 = time.perf_counter()
        fut = dcp.async_save(state, checkpoint_id=path, process_group=dcp_pg)
        t1 = time.perf_counter()
        fut.result()
        t2 = time.perf_counter()
        d = (maxed(t1 - t0), maxed(t2 - t0))
        dist.barrier()
        if rank == 0 and i > 0:
            shutil.rmtree(os.path.join(a.dir, f"dcp-{i - 1}"), ignore_errors=True)
        rows.append({"save": i, "saturate_blocking_s": sat[0], "saturate_durable_s": sat[1],
                     "dcp_blocking_s": d[0], "dcp_durable_s": d[1]})
    ckpt.close()
    prepare_s = maxed(prepare_s)
    if rank == 0:
        print(f"copy threads per rank: {a.copy_threads or 'default'}")
        print(f"{world} ranks x {a.gib} GiB per rank, torch {torch.__version__}, "
              f"prepare {prepare_s:.3f} s (before the loop)" if not a.no_prepare else
              f"{world} ranks x {a.gib} GiB per rank, torch {torch.__version__}, no prepare")
        print("save | saturate blocking | DCP blocking | ratio | saturate durable | DCP durable")
        for r in rows:
            print(f"{r['save']} | {r['saturate_blocking_s']:.3f} s | {r['dcp_blocking_s']:.3f} s | "
                  f"1/{r['dcp_blocking_s'] / r['saturate_blocking_s']:.1f} | "
                  f"{r['saturate_durable_s']:.3f} s | {r['dcp_durable_s']:.3f} s")
        print(json.dumps({"world": world, "gib_per_rank": a.gib, "prepare_s": prepare_s,
                          "prepared": not a.no_prepare, "rows": rows}))
        shutil.rmtree(a.dir, ignore_errors=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
