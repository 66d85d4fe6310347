"""One rank of a guarded sharded-checkpoint job, for test_checkpoint_dist.py (torch >= 2,
torchrun, gloo).

usage: checkpoint_guard_worker.py DIR OUT --steps S [--copy-delay-ms MS]

Each rank holds an FSDP2-like parameter (a DTensor sharded on dim 0), a replicated
plain parameter and a buffer. SGD (lr 1, gradient -1) adds 1 to both parameters per
step. Save s (guard=the optimizer) finds the parameters and the buffer at s - 1; the
buffer's change and the step follow at once, while the guarded copies (delayed by
--copy-delay-ms here) still run. Writes OUT/guard-rank<R>.json: each save's guard wait
and deferred bytes.
"""

import argparse
import json
import os
import time

import torch

ROWS, COLS = 6, 4  # per rank


def expected(step, world):
    """name -> the global tensor checkpoint `step` holds."""
    base = torch.arange(ROWS * world * COLS, dtype=torch.float32).reshape(ROWS * world, COLS)
    return {"model/w": base + (step - 1), "model/b": torch.full((5,), 10.0) + (step - 1),
            "model/buf": torch.full((3,), float(step - 1))}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("out")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--copy-delay-ms", type=int, default=200)
    a = p.parse_args()
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard

    import saturate.checkpoint
    from saturate import dist_checkpoint as dc

    real = saturate.checkpoint._copy_pieces

    def slow(pieces, threads):  # the copy outlasts the time to the next step
        time.sleep(a.copy_delay_ms / 1000)
        real(pieces, threads)

    saturate.checkpoint._copy_pieces = slow
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    full = expected(1, world)
    local = full["model/w"][rank * ROWS:(rank + 1) * ROWS].clone()
    w = torch.nn.Parameter(DTensor.from_local(local, mesh, [Shard(0)], run_check=False))
    b = torch.nn.Parameter(full["model/b"].clone())
    buf = full["model/buf"].clone()
    opt = torch.optim.SGD([w, b], lr=1.0, foreach=False)
    w.grad = DTensor.from_local(torch.full_like(local, -1.0), mesh, [Shard(0)], run_check=False)
    b.grad = torch.full_like(b, -1.0)
    waits, deferred = [], []
    with dc.DistCheckpointer(a.dir, keep=a.steps) as ckpt:
        for step in range(1, a.steps + 1):
            ckpt.save({"model": {"w": w, "b": b, "buf": buf}, "step": step}, step, guard=opt)
            buf.add_(1)  # forward's buffer update: not guarded, copied inside save
            opt.step()  # waits for this rank's guarded copies first
            s = ckpt.stats()
            waits.append(s["guard_wait_ns"])
            deferred.append(s["deferred_bytes"])
    with open(os.path.join(a.out, f"guard-rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "guard_wait_ns": waits, "deferred_bytes": deferred}, f)
    dist.barrier()
    dist.destroy_process_group()
    import gloo_exit  # beside this file: torch's Gloo can abort in finalization

    gloo_exit.leave(0)


if __name__ == "__main__":
    raise SystemExit(main())
