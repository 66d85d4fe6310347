"""Checkpoints in object storage (issue 30, point 4): saturate.Checkpointer and
DistCheckpointer with an s3:// destination, against a real SeaweedFS S3 server
on 127.0.0.1 started by this module (test_remote.py's fixture: an identity, so
signatures are checked). If SeaweedFS cannot start, the tests say why and skip.

- one process: save/load round trip with multipart uploads (parts of 5 MiB),
  keep-last-N deleting old objects, a corrupted object falling back to the
  previous checkpoint with a warning, an upload cut before its manifest ignored;
- wrong credentials and a missing bucket: errors naming the bucket (and key),
  never the secret;
- torchrun (torch >= 2, gloo): save at 2 ranks to s3, load at 3 ranks and whole in
  this process, every tensor compared; kill -9 of a rank in a save loop with
  multipart shard uploads: the newest committed checkpoint loads with exactly its
  step's values.
"""

import json
import os
import random
import signal
import sys
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import saturate  # noqa: E402
from saturate import _core  # noqa: E402
from saturate import dist_checkpoint as dc  # noqa: E402
from saturate.checkpoint import CheckpointWarning  # noqa: E402
from saturate.errors import CorruptionError, IOError as SatIOError, NotFoundError  # noqa: E402

from conftest import HERE, kill_group, start_torchrun as start, torchrun_job  # noqa: E402
from test_remote import BUCKET, SECRET, s3  # noqa: E402,F401 - the SeaweedFS fixture

WORKER = os.path.join(HERE, "checkpoint_dist_worker.py")
TIMEOUT = 180
sys.path.insert(0, HERE)
import checkpoint_dist_worker as W  # noqa: E402

MIB = 1 << 20


def url(name):
    return f"s3://{BUCKET}/{name}-{time.monotonic_ns()}"


def objects(location):
    return sorted(_core.ObjectStore(location).list())


def state_at(step):
    g = torch.Generator().manual_seed(step)
    return {"big": torch.randn(3 * MIB, generator=g),  # 12 MiB: a multipart upload
            "layer": {"w": torch.nn.Parameter(torch.full((7, 3), float(step))),
                      "half": torch.arange(10, dtype=torch.bfloat16)},
            "np": np.arange(step, step + 5, dtype=np.int64), "step": step, "note": "x" * step}


def assert_state(got, step):
    want = state_at(step)
    assert torch.equal(got["big"], want["big"])
    assert isinstance(got["layer"]["w"], torch.nn.Parameter)
    assert torch.equal(got["layer"]["w"], want["layer"]["w"])
    assert torch.equal(got["layer"]["half"], want["layer"]["half"])
    assert np.array_equal(got["np"], want["np"])
    assert got["step"] == step and got["note"] == "x" * step


