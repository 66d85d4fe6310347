#!/usr/bin/env python3
"""A healthy, compute-bound training loop: a small CNN on an in-memory
dataset, the loss read back only when it is logged (every --log-every steps),
no checkpoint in the loop. The batches come straight from memory, or through
a DataLoader (--data loader, with --workers processes) whose per-sample work
is light, so it keeps up. Knows nothing about saturate.

    python healthy.py --steps 150
    python healthy.py --data loader --workers 2
    python healthy.py --precision autocast   # forward under torch.autocast, bfloat16
    python healthy.py --precision bf16       # the model and inputs in bfloat16
"""

import argparse
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    p = argparse.ArgumentParser(description="compute-bound CNN")
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--data", choices=["memory", "loader"], default="memory")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--precision", choices=["fp32", "autocast", "autocast-loop", "bf16"],
                   default="fp32", help="autocast-loop: the whole loop inside one autocast")
    args = p.parse_args()

    torch.manual_seed(0)
    n = args.batch_size * 32
    images = torch.randn(n, 3, 32, 32)
    labels = torch.randint(0, 10, (n,))
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2), nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(64, 10))
    if args.precision == "bf16":
        model, images = model.to(torch.bfloat16), images.to(torch.bfloat16)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    def batches():
        if args.data == "memory":
            while True:
                perm = torch.randperm(n)
                for i in range(0, n - args.batch_size + 1, args.batch_size):
                    idx = perm[i:i + args.batch_size]
                    yield images[idx], labels[idx]
        loader = DataLoader(TensorDataset(images, labels), batch_size=args.batch_size,
                            shuffle=True, num_workers=args.workers, drop_last=True,
                            persistent_workers=args.workers > 0)
        while True:
            yield from loader

    def forward(x, y):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "autocast"):
            return loss_fn(model(x), y)

    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "autocast-loop"):
        train(args, batches(), forward, optimizer)


def train(args, batches, forward, optimizer):
    start = time.time()
    for step, (x, y) in enumerate(batches, 1):
        loss = forward(x, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % args.log_every == 0:
            print(f"step {step} loss {loss.item():.4f} "
                  f"{step / (time.time() - start):.1f} steps/s", flush=True)
        if step == args.steps:
            break
    print(f"done: {args.steps} steps in {time.time() - start:.2f} s")


if __name__ == "__main__":
    main()
