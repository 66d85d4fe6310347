#!/usr/bin/env python3
"""A DistributedDataParallel job on CPU (Gloo), launched by torchrun, where one
rank can be made to hang while staying alive:

    torchrun --nproc_per_node=2 hang_job.py --hang-rank 1 --hang-step 8 --timeout-s 25

Rank R sleeps for an hour at the start of step K (before its forward), so
the other ranks block in step K's gradient all-reduce until the process
group's timeout. Knows nothing about saturate.
"""

import argparse
import datetime
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def hang():
    """Stands for a deadlock, an endless loop or stuck I/O."""
    time.sleep(3600)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--step-ms", type=float, default=120,
                   help="extra time per step (a slower model), so each step's marks are written")
    p.add_argument("--hang-rank", type=int, default=-1)
    p.add_argument("--hang-step", type=int, default=0)
    p.add_argument("--timeout-s", type=float, default=120, help="the process group's timeout")
    args = p.parse_args()

    rank = int(os.environ.get("RANK", 0))
    world = int(os.environ.get("WORLD_SIZE", 1))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=args.timeout_s))
    torch.manual_seed(0)
    torch.set_num_threads(1)

    g = torch.Generator().manual_seed(0)
    n = args.steps * args.batch_size * world
    data = TensorDataset(torch.randn(n, 32, generator=g), torch.randint(0, 4, (n,), generator=g))
    loader = DataLoader(data, batch_size=args.batch_size, sampler=DistributedSampler(data))
    model = DDP(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    step = 0
    for x, y in loader:
        step += 1
        if rank == args.hang_rank and step == args.hang_step:
            print("rank %d: hanging at step %d (pid %d)" % (rank, step, os.getpid()), flush=True)
            hang()
        time.sleep(args.step_ms / 1000)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step >= args.steps:
            break
    if rank == 0:
        print("done: %d steps on %d ranks" % (step, world), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