def test_checkpointer_round_trip_multipart_retention_and_fallback(s3):
    loc = url("single")
    assert saturate.Checkpointer.load(loc) is None  # nothing there: a fresh start
    with saturate.Checkpointer(loc, keep=2, multipart_threshold_bytes=5 * MIB,
                               part_bytes=5 * MIB) as ckpt:
        for step in (1, 2, 3):
            ckpt.save(state_at(step), step)
        ckpt.wait()
        assert ckpt.stats()["commits"] == 3
    assert [s for s, _ in saturate.Checkpointer.list(loc)] == [3, 2]  # keep=2
    assert not [n for n in objects(loc) if n.startswith("step-1/")]   # step 1's objects gone
    key = loc[len("s3://"):] + "/step-3/tensors.bin"
    head = s3.curl("-I", f"{s3.endpoint}/{key}").stdout.decode().lower()
    assert '-3"' in head.split("etag:")[1].splitlines()[0], head  # multipart: 3 parts
    state, info = saturate.Checkpointer.load(loc, info=True)
    assert info["step"] == 3 and info["path"] == f"{loc}/step-3"
    assert_state(state, 3)
    state["big"].add_(1)  # a loaded tensor is the caller's to modify
    assert saturate.Checkpointer.verify(f"{loc}/step-3")["step"] == 3

    # A corrupted object: load names it, skips that checkpoint and returns the previous one.
    store = _core.ObjectStore(loc)
    store.put("step-3/tensors.bin", b"\0" * 1024)
    with pytest.warns(CheckpointWarning, match=r"step-3/tensors\.bin"):
        state, info = saturate.Checkpointer.load(loc, info=True)
    assert info["step"] == 2
    assert_state(state, 2)
    with pytest.raises(CorruptionError, match="step-3/tensors.bin"):
        saturate.Checkpointer.verify(f"{loc}/step-3")
    # One checkpoint by its own prefix: that one, verified (no fallback to another).
    state, info = saturate.Checkpointer.load(f"{loc}/step-2", info=True)
    assert info["step"] == 2 and info["path"] == f"{loc}/step-2"
    assert_state(state, 2)
    with pytest.raises(CorruptionError, match="step-3/tensors.bin"):
        saturate.Checkpointer.load(f"{loc}/step-3")

    # An upload cut before its manifest (a crash mid-save) is ignored with a warning.
    store.put("step-9/tensors.bin", b"partial")
    with pytest.warns(CheckpointWarning, match="step-9: incomplete"):
        assert saturate.Checkpointer.load(loc, info=True)[1]["step"] == 2

    # Re-saving a committed step replaces it whole.
    with saturate.Checkpointer(loc, keep=5) as ckpt:
        ckpt.save(state_at(3), 3)
    assert_state(saturate.Checkpointer.load(loc), 3)


def test_wrong_credentials_and_missing_bucket_name_them_never_the_secret(s3):
    wrong = "wrong-secret-value-123"
    os.environ["AWS_SECRET_ACCESS_KEY"] = wrong
    try:
        loc = url("denied")
        with pytest.raises(SatIOError) as e:
            saturate.Checkpointer(loc)
        msg = str(e.value)
        assert f"s3://{BUCKET}" in msg and "access denied" in msg and loc in msg, msg
        assert wrong not in msg and SECRET not in msg
        with pytest.raises(SatIOError) as e:
            _core.ObjectStore(loc).put("step-1/manifest.json", b"{}")
        assert f"{loc}/step-1/manifest.json" in str(e.value) and wrong not in str(e.value)
    finally:
        os.environ["AWS_SECRET_ACCESS_KEY"] = SECRET
    with pytest.raises(NotFoundError, match="bucket 'no-such-bucket' does not exist"):
        saturate.Checkpointer("s3://no-such-bucket/ckpt")


# ---- torchrun ----


def run(tmp_path, *args):
    proc, log = start(tmp_path, torchrun_job(*args))
    try:
        rc = proc.wait(timeout=TIMEOUT)
    finally:
        kill_group(proc)
    assert rc == 0, f"exit {rc}\n{log.read_text()[-4000:]}"


