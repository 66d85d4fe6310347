#!/usr/bin/env python3
"""Train an image classifier on one CUDA GPU: train.py's models, data and flags,
plus what a GPU training loop chooses (device copies, pinned memory, autocast,
how often the host reads the loss).

An ordinary GPU script in the style of public examples (pytorch/examples'
ImageNet loop: `.cuda(non_blocking=True)` copies, `running_loss += loss.item()`
logging, torch.autocast). It knows nothing about saturate: bench/diagnosis/run.py
--gpu runs it unmodified under `saturate doctor` with one planted cause at a
time (bench/diagnosis/gpu_scenarios.py), chosen by ordinary options:

    (no --pin-memory) -b 128 --image-size 224
                         pageable host memory: each batch's copy is synchronous
    --sync-every 1       running_loss += loss.item() every step: the host waits for the GPU
    --host-work-ms 15    PLANTED per-step host work that does not touch the GPU (a
                         logging call, a metrics RPC), as a sleep: what a sync serializes
    -a tinynet --width 8 --image-size 32 -b 8
                         kernels too small to fill the GPU
    -a mlp --hidden 4096 (no --amp)
                         fp32 matmuls, tensor cores idle (TF32 off: torch's default)

GPU flags (the rest are train.py's, e.g. -a, -b, -j, --steps; see train.py --help):

    --device cuda|cpu    cpu: the same loop on the CPU (a smoke test where no GPU is)
    -a resnet18|resnet50 torchvision's models, besides train.py's tinynet and mlp
    --pin-memory         DataLoader(pin_memory=True); batches move with
                         .to(device, non_blocking=True) either way
    --amp off|bf16|fp16  autocast for the forward pass and the loss (fp16 with a GradScaler)
    --sync-every N       running_loss += loss.item() every N steps (0: only when printing)
    --sync-op item|synchronize
                         what that sync is: the loss's .item(), or torch.cuda.synchronize()
    --host-work-ms X     X ms of host-side work per step (a sleep), outside any GPU call
    --data-on-gpu        the synthetic set lives in GPU memory and batches are drawn
                         there (no DataLoader), as scripts for small data sets do
    --epoch-samples N    an epoch draws N samples, repeating the synthetic set
                         (0: the set's size), so short sets need no pass restarts
    --seconds S          stop S seconds after the first step (0: no limit)

    python train_gpu.py --data synthetic -a resnet50 --image-size 224 -b 128 -j 6 --amp bf16
    python train_gpu.py --data synthetic -a mlp --image-size 64 --hidden 4096 -b 1024 --data-on-gpu
"""

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import torch.utils.data  # noqa: E402

import train  # noqa: E402  (bench/diagnosis/train.py: models, data, flags)

ARCHS = ("tinynet", "mlp", "resnet18", "resnet50")


def gpu_parser():
    # allow_abbrev=False: train.py's --data is not --data-on-gpu.
    p = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("-a", "--arch", default="tinynet", choices=ARCHS)
    p.add_argument("--pin-memory", action="store_true")
    p.add_argument("--amp", default="off", choices=("off", "bf16", "fp16"))
    p.add_argument("--sync-every", default=0, type=int)
    p.add_argument("--sync-op", default="item", choices=("item", "synchronize"))
    p.add_argument("--host-work-ms", default=0.0, type=float)
    p.add_argument("--data-on-gpu", action="store_true")
    p.add_argument("--epoch-samples", default=0, type=int)
    p.add_argument("--seconds", default=0.0, type=float)
    return p


