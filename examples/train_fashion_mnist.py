"""Trains a small CNN on Fashion-MNIST, fed by saturate or by torch's DataLoader,
and reports images/s and the share of time spent waiting for data.

    python examples/train_fashion_mnist.py                  # saturate, 1 epoch
    python examples/train_fashion_mnist.py --loader torch --workers 2 --eval
"""

from __future__ import annotations

import argparse
import gzip
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import saturate.transforms as T
import torch
from torch import nn
from torch.utils.data import Dataset

import common

IDX_DIR = Path("/usr/share/datasets/fashion-mnist")
IDX_PREFIX = {"train": "train", "test": "t10k"}  # the IDX files' names for a split
MEAN, STD = 0.2860, 0.3530  # of the training images, scaled to [0, 1]
NUM_CLASSES = 10


def read_idx(path: Path) -> torch.Tensor:
    """A gzipped IDX file of uint8 (as Fashion-MNIST is distributed) as a tensor of its shape."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    # Header: two zero bytes, the element type (0x08: uint8), the number of
    # dims, then each dim as a big-endian uint32; the elements follow.
    if data[:3] != b"\x00\x00\x08":
        raise ValueError(f"{path}: not an IDX file of uint8")
    ndim = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    elements = np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(shape)
    return torch.from_numpy(elements.copy())  # copy: frombuffer's array is read-only


class FashionMNIST(Dataset):
    """Fashion-MNIST from its IDX files as a DataLoader user writes it: one
    normalized float image [1, 28, 28] and its label per item."""

    def __init__(self, idx_dir: Path, split: str):
        prefix = IDX_PREFIX[split]
        self.images = read_idx(idx_dir / f"{prefix}-images-idx3-ubyte.gz")
        self.labels = read_idx(idx_dir / f"{prefix}-labels-idx1-ubyte.gz")

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        image = (self.images[i].float() / 255 - MEAN) / STD
        return image.unsqueeze(0), int(self.labels[i])


def linear(num_classes: int = NUM_CLASSES) -> nn.Module:
    """Logistic regression: so little compute per image that the input pipeline sets the pace."""
    return nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, num_classes))


def cnn(num_classes: int = NUM_CLASSES) -> nn.Module:
    """Two conv layers (32, 64) with pooling, then two fully connected layers."""
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2),  # 14x14
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2),  # 7x7
        nn.Flatten(),
        nn.Linear(64 * 7 * 7, 128), nn.ReLU(inplace=True),
        nn.Linear(128, num_classes),
    )


MODELS = {"cnn": cnn, "linear": linear}


def make_loader(args: argparse.Namespace, split: str, *, shuffle: bool):
    """(x, y) batches of ``split`` ("train" or "test") from the loader ``args`` names."""
    if args.loader == "torch":
        return common.torch_batches(FashionMNIST(args.idx_dir, split), args, shuffle=shuffle)
    transforms = {"image": [T.ToDtype("float32"), T.Normalize(MEAN, STD)]}
    return common.saturate_batches(
        args.data / f"fashion-mnist-{split}.sat", args, transforms, shuffle=shuffle,
        x_view=lambda x: x.unsqueeze(1))  # [B, 28, 28] -> [B, 1, 28, 28], a view


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_train_args(parser, batch_size=256, lr=0.05)
    parser.add_argument("--idx-dir", type=Path, default=IDX_DIR,
                        help="torch: the gzipped IDX files (default: %(default)s)")
    parser.add_argument("--model", choices=sorted(MODELS), default="cnn",
                        help="cnn, or linear: input-bound (default: %(default)s)")
    parser.add_argument("--eval", action="store_true", help="report the test set's accuracy")
    return common.parse_train_args(parser, argv)


def run(args: argparse.Namespace) -> common.Result:
    """Trains as ``args`` say; the result of common.train, with "test_accuracy" under --eval."""
    loader = make_loader(args, "train", shuffle=True)
    torch.manual_seed(args.seed)  # the same initial weights whichever the loader
    model = MODELS[args.model]()
    result = common.train(model, loader, lr=args.lr, epochs=args.epochs,
                          max_steps=args.max_steps, warmup=args.warmup)
    if args.eval:
        result["test_accuracy"] = common.evaluate(model, make_loader(args, "test", shuffle=False))
    return result


def main(argv: Optional[Sequence[str]] = None) -> None:
    args = parse_args(argv)
    common.print_result(run(args), args.json)


if __name__ == "__main__":
    main()
