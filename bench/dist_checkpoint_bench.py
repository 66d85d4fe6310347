"""Sharded checkpoint bench (issue 30): saturate.dist_checkpoint vs dcp.async_save, side by side.

usage (torch >= 2, every rank on this machine, gloo):
  PYTHONPATH=build/ci/python OMP_NUM_THREADS=1 .venv-torch2/bin/torchrun --nproc_per_node=2 \
      bench/dist_checkpoint_bench.py [--gib 1] [--saves 3] [--dir DIR] [--no-prepare] [--copy-threads N]
      [--guard [--step-s 1.0] [--steps-between 3]]

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

--guard: a training-like loop runs between saves, and saturate saves with
guard=the optimizer (the copy of the optimizer's tensors leaves the save call).
The 16 local shards are the parameters of an SGD optimizer (a constant zero
gradient: each step() reads and writes all of them); a training step is
--step-s seconds of float32 matmuls (calibrated per rank at the start, the
slowest rank's count used by all), a small all_reduce (the ranks stay in step,
as DDP's would) and opt.step(). Per round, each method saves once and the job
runs --steps-between training steps right after the save, then waits for
durability:
  saturate(guard)  DistCheckpointer.save(state, step, guard=opt); blocked = the
                   save call + the time step()'s hook waited for the deferred copy
  DCP              dcp.async_save (its staging copy is inside the call); blocked =
                   the call
  saturate(plain)  DistCheckpointer.save(state, step), for reference; blocked = the call
  durable          save call -> checkpoint committed (saturate: rank 0's global
                   manifest rename; DCP: the future done, max over ranks), while
                   training runs
  steps            the --steps-between steps after the save call, summed, minus as many
                   steps without a checkpoint in flight (the median of 5 measured before
                   the loop): the hook wait and the background copy/write competing with
                   training for the cores; the save call is not in it (call + steps =
                   what the save cost training in all)
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


class Training:
    """A training-like step on this rank: `reps` matmuls (the forward/backward),
    a small all_reduce (as DDP's gradient sync keeps ranks in step), opt.step()."""

    def __init__(self, params, step_s):
        self.opt = torch.optim.SGD(params, lr=1e-3)
        for p in params:
            p.grad = torch.zeros(1).expand_as(p)  # no memory: step() still writes every param
        g = torch.Generator().manual_seed(0)
        self.a = torch.randn(1024, 1024, generator=g)
        self.b = torch.randn(1024, 1024, generator=g)
        self.sync = torch.zeros(16)
        t = time.perf_counter()
        for _ in range(3):
            torch.mm(self.a, self.b)
        per_mm = (time.perf_counter() - t) / 3
        t = time.perf_counter()
        self.opt.step()
        opt_s = time.perf_counter() - t
        reps = torch.tensor([max(1, round((step_s - opt_s) / per_mm))])
        dist.all_reduce(reps, op=dist.ReduceOp.MAX)
        self.reps = int(reps)

    def step(self):
        t = time.perf_counter()
        for _ in range(self.reps):
            torch.mm(self.a, self.b)
        dist.all_reduce(self.sync)
        self.opt.step()
        return time.perf_counter() - t


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
    p.add_argument("--guard", action="store_true",
                   help="a training loop between saves; saturate saves with guard=the optimizer")
    p.add_argument("--step-s", type=float, default=1.0, help="--guard: one training step's time")
    p.add_argument("--steps-between", type=int, default=3,
                   help="--guard: training steps right after each save")
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
    if a.guard:
        return guarded(a, state, ckpt, dcp_pg, prepare_s)
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


def guarded(a, state, ckpt, dcp_pg, prepare_s):
    """--guard: saves inside a training loop (see the module docstring)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    params = [torch.nn.Parameter(dt._local_tensor) for dt in state["model"].values()]
    assert all(p.data_ptr() == dt._local_tensor.data_ptr()
               for p, dt in zip(params, state["model"].values()))  # the DTensors' shards
    train = Training(params, a.step_s)
    for _ in range(2):
        train.step()  # warm-up
    base = sorted(train.step() for _ in range(5))[2]
    base = maxed(base)
    rows = []
    for i in range(a.saves):
        row = {"save": i}
        for method in ("guard", "dcp", "plain"):
            step = 2 * i + (method == "plain")
            state["step"] = step
            done = []
            dist.barrier()
            t0 = time.perf_counter()
            if method == "dcp":
                fut = dcp.async_save(state, checkpoint_id=os.path.join(a.dir, f"dcp-{i}"),
                                     process_group=dcp_pg)
                fut.add_done_callback(lambda f: done.append(time.perf_counter()))
            else:
                ckpt.save(state, step, guard=train.opt if method == "guard" else None)
            call = time.perf_counter() - t0
            steps = sum(train.step() for _ in range(a.steps_between))
            if method == "dcp":
                fut.result()
                while not done:  # the callback runs right after the waiters wake
                    time.sleep(0.0005)
                durable = maxed(done[0] - t0)
                blocked = maxed(call)
            else:
                ckpt.wait()
                while rank == 0 and ckpt._seq not in ckpt._durable_ns:  # set after retention
                    time.sleep(0.0005)
                s = ckpt.stats()
                wait = s["guard_wait_ns"] / 1e9 if method == "guard" else 0.0
                blocked = maxed(call + wait)
                row[f"{method}_call_s"] = maxed(call)
                row[f"{method}_hook_wait_s"] = maxed(wait)
                durable = (s["durable_ns"] or 0) / 1e9 if rank == 0 else 0.0
                durable = maxed(durable)
            row[f"{method}_blocked_s"] = blocked
            row[f"{method}_durable_s"] = durable
            row[f"{method}_step_cost_s"] = maxed(steps - a.steps_between * base)
            dist.barrier()
            if rank == 0 and method == "dcp" and i > 0:
                shutil.rmtree(os.path.join(a.dir, f"dcp-{i - 1}"), ignore_errors=True)
        rows.append(row)
    ckpt.close()
    prepare_s = maxed(prepare_s)
    if rank == 0:
        print(f"{world} ranks x {a.gib} GiB per rank, torch {torch.__version__}, copy threads per "
              f"rank: {a.copy_threads or 'default'}, prepare {prepare_s:.3f} s (before the loop); "
              f"training step {base:.3f} s ({train.reps} matmuls of 1024^2 + all_reduce + "
              f"SGD step over the {a.gib} GiB), {a.steps_between} steps after each save")
        print("save | saturate(guard) blocked = call + hook wait | DCP blocking | ratio | "
              "saturate(plain) blocking | durable: guard / DCP / plain | "
              "steps' extra time: guard / DCP / plain")
        for r in rows:
            print(f"{r['save']} | {r['guard_blocked_s']:.3f} s = {r['guard_call_s']:.3f} + "
                  f"{r['guard_hook_wait_s']:.3f} | {r['dcp_blocked_s']:.3f} s | "
                  f"1/{r['dcp_blocked_s'] / max(r['guard_blocked_s'], 1e-9):.1f} | "
                  f"{r['plain_blocked_s']:.3f} s | {r['guard_durable_s']:.2f} / "
                  f"{r['dcp_durable_s']:.2f} / {r['plain_durable_s']:.2f} s | "
                  f"{r['guard_step_cost_s']:+.3f} / {r['dcp_step_cost_s']:+.3f} / "
                  f"{r['plain_step_cost_s']:+.3f} s")
        print(json.dumps({"mode": "guard", "world": world, "gib_per_rank": a.gib,
                          "prepare_s": prepare_s, "step_s": base, "matmuls": train.reps,
                          "steps_between": a.steps_between, "rows": rows}))
        shutil.rmtree(a.dir, ignore_errors=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
