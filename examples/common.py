"""Shared parts of the training examples: command-line flags, the two kinds of
loader as iterables of (x, y) batches, a timed training loop and its report."""

from __future__ import annotations

import argparse
import itertools
import json
import os
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence, Union

import saturate
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

DEFAULT_DATA = Path(__file__).resolve().parent.parent / "data"

Result = dict[str, Any]
XView = Optional[Callable[[torch.Tensor], torch.Tensor]]


# ---------------------------------------------------------------- flags


def positive_int(text: str) -> int:
    """argparse type: an int > 0."""
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: use a positive int")
    return value


def non_negative_int(text: str) -> int:
    """argparse type: an int >= 0."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: use an int >= 0")
    return value


def threads_arg(text: str) -> Union[int, str]:
    """argparse type for --threads: "auto" or a positive int."""
    return text if text == "auto" else positive_int(text)


class Url(str):
    """A dataset location in object storage: joins with ``/`` as a Path does."""

    def __truediv__(self, name: str) -> "Url":
        return Url(self.rstrip("/") + "/" + name)


def data_location(text: str) -> Union[Path, Url]:
    """argparse type for --data: a directory, or an s3:// / http(s):// prefix."""
    return Url(text) if text.startswith(("s3://", "http://", "https://")) else Path(text)


def add_train_args(parser: argparse.ArgumentParser, *, batch_size: int, lr: float) -> None:
    """The flags both training examples share; the defaults that differ are arguments."""
    parser.add_argument("--loader", choices=("saturate", "torch"), default="saturate",
                        help="saturate.Loader or torch's DataLoader (default: %(default)s)")
    parser.add_argument("--data", type=data_location, default=DEFAULT_DATA, metavar="DIR",
                        help="directory of the packed datasets, or an s3:// / https:// prefix "
                             "holding them (default: %(default)s)")
    parser.add_argument("--epochs", type=positive_int,
                        help="epochs to run (default: 1, or as many as --max-steps takes)")
    parser.add_argument("--max-steps", type=positive_int, metavar="N",
                        help="stop after N steps in all, warmup included")
    parser.add_argument("--warmup", type=non_negative_int, default=5, metavar="N",
                        help="steps left out of the measurement (default: %(default)s)")
    # Under `saturate tune`, SATURATE_TUNE_<NAME> sets a default the flag can still override.
    tuned = lambda name, default: os.environ.get(f"SATURATE_TUNE_{name}") or default  # noqa: E731
    parser.add_argument("--batch-size", type=positive_int,
                        default=positive_int(str(tuned("BATCH", batch_size))),
                        help="default: %(default)s (or SATURATE_TUNE_BATCH)")
    parser.add_argument("--lr", type=float, default=lr,
                        help="SGD learning rate (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0,
                        help="model initialization and shuffling (default: %(default)s)")
    parser.add_argument("--threads", type=threads_arg, default="auto",
                        help="saturate: decoding threads, an int or auto (default: %(default)s)")
    parser.add_argument("--workers", type=non_negative_int,
                        default=non_negative_int(str(tuned("WORKERS", 2))),
                        help="torch: DataLoader num_workers (default: %(default)s, or "
                             "SATURATE_TUNE_WORKERS)")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON line")


