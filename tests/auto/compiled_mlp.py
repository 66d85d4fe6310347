#!/usr/bin/env python3
"""Train an MLP compiled with torch.compile, fed by a DataLoader over a dataset
whose size is not a multiple of the batch size. With drop_last=False (the
default) the first epoch's short last batch has a new shape: torch.compile
compiles again in the middle of training. --drop-last keeps every batch the same
shape. Knows nothing about saturate.

    python compiled_mlp.py --epochs 3 --samples 1000 --batch-size 64 [--drop-last]
    python compiled_mlp.py --backend aot_eager    # compiles in ~1 s instead of ~10 on a CPU
"""

import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    p = argparse.ArgumentParser(description="a torch.compile'd MLP, short last batch or not")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--samples", type=int, default=1000)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--drop-last", action="store_true")
    p.add_argument("--backend", default="inductor", help="torch.compile backend")
    args = p.parse_args()

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(args.samples, 256), torch.randint(0, 10, (args.samples,)))
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=True, drop_last=args.drop_last)
    model = nn.Sequential(nn.Linear(256, args.hidden), nn.ReLU(), nn.Linear(args.hidden, args.hidden),
                          nn.ReLU(), nn.Linear(args.hidden, 10))
    model = torch.compile(model, backend=args.backend)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    steps = 0
    for epoch in range(args.epochs):
        for x, y in loader:
            loss = loss_fn(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            steps += 1
        print(f"epoch {epoch}: loss {loss.item():.4f}, {steps} steps")


if __name__ == "__main__":
    main()
