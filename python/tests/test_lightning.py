"""saturate.lightning with the real PyTorch Lightning (PyPI `lightning`, on CPU): the
DataModule feeds every sample once per epoch, evaluation passes are whole, a limited
epoch does not run into the next, a run resumed mid-epoch continues with the batch after
the checkpoint's, the callback's spans and step marks match the optimizer updates, and under
DDP (2 CPU ranks, torchrun) each rank trains on its own shard.

Runs in the torch 2 line of CI (scripts/torch2-env.sh installs lightning into
.venv-torch2); elsewhere it skips, saying why.
"""

import glob
import json
import os
import pickle
import random
import resource
import shutil
import signal
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch")
try:
    import lightning.pytorch as pl
except ImportError:
    pl = pytest.importorskip(
        "pytorch_lightning", reason="PyTorch Lightning is not installed (scripts/torch2-env.sh "
        "installs `lightning` into .venv-torch2, which CI runs this file with)")

import saturate  # noqa: E402
from saturate import transforms as T  # noqa: E402
from saturate.errors import CorruptionError  # noqa: E402
from saturate.lightning import (SaturateCallback, SaturateCheckpointIO,  # noqa: E402
                                SaturateDataModule, _read_ref)

from conftest import DIGITS, HERE, run_python, torchrun_env, torchrun_job  # noqa: E402

