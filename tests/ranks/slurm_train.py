#!/usr/bin/env python3
"""Data-parallel training launched by Slurm's srun (one task per rank), set up
the way many public Slurm scripts do it: the script itself maps SLURM_PROCID /
SLURM_NTASKS / SLURM_LOCALID to the rank, world size and local rank and joins a
Gloo process group at MASTER_ADDR:MASTER_PORT (defaults: 127.0.0.1 and a port
from the job id). A small Linear model, --steps steps, the mean loss
all-reduced every step for logging; --slow-rank R sleeps --slow-ms in its data
path (the collate function) every step, so the other ranks wait for it in the
gradient all-reduce. Launch:

    srun -n 2 python slurm_train.py --steps 40 --slow-rank 1

Knows nothing about saturate.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main():
    p = argparse.ArgumentParser(description="DDP on CPU under srun")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--batch-size", type=int, default=16, help="per rank")
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--slow-ms", type=float, default=30.0)
    args = p.parse_args()

    rank = int(os.environ["SLURM_PROCID"])
    world = int(os.environ["SLURM_NTASKS"])
    local_rank = int(os.environ.get("SLURM_LOCALID", 0))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    job_id = int(os.environ.get("SLURM_JOB_ID", 0))
    os.environ.setdefault("MASTER_PORT", str(12000 + job_id % 20000))
    dist.init_process_group("gloo", rank=rank, world_size=world)

    g = torch.Generator().manual_seed(0)
    x = torch.randn(args.steps * args.batch_size * world, 32, generator=g)
    y = (x[:, :4].sum(1) > 0).long()
    dataset = TensorDataset(x, y)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=0)

    def collate(items):
        if rank == args.slow_rank:
            time.sleep(args.slow_ms / 1000)  # a slow data path on this rank only
        return torch.stack([a for a, _ in items]), torch.stack([b for _, b in items])

    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, collate_fn=collate,
                        drop_last=True)
    torch.manual_seed(0)
    model = DDP(nn.Linear(32, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.CrossEntropyLoss()

    start, step = time.time(), 0
    for xb, yb in loader:
        loss = loss_fn(model(xb), yb)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        if rank == 0 and step % 10 == 0:
            print(f"step {step} loss {mean.item() / world:.4f}", flush=True)
    dist.barrier()
    print(f"rank {rank}/{world} (local {local_rank}): {step} steps in {time.time() - start:.2f} s",
          flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
