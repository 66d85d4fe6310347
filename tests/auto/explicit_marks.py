#!/usr/bin/env python3
"""A training loop already instrumented with saturate's explicit API
(saturate.phase around forward/backward, saturate.step() after each update).
The one script in tests/auto that imports saturate: it checks that the
auto-instrumentation and explicit marks work side by side.

    python explicit_marks.py --steps 20
"""

import argparse

import torch
import torch.nn as nn

import saturate


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    args = p.parse_args()

    torch.manual_seed(0)
    model = nn.Linear(32, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(64, 32), torch.randint(0, 4, (64,))
    for _ in range(args.steps):
        with saturate.phase("forward"):
            loss = nn.functional.cross_entropy(model(x), y)
        with saturate.phase("backward"):
            optimizer.zero_grad()
            loss.backward()
        optimizer.step()
        saturate.step()
    print(f"done: {args.steps} steps, loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
