"""Trains the same models from the same seed for the same number of steps, fed
first by saturate and then by torch's DataLoader, and prints a table of
images/s and data-wait share with the saturate/DataLoader throughput ratio.

    python examples/compare.py                      # about 2 minutes on 2 CPU cores
    python examples/compare.py --fmnist-steps 235   # a whole Fashion-MNIST epoch
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

import saturate
import torch

# The sibling examples are modules, not a package: import them from this file's directory.
sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
import train_fashion_mnist  # noqa: E402
import train_resnet18_photos  # noqa: E402

ROW = "{:<22} {:<26} {:>10} {:>10}"


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=common.DEFAULT_DATA, metavar="DIR",
                        help="directory of the packed datasets (default: %(default)s)")
    # On a CPU the models, not the loaders, set the pace: a step of the CNN takes
    # about 0.35 s and one of ResNet-18 about 1.6 s on 2 cores, so the defaults
    # keep the whole comparison near 2 minutes.
    parser.add_argument("--fmnist-steps", type=common.positive_int, default=80, metavar="N",
                        help="Fashion-MNIST steps per loader, warmup included (default: "
                             "%(default)s; 235 is one epoch)")
    parser.add_argument("--photos-steps", type=common.positive_int, default=15, metavar="N",
                        help="ResNet-18 steps per loader, warmup included (default: %(default)s)")
    parser.add_argument("--image-size", type=common.positive_int, default=112, metavar="PX",
                        help="ResNet-18 crop size (default: %(default)s)")
    parser.add_argument("--photos-batch-size", type=common.positive_int, default=32, metavar="N",
                        help="ResNet-18 batch size (default: %(default)s)")
    parser.add_argument("--warmup", type=common.non_negative_int, default=5, metavar="N",
                        help="steps left out of each measurement (default: %(default)s)")
    parser.add_argument("--threads", type=common.threads_arg, default="auto",
                        help="saturate threads, an int or auto (default: %(default)s)")
    # One worker per core, the usual choice; more only contend with training for the CPU.
    parser.add_argument("--workers", type=common.non_negative_int, default=os.cpu_count() or 2,
                        help="DataLoader num_workers (default: the CPU count, %(default)s)")
    args = parser.parse_args(argv)
    if min(args.fmnist_steps, args.photos_steps) <= args.warmup:
        parser.error(f"--fmnist-steps and --photos-steps must exceed --warmup {args.warmup}")
    return args


def tasks(args: argparse.Namespace) -> list[tuple[str, object, list[str]]]:
    """(title, example module, its flags) of each comparison."""
    return [
        # A tiny model, so the input pipeline sets the pace: where loaders differ.
        ("Fashion-MNIST linear", train_fashion_mnist, ["--model", "linear", "--epochs", "1"]),
        ("Fashion-MNIST CNN", train_fashion_mnist, ["--max-steps", str(args.fmnist_steps)]),
        (f"ResNet-18 photos {args.image_size}px", train_resnet18_photos,
         ["--max-steps", str(args.photos_steps), "--image-size", str(args.image_size),
          "--batch-size", str(args.photos_batch_size)]),
    ]


def run_task(title: str, module, flags: list[str], args: argparse.Namespace) -> None:
    """Trains with each loader in turn and prints their rows and the ratio."""
    shared = ["--data", str(args.data), "--warmup", str(args.warmup), "--seed", "0",
              "--threads", str(args.threads), "--workers", str(args.workers)]
    results = {}
    for kind in ("saturate", "torch"):
        results[kind] = module.run(module.parse_args([*flags, *shared, "--loader", kind]))
        r = results[kind]
        print(ROW.format(title, r["loader"], f"{r['images_per_s']:.1f}",
                         f"{r['data_wait_pct']:.1f}%"), flush=True)
    ratio = results["saturate"]["images_per_s"] / results["torch"]["images_per_s"]
    print(ROW.format("", "saturate / DataLoader", f"{ratio:.2f}x", ""), flush=True)


def main(argv: Optional[Sequence[str]] = None) -> None:
    args = parse_args(argv)
    dev = common.device()
    print(f"saturate {saturate.__version__}, torch {torch.__version__} on {dev} "
          f"({torch.get_num_threads()} torch threads, {os.cpu_count()} CPUs); "
          f"DataLoader num_workers={args.workers}, saturate threads={args.threads}; "
          f"{args.warmup} warmup steps not measured")
    print(ROW.format("task", "loader", "images/s", "data wait"))
    start = time.perf_counter()
    for title, module, flags in tasks(args):
        run_task(title, module, flags, args)
    print(f"compare took {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
