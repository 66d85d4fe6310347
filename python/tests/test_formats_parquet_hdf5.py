"""Parquet and HDF5 files (docs/formats.md) packed with `saturate pack`, from files the formats'
reference writers make at test time (pyarrow.parquet.write_table, h5py), checked image for image
and label for label against the source; and malformed files, which must fail naming file,
column or dataset and what was found (or be skipped and counted with skip_bad).

Parquet goes through the Python package (pyarrow reads, the engine packs): saturate.pack() and
the `saturate` command's Python shim (`python -m saturate pack`). HDF5 is read by the engine
with libhdf5: the C++ tool and saturate.pack().
"""

import importlib
import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import saturate
from saturate import transforms as T

from conftest import encode_image, on_terminal, saturate_cmd, synthetic_photo



def need(module):
    """The reference writer `module`: skipped where it is not installed, except under CI
    (scripts/python-env.sh installs it there), where its absence fails."""
    if os.environ.get("CI"):
        return importlib.import_module(module)
    why = f"{module} is not installed here (scripts/python-env.sh installs it; CI must have it)"
    return pytest.importorskip(module, reason=why)


pa = need("pyarrow")
pq = need("pyarrow.parquet")
h5py = need("h5py")
from PIL import Image  # noqa: E402

H, W, N = 40, 56, 12
FULL = {"image": [T.Resize(H), T.CenterCrop((H, W))]}  # uint8 [3, H, W]: the decoded pixels


def photo(i):
    return synthetic_photo(i, H, W, seed=100)


encode = encode_image


def decode(data):
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def cli(*args, check=True):
    """The C++ tool (SATURATE_CLI or the bundled one)."""
    r = subprocess.run([*saturate_cmd(), *args], capture_output=True, text=True, timeout=300)
    if check:
        assert r.returncode == 0, r.stderr
    return r


def shim(*args, check=True):
    """The pip-installed `saturate` command: the Python shim, which packs Parquet itself."""
    r = subprocess.run([sys.executable, "-m", "saturate", *args], capture_output=True, text=True,
                       timeout=300, env={**os.environ})
    if check:
        assert r.returncode == 0, r.stderr
    return r


def read_all(dataset, transforms=FULL):
    """Every sample in order: (images, labels)."""
    loader = saturate.Loader(dataset, batch_size=5, shuffle=False, transforms=transforms,
                             framework="numpy", threads=2)
    images, labels = [], []
    for batch in loader:
        image = np.asarray(batch["image"])
        images.append(image.transpose(0, 2, 3, 1).copy() if transforms else image.copy())
        labels.append(np.asarray(batch["label"]).copy())
    del loader
    return np.concatenate(images), np.concatenate(labels)


def manifest(dataset):
    with open(os.path.join(dataset, "manifest.json")) as f:
        return json.load(f)


# ---- Parquet ----------------------------------------------------------------------------------