def parse_args(argv=None):
    """This script's flags, then train.py's (which also answer --help)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if "-h" in argv or "--help" in argv:
        print(__doc__)
    gpu, rest = gpu_parser().parse_known_args(argv)
    args = train.parse_args(rest)
    for k, v in vars(gpu).items():
        setattr(args, k, v)
    for name in ("sync_every", "epoch_samples"):
        if getattr(args, name) < 0:
            raise SystemExit("train_gpu.py: --%s must be >= 0" % name.replace("_", "-"))
    return args


class Repeated(torch.utils.data.Dataset):
    """`length` samples drawn from `base`, repeating it."""

    def __init__(self, base, length):
        self.base, self.length = base, length

    def __len__(self):
        return self.length

    def __getitem__(self, i):
        return self.base[i % len(self.base)]


def build_model(args, num_classes):
    if args.arch in ("resnet18", "resnet50"):
        import torchvision.models

        return getattr(torchvision.models, args.arch)(num_classes=num_classes)
    if args.arch == "mlp":
        return train.MLP(num_classes, args.image_size, args.hidden)
    return train.TinyNet(num_classes, args.width, args.frozen_mb)


def batches(args, dataset, device):
    """(images, target) per step: from a DataLoader, or drawn from the set in GPU memory."""
    if args.data_on_gpu:
        images, labels = (t.to(device) for t in dataset.tensors)
        # Drawn with replacement: a batch may be larger than the set (a batch fix).
        per_epoch = max(1, (args.epoch_samples or len(images)) // args.batch_size)
        while True:
            for _ in range(per_epoch):
                idx = torch.randint(len(images), (args.batch_size,), device=device)
                yield images[idx], labels[idx]
            yield None  # the end of an epoch
    if args.epoch_samples:
        dataset = Repeated(dataset, args.epoch_samples)
    extra = {}
    if args.workers > 0:
        extra = {"persistent_workers": args.persistent_workers,
                 "prefetch_factor": args.prefetch_factor}
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
        drop_last=True, pin_memory=args.pin_memory and device.type == "cuda", **extra)
    while True:
        for images, target in loader:
            yield (images.to(device, non_blocking=True), target.to(device, non_blocking=True))
        yield None


def main(argv=None):
    args = parse_args(argv)
    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        raise SystemExit("train_gpu.py: no CUDA device (torch %s); --device cpu runs the same loop "
                         "on the CPU" % torch.__version__)
    if args.amp == "fp16" and not cuda:
        raise SystemExit("train_gpu.py: --amp fp16 needs CUDA (bf16 runs on the CPU)")
    if args.sync_op == "synchronize" and not cuda and args.sync_every:
        print("train_gpu.py: no CUDA: --sync-op synchronize does nothing on the CPU", flush=True)
    torch.manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)

    if args.data_on_gpu and args.data != "synthetic":
        raise SystemExit("train_gpu.py: --data-on-gpu takes --data synthetic")
    dataset, num_classes = train.build_dataset(args, 0)
    model = build_model(args, num_classes).to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    if args.optimizer == "adam":
        optimizer = torch.optim.Adam(params, lr=args.lr)
    else:
        optimizer = torch.optim.SGD(params, lr=args.lr, momentum=0.9)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.amp)
    scaler = None
    if args.amp == "fp16":
        scaler = (torch.amp.GradScaler("cuda") if hasattr(torch.amp, "GradScaler")
                  else torch.cuda.amp.GradScaler())

    model.train()
    step, epoch, samples = 0, 0, 0
    running_loss, start, first_step_end = 0.0, time.time(), None
    for batch in batches(args, dataset, device):
        if batch is None:
            epoch += 1
            if epoch >= args.epochs:
                break
            continue
        images, target = batch
        with torch.autocast(device.type, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            output = model(images)
            loss = F.cross_entropy(output, target)
        optimizer.zero_grad(set_to_none=True)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        step += 1
        samples += args.batch_size
        if args.sync_every and step % args.sync_every == 0:
            if args.sync_op == "item":
                running_loss += loss.item()
            elif cuda:
                torch.cuda.synchronize()
        if args.host_work_ms:
            time.sleep(args.host_work_ms / 1e3)
        if step % args.print_freq == 0:
            print("epoch %d step %d loss %.4f" % (epoch, step, loss.item()), flush=True)
        if first_step_end is None:
            first_step_end = time.time()
        if args.steps and step >= args.steps:
            break
        if args.seconds and time.time() - first_step_end >= args.seconds:
            break
    if cuda:
        torch.cuda.synchronize()
    elapsed = time.time() - start
    print("done: %d steps, %.1f samples/s (%s, amp %s)" % (
        step, samples / max(elapsed, 1e-9), device.type, args.amp), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
