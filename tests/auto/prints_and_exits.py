#!/usr/bin/env python3
"""Trains a few deterministic steps, writes to stdout and stderr, then
leaves with a chosen exit code or signal. Used to check that a job's output
and exit status are the same with and without saturate's auto-instrumentation.
Knows nothing about saturate.

    python prints_and_exits.py --exit-code 3
    python prints_and_exits.py --signal TERM      # ends itself with SIGTERM
    python prints_and_exits.py --no-torch         # never imports torch
"""

import argparse
import os
import signal
import sys


def train(steps, workers):
    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    torch.set_num_threads(1)
    x = torch.randn(steps * 8, 16)
    y = (x[:, 0] > 0).long()
    loader = DataLoader(TensorDataset(x, y), batch_size=8, num_workers=workers)
    model = nn.Linear(16, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step, (xb, yb) in enumerate(loader, 1):
        loss = nn.functional.cross_entropy(model(xb), yb)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")
        if step % 4 == 0:
            print(f"warning: step {step} is a multiple of 4", file=sys.stderr)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--exit-code", type=int, default=0)
    p.add_argument("--signal", choices=["TERM", "INT", "KILL"])
    p.add_argument("--no-torch", action="store_true")
    args = p.parse_args()

    print("argv:", sys.argv[1:])
    print("stdin is a tty:", sys.stdin.isatty(), file=sys.stderr)
    if args.no_torch:
        print("no torch:", "torch" in sys.modules)
    else:
        train(args.steps, args.workers)
    sys.stdout.flush()
    sys.stderr.flush()
    if args.signal:
        os.kill(os.getpid(), getattr(signal, "SIG" + args.signal))
    sys.exit(args.exit_code)


if __name__ == "__main__":
    main()