def test_dist_save_at_2_ranks_to_s3_load_at_3_and_whole(s3, tmp_path):
    loc, out = url("dist"), tmp_path / "out"
    out.mkdir()
    run(tmp_path, 2, WORKER, "save", loc, str(out), "--steps", "3")
    assert [s for s, _ in dc.list_checkpoints(loc)] == [3, 2]  # keep=2
    names = objects(loc)
    assert "step-3.manifest.json" in names and "step-1.manifest.json" not in names
    assert not [n for n in names if "/step-1/" in n], names  # retention removed the rank objects
    manifest = json.loads(_core.ObjectStore(loc).get("step-3.manifest.json"))
    assert manifest["world_size"] == 2 and [r["dir"] for r in manifest["ranks"]] == \
        ["rank-0/step-3", "rank-1/step-3"]

    run(tmp_path, 3, WORKER, "load", loc, str(out))
    loaded = [json.loads((out / f"load-rank{r}.json").read_text()) for r in range(3)]
    assert [x["step"] for x in loaded] == [3, 3, 3] and loaded[0]["saved_world"] == 2
    assert all(len(x["checked"]) == 8 for x in loaded)

    state, info = dc.load(loc, rank=1, info=True)  # whole, one process
    assert info["step"] == 3 and info["world_size"] == 2
    exp = W.expected(3)
    flat = {"model/dt": state["model"]["dt"], "model/dt_rep": state["model"]["dt_rep"],
            "model/emb": state["model"]["emb"], "model/st": state["model"]["st"],
            "bias": state["bias"], "half": state["half"], "param": state["param"],
            "np": state["np"]}
    for name, want in exp.items():
        got = flat[name]
        if isinstance(want, np.ndarray):
            assert np.array_equal(got, want), name
        else:
            assert got.dtype == want.dtype and torch.equal(got, want), name
    assert state["note"] == "rank1"

    # A rank object corrupted after the commit: loading it names the object.
    store = _core.ObjectStore(loc)
    shard = next(s for s in manifest["tensors"]["model/dt"]["shards"] if s["rank"] == 1)
    store.put(shard["file"], b"\0" * 64)
    with pytest.raises(CorruptionError, match=shard["file"].replace(".", r"\.")):
        dc.load(loc, step=3)


def wait_for(paths, proc, log):
    deadline = time.monotonic() + TIMEOUT
    while not all(os.path.exists(p) for p in paths):
        assert proc.poll() is None, f"exit {proc.returncode}\n{log.read_text()[-4000:]}"
        assert time.monotonic() < deadline, log.read_text()[-4000:]
        time.sleep(0.02)


def test_kill_9_of_a_rank_mid_upload_leaves_a_loadable_previous_checkpoint(s3, tmp_path):
    seed = int(os.environ.get("SATURATE_KILL_SEED", random.randrange(1 << 30)))
    print(f"kill seed {seed} (SATURATE_KILL_SEED={seed} repeats it)")
    rng = random.Random(seed)
    scale = 100000  # model/dt: 1,000,000 x 6 float32: 12 MB per rank, 3 parts of 5 MiB
    for trial in range(2):
        loc, out = url(f"kill{trial}"), tmp_path / f"out{trial}"
        out.mkdir()
        proc, log = start(tmp_path, torchrun_job(2, WORKER, "loop", loc, str(out), "--scale",
                                                 str(scale), "--part-mib", "5"))
        try:
            wait_for([out / "first-rank0.json", out / "first-rank1.json",
                      out / "pid-rank0.json", out / "pid-rank1.json"], proc, log)
            victim = rng.randrange(2)
            delay = rng.uniform(0.0, 2.0)
            time.sleep(delay)
            pid = json.loads((out / f"pid-rank{victim}.json").read_text())["pid"]
            os.kill(pid, signal.SIGKILL)
            proc.wait(timeout=TIMEOUT)
        finally:
            kill_group(proc)
        steps = [s for s, _ in dc.list_checkpoints(loc)]
        uncommitted = sorted({n.split("/")[1] for n in objects(loc) if n.startswith("rank-")}
                             - {f"step-{s}" for s in steps})
        print(f"trial {trial}: killed rank {victim} after {delay:.3f} s; manifests {steps}; "
              f"rank steps without a manifest: {uncommitted}")
        state, info = dc.load(loc, info=True)
        assert info["step"] == steps[0] >= 1, (trial, victim, delay, steps)
        exp = W.expected(info["step"], scale)
        assert torch.equal(state["model"]["dt"], exp["model/dt"]), (trial, victim, delay)
        assert torch.equal(state["model"]["emb"], exp["model/emb"])
        assert torch.equal(state["half"], exp["half"]) and np.array_equal(state["np"], exp["np"])
        for step in steps[1:]:
            assert dc.load(loc, step=step, info=True)[1]["step"] == step
