#!/usr/bin/env python3
"""Data-parallel training with torch.distributed: DistributedDataParallel
over Gloo (CPU) or NCCL (GPUs), a DistributedSampler sharding the dataset,
the initial weights broadcast from rank 0, and the mean loss all-reduced
across ranks every --log-every steps for logging. Launch with torchrun:

    torchrun --nproc_per_node=2 ddp_train.py --epochs 2

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
    p = argparse.ArgumentParser(description="DDP on synthetic data")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--samples", type=int, default=2048)
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--log-every", type=int, default=8)
    p.add_argument("--lr", type=float, default=0.05)
    args = p.parse_args()

    use_cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device(f"cuda:{local_rank}" if use_cuda else "cpu")
    if use_cuda:
        torch.cuda.set_device(device)

    g = torch.Generator().manual_seed(0)
    x = torch.randn(args.samples, 64, generator=g)
    y = (x[:, :8].sum(1) > 0).long()
    dataset = TensorDataset(x, y)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler,
                        num_workers=args.workers, drop_last=True)

    torch.manual_seed(rank)  # different on purpose: the broadcast below makes them equal
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 2)).to(device)
    for param in model.parameters():
        dist.broadcast(param.data, src=0)
    ddp = DDP(model, device_ids=[local_rank] if use_cuda else None)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    step, start = 0, time.time()
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            xb, yb = xb.to(device), yb.to(device)
            loss = loss_fn(ddp(xb), yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            if step % args.log_every == 0:
                mean = loss.detach().clone()
                dist.all_reduce(mean)  # ALL_REDUCE_LINE
                mean /= world
                if rank == 0:
                    print(f"epoch {epoch} step {step} loss {mean.item():.4f}", flush=True)
    dist.barrier()
    if rank == 0:
        print(f"done: {step} steps per rank on {world} ranks in {time.time() - start:.2f} s")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
