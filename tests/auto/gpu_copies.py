#!/usr/bin/env python3
"""A small GPU training loop with two habits that cost GPU time: batches copied
from pageable memory without non_blocking, and loss.item() every step. It knows
nothing about saturate; python/tests/test_auto.py runs it under doctor on a GPU
machine (pytest -m gpu, as bench/gpu/run.sh does).

Each step queues a few milliseconds of GPU work and then does some host work
(logging, metrics; here a sleep). Without the .item() the host work would run
while the GPU works through its queue; with it the GPU first drains and then
idles through the host work and the next copy, which is what the sync costs.
(With a model of a few microseconds per step, as this script once had, a fast
GPU is never the one waiting, and a sync costs nothing to speak of.)

    python gpu_copies.py --steps 200
"""

import argparse
import time

import torch


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--width", type=int, default=4096, help="hidden width: the GPU's work per step")
    p.add_argument("--host-ms", type=float, default=3.0, help="host work per step, after the sync")
    args = p.parse_args()
    device = torch.device("cuda")
    w = args.width
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 64 * 64, w),
                                torch.nn.ReLU(), torch.nn.Linear(w, w), torch.nn.ReLU(),
                                torch.nn.Linear(w, w), torch.nn.ReLU(),
                                torch.nn.Linear(w, 10)).to(device)
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
        time.sleep(args.host_ms / 1000)
    print("loss %.3f" % print_loss)


if __name__ == "__main__":
    main()
