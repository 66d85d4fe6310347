#!/usr/bin/env python3
"""Train a wide MLP and write a full checkpoint (model + optimizer state)
with torch.save every --save-every steps, in the training loop, as many
scripts do. The checkpoint is tens of MB, so each save stalls training.
Knows nothing about saturate.

    python save_every_n.py --steps 40 --save-every 5 --out /tmp/ckpt
"""

import argparse
import os
import time

import torch
import torch.nn as nn


def main():
    p = argparse.ArgumentParser(description="wide MLP, checkpoint every N steps")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--save-every", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--out", default="checkpoints")
    args = p.parse_args()

    torch.manual_seed(0)
    os.makedirs(args.out, exist_ok=True)
    model = nn.Sequential(nn.Linear(512, args.hidden), nn.ReLU(),
                          nn.Linear(args.hidden, args.hidden), nn.ReLU(),
                          nn.Linear(args.hidden, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    x_all = torch.randn(args.batch_size * 8, 512)
    y_all = torch.randint(0, 10, (args.batch_size * 8,))

    start = time.time()
    for step in range(1, args.steps + 1):
        i = (step * args.batch_size) % len(x_all)
        loss = loss_fn(model(x_all[i:i + args.batch_size]), y_all[i:i + args.batch_size])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % args.save_every == 0:
            path = os.path.join(args.out, f"step{step:06d}.pt")
            state = {"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict()}
            torch.save(state, path)  # SAVE_LINE: the stall
    print(f"done: {args.steps} steps in {time.time() - start:.2f} s")


if __name__ == "__main__":
    main()