BATCH = 10
BATCHES = -(-DIGITS // BATCH)  # 11 per epoch, the last one short


class Recorder(pl.LightningModule):
    """A linear model on the 8x8 digits that records the labels of each batch it trains
    and validates on."""

    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(64, 1)
        self.train_labels = []  # one list of ints per training batch, in order
        self.val_labels = []  # one list per validation pass

    def training_step(self, batch, batch_idx):
        self.train_labels.append(batch["label"].tolist())
        x = batch["image"].reshape(-1, 64).float() / 255
        return torch.nn.functional.mse_loss(self.layer(x).squeeze(1), batch["label"].float() / 255)

    def on_validation_epoch_start(self):
        self.val_labels.append([])

    def validation_step(self, batch, batch_idx):
        self.val_labels[-1].extend(batch["label"].tolist())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def trainer(tmp_path, **kwargs):
    args = dict(accelerator="cpu", devices=1, max_epochs=2, logger=False,
                enable_progress_bar=False, enable_model_summary=False,
                enable_checkpointing=False, default_root_dir=str(tmp_path))
    args.update(kwargs)
    return pl.Trainer(**args)


def by_epoch(batches):
    return [sorted(sum(batches[e * BATCHES:(e + 1) * BATCHES], [])) for e in range(2)]


def test_every_sample_once_per_epoch_and_whole_validation_passes(digits, tmp_path):
    data = SaturateDataModule(digits, val=digits, batch_size=BATCH, threads=2, seed=3)
    model = Recorder()
    trainer(tmp_path).fit(model, datamodule=data)

    assert len(model.train_labels) == 2 * BATCHES
    assert by_epoch(model.train_labels) == [list(range(DIGITS))] * 2
    assert model.train_labels[:BATCHES] != model.train_labels[BATCHES:]  # reshuffled
    # The sanity check reads 2 batches; every validation after it reads all, in order.
    assert [len(p) for p in model.val_labels] == [2 * BATCH, DIGITS, DIGITS]
    assert model.val_labels[1] == model.val_labels[2] == list(range(DIGITS))
    # The same order as the plain loader's epochs 0 and 1 (rank 0 of 1).
    plain = saturate.Loader(digits, BATCH, seed=3, threads=1)
    expected = [b["label"].tolist() for b in plain] + [b["label"].tolist() for b in plain]
    assert model.train_labels == expected


def test_a_limited_epoch_does_not_run_into_the_next(digits, tmp_path):
    data = SaturateDataModule(digits, batch_size=BATCH, threads=2, seed=5)
    model = Recorder()
    trainer(tmp_path, limit_train_batches=3).fit(model, datamodule=data)

    plain = saturate.Loader(digits, BATCH, seed=5, threads=1)
    first = [b["label"].tolist() for b in plain][:3]
    plain.set_epoch(1)
    second = [b["label"].tolist() for b in plain][:3]
    assert model.train_labels == first + second


@pytest.mark.parametrize("io", ["torch", "saturate"])
def test_resume_mid_epoch_continues_with_the_next_batch(digits, tmp_path, io):
    # Lightning's own checkpoint files, or saturate's asynchronous checkpoint I/O.
    plugins = (lambda: [SaturateCheckpointIO()]) if io == "saturate" else list
    # A whole run that checkpoints every 4 steps (mid-epoch: 11 batches an epoch)...
    ckpts = tmp_path / "ckpt"
    whole = Recorder()
    every4 = pl.callbacks.ModelCheckpoint(dirpath=str(ckpts), every_n_train_steps=4,
                                          save_top_k=-1, filename="{step}")
    trainer(tmp_path, enable_checkpointing=True, callbacks=[every4], plugins=plugins()).fit(
        whole, datamodule=SaturateDataModule(digits, batch_size=BATCH, threads=2, seed=7))
    assert {"step=4.ckpt", "step=12.ckpt"} <= set(os.listdir(ckpts))

    # ...and new runs, in fresh loaders, resumed from step 4 (epoch 0) and 12 (epoch 1).
    for step in (4, 12):
        resumed = Recorder()
        trainer(tmp_path, plugins=plugins()).fit(
            resumed, datamodule=SaturateDataModule(digits, batch_size=BATCH, threads=2, seed=7),
            ckpt_path=str(ckpts / f"step={step}.ckpt"))
        assert resumed.train_labels == whole.train_labels[step:], step


def refs(ckpts):
    """{name: the step directory it names} of the reference files in ckpts (torch.save
    files left out)."""
    out = {}
    for name in os.listdir(ckpts):
        target = _read_ref(str(ckpts / name)) if name.endswith(".ckpt") else None
        if target is not None:
            out[name] = target
    return out


def test_checkpoint_io_keeps_what_lightning_keeps_and_resumes_from_last(digits, tmp_path):
    """Top-k eviction and last.ckpt under SaturateCheckpointIO: the .ckpt names Lightning
    keeps, each naming committed data, nothing else left in the store, and a resume from
    "last" continuing with the batch after it."""
    ckpts = tmp_path / "ckpt"
    whole = Recorder()
    best2 = pl.callbacks.ModelCheckpoint(dirpath=str(ckpts), every_n_train_steps=3,
                                         monitor="step", mode="max", save_top_k=2,
                                         save_last=True, filename="{step}")
    trainer(tmp_path, enable_checkpointing=True, callbacks=[best2],
            plugins=[SaturateCheckpointIO()]).fit(
        whole, datamodule=SaturateDataModule(digits, batch_size=BATCH, threads=2, seed=5))
    names = refs(ckpts)
    assert set(names) == {"step=18.ckpt", "step=21.ckpt", "last.ckpt"}, names
    store = ckpts / ".saturate-checkpoints"
    assert set(os.listdir(ckpts)) == set(names) | {store.name}
    assert sorted(os.listdir(store)) == sorted(os.path.basename(d) for d in names.values())

    io = SaturateCheckpointIO()
    last = io.load_checkpoint(ckpts / "last.ckpt")
    assert last["global_step"] == 21
    same = io.load_checkpoint(ckpts / "step=21.ckpt")
    assert torch.equal(last["state_dict"]["layer.weight"], same["state_dict"]["layer.weight"])
    # The usual way to a trained model for inference reads the .ckpt with torch.load: it gets
    # the checkpoint the reference names (weights_only=False: the reference is a call).
    model = Recorder.load_from_checkpoint(ckpts / "last.ckpt", weights_only=False)
    assert torch.equal(model.layer.weight, last["state_dict"]["layer.weight"])

    resumed = Recorder()
    trainer(tmp_path, plugins=[SaturateCheckpointIO()], enable_checkpointing=True,
            callbacks=[pl.callbacks.ModelCheckpoint(dirpath=str(ckpts))]).fit(
        resumed, datamodule=SaturateDataModule(digits, batch_size=BATCH, threads=2, seed=5),
        ckpt_path="last")
    assert resumed.train_labels == whole.train_labels[21:]


def test_sigkill_mid_fit_leaves_every_ckpt_whole_and_resumes_from_the_newest(tmp_path):
    """A fit saving every step (top-2 and last.ckpt) through SaturateCheckpointIO, killed with
    SIGKILL at random points, 3 times: after each kill every .ckpt loads (checksums verified),
    and the next run starts from the step last.ckpt names; the store holds only named data
    once a run has saved. (Not named kill_9: CI's torch 2 line, the only one with Lightning,
    leaves those out.)"""
    ckpts = tmp_path / "ckpt"
    rng = random.Random(11)
    resumed_at = 0
    for kill in range(3):
        proc = subprocess.Popen([sys.executable, os.path.join(HERE, "lightning_kill_worker.py"),
                                 str(ckpts)], env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                                     sys.path)), stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True)
        lines = (line.split() for line in proc.stdout)
        start = next(int(w[1]) for w in lines if w and w[0] == "start")
        assert start == resumed_at, (kill, start, resumed_at)
        stepped = next(int(w[1]) for w in lines if w and w[0] == "step" and int(w[1]) >= start + 4)
        time.sleep(rng.uniform(0.0, 0.2))  # the random kill point, saves under way
        proc.kill()
        proc.communicate(timeout=60)
        io = SaturateCheckpointIO()
        names = refs(ckpts)
        assert "last.ckpt" in names, names
        steps = {name: io.load_checkpoint(ckpts / name)["global_step"] for name in names}
        # Newer than where this run started: saves of 4 steps and more were issued before the
        # kill, and each waits for the write 2 saves before it (max_in_flight=2).
        assert start < steps["last.ckpt"] <= max(steps.values()), (kill, start, steps, stepped)
        resumed_at = steps["last.ckpt"]
        named = {os.path.basename(d) for d in names.values()}
        assert named <= set(os.listdir(ckpts / ".saturate-checkpoints"))


