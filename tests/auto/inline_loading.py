#!/usr/bin/env python3
"""Train a small CNN on synthetic photos, loading batches in the training
process by default (DataLoader num_workers=0) with a heavy per-sample
transform: decode-like work (blur, resize, colour jitter) done with PIL on
every sample. The model is light, so the step waits on the data.

    python inline_loading.py                    # num_workers=0: input bound
    python inline_loading.py --workers 2        # the same job with worker processes

Knows nothing about saturate.
"""

import argparse
import time

import numpy as np
import torch
import torch.nn as nn
from PIL import Image, ImageEnhance, ImageFilter
from torch.utils.data import DataLoader, Dataset


class SyntheticPhotos(Dataset):
    """Deterministic RGB "photos" rendered per index, transformed on every access."""

    def __init__(self, n, size, out_size, classes=10):
        self.n, self.size, self.out_size, self.classes = n, size, out_size, classes

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        rng = np.random.default_rng(i)
        pixels = rng.integers(0, 256, (self.size, self.size, 3), dtype=np.uint8)
        img = Image.fromarray(pixels)
        img = img.filter(ImageFilter.GaussianBlur(radius=2))
        img = ImageEnhance.Color(img).enhance(0.8 + 0.4 * rng.random())
        img = ImageEnhance.Contrast(img).enhance(0.8 + 0.4 * rng.random())
        img = img.resize((self.out_size, self.out_size), Image.BILINEAR)
        x = torch.from_numpy(np.asarray(img, dtype=np.float32) / 255.0).permute(2, 0, 1)
        x = (x - 0.5) / 0.25
        return x, i % self.classes


def main():
    p = argparse.ArgumentParser(description="CNN on synthetic photos, inline loading")
    p.add_argument("--workers", type=int, default=0, help="DataLoader num_workers")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--image-size", type=int, default=160, help="rendered size before resize")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--log-every", type=int, default=20)
    args = p.parse_args()

    torch.manual_seed(0)
    dataset = SyntheticPhotos(args.batch_size * args.steps, args.image_size, 32)
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True,
                        num_workers=args.workers)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(128, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    start = time.time()
    for step, (x, y) in enumerate(loader, 1):
        loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % args.log_every == 0:
            print(f"step {step} loss {loss.item():.4f} {step / (time.time() - start):.1f} steps/s",
                  flush=True)
    print(f"done: {step} steps in {time.time() - start:.2f} s")


if __name__ == "__main__":
    main()
