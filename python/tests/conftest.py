"""Shared fixtures: small datasets packed with saturate.pack, once per session.

- photos: an ImageFolder of 36 JPEGs of varying sizes in 3 classes.
- digits: an IDX pair of 101 uint8[8, 8] "images" whose label is the record
  index mod 256, so a label identifies its sample (ranks, resume).

And the second interpreter multi-rank tests need: torch2_python() (PyPI torch
>= 2, whose torchrun works; Debian's torch 1.13 torchrun does not start under
Python 3.11) and saturate_path(), an import path that adds only this saturate
package to it.
"""

import gzip
import importlib.util
import os
import pty
import signal
import socket
import struct
import subprocess
import sys
import time

import numpy as np
import pytest

import saturate

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DIGITS = 101
TORCH2_DEFAULT = os.path.join(REPO, ".venv-torch2", "bin", "python")


def write_idx(path, array):
    """An MNIST-style IDX file (gzip'd) holding a uint8 array."""
    header = struct.pack(">HBB", 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


def synthetic_photo(i, h, w, seed=0):
    """A photo-like RGB image (h, w, 3) uint8: smooth gradients plus noise, different per i."""
    rng = np.random.default_rng(seed + i)
    y, x = np.mgrid[0:h, 0:w]
    rgb = np.stack([(x * (i % 5 + 2)) % 256, (y * (i % 7 + 3)) % 256, (x + y + 9 * i) % 256], -1)
    return (rgb + rng.integers(0, 24, rgb.shape)).clip(0, 255).astype(np.uint8)


def encode_image(rgb, fmt):
    """`rgb` as JPEG (quality 92) or PNG bytes, written by PIL."""
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(rgb).save(out, format=fmt, **({"quality": 92} if fmt == "JPEG" else {}))
    return out.getvalue()


def read_labels(loader, batches=None):
    """The labels of `loader`'s next epoch as a list, or of its next `batches` batches."""
    out = []
    for i, batch in enumerate(loader):
        out += batch["label"].tolist()
        if batches is not None and i + 1 == batches:
            break
    return out


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


def load_module(name, path):
    """The Python file at PATH as a module named NAME (bench/ scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_python(args, env=None, timeout=120, **kwargs):
    """Runs `python ARGS` (argv, never a shell) with this interpreter and import path."""
    full_env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), **(env or {}))
    return subprocess.run(
        [sys.executable, *args], env=full_env, timeout=timeout, capture_output=True, text=True,
        **kwargs,
    )


def saturate_cmd():
    """The saturate command line tool: $SATURATE_CLI (a build tree's binary,
    while developing), else the one bundled with the installed package."""
    if os.environ.get("SATURATE_CLI"):
        return [os.environ["SATURATE_CLI"]]
    exe = os.path.join(os.path.dirname(os.path.abspath(saturate.__file__)), "bin", "saturate")
    return [exe] if os.access(exe, os.X_OK) else [sys.executable, "-m", "saturate"]


def torch2_python():
    """The torch >= 2 interpreter for torchrun: $SATURATE_TORCH2_PYTHON (scripts/test.sh
    sets it; a missing one fails), else REPO/.venv-torch2/bin/python (scripts/torch2-env.sh
    makes it), else the test skips."""
    path = os.environ.get("SATURATE_TORCH2_PYTHON")
    if path:
        assert os.access(path, os.X_OK), (
            f"SATURATE_TORCH2_PYTHON={path} is not an executable; run scripts/torch2-env.sh")
        return path
    if not os.access(TORCH2_DEFAULT, os.X_OK):
        pytest.skip(f"no torch 2 environment at {TORCH2_DEFAULT} (scripts/torch2-env.sh makes it; "
                    "CI sets SATURATE_TORCH2_PYTHON)")
    return TORCH2_DEFAULT


def torchrun(python):
    """torchrun of that interpreter's environment, as a command prefix."""
    exe = os.path.join(os.path.dirname(python), "torchrun")
    return [exe] if os.access(exe, os.X_OK) else [python, "-m", "torch.distributed.run"]


def torchrun_job(nproc, script, *args):
    """The real torchrun, one node, NPROC ranks, its rendezvous and every rank on
    127.0.0.1, running SCRIPT ARGS under the torch 2 interpreter."""
    return [*torchrun(torch2_python()), "--nnodes=1", f"--nproc_per_node={nproc}",
            "--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.1:{free_port()}",
            "--local_addr=127.0.0.1", "--max_restarts=0", script, *args]


def torchrun_env(tmp_path):
    """This environment without launcher, Slurm or saturate variables, with only this
    saturate on PYTHONPATH, Gloo on the loopback and one OpenMP thread per rank."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SATURATE_", "SLURM_", "TORCHELASTIC_"))
           and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    # PYTHONFAULTHANDLER: a rank that dies of a signal prints every thread's Python stack.
    env.update(PYTHONPATH=saturate_path(tmp_path / "pythonpath"), GLOO_SOCKET_IFNAME="lo",
               OMP_NUM_THREADS="1", PYTHONFAULTHANDLER="1")
    return env


def start_torchrun(tmp_path, cmd):
    """Starts `cmd` (a torchrun job) in its own process group, output to a log in tmp_path:
    (process, log path)."""
    log = tmp_path / f"job-{time.monotonic_ns()}.log"
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, env=torchrun_env(tmp_path), stdout=f, stderr=subprocess.STDOUT,
                                start_new_session=True)
    return proc, log


def kill_group(proc):
    """SIGKILL to a start_torchrun() job's whole process group."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def saturate_path(directory):
    """A folder holding only a link to the saturate package this test imports, for
    PYTHONPATH of another CPython of the same version (the torch 2 venv): it adds
    saturate (with its compiled module) and nothing else of this environment."""
    os.makedirs(directory, exist_ok=True)
    link = os.path.join(directory, "saturate")
    if not os.path.islink(link):
        os.symlink(os.path.dirname(os.path.abspath(saturate.__file__)), link)
    return str(directory)


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape_watch_until(proc, port, done, timeout=60):
    """The /metrics page of the `saturate watch --prometheus PORT` running as PROC
    once done(page) holds (else the last one read at TIMEOUT s); stops PROC with
    SIGINT either way."""
    import urllib.request

    page = ""
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"saturate watch exited: {proc.stderr.read()}"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    page = r.read().decode()
            except OSError:
                page = ""
            if done(page):
                break
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return page


def fake_nvml():
    """The test-only fake libnvidia-ml (src/watch/testing/fake_nvml.cc) for exporters on a
    machine without a GPU: $SATURATE_FAKE_NVML (scripts/test.sh sets it; a missing one
    fails), else REPO/build/ci's, else the test skips."""
    path = os.environ.get("SATURATE_FAKE_NVML")
    if path:
        assert os.path.exists(path), f"SATURATE_FAKE_NVML={path} does not exist"
        return path
    path = os.path.join(REPO, "build", "ci", "src", "watch", "libfake_nvml.so")
    if not os.path.exists(path):
        pytest.skip(f"no fake NVML library at {path} (build the tree: cmake --build build/ci)")
    return path


def on_terminal(argv, env=None):
    """Runs argv with stderr on a pseudo-terminal (as in a user's shell); returns stderr."""
    main, child = pty.openpty()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=child, env=env)
    os.close(child)
    out = b""
    while True:
        try:
            chunk = os.read(main, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(main)
    assert proc.wait(timeout=120) == 0, out.decode(errors="replace")
    return out.decode(errors="replace")

