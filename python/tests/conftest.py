"""Shared fixtures: small datasets packed with saturate.pack, once per session.

- photos: an ImageFolder of 36 JPEGs of varying sizes in 3 classes.
- digits: an IDX pair of 101 uint8[8, 8] "images" whose label is the record
  index mod 256, so a label identifies its sample (ranks, resume).
"""

import gzip
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

import saturate

HERE = os.path.dirname(os.path.abspath(__file__))
DIGITS = 101


def write_idx(path, array):
    """An MNIST-style IDX file (gzip'd) holding a uint8 array."""
    header = struct.pack(">HBB", 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


def make_photo_folder(root, per_class=12, classes=3):
    from PIL import Image

    rng = np.random.default_rng(0)
    for c in range(classes):
        os.makedirs(os.path.join(root, f"class{c}"), exist_ok=True)
        for i in range(per_class):
            h, w = 48 + 8 * (i % 5), 64 + 8 * (i % 7)
            y, x = np.mgrid[0:h, 0:w]
            rgb = np.stack([(x * (c + 2)) % 256, (y * (i + 3)) % 256, (x + y) % 256], axis=-1)
            rgb = (rgb + rng.integers(0, 16, rgb.shape)).clip(0, 255).astype(np.uint8)
            Image.fromarray(rgb).save(os.path.join(root, f"class{c}", f"{i:03d}.jpg"), quality=90)


@pytest.fixture(scope="session")
def photos(tmp_path_factory):
    root = tmp_path_factory.mktemp("photos")
    make_photo_folder(str(root / "folder"))
    out = str(root / "photos.sat")
    saturate.pack(str(root / "folder"), out)
    return out


@pytest.fixture(scope="session")
def digits(tmp_path_factory):
    root = tmp_path_factory.mktemp("digits")
    images = np.stack([np.full((8, 8), i % 256) for i in range(DIGITS)])
    write_idx(str(root / "images.gz"), images)
    write_idx(str(root / "labels.gz"), np.arange(DIGITS) % 256)
    out = str(root / "digits.sat")
    saturate.pack(str(root / "images.gz"), out, labels=str(root / "labels.gz"))
    return out


def pytest_collection_modifyitems(config, items):
    """Tests marked gpu skip themselves where torch sees no CUDA device."""
    try:
        import torch

        has_gpu = torch.cuda.is_available()
    except ImportError:
        has_gpu = False
    if has_gpu:
        return
    skip = pytest.mark.skip(reason="no CUDA GPU visible")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def epoch_samples_and_stats(loader, field="image"):
    """(samples seen, loader.stats()) over one epoch, with the stats read at its
    last batch. The workers may have started on the next epoch by then (they read
    up to ``prefetch`` batches ahead across the boundary)."""
    n, stats = 0, None
    for i, batch in enumerate(loader):
        n += batch[field].shape[0]
        if i == len(loader) - 1:
            stats = loader.stats()
    return n, stats


def run_python(args, env=None, timeout=120, **kwargs):
    """Runs `python ARGS` (argv, never a shell) with this interpreter and import path."""
    full_env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), **(env or {}))
    return subprocess.run(
        [sys.executable, *args], env=full_env, timeout=timeout, capture_output=True, text=True,
        **kwargs,
    )
