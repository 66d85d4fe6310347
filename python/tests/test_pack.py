"""saturate.pack / saturate.verify from Python."""

import os

import numpy as np
import pytest

import saturate

from conftest import make_photo_folder


def test_pack_folder_then_verify(tmp_path):
    make_photo_folder(str(tmp_path / "f"), per_class=4, classes=2)
    summary = saturate.pack(tmp_path / "f", tmp_path / "d.sat", shard_size="64KiB")
    assert summary["records"] == 8 and summary["shards"] >= 1
    report = saturate.verify(tmp_path / "d.sat")
    assert report["ok"] and report["records_checked"] == 8
    with pytest.raises(FileExistsError, match="d.sat"):
        saturate.pack(tmp_path / "f", tmp_path / "d.sat")
    assert saturate.pack(tmp_path / "f", tmp_path / "d.sat", force=True)["records"] == 8


def test_restart_marked_jpegs_give_the_loader_the_same_batches_up_to_rounding(tmp_path):
    # Default pack rewrites JPEGs with restart markers: the loader then decodes only the MCUs
    # around each crop, as YCbCr components resized as stored and converted to RGB after the
    # resize. keep_jpeg_bytes stores the files as given: decoded to RGB, then resized. Same
    # crops, flips and labels; the pixels differ by rounding only.
    make_photo_folder(str(tmp_path / "f"), per_class=12, classes=2)
    marked = saturate.pack(tmp_path / "f", tmp_path / "marked.sat")
    kept = saturate.pack(tmp_path / "f", tmp_path / "kept.sat", keep_jpeg_bytes=True)
    assert marked["bytes"] != kept["bytes"]

    def batches(dataset):
        loader = saturate.Loader(dataset, 8, seed=3, framework="numpy", threads=2,
                                 transforms={"image": "crop=random,size=40,flip=0.5"})
        return [{k: v.copy() for k, v in b.items()} for _ in range(2) for b in loader]

    want, got = batches(tmp_path / "kept.sat"), batches(tmp_path / "marked.sat")
    assert len(want) == len(got) == 6
    for w, g in zip(want, got):
        assert (w["label"] == g["label"]).all()
        err = w["image"].astype(np.float64) - g["image"].astype(np.float64)
        psnr = 10 * np.log10(255.0 ** 2 / max(np.mean(err ** 2), 1e-12))
        assert psnr >= 35, psnr
    assert batches(tmp_path / "marked.sat")[0]["image"].tobytes() == got[0]["image"].tobytes()


def test_verify_reports_a_flipped_byte(tmp_path):
    make_photo_folder(str(tmp_path / "f"), per_class=3, classes=1)
    saturate.pack(tmp_path / "f", tmp_path / "d.sat")
    shard = next(p for p in os.listdir(tmp_path / "d.sat") if p.endswith(".srec"))
    path = tmp_path / "d.sat" / shard
    data = bytearray(path.read_bytes())
    data[300] ^= 1
    path.write_bytes(bytes(data))
    report = saturate.verify(tmp_path / "d.sat")
    assert not report["ok"] and report["problem_count"] >= 1
    assert shard in report["problems"][0]


def test_pack_table_and_errors(tmp_path):
    make_photo_folder(str(tmp_path / "f"), per_class=2, classes=1)
    rows = ["path,label,weight"] + [f"f/class0/{i:03d}.jpg,{i},0.5" for i in range(2)]
    (tmp_path / "t.csv").write_text("\n".join(rows) + "\n")
    assert saturate.pack(tmp_path / "t.csv", tmp_path / "t.sat")["records"] == 2
    with pytest.raises(FileNotFoundError):
        saturate.pack(tmp_path / "missing", tmp_path / "x.sat")
    with pytest.raises(ValueError, match="shard_size"):
        saturate.pack(tmp_path / "f", tmp_path / "y.sat", shard_size="lots")
