"""The training loop of `python -m minitrain`: a linear classifier over a
DataLoader, the loss logged every --log-every steps."""

import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m minitrain")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--log-every", type=int, default=10)
    args = p.parse_args(argv)

    torch.manual_seed(0)
    x = torch.randn(args.steps * args.batch_size, 32)
    y = (x.sum(1) > 0).long()
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=True,
                        num_workers=args.workers)
    model = nn.Linear(32, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = nn.CrossEntropyLoss()
    for step, (xb, yb) in enumerate(loader, 1):
        loss = loss_fn(model(xb), yb)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % args.log_every == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)  # LOG_LINE
    print(f"done: {step} steps")
