"""WebDataset tar shards and TFRecord files of tf.Example (docs/formats.md): packed with
`saturate pack` and read directly by saturate.Loader, from files the formats' reference
writers make at test time (webdataset's TarWriter, the tfrecord package), checked image for
image and label for label against the source; and malformed files, which must fail naming
file, member or record and field (or be skipped and counted with --skip-bad).
"""

import gzip
import io
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import saturate
from saturate import transforms as T

from conftest import encode_image, on_terminal, saturate_cmd, synthetic_photo

wds = pytest.importorskip("webdataset")
tfrecord = pytest.importorskip("tfrecord")
from PIL import Image  # noqa: E402

H, W, N = 48, 64, 24  # every photo the same size: a center crop of HxW is the whole image
FULL = {"image": [T.Resize(H), T.CenterCrop((H, W))]}  # uint8 [3, H, W]: the decoded pixels


def photo(i):
    return synthetic_photo(i, H, W)


encode = encode_image


def run(*args, check=True):
    r = subprocess.run([*saturate_cmd(), *args], capture_output=True, text=True, timeout=300)
    if check:
        assert r.returncode == 0, r.stderr
    return r


# ImageNet's box lists vary in length per image: int64[] / float32[] fields, which the
# loader pads to a length it is given.
BOXES = {"image/object/bbox/xmin": T.Pad(8)}


def read_all(dataset, extra=None, **kwargs):
    """Every sample in order: (images [N, H, W, 3], labels [N])."""
    loader = saturate.Loader(dataset, batch_size=5, shuffle=False,
                             transforms={**FULL, **(extra or {})}, framework="numpy", threads=2,
                             **kwargs)
    images, labels = [], []
    for batch in loader:
        images.append(np.asarray(batch["image"]).transpose(0, 2, 3, 1).copy())
        labels.append(np.asarray(batch["label"]).copy())
    del loader
    return np.concatenate(images), np.concatenate(labels)


