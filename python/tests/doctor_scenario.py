"""A small CPU training job that creates one bottleneck on demand, for
saturate doctor's end-to-end tests (test_doctor_scenarios.py).

Sources of batches:
  loader     saturate.Loader over a packed photo dataset (--threads decode
             threads): JPEG decode is the cost, so 1 thread starves the model.
  pipe       records read from a named pipe that a throttled writer fills at
             --mbps (storage that cannot deliver).
  file       the same records from a local file (the pipe scenario's fix).
  memory     random tensors made once (no input cost at all).

The loop is instrumented the way a user would: data, forward, backward and
optimizer phases, and saturate.step() per step. It runs for --seconds.
"""

import argparse
import os
import sys
import threading
import time

import saturate
import torch
import torch.nn.functional as F

SIZE = 64
RECORD_BYTES = 3 * SIZE * SIZE


def model_for(kind, classes=10):
    """conv: a small CNN; light: the same on 4x4-pooled input (cheap steps,
    so input costs show); mlp: a two-layer perceptron (per-step overheads)."""
    conv = [torch.nn.Conv2d(3, 16, 3, stride=2, padding=1), torch.nn.ReLU(),
            torch.nn.Conv2d(16, 32, 3, stride=2, padding=1), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, classes)]
    layers = {"conv": conv, "light": [torch.nn.AvgPool2d(4), *conv],
              "mlp": [torch.nn.AvgPool2d(4), torch.nn.Flatten(), torch.nn.Linear(768, 256),
                      torch.nn.ReLU(), torch.nn.Linear(256, classes)]}[kind]
    return torch.nn.Sequential(*layers)


def loader_batches(args):
    loader = saturate.Loader(
        args.data, batch_size=args.batch_size, shuffle=True, seed=0, threads=args.threads,
        prefetch=2, transforms={"image": [saturate.transforms.RandomResizedCrop(SIZE),
                                          saturate.transforms.ToLayout("CHW")]})
    while True:
        for batch in loader:
            yield batch["image"].float().div_(255), batch["label"]


def throttled_writer(path, mbps, records):
    """Fills the FIFO at `mbps` MB/s, in 64 KiB pieces, like a slow share."""
    chunk = bytes(range(256)) * 256
    try:
        with open(path, "wb") as fifo:
            start, sent = time.monotonic(), 0
            while sent < records * RECORD_BYTES:
                fifo.write(chunk)
                sent += len(chunk)
                delay = start + sent / (mbps * 1e6) - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
    except BrokenPipeError:  # the training loop ended
        pass


def read_exactly(f, n):
    """n bytes (a pipe returns what it has); from the start again at the end of a file."""
    buf = bytearray()
    while len(buf) < n:
        piece = f.read(n - len(buf))
        if not piece:
            f.seek(0)
        buf += piece
    return buf


def stream_batches(f, batch_size):
    labels = torch.zeros(batch_size, dtype=torch.int64)
    while True:
        raw = read_exactly(f, RECORD_BYTES * batch_size)
        x = torch.frombuffer(raw, dtype=torch.uint8).view(batch_size, 3, SIZE, SIZE)
        yield x.float().div_(255), labels


def pipe_batches(args):
    fifo = os.path.join(args.workdir, "records.fifo")
    if not os.path.exists(fifo):
        os.mkfifo(fifo)
    threading.Thread(target=throttled_writer, args=(fifo, args.mbps, 1 << 30),
                     daemon=True).start()
    return stream_batches(open(fifo, "rb", buffering=0), args.batch_size)


def file_batches(args):
    path = os.path.join(args.workdir, "records.bin")
    with open(path, "wb") as f:
        f.write(os.urandom(RECORD_BYTES * 512))
    return stream_batches(open(path, "rb"), args.batch_size)


def memory_batches(args):
    x = torch.rand(args.batch_size, 3, SIZE, SIZE)
    y = torch.zeros(args.batch_size, dtype=torch.int64)
    while True:
        yield x, y


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--source", choices=("loader", "pipe", "file", "memory"), required=True)
    p.add_argument("--data", help="packed photo dataset (--source loader)")
    p.add_argument("--workdir", default=".", help="where the pipe or file goes")
    p.add_argument("--threads", type=int, default=2, help="loader threads")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--model", choices=("conv", "light", "mlp"), default="light")
    p.add_argument("--mbps", type=float, default=1.0, help="pipe throughput, MB/s")
    p.add_argument("--torch-threads", type=int, default=1)
    p.add_argument("--seconds", type=float, default=6.0)
    args = p.parse_args()
    torch.set_num_threads(args.torch_threads)
    torch.manual_seed(0)
    batches = {"loader": loader_batches, "pipe": pipe_batches, "file": file_batches,
               "memory": memory_batches}[args.source](args)
    model = model_for(args.model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    steps, end = 0, time.monotonic() + args.seconds
    while time.monotonic() < end:
        with saturate.phase("data"):
            x, y = next(batches)
        with saturate.phase("forward"):
            loss = F.cross_entropy(model(x), y % 10)
        with saturate.phase("backward"):
            opt.zero_grad(set_to_none=True)
            loss.backward()
        with saturate.phase("optimizer"):
            opt.step()
        saturate.step()
        steps += 1
    print(f"{steps} steps, batch {args.batch_size}, source {args.source}", file=sys.stderr)


if __name__ == "__main__":
    main()