FABRIC_SAVES = """
import sys, torch
from lightning.fabric import Fabric
from saturate.lightning import SaturateCheckpointIO
fabric = Fabric(accelerator="cpu", devices=1, plugins=[SaturateCheckpointIO()])
model = fabric.setup(torch.nn.Linear(512, 512))
for step in range(1, 4):
    with torch.no_grad():
        model.weight.fill_(step)
    fabric.save(sys.argv[1], {"model": model, "step": step})
"""  # and exits: nothing calls the plugin's teardown


def test_fabric_saves_are_whole_when_the_script_just_exits(tmp_path):
    """Fabric (and trainer.save_checkpoint outside fit) never call teardown: the exit waits
    for the writes and references. A reference's temp file left by a cut job goes at the
    next run's first save."""
    path = tmp_path / "last.ckpt"
    (tmp_path / "last.ckpt.tmp-99999").write_bytes(b"{")  # a reference cut mid-write
    done = run_python(["-c", FABRIC_SAVES, str(path)])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "leak" not in done.stderr, done.stderr[-3000:]
    state = SaturateCheckpointIO().load_checkpoint(path)
    assert state["step"] == 3 and bool((state["model"]["weight"] == 3).all())
    assert set(os.listdir(tmp_path)) == {"last.ckpt", ".saturate-checkpoints"}
    assert len(os.listdir(tmp_path / ".saturate-checkpoints")) == 1  # the two older: dropped


