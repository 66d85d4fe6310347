"""Trains torchvision's ResNet-18 on the photos dataset, fed by saturate or by
torch's DataLoader over the ImageFolder tree, and reports images/s and the share
of time spent waiting for data.

    python examples/train_resnet18_photos.py                 # saturate, 1 epoch, 224 px
    python examples/train_resnet18_photos.py --loader torch --image-size 112 --max-steps 20
"""

from __future__ import annotations

import argparse
from typing import Optional, Sequence

import saturate.transforms as T
import torch
import torchvision
import torchvision.transforms as tv

import common


def make_loader(args: argparse.Namespace):
    """(training batches, number of classes) from the loader ``args`` names."""
    if args.loader == "torch":
        transform = tv.Compose([
            tv.RandomResizedCrop(args.image_size), tv.RandomHorizontalFlip(), tv.ToTensor(),
            tv.Normalize(T.IMAGENET_MEAN, T.IMAGENET_STD)])
        folder = torchvision.datasets.ImageFolder(args.data / "photos" / "train", transform)
        return common.torch_batches(folder, args, shuffle=True), len(folder.classes)
    dataset = args.data / "photos-train.sat"
    # On a GPU: half precision in channels_last, converted there from uint8 (AMP takes fp16 in).
    on_gpu = common.device().type == "cuda"
    transforms = {"image": [
        T.RandomResizedCrop(args.image_size), T.RandomHorizontalFlip(),
        T.ToDtype("float16" if on_gpu else "float32"),
        T.Normalize(T.IMAGENET_MEAN, T.IMAGENET_STD), T.ToLayout("channels_last" if on_gpu else "chw")]}
    loader = common.saturate_batches(dataset, args, transforms, shuffle=True)
    return loader, len(common.class_names(loader))


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_train_args(parser, batch_size=64, lr=0.05)
    parser.add_argument("--image-size", type=common.positive_int, default=224, metavar="PX",
                        help="crop size (default: %(default)s; 112 makes a quick CPU run)")
    return common.parse_train_args(parser, argv)


def run(args: argparse.Namespace) -> common.Result:
    """Trains as ``args`` say; the result of common.train."""
    loader, num_classes = make_loader(args)
    torch.manual_seed(args.seed)  # the same initial weights whichever the loader
    model = torchvision.models.resnet18(num_classes=num_classes)
    return common.train(model, loader, lr=args.lr, epochs=args.epochs,
                        max_steps=args.max_steps, warmup=args.warmup)


def main(argv: Optional[Sequence[str]] = None) -> None:
    args = parse_args(argv)
    common.print_result(run(args), args.json)


if __name__ == "__main__":
    main()
