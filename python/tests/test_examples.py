"""The training examples (examples/) run, briefly, with this interpreter's torch: CI runs this
file under Debian's torch 1.13 and under PyPI's torch 2 (scripts/test.sh, the two lines).
Fashion-MNIST-shaped data (28x28 uint8, 10 classes) is made here, as IDX files for the
DataLoader side and packed for saturate's; the ResNet-18 example reads the photos fixture.
"""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("torchvision")

import saturate  # noqa: E402

from conftest import REPO, write_idx  # noqa: E402

EXAMPLES = os.path.join(REPO, "examples")


def run_example(script, *args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SATURATE_")}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, os.path.join(EXAMPLES, script), "--json", *args],
                          capture_output=True, text=True, timeout=300, env=env, cwd=EXAMPLES)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def fashion_dir(tmp_path_factory):
    """DIR with {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz and
    fashion-mnist-{train,test}.sat: 640 and 128 images whose label is a stripe's row band."""
    root = tmp_path_factory.mktemp("fashion")
    rng = np.random.default_rng(0)
    for split, prefix, n in (("train", "train", 640), ("test", "t10k", 128)):
        labels = rng.integers(0, 10, n)
        images = rng.integers(0, 40, (n, 28, 28))
        for i, label in enumerate(labels):
            images[i, 2 * label:2 * label + 8, :] += 200
        write_idx(str(root / f"{prefix}-images-idx3-ubyte.gz"), images)
        write_idx(str(root / f"{prefix}-labels-idx1-ubyte.gz"), labels)
        saturate.pack(str(root / f"{prefix}-images-idx3-ubyte.gz"),
                      str(root / f"fashion-mnist-{split}.sat"),
                      labels=str(root / f"{prefix}-labels-idx1-ubyte.gz"))
    return root


@pytest.mark.parametrize("loader", ["saturate", "torch"])
def test_fashion_mnist_example(fashion_dir, loader):
    result = run_example("train_fashion_mnist.py", "--loader", loader, "--data", str(fashion_dir),
                         "--idx-dir", str(fashion_dir), "--batch-size", "32", "--max-steps", "12",
                         "--warmup", "2", "--threads", "1", "--workers", "1", "--eval")
    assert result["loader"].startswith({"saturate": "saturate", "torch": "DataLoader"}[loader])
    assert result["steps"] == 10 and result["images"] == 320
    assert result["images_per_s"] > 0 and 0 <= result["data_wait_pct"] <= 100
    assert np.isfinite(result["loss"]) and 0 <= result["test_accuracy"] <= 1


def test_resnet18_photos_example(photos, tmp_path):
    shutil.copytree(photos, tmp_path / "photos-train.sat")  # the name the example reads
    result = run_example("train_resnet18_photos.py", "--data", str(tmp_path), "--image-size", "32",
                         "--batch-size", "6", "--max-steps", "4", "--warmup", "1",
                         "--threads", "1")
    assert result["loader"].startswith("saturate")
    assert result["steps"] == 3 and result["images"] == 18
    assert np.isfinite(result["loss"])
