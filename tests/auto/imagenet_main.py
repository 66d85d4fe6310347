#!/usr/bin/env python3
"""Train an image classifier on an ImageFolder dataset (CPU or one GPU).

A small, ordinary training script in the style of the public ImageNet
examples: argparse flags, torchvision's ImageFolder and transforms, a
DataLoader with worker processes, AverageMeter/ProgressMeter logging with
loss.item() every step, and a checkpoint at the end of every epoch. It knows
nothing about saturate; tests/auto uses it to check that `saturate doctor`
explains a job it did not modify.

    python imagenet_main.py -a resnet18 -j 4 -b 32 --epochs 1 DATA
    python imagenet_main.py -a tinynet --image-size 64 --max-steps 40 DATA

DATA holds train/ (and optionally val/) in ImageFolder layout.
"""

import argparse
import os
import shutil
import time

import torch
import torch.nn as nn
import torch.utils.data
import torchvision.datasets as datasets
import torchvision.models as models
import torchvision.transforms as transforms


class TinyNet(nn.Module):
    """A four-layer CNN: fast enough to train on a CPU in seconds."""

    def __init__(self, num_classes=1000):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
            nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32), nn.ReLU(inplace=True),
            nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(1))
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x):
        return self.fc(torch.flatten(self.features(x), 1))


ARCHS = ["tinynet"] + sorted(n for n in ("resnet18", "resnet34", "resnet50", "mobilenet_v2")
                             if hasattr(models, n))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="ImageFolder training")
    p.add_argument("data", metavar="DIR", help="dataset root holding train/ (and val/)")
    p.add_argument("-a", "--arch", default="resnet18", choices=ARCHS)
    p.add_argument("-j", "--workers", default=4, type=int, help="data loading workers")
    p.add_argument("--epochs", default=90, type=int)
    p.add_argument("-b", "--batch-size", default=256, type=int)
    p.add_argument("--lr", "--learning-rate", default=0.1, type=float, dest="lr")
    p.add_argument("--momentum", default=0.9, type=float)
    p.add_argument("--wd", "--weight-decay", default=1e-4, type=float, dest="weight_decay")
    p.add_argument("-p", "--print-freq", default=10, type=int)
    p.add_argument("--image-size", default=224, type=int, help="crop size fed to the model")
    p.add_argument("--max-steps", default=0, type=int, help="stop after this many steps (0: no limit)")
    p.add_argument("--checkpoint-dir", default=".", help="where checkpoint.pth.tar goes")
    p.add_argument("--seed", default=None, type=int)
    return p.parse_args(argv)


def main():
    args = parse_args()
    if args.seed is not None:
        torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    normalize = transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
    train_dataset = datasets.ImageFolder(
        os.path.join(args.data, "train"),
        transforms.Compose([
            transforms.RandomResizedCrop(args.image_size),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            normalize,
        ]))
    num_classes = len(train_dataset.classes)
    train_loader = torch.utils.data.DataLoader(
        train_dataset, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
        pin_memory=device.type == "cuda", drop_last=True)

    val_loader = None
    val_dir = os.path.join(args.data, "val")
    if os.path.isdir(val_dir) and os.listdir(val_dir):
        val_dataset = datasets.ImageFolder(val_dir, transforms.Compose([
            transforms.Resize(args.image_size * 8 // 7),
            transforms.CenterCrop(args.image_size),
            transforms.ToTensor(),
            normalize,
        ]))
        val_loader = torch.utils.data.DataLoader(
            val_dataset, batch_size=args.batch_size, shuffle=False, num_workers=args.workers,
            pin_memory=device.type == "cuda")

    print(f"=> creating model '{args.arch}' ({num_classes} classes) on {device}")
    if args.arch == "tinynet":
        model = TinyNet(num_classes)
    else:
        model = models.__dict__[args.arch](num_classes=num_classes)
    model = model.to(device)

    criterion = nn.CrossEntropyLoss().to(device)
    optimizer = torch.optim.SGD(model.parameters(), args.lr, momentum=args.momentum,
                                weight_decay=args.weight_decay)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=30, gamma=0.1)

    best_acc1 = 0.0
    steps = 0
    for epoch in range(args.epochs):
        steps = train(train_loader, model, criterion, optimizer, epoch, device, args, steps)
        acc1 = validate(val_loader, model, criterion, device, args) if val_loader else 0.0
        scheduler.step()
        is_best = acc1 > best_acc1
        best_acc1 = max(acc1, best_acc1)
        save_checkpoint({
            "epoch": epoch + 1,
            "arch": args.arch,
            "state_dict": model.state_dict(),
            "best_acc1": best_acc1,
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
        }, is_best, args.checkpoint_dir)
        if args.max_steps and steps >= args.max_steps:
            break
    print(f"=> done: {steps} steps")


