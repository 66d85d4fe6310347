#!/usr/bin/env python3
"""Train a small image classifier on an ImageFolder dataset (CPU, one process or
DistributedDataParallel under torchrun with Gloo).

An ordinary training script in the style of public example repositories:
argparse flags, torchvision's ImageFolder and transforms, a DataLoader with
worker processes, loss.item() logging, torch.save checkpoints. It knows
nothing about saturate: bench/diagnosis/run.py runs it unmodified under
`saturate doctor` with one planted cause at a time, chosen by ordinary options:

    -j 0                 load inline in the training process
    -j 1                 one worker decoding JPEGs for a light model
    --read-mbps 4        PLANTED slow disk: every file read goes through one
                         throttle of 4 MB/s shared by all processes (see ThrottledDisk)
    --cache              read the files without the throttle (a local/RAM copy)
    -a mlp -b 1 --optimizer adam
                         a tiny batch: Adam on 10M weights dwarfs a batch-1 forward
    --save-every 4 --frozen-mb 64
                         torch.save every 4 steps of a model with a 64 MB frozen part
    --slow-rank 1 --read-mbps 2
                         under torchrun: only rank 1 reads through the slow disk

    python train.py --data photos -a tinynet -j 2 -b 32 --steps 100
    python train.py --data synthetic -a tinynet --width 32 -b 64 --steps 50
    torchrun --nproc_per_node=2 train.py --data photos -j 0 -b 8 --slow-rank 1 --read-mbps 2

--data DIR holds train/ in ImageFolder layout (scripts/make-photo-dataset makes
one from real photographs); --data synthetic uses random tensors in memory.
"""

import argparse
import datetime
import fcntl
import io
import os
import shutil
import struct
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.data
import torchvision.datasets as datasets
import torchvision.transforms as transforms
from PIL import Image


class TinyNet(nn.Module):
    """A four-layer CNN; `width` scales its compute."""

    def __init__(self, num_classes, width=16, frozen_mb=0):
        super().__init__()
        w = width
        self.features = nn.Sequential(
            nn.Conv2d(3, w, 3, stride=2, padding=1), nn.BatchNorm2d(w), nn.ReLU(inplace=True),
            nn.Conv2d(w, 2 * w, 3, stride=2, padding=1), nn.BatchNorm2d(2 * w), nn.ReLU(inplace=True),
            nn.Conv2d(2 * w, 4 * w, 3, stride=2, padding=1), nn.BatchNorm2d(4 * w),
            nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d(1))
        self.fc = nn.Linear(4 * w, num_classes)
        # A frozen pretrained block (random weights stand in for a downloaded
        # encoder, e.g. label-text embeddings): saved in every checkpoint, not trained.
        self.label_text = None
        if frozen_mb > 0:
            rows = max(1, int(frozen_mb * 1e6 / 4 / 256))
            self.label_text = nn.Embedding(rows, 256)
            self.label_text.weight.requires_grad_(False)
            self.text_proj = nn.Linear(256, num_classes)

    def forward(self, x):
        logits = self.fc(torch.flatten(self.features(x), 1))
        if self.label_text is not None:
            prior = self.label_text(torch.zeros(1, dtype=torch.long, device=x.device))
            logits = logits + self.text_proj(prior)
        return logits


class MLP(nn.Module):
    """Two wide hidden layers on the flattened image."""

    def __init__(self, num_classes, image_size, hidden):
        super().__init__()
        self.net = nn.Sequential(
            nn.Flatten(), nn.Linear(3 * image_size * image_size, hidden), nn.ReLU(inplace=True),
            nn.Linear(hidden, hidden), nn.ReLU(inplace=True), nn.Linear(hidden, num_classes))

    def forward(self, x):
        return self.net(x)


class ThrottledDisk:
    """PLANTED CAUSE (a slow disk): every file read is delivered at `mbps` MB/s
    by one device that all processes share (DataLoader workers included). The
    device's "busy until" time lives in a small state file under an fcntl lock:
    a read queues behind the reads before it and sleeps until its bytes have
    "arrived". Without a FUSE filesystem, this is how the suite makes storage
    that cannot deliver; more workers do not read faster through it."""

    def __init__(self, mbps, state_path):
        self.bytes_per_s = mbps * 1e6
        self.state_path = state_path
        with open(state_path, "wb") as f:
            f.write(struct.pack("d", 0.0))

    def read(self, path):
        with open(path, "rb") as f:
            data = f.read()
        with open(self.state_path, "r+b") as state:
            fcntl.flock(state, fcntl.LOCK_EX)
            (busy_until,) = struct.unpack("d", state.read(8))
            now = time.time()
            done = max(now, busy_until) + len(data) / self.bytes_per_s
            state.seek(0)
            state.write(struct.pack("d", done))
            state.flush()
            fcntl.flock(state, fcntl.LOCK_UN)
        time.sleep(max(0.0, done - time.time()))
        return data


