#!/usr/bin/env python3
"""A small GPU training loop with two habits that cost GPU time: batches copied
from pageable memory without non_blocking, and loss.item() every step. It knows
nothing about saturate; python/tests/test_auto.py runs it under doctor on a GPU
machine (pytest -m gpu, as bench/gpu/run.sh does).

    python gpu_copies.py --steps 200
"""

import argparse

import torch


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=256)
    args = p.parse_args()
    device = torch.device("cuda")
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 64 * 64, 1024),
                                torch.nn.ReLU(), torch.nn.Linear(1024, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    images = torch.randn(args.batch_size, 3, 64, 64)  # pageable host memory
    labels = torch.randint(0, 10, (args.batch_size,))
    for step in range(args.steps):
        x = images.to(device)  # COPY: blocking, from pageable memory
        y = labels.to(device)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print_loss = loss.item()  # SYNC: waits for the GPU every step
    print("loss %.3f" % print_loss)


if __name__ == "__main__":
    main()
