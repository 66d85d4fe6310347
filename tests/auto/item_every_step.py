#!/usr/bin/env python3
"""Train an MLP on in-memory data, reading the loss back with .item() every
step to keep a running average: the habit that makes a GPU wait for the host
at every step. Knows nothing about saturate.

    python item_every_step.py --steps 200
"""

import argparse
import time

import torch
import torch.nn as nn


def main():
    p = argparse.ArgumentParser(description="MLP with a per-step .item()")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.01)
    args = p.parse_args()

    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    x_all = torch.randn(args.batch_size * 16, 128)
    y_all = torch.randint(0, 10, (args.batch_size * 16,))
    model = nn.Sequential(nn.Linear(128, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 10)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()

    running, start = 0.0, time.time()
    for step in range(1, args.steps + 1):
        i = (step * args.batch_size) % len(x_all)
        x = x_all[i:i + args.batch_size].to(device)
        y = y_all[i:i + args.batch_size].to(device)
        loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        running += loss.item()  # HOST_SYNC_LINE: the per-step read-back
    print(f"done: {args.steps} steps, mean loss {running / args.steps:.4f}, "
          f"{time.time() - start:.2f} s")


if __name__ == "__main__":
    main()
