"""saturate.Loader from Python: values, zero-copy lifetime, epochs, frameworks."""

import json
import os
import subprocess

import numpy as np
import pytest
import torch
import xxhash

import saturate
from saturate import transforms as T

from conftest import DIGITS, epoch_samples_and_stats, run_python

TRAIN = [T.RandomResizedCrop(64), T.RandomHorizontalFlip()]  # 48 KiB+ batches: views


def digest(batches):
    """XXH3-64 over every tensor's bytes in order, as `saturate bench feed --digest`."""
    h = xxhash.xxh3_64()
    for batch in batches:
        for t in batch.values():
            h.update(np.ascontiguousarray(np.asarray(t)).tobytes())
    return h.hexdigest()


def cli(*args):
    exe = os.path.join(os.path.dirname(saturate.__file__), "bin", "saturate")
    return subprocess.run([exe, *args], capture_output=True, text=True, check=True).stdout


@pytest.mark.parametrize("threads", [1, 3])
def test_values_are_the_cpp_loaders(photos, threads):
    spec = T.field_spec("image", TRAIN + [T.ToDtype("float16")])
    out = cli("bench", "feed", photos, "--batch", "5", "--seed", "9", "--threads", "2",
              "--warmup", "0", "--digest", "--json", "-t", spec)
    loader = saturate.Loader(photos, 5, seed=9, threads=threads,
                             transforms={"image": TRAIN + [T.ToDtype("float16")]})
    assert digest(loader) == json.loads(out)["digest"]
    first = next(iter(loader))  # the next epoch's
    assert first["image"].dtype == torch.float16 and first["image"].shape == (5, 3, 64, 64)


def test_batches_view_the_batch_buffer_without_copies(photos):
    loader = saturate.Loader(photos, 4, prefetch=2, max_held_batches=1,
                             transforms={"image": TRAIN})
    seen = set()
    while (item := loader._next_with_info()) is not None:
        tensors, info = item
        assert tensors["image"].data_ptr() == info["addresses"]["image"]  # the C++ buffer itself
        assert tensors["label"].data_ptr() != info["addresses"]["label"]  # small: copied
        seen.add(info["addresses"]["image"])
        del tensors
    assert 1 < len(seen) <= 3  # buffers cycle within the pool (prefetch + max_held)


def test_held_batches_are_never_overwritten(photos):
    loader = saturate.Loader(photos, 4, prefetch=2, max_held_batches=3, threads=2,
                             transforms={"image": TRAIN})
    held, copies = [], []
    for i, batch in enumerate(loader):
        if i % 3 == 0:  # keep every third batch (at most 2 alive with the current one)
            held.append(batch)
            copies.append({k: v.clone() for k, v in batch.items()})
            if len(held) > 2:
                held.pop(0)
                copies.pop(0)
        for h, c in zip(held, copies):
            for k in c:
                assert torch.equal(h[k], c[k])


def test_buffer_returns_to_the_pool_when_the_last_view_goes(photos):
    loader = saturate.Loader(photos, 4, prefetch=1, max_held_batches=1,
                             transforms={"image": TRAIN})
    it = iter(loader)
    view = next(it)["image"][0]  # a view of batch 0 keeps its buffer
    second = next(it)
    with pytest.raises(saturate.errors.InvalidArgumentError, match="max_held_batches"):
        next(it)
    del view, second
    assert next(iter(loader))["image"].shape == (4, 3, 64, 64)  # continues where it stopped


def test_labels_can_be_kept_without_pinning_buffers(photos):
    loader = saturate.Loader(photos, 4, prefetch=1, max_held_batches=1,
                             transforms={"image": TRAIN})
    labels = [b["label"] for b in loader]  # small tensors are copies
    assert torch.cat(labels).bincount().tolist() == [12, 12, 12]


def test_len_drop_last_and_epochs(digits):
    assert len(saturate.Loader(digits, 10)) == 11
    assert len(saturate.Loader(digits, 10, drop_last=True)) == 10
    loader = saturate.Loader(digits, 10, seed=1)

    def epoch_labels():
        return torch.cat([b["label"] for b in loader]).tolist()

    e0 = epoch_labels()
    assert sorted(e0) == [i % 256 for i in range(DIGITS)]
    assert loader.epoch == 1  # a finished epoch moves on to the next by itself
    e1 = epoch_labels()
    assert sorted(e1) == sorted(e0) and e1 != e0
    loader.set_epoch(0)
    assert epoch_labels() == e0
    loader.set_epoch(1)
    assert epoch_labels() == e1


def test_no_shuffle_reads_in_order(digits):
    loader = saturate.Loader(digits, 32, shuffle=False)
    labels = torch.cat([b["label"] for b in loader]).tolist()
    assert labels == list(range(DIGITS))


def test_array_transform_to_float(digits):
    loader = saturate.Loader(digits, 8, shuffle=False,
                             transforms={"image": [T.ToDtype("float32"), T.Normalize(0.5, 2.0)]})
    batch = next(iter(loader))
    assert batch["image"].dtype == torch.float32 and batch["image"].shape == (8, 8, 8)
    expected = (torch.arange(8, dtype=torch.float32) / 255 - 0.5) / 2.0
    torch.testing.assert_close(batch["image"][:, 0, 0], expected)


def test_numpy_and_dlpack_outputs_match_torch(photos):
    def first(framework):
        return next(iter(saturate.Loader(photos, 6, seed=2, framework=framework,
                                         transforms={"image": TRAIN})))

    ref = first("torch")
    arrays = first("numpy")
    assert isinstance(arrays["image"], np.ndarray) and arrays["image"].dtype == np.uint8
    np.testing.assert_array_equal(arrays["image"], ref["image"].numpy())
    np.testing.assert_array_equal(arrays["label"], ref["label"].numpy())
    raw = first("dlpack")
    assert torch.equal(torch.from_dlpack(raw["image"]), ref["image"])


def test_jax_outputs_match_torch(photos):
    jax = pytest.importorskip("jax")

    def first(framework):
        return next(iter(saturate.Loader(photos, 6, seed=2, framework=framework,
                                         transforms={"image": TRAIN})))

    ref, arrays = first("torch"), first("jax")
    assert isinstance(arrays["image"], jax.Array)
    np.testing.assert_array_equal(np.asarray(arrays["image"]), ref["image"].numpy())
    np.testing.assert_array_equal(np.asarray(arrays["label"]), ref["label"].numpy())


def test_stats_count_the_stages(photos):
    loader = saturate.Loader(photos, 6, transforms={"image": TRAIN})
    n, stats = epoch_samples_and_stats(loader)
    assert n == 36
    # The workers may be up to `prefetch` batches into the next epoch already.
    assert n <= stats["samples"] <= n + stats["prefetch"] * 6
    assert stats["decode_ns"] > 0 and stats["batches_delivered"] == len(loader)
    assert stats["threads"] >= 1 and stats["prefetch"] >= 1


def test_python_m_saturate_runs_the_cli(digits):
    result = run_python(["-m", "saturate", "inspect", "--json", digits])
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["records"] == DIGITS


def test_class_names_are_the_manifests(photos):
    with open(os.path.join(photos, "manifest.json")) as f:
        want = json.load(f)["class_names"]
    assert want and saturate.Loader(photos, 4).class_names == want