def parse_train_args(parser: argparse.ArgumentParser,
                     argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """``parser.parse_args(argv)``, refusing a run too short to measure."""
    args = parser.parse_args(argv)
    if args.max_steps is not None and args.max_steps <= args.warmup:
        parser.error(f"--max-steps {args.max_steps} leaves nothing after --warmup {args.warmup}")
    return args


# ---------------------------------------------------------------- loaders


class SaturateBatches:
    """A saturate.Loader seen as (x, y) batches, the shape DataLoader batches have.

    ``x_view`` reshapes x without copying it (e.g. adds Fashion-MNIST's channel dim).
    """

    def __init__(self, loader: saturate.Loader, threads: Union[int, str], x_view: XView = None,
                 x_field: str = "image", y_field: str = "label"):
        self.loader, self.threads, self.x_view = loader, threads, x_view
        self.x_field, self.y_field = x_field, y_field

    def __len__(self) -> int:
        return len(self.loader)

    def set_epoch(self, epoch: int) -> None:
        self.loader.set_epoch(epoch)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for batch in self.loader:
            x = batch[self.x_field]
            yield (self.x_view(x) if self.x_view else x), batch[self.y_field]


def saturate_batches(dataset: Path, args: argparse.Namespace, transforms: dict, *,
                     shuffle: bool, x_view: XView = None) -> SaturateBatches:
    """A saturate.Loader over ``dataset``, configured from the common flags. With a GPU the
    batches arrive on it (pinned buffers, copies on a side stream, conversion in kernels)."""
    loader = saturate.Loader(dataset, batch_size=args.batch_size, shuffle=shuffle, seed=args.seed,
                             threads=args.threads, transforms=transforms, device=device().type)
    return SaturateBatches(loader, args.threads, x_view)


def torch_batches(dataset: Dataset, args: argparse.Namespace, *, shuffle: bool) -> DataLoader:
    """The DataLoader a PyTorch user would write, configured from the common flags."""
    return DataLoader(dataset, batch_size=args.batch_size, shuffle=shuffle,
                      num_workers=args.workers,
                      pin_memory=torch.cuda.is_available(),
                      # Without it every epoch pays the workers' start-up again.
                      persistent_workers=args.workers > 0,
                      generator=torch.Generator().manual_seed(args.seed))


def describe(loader: Iterable) -> str:
    """A short name for a loader and its parallelism, for reports."""
    if isinstance(loader, SaturateBatches):
        threads = loader.loader.stats()["threads"]  # what the autotuner settled on
        return f"saturate threads={threads}" + (" (auto)" if loader.threads == "auto" else "")
    if isinstance(loader, DataLoader):
        return f"DataLoader workers={loader.num_workers}"
    return type(loader).__name__


def class_names(loader: SaturateBatches) -> list[str]:
    """The class names a packed dataset records (docs/record-format.md)."""
    return loader.loader.class_names


# ---------------------------------------------------------------- device


def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def autocast(dev: torch.device):
    """fp16 autocast on CUDA; a no-op elsewhere (CPU autocast supports bf16 only)."""
    return torch.autocast("cuda", dtype=torch.float16, enabled=dev.type == "cuda")


def grad_scaler(dev: torch.device):
    """A GradScaler for fp16 on CUDA; disabled, it passes the loss and step through."""
    enabled = dev.type == "cuda"
    if hasattr(torch.amp, "GradScaler"):  # torch >= 2.3 deprecates torch.cuda.amp's
        return torch.amp.GradScaler("cuda", enabled=enabled)
    return torch.cuda.amp.GradScaler(enabled=enabled)


def memory_format(dev: torch.device) -> torch.memory_format:
    # channels_last lets cuDNN use its NHWC kernels, the fast ones on tensor cores.
    return torch.channels_last if dev.type == "cuda" else torch.preserve_format


def to_device(t: torch.Tensor, dev: torch.device) -> torch.Tensor:
    """``t`` on ``dev``; on the CPU it is ``t`` itself (no copy)."""
    fmt = memory_format(dev) if t.dim() == 4 else torch.preserve_format
    return t.to(dev, non_blocking=True, memory_format=fmt)


def synchronize(dev: torch.device) -> None:
    """Waits for queued GPU work, so that the clock measures it."""
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


# ---------------------------------------------------------------- timing


class StepTimer:
    """Times the steps after the first ``warmup`` and, within them, the time
    blocked waiting for data.

    Warmup steps are left out: they pay worker start-up, the first batch's
    latency and cuDNN's autotuning, none of which is the steady state.
    """

    def __init__(self, warmup: int, dev: torch.device):
        self.warmup, self.dev = warmup, dev
        self.steps = 0  # all steps, warmup included
        self.images = 0  # images of the measured steps
        self.wait_s = 0.0  # seconds blocked on data in the measured steps
        self._start: Optional[float] = None
        if warmup == 0:
            self._start_clock()

    def blocked(self, fn: Callable, *args):
        """``fn(*args)``, its time counted as waiting for data once measuring."""
        begin = time.perf_counter()
        with saturate.phase("data"):
            value = fn(*args)
        if self._start is not None:
            self.wait_s += time.perf_counter() - begin
        return value

    def step_done(self, images: int) -> None:
        self.steps += 1
        if self.steps > self.warmup:
            self.images += images
        elif self.steps == self.warmup:
            self._start_clock()

    def result(self, loader: str) -> Result:
        measured = self.steps - self.warmup
        if measured <= 0:
            raise ValueError(f"nothing measured: {self.steps} steps, {self.warmup} of them warmup")
        synchronize(self.dev)
        seconds = time.perf_counter() - self._start
        return {"loader": loader, "images_per_s": self.images / seconds,
                "data_wait_pct": 100.0 * self.wait_s / seconds,
                "steps": measured, "images": self.images, "seconds": seconds}

    def _start_clock(self) -> None:
        synchronize(self.dev)  # the warmup's queued GPU work is not measured time
        self._start = time.perf_counter()


def _timed_batches(loader: Iterable, epochs: Iterable[int], timer: StepTimer) -> Iterator:
    """The loader's batches over ``epochs``, timing every call that blocks on it."""
    for epoch in epochs:
        if hasattr(loader, "set_epoch"):  # saturate: the epoch picks the shuffle order
            loader.set_epoch(epoch)
        it = timer.blocked(iter, loader)
        while (batch := timer.blocked(next, it, None)) is not None:
            yield batch


def _epoch_numbers(epochs: Optional[int], max_steps: Optional[int]) -> Iterable[int]:
    """``epochs`` epochs; without it, as many as ``max_steps`` takes, else one."""
    if epochs is not None:
        return range(epochs)
    return itertools.count() if max_steps else range(1)


def train(model: torch.nn.Module, loader: Iterable, *, lr: float, epochs: Optional[int] = None,
          max_steps: Optional[int] = None, warmup: int = 5) -> Result:
    """Trains ``model`` with SGD on the (x, y) batches of ``loader`` for ``epochs``
    (default: 1, or as many as ``max_steps`` takes) or ``max_steps``, whichever
    ends first.

    Returns {"loader", "images_per_s", "data_wait_pct", "steps", "images",
    "seconds"} over the steps after ``warmup``, and the last "loss".
    """
    dev = device()
    model.to(dev, memory_format=memory_format(dev))
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    scaler = grad_scaler(dev)
    timer = StepTimer(warmup, dev)
    model.train()
    # The phases and step marks go to the run directory under `saturate doctor`.
    for x, y in _timed_batches(loader, _epoch_numbers(epochs, max_steps), timer):
        with saturate.phase("copy"):
            x, y = to_device(x, dev), to_device(y, dev)
        with saturate.phase("forward"), autocast(dev):
            loss = F.cross_entropy(model(x), y)
        with saturate.phase("backward"):
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
        with saturate.phase("optimizer"):
            scaler.step(optimizer)
            scaler.update()
        saturate.step()
        timer.step_done(len(y))
        if timer.steps == max_steps:
            break
    result = timer.result(describe(loader))
    result["loss"] = loss.item()  # read once: .item() waits for the GPU
    return result


@torch.no_grad()
def evaluate(model: torch.nn.Module, loader: Iterable) -> float:
    """Top-1 accuracy of ``model`` over the (x, y) batches of ``loader``."""
    dev = device()
    model.eval()
    correct = total = 0
    for x, y in loader:
        x, y = to_device(x, dev), to_device(y, dev)
        with autocast(dev):
            correct += (model(x).argmax(1) == y).sum().item()
        total += len(y)
    return correct / total


# ---------------------------------------------------------------- report


def format_result(result: Result) -> str:
    line = (f"{result['loader']}: {result['images_per_s']:.1f} images/s, "
            f"data wait {result['data_wait_pct']:.1f}% ({result['steps']} steps, "
            f"{result['images']} images, {result['seconds']:.2f} s, loss {result['loss']:.3f})")
    if "test_accuracy" in result:
        line += f", test accuracy {result['test_accuracy']:.4f}"
    return line


def print_result(result: Result, as_json: bool = False) -> None:
    print(json.dumps(result) if as_json else format_result(result))