def write_parquet(path, start, count, struct=False, fmt="PNG", metadata=None):
    """Rows of (image, label, caption, score, tags); `struct`: the image as Hugging Face's
    Image feature writes it, {bytes, path}."""
    images = [encode(photo(i), fmt) for i in range(start, start + count)]
    labels = [i % 4 for i in range(start, start + count)]
    if struct:
        image_col = pa.array([{"bytes": b, "path": f"img{i}.png"} for i, b in
                              zip(range(start, start + count), images)],
                             pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
    else:
        image_col = pa.array(images, pa.binary())
    table = pa.table({
        "image": image_col,
        "label": pa.array(labels, pa.int64()),
        "caption": [f"caption {i}" for i in range(start, start + count)],
        "score": pa.array([i / 4 for i in range(start, start + count)], pa.float64()),
        "tags": [["a", "b"][: i % 3] for i in range(start, start + count)],
    })
    if metadata:
        table = table.replace_schema_metadata(metadata)
    pq.write_table(table, path, row_group_size=5)
    return images, labels


def test_parquet_binary_column_round_trip(tmp_path):
    images, labels = write_parquet(str(tmp_path / "train-00000.parquet"), 0, 7)
    more = write_parquet(str(tmp_path / "train-00001.parquet"), 7, 5)
    images, labels = images + more[0], labels + more[1]
    out = str(tmp_path / "p.sat")
    summary = saturate.pack(str(tmp_path / "train-*.parquet"), out)
    assert summary["records"] == N and summary["skipped"] == 0
    assert summary["ignored_columns"] == ["tags"]
    got_images, got_labels = read_all(out)
    assert np.array_equal(got_images, np.stack([decode(b) for b in images]))  # PNG: exact
    assert got_labels.tolist() == labels
    info = cli("inspect", out, "--json", "--record", "9").stdout
    for text in ('"caption"', "caption 9", '"score"'):
        assert text in info
    schema = json.dumps(manifest(out)["schema"])
    assert "float32" in schema and "tags" not in schema
    # On a terminal, `saturate pack` draws its bar and clears it at the end.
    shown = on_terminal([sys.executable, "-m", "saturate", "pack", str(tmp_path / "train-*.parquet"),
                         str(tmp_path / "again.sat")])
    assert "pack [" in shown and f" {N}/{N} 100.0%" in shown and shown.endswith("\r\x1b[K"), shown


def test_parquet_hugging_face_struct_column_through_the_saturate_command(tmp_path):
    names = ["cat", "dog", "fox", "owl"]
    hf = {"info": {"features": {"image": {"_type": "Image"},
                                "label": {"names": names, "_type": "ClassLabel"}}}}
    path = str(tmp_path / "hf.parquet")
    images, labels = write_parquet(path, 0, N, struct=True, fmt="JPEG",
                                   metadata={b"huggingface": json.dumps(hf).encode()})
    out = str(tmp_path / "hf.sat")
    summary = json.loads(shim("pack", path, out, "--keep-jpeg-bytes", "--json", "-q").stdout)
    assert summary["records"] == N and summary["dataset"] == out
    assert manifest(out)["class_names"] == names
    info = json.loads(cli("inspect", out, "--json", "--record", "4").stdout)
    assert str(len(images[4])) in json.dumps(info)  # the JPEG stored byte for byte
    got_images, got_labels = read_all(out)
    assert got_labels.tolist() == labels
    want = np.stack([decode(b) for b in images]).astype(int)
    assert np.abs(got_images.astype(int) - want).mean() < 2.0  # libjpeg-turbo in both
    # `pack parquet` by name too, and the default (JPEGs rewritten with restart markers).
    shim("pack", "parquet", path, str(tmp_path / "again.sat"), "-q")
    assert read_all(str(tmp_path / "again.sat"))[1].tolist() == labels


def test_parquet_text_labels_paths_and_no_label_column(tmp_path):
    folder = tmp_path / "imgs"
    folder.mkdir()
    data = [encode(photo(i), "PNG") for i in range(4)]
    (folder / "x2.png").write_bytes(data[2])
    table = pa.table({
        "img": pa.array([{"bytes": data[0], "path": None}, {"bytes": data[1], "path": None},
                         {"bytes": None, "path": "imgs/x2.png"},  # a path beside the file
                         {"bytes": data[3], "path": "x3.png"}],
                        pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
        "species": ["owl", "cat", "owl", "dog"],
    })
    path = str(tmp_path / "named.parquet")
    pq.write_table(table, path)
    out = str(tmp_path / "named.sat")
    saturate.pack(path, out, image_column="img", label_column="species")
    assert manifest(out)["class_names"] == ["cat", "dog", "owl"]
    images, labels = read_all(out)
    assert labels.tolist() == [2, 0, 2, 1]
    assert np.array_equal(images, np.stack([decode(b) for b in data]))

    saturate.pack(path, str(tmp_path / "nolabel.sat"), image_column="img", label_column="")
    fields = [f["name"] for f in manifest(str(tmp_path / "nolabel.sat"))["schema"]]
    assert fields == ["image", "species"]


def test_parquet_wrong_column_type_and_missing_column(tmp_path):
    path = str(tmp_path / "typed.parquet")
    pq.write_table(pa.table({"image": pa.array([1, 2, 3], pa.int64()), "label": [0, 1, 2],
                             "jpeg": [encode(photo(i), "JPEG") for i in range(3)]}), path)
    r = shim("pack", path, str(tmp_path / "a.sat"), check=False)
    assert r.returncode == 3, r.stderr
    assert "typed.parquet: column 'image' is int64" in r.stderr and "binary" in r.stderr
    with pytest.raises(saturate.errors.CorruptionError, match="column 'image' is int64"):
        saturate.pack(path, str(tmp_path / "a.sat"))

    r = shim("pack", path, str(tmp_path / "a.sat"), "--image-column", "jpg", check=False)
    assert r.returncode == 2
    assert "no column 'jpg'" in r.stderr and "'jpeg' (binary)" in r.stderr
    with pytest.raises(saturate.errors.InvalidArgumentError, match="no column 'lbl'"):
        saturate.pack(path, str(tmp_path / "a.sat"), image_column="jpeg", label_column="lbl")

    floats = str(tmp_path / "floats.parquet")
    pq.write_table(pa.table({"image": [encode(photo(0), "PNG")], "label": [0.5]}), floats)
    with pytest.raises(saturate.errors.CorruptionError, match="column 'label' is double"):
        saturate.pack(floats, str(tmp_path / "b.sat"))
    assert not os.path.exists(tmp_path / "a.sat") and not os.path.exists(tmp_path / "b.sat")

    # Every file must match the first; the second is checked before anything is written.
    write_parquet(str(tmp_path / "g-0.parquet"), 0, 2)
    pq.write_table(pa.table({"image": ["text"], "label": [1], "caption": ["c"], "score": [0.5],
                             "tags": [["a"]]}), str(tmp_path / "g-1.parquet"))
    with pytest.raises(saturate.errors.CorruptionError, match="g-1.parquet: column 'image' is "
                                                              "string"):
        saturate.pack(str(tmp_path / "g-*.parquet"), str(tmp_path / "g.sat"))
    assert not os.path.exists(tmp_path / "g.sat")

    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"PAR1 but not really a Parquet file")
    r = shim("pack", str(junk), str(tmp_path / "c.sat"), check=False)
    assert r.returncode == 3 and "junk.parquet: not a readable Parquet file" in r.stderr


def test_parquet_corrupt_image_fails_or_is_skipped_and_counted(tmp_path):
    images = [encode(photo(i), "JPEG") for i in range(6)]
    images[3] = images[3][: len(images[3]) // 3]  # truncated JPEG
    path = str(tmp_path / "bad.parquet")
    pq.write_table(pa.table({"image": pa.array(images, pa.binary()),
                             "label": list(range(6))}), path)
    r = shim("pack", path, str(tmp_path / "out.sat"), check=False)
    assert r.returncode == 3
    assert "bad.parquet: row 3: field 'image'" in r.stderr
    assert not os.path.exists(tmp_path / "out.sat")
    summary = json.loads(shim("pack", path, str(tmp_path / "out.sat"), "--skip-bad", "--json",
                              "-q").stdout)
    assert summary["records"] == 5 and summary["skipped"] == 1
    assert "row 3" in summary["skip_notes"][0]
    assert read_all(str(tmp_path / "out.sat"))[1].tolist() == [0, 1, 2, 4, 5]
    summary = saturate.pack(path, str(tmp_path / "py.sat"), skip_bad=True)
    assert summary["skipped"] == 1


def test_the_cpp_tool_says_how_to_pack_parquet(tmp_path):
    path = str(tmp_path / "x.parquet")
    pq.write_table(pa.table({"image": [b"x"], "label": [0]}), path)
    for args in (["pack", path, str(tmp_path / "o")], ["pack", "parquet", path, "o"]):
        r = cli(*args, check=False)
        assert r.returncode == 2, r.stderr
        assert "python -m saturate pack" in r.stderr and "saturate[parquet]" in r.stderr


# ---- HDF5 -------------------------------------------------------------------------------------


def write_h5_encoded(path, count=N, fmt="PNG", labels=None):
    images = [encode(photo(i), fmt) for i in range(count)]
    labels = [i * 3 % 5 for i in range(count)] if labels is None else labels
    with h5py.File(path, "w") as f:
        d = f.create_dataset("images", (count,), dtype=h5py.vlen_dtype(np.uint8))
        for i, b in enumerate(images):
            d[i] = np.frombuffer(b, np.uint8)
        f.create_dataset("labels", data=np.array(labels, np.int32))
    return images, labels


def test_hdf5_vlen_bytes_round_trip(tmp_path):
    path = str(tmp_path / "photos.h5")
    images, labels = write_h5_encoded(path)
    out = str(tmp_path / "h5.sat")
    summary = json.loads(cli("pack", path, out, "--json", "-q").stdout)
    assert summary["records"] == N and summary["skipped"] == 0
    got_images, got_labels = read_all(out)
    assert np.array_equal(got_images, np.stack([decode(b) for b in images]))
    assert got_labels.tolist() == labels
    # saturate.pack, and `pack hdf5` with the dataset names given; two files by pattern.
    write_h5_encoded(str(tmp_path / "more.h5"), count=3)
    summary = saturate.pack([path, str(tmp_path / "more.h5")], str(tmp_path / "py.sat"))
    assert summary["records"] == N + 3
    cli("pack", "hdf5", str(tmp_path / "*.h5"), str(tmp_path / "cli.sat"), "--image-key",
        "images", "--label-key", "labels", "-q")
    assert read_all(str(tmp_path / "cli.sat"))[1].tolist() == [0, 3, 1] + labels


def test_hdf5_raw_uint8_arrays_become_an_array_field(tmp_path):
    pixels = np.stack([photo(i) for i in range(N)])
    labels = np.arange(N) % 7
    path = str(tmp_path / "raw.hdf5")
    with h5py.File(path, "w") as f:
        f.create_dataset("train/x", data=pixels, chunks=(4, H, W, 3), compression="gzip")
        f.create_dataset("train/y", data=labels.astype(np.uint8).reshape(N, 1))
    out = str(tmp_path / "raw.sat")
    saturate.pack(path, out, image_key="train/x", label_key="train/y")
    fields = manifest(out)["schema"]
    assert fields[0]["name"] == "image" and fields[0]["shape"] == [H, W, 3]
    got_images, got_labels = read_all(out, transforms=None)
    assert np.array_equal(got_images, pixels) and np.array_equal(got_labels, labels)


def test_hdf5_wrong_shape_missing_dataset_and_label_count(tmp_path):
    path = str(tmp_path / "bad.h5")
    with h5py.File(path, "w") as f:
        f.create_dataset("images", data=np.zeros((6, 100), np.uint8))
        f.create_dataset("floats", data=np.zeros((6, 8, 8), np.float32))
        f.create_dataset("labels", data=np.arange(6))
    r = cli("pack", path, str(tmp_path / "a.sat"), check=False)
    assert r.returncode == 3, r.stderr
    assert "bad.h5: dataset 'images' (6, 100) uint8" in r.stderr and "(N, H, W)" in r.stderr
    with pytest.raises(saturate.errors.CorruptionError, match=r"'floats' \(6, 8, 8\) float32"):
        saturate.pack(path, str(tmp_path / "a.sat"), image_key="floats")
    r = cli("pack", "hdf5", path, str(tmp_path / "a.sat"), "--image-key", "x", check=False)
    assert r.returncode == 2
    assert "no dataset 'x'" in r.stderr and "'labels' (6,) int64" in r.stderr

    short = str(tmp_path / "short.h5")
    write_h5_encoded(short, count=5, labels=[0, 1, 2, 3])
    r = cli("pack", short, str(tmp_path / "b.sat"), check=False)
    assert r.returncode == 3
    assert "short.h5: dataset 'labels' (4,) int32" in r.stderr
    assert "4 labels for 5 images" in r.stderr
    assert not os.path.exists(tmp_path / "a.sat") and not os.path.exists(tmp_path / "b.sat")


def test_hdf5_corrupt_image_fails_or_is_skipped_and_counted(tmp_path):
    path = str(tmp_path / "bad.h5")
    images = [encode(photo(i), "JPEG") for i in range(6)]
    images[2] = b"not an image at all"
    with h5py.File(path, "w") as f:
        d = f.create_dataset("images", (6,), dtype=h5py.vlen_dtype(np.uint8))
        for i, b in enumerate(images):
            d[i] = np.frombuffer(b, np.uint8)
        f.create_dataset("labels", data=np.arange(6))
    r = cli("pack", path, str(tmp_path / "out.sat"), check=False)
    assert r.returncode == 3
    assert "bad.h5: row 2: field 'image'" in r.stderr
    summary = json.loads(cli("pack", path, str(tmp_path / "out.sat"), "--skip-bad", "--json",
                             "-q").stdout)
    assert summary["records"] == 5 and summary["skipped"] == 1
    assert "row 2" in summary["skip_notes"][0]
    assert read_all(str(tmp_path / "out.sat"))[1].tolist() == [0, 1, 3, 4, 5]


def test_hdf5_unreadable_chunk_fails_or_its_rows_are_skipped(tmp_path):
    pixels = np.stack([photo(i) for i in range(8)])
    path = str(tmp_path / "chunks.h5")
    with h5py.File(path, "w") as f:
        d = f.create_dataset("images", data=pixels, chunks=(1, H, W, 3), compression="gzip")
        f.create_dataset("labels", data=np.arange(8))
        info = d.id.get_chunk_info(5)  # row 5's compressed chunk
    with open(path, "r+b") as f:
        f.seek(info.byte_offset + info.size // 2)
        f.write(b"\xff" * 64)
    r = cli("pack", path, str(tmp_path / "out.sat"), check=False)
    assert r.returncode == 3, r.stderr
    assert "chunks.h5: dataset 'images' row 5: cannot read" in r.stderr
    summary = json.loads(cli("pack", path, str(tmp_path / "out.sat"), "--skip-bad", "--json",
                             "-q").stdout)
    assert summary["records"] == 7 and summary["skipped"] == 1
    images, labels = read_all(str(tmp_path / "out.sat"), transforms=None)
    assert labels.tolist() == [0, 1, 2, 3, 4, 6, 7]
    assert np.array_equal(images, pixels[[0, 1, 2, 3, 4, 6, 7]])