def test_checkpoint_io_reference_files_name_whole_checkpoints(tmp_path):
    """A .ckpt is a reference written after its data committed; overwriting one drops the
    data it named; a missing or damaged checkpoint is an error naming the .ckpt; a
    torch.save file still loads (a run started without the plugin resumes with it)."""
    io = SaturateCheckpointIO()
    path = tmp_path / "a.ckpt"
    io.save_checkpoint({"w": torch.arange(6.0), "global_step": 1}, path)
    io.save_checkpoint({"w": torch.arange(6.0) * 2, "global_step": 2}, path)
    io.teardown()
    assert torch.equal(io.load_checkpoint(path)["w"], torch.arange(6.0) * 2)
    store = tmp_path / ".saturate-checkpoints"
    assert os.listdir(store) == ["step-1"]  # step-0, overwritten, is gone

    # torch.load follows the reference when it may run code (weights_only=False); the
    # weights-only default refuses, naming the call to allow. A copy of the directory loads
    # through the plugin (beside the .ckpt), not through torch.load once the original is gone.
    assert torch.equal(torch.load(path, weights_only=False)["w"], torch.arange(6.0) * 2)
    with pytest.raises(pickle.UnpicklingError, match="saturate.checkpoint._load_reference"):
        torch.load(path, weights_only=True)
    moved = tmp_path.parent / (tmp_path.name + "-moved")
    shutil.copytree(tmp_path, moved)
    shutil.move(store, tmp_path / "gone")
    assert torch.equal(io.load_checkpoint(moved / "a.ckpt")["w"], torch.arange(6.0) * 2)
    with pytest.raises(CorruptionError, match="step-1, which is missing; if the directory was"):
        torch.load(moved / "a.ckpt", weights_only=False)
    shutil.move(tmp_path / "gone", store)

    with open(store / "step-1" / "tensors.bin", "r+b") as f:
        f.write(b"\xff")
    with pytest.raises(CorruptionError, match="a.ckpt.*tensors.bin"):
        io.load_checkpoint(path)
    io.remove_checkpoint(path)
    assert os.listdir(tmp_path) == [store.name] and os.listdir(store) == []

    io.save_checkpoint({"w": torch.ones(2)}, path)
    io.teardown()
    [step] = os.listdir(store)
    (store / step / "manifest.json").unlink()  # e.g. a store copied without it
    with pytest.raises(CorruptionError, match="a.ckpt.*manifest.json: missing"):
        io.load_checkpoint(path)

    with pytest.raises(ValueError, match="s3://b/c.ckpt: local paths only"):
        io.save_checkpoint({"w": torch.ones(1)}, "s3://b/c.ckpt")

    plain = tmp_path / "plain.ckpt"
    torch.save({"w": torch.full((2,), 7.0)}, plain)
    assert torch.equal(io.load_checkpoint(plain)["w"], torch.full((2,), 7.0))

    # Data committed by a job that ended before writing its reference is named by no .ckpt:
    # the next run's first save in that directory removes it.
    orphan = saturate.Checkpointer(store, keep=100)
    orphan.save({"w": torch.ones(3)}, 50)
    orphan.close()
    io.save_checkpoint({"w": torch.ones(2)}, tmp_path / "next.ckpt")
    io.teardown()
    assert "step-50" not in os.listdir(store)
    assert sorted(os.listdir(store)) == sorted(os.path.basename(d) for d in refs(tmp_path).values())

    # A write that fails (files capped at 1 MiB) leaves the .ckpt naming the checkpoint
    # before it, and teardown (the end of fit) raises it.
    good = tmp_path / "good.ckpt"
    io.save_checkpoint({"w": torch.ones(4)}, good)
    io.teardown()
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    old_limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, old_limit[1]))
    try:
        io.save_checkpoint({"w": torch.zeros(1 << 20)}, good)
        with pytest.raises(saturate.errors.IOError, match="tensors.bin.*too large"):
            io.teardown()
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old_limit)
        signal.signal(signal.SIGXFSZ, old_handler)
    assert torch.equal(io.load_checkpoint(good)["w"], torch.ones(4))