def write_shards(folder, name, shards=2, per_shard=N // 2, fmt="PNG"):
    """WebDataset shards NAME-000.tar ... with .png|.jpg, .cls, .json and .txt members."""
    ext = "png" if fmt == "PNG" else "jpg"
    sources = []
    for s in range(shards):
        with wds.TarWriter(os.path.join(folder, f"{name}-{s:03d}.tar")) as sink:
            for i in range(s * per_shard, (s + 1) * per_shard):
                data = encode(photo(i), fmt)
                sources.append((data, i * 7 % 11))
                sink.write({"__key__": f"sample{i:05d}", ext: data, "cls": i * 7 % 11,
                            "json": {"index": i}, "txt": f"caption {i}"})
    return sources


def write_tfrecord(path, start, count, extra=True):
    """ImageNet-style tf.Example records with JPEG images."""
    writer = tfrecord.TFRecordWriter(path)
    sources = []
    for i in range(start, start + count):
        jpeg = encode(photo(i), "JPEG")
        sources.append((jpeg, 1 + i % 1000))
        features = {"image/encoded": (jpeg, "byte"), "image/class/label": (1 + i % 1000, "int")}
        if extra:
            features.update({"image/height": (H, "int"), "image/width": (W, "int"),
                             "image/class/synset": (f"n{i:08d}".encode(), "byte"),
                             "image/object/bbox/xmin": ([0.1] * (i % 3), "float")})
        writer.write(features)
    writer.close()
    return sources


def decoded(sources):
    return np.stack([np.asarray(Image.open(io.BytesIO(b)).convert("RGB")) for b, _ in sources])


@pytest.fixture
def shards(tmp_path):
    return str(tmp_path), write_shards(str(tmp_path), "shards")


def test_webdataset_pack_and_direct_reading_equal_the_source(shards, tmp_path):
    folder, sources = shards
    pattern = os.path.join(folder, "shards-{000..001}.tar")
    want_images, want_labels = decoded(sources), np.array([label for _, label in sources])

    # Direct reading: the first Loader builds the sidecar indexes.
    images, labels = read_all(pattern)
    assert np.array_equal(images, want_images) and np.array_equal(labels, want_labels)
    assert os.path.exists(os.path.join(folder, "shards-000.tar.satidx"))

    out = str(tmp_path / "packed.sat")
    summary = json.loads(run("pack", pattern, out, "--json", "-q").stdout)
    assert summary["records"] == N and summary["skipped"] == 0
    images, labels = read_all(out)
    assert np.array_equal(images, want_images) and np.array_equal(labels, want_labels)
    text = run("inspect", out, "--json", "--record", "3").stdout
    for field in ('"key"', '"json"', '"txt"', "sample00003", "caption 3"):
        assert field in text

    # .tar.gz shards (TarWriter gzips by name) pack to the same records.
    gz = tmp_path / "gz"
    gz.mkdir()
    for s in range(2):
        with open(os.path.join(folder, f"shards-{s:03d}.tar"), "rb") as f, \
                gzip.open(gz / f"shards-{s:03d}.tar.gz", "wb") as g:
            shutil.copyfileobj(f, g)
    out_gz = str(tmp_path / "packed-gz.sat")
    run("pack", "webdataset", str(gz / "shards-*.tar.gz"), out_gz, "-q")
    images, labels = read_all(out_gz)
    assert np.array_equal(images, want_images) and np.array_equal(labels, want_labels)
    assert not os.path.exists(out_gz + ".unpack")
    r = run("bench", "feed", str(gz / "shards-*.tar.gz"), check=False)
    assert r.returncode != 0 and "saturate pack" in r.stderr


def test_webdataset_jpeg_shards_written_with_tarwriter_compress(tmp_path):
    sources = []
    path = str(tmp_path / "laion-000.tar.gz")
    with wds.TarWriter(path, compress=True) as sink:
        for i in range(6):
            data = encode(photo(i), "JPEG")
            sources.append((data, i))
            sink.write({"__key__": f"{i:09d}", "jpg": data, "cls": i, "txt": "a photo"})
    out = str(tmp_path / "laion.sat")
    run("pack", path, out, "--keep-jpeg-bytes", "-q")
    info = json.loads(run("inspect", out, "--json", "--record", "4").stdout)
    assert str(len(sources[4][0])) in json.dumps(info)  # the JPEG stored byte for byte
    _, labels = read_all(out)
    assert labels.tolist() == list(range(6))


def test_tfrecord_pack_and_direct_reading_equal_the_source(tmp_path):
    folder = str(tmp_path)
    sources = write_tfrecord(os.path.join(folder, "train-00000.tfrecord"), 0, 10)
    sources += write_tfrecord(os.path.join(folder, "train-00001.tfrecord"), 10, 14)
    pattern = os.path.join(folder, "train-*.tfrecord")
    want_labels = np.array([label for _, label in sources])

    direct_images, labels = read_all(pattern, BOXES)
    assert np.array_equal(labels, want_labels)
    # libjpeg-turbo in both; the loader's and PIL's upsampling may round differently.
    assert np.abs(direct_images.astype(int) - decoded(sources).astype(int)).mean() < 2.0

    # Packed with the JPEG bytes as they are: the bytes of direct reading without the
    # index's JPEG entry tables (decoded the same way, whole).
    out = str(tmp_path / "imagenet.sat")
    run("pack", pattern, out, "--keep-jpeg-bytes", "-q")
    images, labels = read_all(out, BOXES)
    plain_images, _ = read_all(pattern + "?jpeg_index=0", BOXES)
    assert np.array_equal(images, plain_images) and np.array_equal(labels, want_labels)
    info = json.loads(run("inspect", out, "--json", "--record", "12").stdout)
    text = json.dumps(info)
    assert str(len(sources[12][0])) in text  # image bytes as written
    for name in ("image/height", "image/class/synset", "image/object/bbox/xmin"):
        assert name in text
    # The default pack rewrites the JPEGs with restart markers, and each is cut to the
    # MCUs around its crop; direct reading cuts the files as they are on the entry tables
    # of the index: the same bytes, crop for crop.
    rewritten = str(tmp_path / "rewritten.sat")
    run("pack", "tfrecord", pattern, rewritten, "-q")
    rrc = {"image": [T.RandomResizedCrop(24)]}
    for dataset in (rewritten, pattern):
        images, labels = read_all(dataset, {**BOXES, **rrc}, seed=9)
        if dataset == rewritten:
            want_cut = images
    assert np.array_equal(labels, want_labels) and np.array_equal(images, want_cut)
    assert np.array_equal(read_all(rewritten, BOXES)[0], direct_images)

    # gzip'd TFRecord: packed (unpacked on the way); direct reading says to pack.
    gz = os.path.join(folder, "gz-00000.tfrecord.gz")
    with open(os.path.join(folder, "train-00000.tfrecord"), "rb") as f, gzip.open(gz, "wb") as g:
        shutil.copyfileobj(f, g)
    run("pack", gz, str(tmp_path / "gz.sat"), "-q")
    assert np.array_equal(read_all(str(tmp_path / "gz.sat"), BOXES)[1], want_labels[:10])
    with pytest.raises(saturate.Error, match="saturate pack"):
        saturate.Loader(gz, batch_size=4, transforms=FULL)


def test_tfrecord_keys_by_flag_and_in_the_pattern(tmp_path):
    path = str(tmp_path / "data.tfrecord")
    writer = tfrecord.TFRecordWriter(path)
    for i in range(5):
        writer.write({"jpeg": (encode(photo(i), "JPEG"), "byte"), "cls": (i, "int")})
    writer.close()
    r = run("pack", path, str(tmp_path / "a.sat"), check=False)
    assert r.returncode == 2 and "image/encoded" in r.stderr and "--image-key" in r.stderr
    run("pack", path, str(tmp_path / "a.sat"), "--image-key", "jpeg", "--label-key", "cls", "-q")
    assert read_all(str(tmp_path / "a.sat"))[1].tolist() == list(range(5))
    assert read_all(path + "?image_key=jpeg&label_key=cls")[1].tolist() == list(range(5))
    # saturate.pack: the same from Python.
    summary = saturate.pack(path, str(tmp_path / "b.sat"), image_key="jpeg", label_key="cls")
    assert summary["records"] == 5
    assert read_all(str(tmp_path / "b.sat"))[1].tolist() == list(range(5))


def test_direct_reading_shuffles_shards_by_rank_and_resumes(tmp_path):
    folder = str(tmp_path)
    write_tfrecord(os.path.join(folder, "r-0.tfrecord"), 0, 13, extra=False)
    write_tfrecord(os.path.join(folder, "r-1.tfrecord"), 13, 11, extra=False)
    pattern = os.path.join(folder, "r-{0..1}.tfrecord")

    def labels(loader):
        return [int(x) for b in loader for x in np.asarray(b["label"])]

    seen = []
    for rank in range(2):
        loader = saturate.Loader(pattern, batch_size=4, seed=3, rank=rank, world_size=2,
                                 transforms=FULL, framework="numpy", drop_uneven=True)
        seen.append(labels(loader))
    assert not set(seen[0]) & set(seen[1])
    assert len(seen[0]) == len(seen[1]) == 12
    assert seen[0] != sorted(seen[0])  # shuffled

    full = saturate.Loader(pattern, batch_size=4, seed=5, transforms=FULL, framework="numpy")
    everything = labels(full)
    assert sorted(everything) == [1 + i for i in range(24)]
    first = saturate.Loader(pattern, batch_size=4, seed=5, transforms=FULL, framework="numpy")
    it = iter(first)
    head = [int(x) for _ in range(2) for x in np.asarray(next(it)["label"])]
    state = first.state_dict()
    del it, first
    again = saturate.Loader(pattern, batch_size=4, seed=5, transforms=FULL, framework="numpy")
    again.load_state_dict(state)
    assert head + labels(again) == everything


# ---- malformed input ----------------------------------------------------------------------


def test_truncated_tar_member_names_file_and_member(shards, tmp_path):
    folder, _ = shards
    path = os.path.join(folder, "shards-001.tar")
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size // 2 + 100)
    r = run("pack", path, str(tmp_path / "out.sat"), check=False)
    assert r.returncode == 3, r.stderr
    assert "shards-001.tar" in r.stderr and "member 'sample000" in r.stderr
    assert not os.path.exists(tmp_path / "out.sat")
    with pytest.raises(saturate.errors.CorruptionError, match="shards-001.tar"):
        saturate.Loader(path, batch_size=4, transforms=FULL)


def test_bad_tfrecord_crc_fails_or_is_skipped_and_counted(tmp_path):
    path = str(tmp_path / "bad.tfrecord")
    sources = write_tfrecord(path, 0, 8, extra=False)
    data = bytearray(open(path, "rb").read())
    offset = 0
    for _ in range(5):  # to record 5's data
        offset += 12 + int.from_bytes(data[offset:offset + 8], "little") + 4
    data[offset + 12 + 40] ^= 0x10
    open(path, "wb").write(bytes(data))

    r = run("pack", path, str(tmp_path / "out.sat"), check=False)
    assert r.returncode == 3
    assert "bad.tfrecord: record 5 at offset" in r.stderr and "CRC-32C" in r.stderr
    summary = json.loads(run("pack", path, str(tmp_path / "out.sat"), "--skip-bad", "--json",
                             "-q").stdout)
    assert summary["records"] == 7 and summary["skipped"] == 1
    assert "record 5" in summary["skip_notes"][0]
    labels = read_all(str(tmp_path / "out.sat"))[1].tolist()
    assert labels == [label for i, (_, label) in enumerate(sources) if i != 5]

    r = run("verify", path, check=False)
    assert r.returncode == 1 and "record 5" in r.stdout
    with pytest.raises(saturate.errors.CorruptionError, match="record 5"):
        read_all(path)
    assert read_all(path, skip_bad=True)[1].tolist() == labels


def test_sample_without_image_and_wrong_field_type(tmp_path):
    path = str(tmp_path / "holes-000.tar")
    with wds.TarWriter(path) as sink:
        for i in range(4):
            sample = {"__key__": f"s{i}", "cls": i}
            if i != 2:
                sample["png"] = encode(photo(i), "PNG")
            sink.write(sample)
    r = run("pack", path, str(tmp_path / "a.sat"), check=False)
    assert r.returncode == 3
    assert "holes-000.tar: sample 's2'" in r.stderr and "field 'image'" in r.stderr
    summary = json.loads(run("pack", path, str(tmp_path / "a.sat"), "--skip-bad", "--json",
                             "-q").stdout)
    assert summary["records"] == 3 and summary["skipped"] == 1

    tf = str(tmp_path / "typed.tfrecord")
    writer = tfrecord.TFRecordWriter(tf)
    for i in range(4):
        label = (i, "int") if i != 3 else (float(i), "float")
        writer.write({"image/encoded": (encode(photo(i), "JPEG"), "byte"),
                      "image/class/label": label})
    writer.close()
    r = run("pack", tf, str(tmp_path / "b.sat"), check=False)
    assert r.returncode == 3
    assert "typed.tfrecord: record 3" in r.stderr and "'image/class/label'" in r.stderr
    assert "float_list" in r.stderr


def test_first_open_draws_the_jpeg_indexing_bar_on_a_terminal(tmp_path):
    write_shards(str(tmp_path), "jpg", fmt="JPEG")
    pattern = os.path.join(str(tmp_path), "jpg-*.tar")
    script = ("import saturate, sys\n"
              "saturate.Loader(sys.argv[1], batch_size=4, framework='numpy')\n")
    first = on_terminal([sys.executable, "-c", script, pattern])
    assert "indexing JPEGs [" in first and f" {N}/{N} 100.0%" in first, first
    assert first.endswith("\r\x1b[K"), repr(first[-80:])  # the line is cleared once opened
    # The index holds the tables now: the next open has nothing to draw. (A rank that waits
    # for another one's tables makes none, so it draws nothing either: source_test's
    # AWaitingOpenerTakesTheTablesTheFirstOneSaved sees no progress call.)
    assert "indexing" not in on_terminal([sys.executable, "-c", script, pattern])
    # The CLI's feed draws the same bar on the first open.
    for name in os.listdir(str(tmp_path)):
        if name.endswith(".satidx"):
            os.remove(os.path.join(str(tmp_path), name))
    cli = on_terminal([*saturate_cmd(), "bench", "feed", pattern, "--epochs", "1", "--batch", "4"])
    assert "indexing JPEGs [" in cli and f" {N}/{N} 100.0%" in cli, cli