def train(train_loader, model, criterion, optimizer, epoch, device, args, steps):
    batch_time = AverageMeter("Time", ":6.3f")
    data_time = AverageMeter("Data", ":6.3f")
    losses = AverageMeter("Loss", ":.4e")
    top1 = AverageMeter("Acc@1", ":6.2f")
    progress = ProgressMeter(len(train_loader), [batch_time, data_time, losses, top1],
                             prefix=f"Epoch: [{epoch}]")
    model.train()
    end = time.time()
    for i, (images, target) in enumerate(train_loader):
        data_time.update(time.time() - end)
        images = images.to(device, non_blocking=True)
        target = target.to(device, non_blocking=True)

        output = model(images)
        loss = criterion(output, target)

        acc1, = accuracy(output, target, topk=(1,))
        losses.update(loss.item(), images.size(0))
        top1.update(acc1[0], images.size(0))

        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        steps += 1

        batch_time.update(time.time() - end)
        end = time.time()
        if i % args.print_freq == 0:
            progress.display(i + 1)
        if args.max_steps and steps >= args.max_steps:
            break
    return steps


def validate(val_loader, model, criterion, device, args):
    top1 = AverageMeter("Acc@1", ":6.2f")
    model.eval()
    with torch.no_grad():
        for images, target in val_loader:
            images, target = images.to(device), target.to(device)
            acc1, = accuracy(model(images), target, topk=(1,))
            top1.update(acc1[0], images.size(0))
    print(f" * Acc@1 {float(top1.avg):.3f}")
    return float(top1.avg)


def save_checkpoint(state, is_best, directory, filename="checkpoint.pth.tar"):
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, filename)
    torch.save(state, path)
    if is_best:
        shutil.copyfile(path, os.path.join(directory, "model_best.pth.tar"))


class AverageMeter:
    """Computes and stores the average and current value."""

    def __init__(self, name, fmt=":f"):
        self.name, self.fmt = name, fmt
        self.val = self.avg = self.sum = 0
        self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count

    def __str__(self):
        fmtstr = "{name} {val" + self.fmt + "} ({avg" + self.fmt + "})"
        return fmtstr.format(name=self.name, val=float(self.val), avg=float(self.avg))


class ProgressMeter:
    def __init__(self, num_batches, meters, prefix=""):
        digits = len(str(num_batches))
        self.batch_fmtstr = "[{:" + str(digits) + "d}/" + str(num_batches) + "]"
        self.meters, self.prefix = meters, prefix

    def display(self, batch):
        entries = [self.prefix + self.batch_fmtstr.format(batch)]
        entries += [str(meter) for meter in self.meters]
        print("\t".join(entries), flush=True)


def accuracy(output, target, topk=(1,)):
    """Accuracy over the k top predictions, in percent, for each k."""
    with torch.no_grad():
        maxk = min(max(topk), output.size(1))
        _, pred = output.topk(maxk, 1, True, True)
        correct = pred.t().eq(target.view(1, -1).expand_as(pred.t()))
        return [correct[:k].reshape(-1).float().sum(0, keepdim=True).mul_(100.0 / target.size(0))
                for k in topk]


if __name__ == "__main__":
    main()
