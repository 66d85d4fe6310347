"""saturate with the real Hugging Face Accelerate (PyPI `accelerate`): two CPU processes
under `accelerate launch` (Gloo on 127.0.0.1). accelerator.prepare() hands the loader back
untouched, each rank reads its own shard (the loader's split, as when made without
Accelerate), the ranks train in step, and accelerator.save_state/load_state resume every
rank's shard at the saved batch in new processes, ending with the same weights.

Runs in the torch 2 line of CI (scripts/torch2-env.sh installs accelerate into
.venv-torch2); elsewhere it skips, saying why.
"""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("accelerate", reason="Hugging Face Accelerate is not installed "
                    "(scripts/torch2-env.sh installs it into .venv-torch2, which CI runs this file with)")

import saturate  # noqa: E402

from conftest import DIGITS, HERE, free_port, torchrun_env  # noqa: E402

WORKER = os.path.join(HERE, "accelerate_worker.py")
BATCH, SEED, SAVE_AFTER = 8, 11, 3  # as in accelerate_worker.py


def launch(digits, out_dir, phase, tmp_path):
    accelerate = os.path.join(os.path.dirname(sys.executable), "accelerate")
    if not os.access(accelerate, os.X_OK):
        pytest.skip(f"no accelerate command beside {sys.executable}")
    env = torchrun_env(tmp_path)
    env["HF_HOME"] = str(tmp_path / "hf")  # no user's accelerate config
    cmd = [accelerate, "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
           "--machine_rank", "0", "--main_process_ip", "127.0.0.1",
           "--main_process_port", str(free_port()), "--mixed_precision", "no",
           "--dynamo_backend", "no", WORKER, digits, str(out_dir), phase]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    reports = []
    for rank in range(2):
        with open(out_dir / f"rank{rank}-{phase}.json") as f:
            reports.append(json.load(f))
    return reports


def test_two_ranks_shard_train_and_resume(digits, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    trained = launch(digits, out, "train", tmp_path)

    per_rank = -(-DIGITS // 2)  # 51: the short rank repeats a sample (drop_uneven=False)
    batches = -(-per_rank // BATCH)
    for rank, r in enumerate(trained):
        assert r["distributed_type"] == "DistributedType.MULTI_CPU" and r["backend"] == "gloo"
        assert (r["process_index"], r["num_processes"]) == (rank, 2)
        assert r["prepare_returned_the_loader"]
        assert r["loader"] == [rank, 2, batches]
        assert r["plain_loader"] == [rank, 2]  # from torch.distributed, as Accelerate set it up
        # The rank's shard, epoch by epoch, as saturate splits it without Accelerate.
        shard = saturate.Loader(digits, BATCH, seed=SEED, rank=rank, world_size=2, threads=1)
        for epoch in range(2):
            shard.set_epoch(epoch)
            assert r["epochs"][str(epoch)] == [b["label"].tolist() for b in shard], (rank, epoch)
    for epoch in ("0", "1"):
        seen = [sum(r["epochs"][epoch], []) for r in trained]
        assert len(seen[0]) == len(seen[1]) == per_rank
        assert sorted(set(seen[0]) | set(seen[1])) == list(range(DIGITS))
        assert len(set(seen[0]) & set(seen[1])) == 2 * per_rank - DIGITS  # the one padded
    # DDP kept the replicas equal.
    assert trained[0]["weights_sum"] == trained[1]["weights_sum"]

    resumed = launch(digits, out, "resume", tmp_path)
    for t, r in zip(trained, resumed):
        assert r["epochs"] == {"1": t["epochs"]["1"][SAVE_AFTER:]}
        assert r["weights_sum"] == pytest.approx(t["weights_sum"], rel=1e-6)