class ImageReader:
    """ImageFolder's loader: the file's bytes (through the disk), decoded by PIL."""

    def __init__(self, disk=None):
        self.disk = disk

    def __call__(self, path):
        if self.disk is not None:
            data = self.disk.read(path)
        else:
            with open(path, "rb") as f:
                data = f.read()
        return Image.open(io.BytesIO(data)).convert("RGB")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--data", default="synthetic", help="dataset root holding train/, or 'synthetic'")
    p.add_argument("-a", "--arch", default="tinynet", choices=("tinynet", "mlp"))
    p.add_argument("--width", default=16, type=int, help="tinynet channels (first layer)")
    p.add_argument("--hidden", default=2048, type=int, help="mlp hidden width")
    p.add_argument("--frozen-mb", default=0, type=float,
                   help="size of the frozen pretrained block in the model (MB)")
    p.add_argument("-j", "--workers", default=4, type=int, help="data loading workers")
    p.add_argument("-b", "--batch-size", default=32, type=int)
    p.add_argument("--epochs", default=1000, type=int)
    p.add_argument("--steps", default=0, type=int, help="stop after this many steps (0: no limit)")
    p.add_argument("--lr", "--learning-rate", default=0.01, type=float, dest="lr")
    p.add_argument("--optimizer", default="sgd", choices=("sgd", "adam"))
    p.add_argument("--image-size", default=64, type=int, help="crop size fed to the model")
    p.add_argument("--synthetic-size", default=512, type=int, help="samples of --data synthetic")
    p.add_argument("--persistent-workers", action="store_true")
    p.add_argument("--prefetch-factor", default=2, type=int)
    p.add_argument("--read-mbps", default=0, type=float,
                   help="PLANTED: read the files through a shared throttle of this many MB/s")
    p.add_argument("--slow-rank", default=-1, type=int,
                   help="with --read-mbps under torchrun: only this rank's disk is slow")
    p.add_argument("--cache", action="store_true",
                   help="read the dataset from a local copy (no throttle)")
    p.add_argument("--save-every", default=0, type=int, help="checkpoint every N steps (0: never)")
    p.add_argument("--checkpoint-dir", default=None, help="where checkpoints go (default: a temp dir)")
    p.add_argument("-p", "--print-freq", default=10, type=int)
    p.add_argument("--threads", default=0, type=int, help="torch intra-op threads (0: default)")
    p.add_argument("--seed", default=0, type=int)
    return p.parse_args(argv)


def build_dataset(args, rank):
    if args.data == "synthetic":
        g = torch.Generator().manual_seed(args.seed)
        images = torch.randn(args.synthetic_size, 3, args.image_size, args.image_size, generator=g)
        labels = torch.randint(0, 10, (args.synthetic_size,), generator=g)
        return torch.utils.data.TensorDataset(images, labels), 10
    disk = None
    slow_here = args.slow_rank < 0 or args.slow_rank == rank
    if args.read_mbps > 0 and slow_here and not args.cache:
        state = os.path.join(tempfile.gettempdir(), "slow-disk-%d.state" % os.getpid())
        disk = ThrottledDisk(args.read_mbps, state)
    dataset = datasets.ImageFolder(
        os.path.join(args.data, "train"),
        transforms.Compose([
            transforms.RandomResizedCrop(args.image_size),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
        ]),
        loader=ImageReader(disk))
    return dataset, len(dataset.classes)


def main():
    args = parse_args()
    torch.manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    world = int(os.environ.get("WORLD_SIZE", 1))
    rank = int(os.environ.get("RANK", 0))
    if world > 1:
        dist.init_process_group("gloo", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=120))

    dataset, num_classes = build_dataset(args, rank)
    sampler = torch.utils.data.distributed.DistributedSampler(dataset) if world > 1 else None
    extra = {}
    if args.workers > 0:
        extra = {"persistent_workers": args.persistent_workers,
                 "prefetch_factor": args.prefetch_factor}
    train_loader = torch.utils.data.DataLoader(
        dataset, batch_size=args.batch_size, shuffle=sampler is None, sampler=sampler,
        num_workers=args.workers, drop_last=True, **extra)

    if args.arch == "mlp":
        model = MLP(num_classes, args.image_size, args.hidden)
    else:
        model = TinyNet(num_classes, args.width, args.frozen_mb)
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    params = [p for p in model.parameters() if p.requires_grad]
    if args.optimizer == "adam":
        optimizer = torch.optim.Adam(params, lr=args.lr)
    else:
        optimizer = torch.optim.SGD(params, lr=args.lr, momentum=0.9)

    ckpt_dir = args.checkpoint_dir or tempfile.mkdtemp(prefix="train-ckpt-")
    os.makedirs(ckpt_dir, exist_ok=True)
    ckpt = os.path.join(ckpt_dir, "checkpoint.pt")

    model.train()
    step, start = 0, time.time()
    for epoch in range(args.epochs):
        if sampler is not None:
            sampler.set_epoch(epoch)
        for images, target in train_loader:
            output = model(images)
            loss = F.cross_entropy(output, target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            if step % args.print_freq == 0 and rank == 0:
                print("epoch %d step %d loss %.4f" % (epoch, step, loss.item()), flush=True)
            if args.save_every and step % args.save_every == 0 and rank == 0:
                torch.save({"step": step, "model": model.state_dict(),
                            "optimizer": optimizer.state_dict()}, ckpt)
            if args.steps and step >= args.steps:
                break
        if args.steps and step >= args.steps:
            break
    elapsed = time.time() - start
    if rank == 0:
        print("done: %d steps, %.1f samples/s" % (step, step * args.batch_size * world / elapsed),
              flush=True)
    if not args.checkpoint_dir:
        shutil.rmtree(ckpt_dir, ignore_errors=True)
    disk = getattr(getattr(dataset, "loader", None), "disk", None)
    if disk is not None and os.path.exists(disk.state_path):
        os.remove(disk.state_path)
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