def test_lightning_holds_one_large_batch_at_a_time(photos, tmp_path):
    """48x48 RGB crops, 6 a batch: 41 KiB views of the loader's buffers (the lifetime rule
    applies). With max_held_batches=1, any batch Lightning kept alive past its step would
    make the next one raise."""

    class Photos(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(3, 3)
            self.sizes = []

        def training_step(self, batch, batch_idx):
            x = batch["image"]
            self.sizes.append(tuple(x.shape))
            return self.layer(x.float().mean(dim=(2, 3))).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    data = SaturateDataModule(photos, batch_size=6, threads=2, max_held_batches=1, prefetch=1,
                              transforms={"image": [T.RandomResizedCrop(48)]})
    model = Photos()
    trainer(tmp_path).fit(model, datamodule=data)
    assert model.sizes == [(6, 3, 48, 48)] * 12  # 36 photos, 2 epochs


def test_callback_records_phases_and_one_step_per_update(digits, tmp_path):
    run = tmp_path / "run"
    callback = SaturateCallback(run, watch=True, watch_interval=0.002)  # the fit takes ~40 ms
    model = Recorder()
    trainer(tmp_path, accumulate_grad_batches=2, callbacks=[callback]).fit(
        model, datamodule=SaturateDataModule(digits, batch_size=BATCH, threads=2))
    assert not saturate.trace.enabled()  # it stopped what it started

    updates = 2 * -(-BATCHES // 2)  # 6 per epoch: the epoch's last, odd batch steps too
    assert callback.steps == updates
    events = []
    for path in glob.glob(str(run / "spans-*.jsonl")):
        with open(path) as f:
            events += [json.loads(line) for line in f]
    spans = {}
    for e in events:
        if e["ph"] == "X" and e["cat"] == "user":
            spans[e["name"]] = spans.get(e["name"], 0) + 1
    assert spans == {"forward": 2 * BATCHES, "backward": 2 * BATCHES, "optimizer": updates}
    steps = [e["step"] for e in events if e["ph"] == "step"]
    assert steps == list(range(steps[0], steps[0] + updates))  # numbered per process
    waits = [e for e in events if e["ph"] == "X" and e["name"] == "data_wait"]
    assert len(waits) >= 2 * BATCHES  # the loader's own spans
    # watch=True: the samples of this process beside the spans.
    with open(run / "meta.json") as f:
        meta = json.load(f)
    assert meta["pid"] == os.getpid() and meta["exit_code"] == 0
    with open(run / "samples.jsonl") as f:
        assert len(f.readlines()) == meta["samples"] > 0


def test_ddp_ranks_each_read_their_own_shard(digits, tmp_path):
    """Lightning's DDP over 2 CPU processes (torchrun, Gloo on 127.0.0.1): each rank's loader,
    made when Lightning asks for it, takes its rank from torch.distributed and trains on
    its shard, as saturate splits it without Lightning; the replicas stay equal. Rank 0 alone
    writes the checkpoints through SaturateCheckpointIO, and the last holds the final model."""
    out = tmp_path / "out"
    out.mkdir()
    done = subprocess.run(torchrun_job(2, os.path.join(HERE, "lightning_worker.py"), digits,
                                       str(out)),
                          env=torchrun_env(tmp_path), capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    ranks = []
    for rank in range(2):
        with open(out / f"rank{rank}.json") as f:
            ranks.append(json.load(f))
    per_rank = -(-DIGITS // 2)
    batches = -(-per_rank // 8)
    for rank, r in enumerate(ranks):
        assert (r["global_rank"], r["world_size"]) == (rank, 2)
        assert r["loader"] == [rank, 2, batches]
        shard = saturate.Loader(digits, 8, seed=3, rank=rank, world_size=2, threads=1)
        expected = [b["label"].tolist() for b in shard] + [b["label"].tolist() for b in shard]
        assert r["labels"] == expected, rank
        assert r["steps"] == 2 * batches
    assert ranks[0]["weight_sum"] == ranks[1]["weight_sum"]
    ckpts = out / "ckpt"
    assert set(refs(ckpts)) == {f"epoch=1-step={2 * batches}.ckpt", "last.ckpt"}, refs(ckpts)
    last = SaturateCheckpointIO().load_checkpoint(ckpts / "last.ckpt")
    assert last["global_step"] == 2 * batches
    assert float(last["state_dict"]["layer.weight"].double().sum()) == ranks[0]["weight_sum"]
