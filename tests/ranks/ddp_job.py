#!/usr/bin/env python3
"""A public-style DistributedDataParallel job on CPU (Gloo), launched by torchrun
or srun, with causes that can be planted from the command line:

    torchrun --nproc_per_node=4 ddp_job.py --slow-rank 3 --slow-ms 40
    torchrun --nproc_per_node=4 ddp_job.py --save-every 1      # rank 0 checkpoints
    torchrun --nproc_per_node=2 ddp_job.py --exit-rank 1 --exit-step 10 --timeout-s 20
    torchrun --nproc_per_node=3 ddp_job.py --uneven-rank 2      # longer sequences on one rank
    torchrun --nproc_per_node=2 ddp_job.py --sync-mb 16         # a large all-reduce every step

Knows nothing about saturate.
"""

import argparse
import datetime
import io
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class Sequences(Dataset):
    """Synthetic sequences; `delay_s` per sample stands for a slow data path."""

    def __init__(self, n, length, delay_s):
        self.n, self.length, self.delay_s = n, length, delay_s

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.delay_s:
            time.sleep(self.delay_s)
        g = torch.Generator().manual_seed(i)
        return torch.randn(self.length, 32, generator=g), torch.tensor(i % 4)


class SlowStorage(io.FileIO):
    """A file on shared storage: its first write waits 30 ms, as a network filesystem would."""

    def write(self, b):
        if self.tell() == 0:
            time.sleep(0.03)
        return super().write(b)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--seq-len", type=int, default=16)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--slow-ms", type=float, default=0)
    p.add_argument("--save-every", type=int, default=0, help="rank 0 saves every N steps")
    p.add_argument("--exit-rank", type=int, default=-1)
    p.add_argument("--exit-step", type=int, default=0)
    p.add_argument("--uneven-rank", type=int, default=-1, help="this rank gets 3x longer sequences")
    p.add_argument("--timeout-s", type=float, default=120)
    p.add_argument("--batchnorm", action="store_true", help="a BatchNorm layer (model buffers)")
    p.add_argument("--sync-mb", type=float, default=0,
                   help="all-reduce this many MB of metrics every step")
    args = p.parse_args()

    # torchrun sets RANK/WORLD_SIZE; under srun they come from Slurm.
    rank = int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", 0)))
    world = int(os.environ.get("WORLD_SIZE", os.environ.get("SLURM_NTASKS", 1)))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=args.timeout_s))
    torch.manual_seed(0)
    torch.set_num_threads(1)

    length = args.seq_len * (3 if rank == args.uneven_rank else 1)
    delay = args.slow_ms / 1000 / args.batch_size if rank == args.slow_rank else 0
    data = Sequences(args.steps * args.batch_size * world, length, delay)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=DistributedSampler(data))
    layers = [nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 4)]
    if args.batchnorm:  # buffers: DDP broadcasts them from rank 0 at every forward
        layers.insert(0, nn.BatchNorm1d(length))
    model = DDP(nn.Sequential(*layers))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    ckpt = os.path.join(tempfile.gettempdir(), "ddp_job_%d.pt" % os.getpid())

    metrics = torch.zeros(int(args.sync_mb * (1 << 20) / 4))
    step = 0
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x).mean(dim=1), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if args.sync_mb:
            dist.all_reduce(metrics)
        step += 1
        if rank == 0 and args.save_every and step % args.save_every == 0:
            with SlowStorage(ckpt, "wb") as f:
                torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, f)
        if rank == args.exit_rank and step == args.exit_step:
            print("rank %d: leaving early at step %d" % (rank, step), flush=True)
            sys.exit(0)
        if step >= args.steps:
            break
    if rank == 0:
        print("done: %d steps on %d ranks" % (step, world), flush=True)
    if os.path.exists(ckpt):
        os.remove(ckpt)
    dist.barrier()  # every rank done before the group goes away
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
