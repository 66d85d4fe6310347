"""The loader across ranks under the real torchrun (torch >= 2, gloo on CPU, loopback).

dist_worker.py is each rank: it joins the process group and builds the Loader with
RANK/WORLD_SIZE removed, so the sharding comes from torch.distributed. The sample
count (101) is divisible by neither world size tried (2, 3).
- shard: padding (the default) covers every sample, ranks overlap only in the
  repeated padding; drop_uneven drops exactly the tail of the epoch's order; equal
  batch counts on every rank either way.
- resume: each rank saves its state after K batches, the job is terminated (as a
  preempted job is), a second torchrun of the same size restores and finishes; per
  rank the two halves equal the uninterrupted run exactly.
Needs the torch 2 environment (conftest.torch2_python: skipped locally without it).
"""

import json
import os
import signal
import subprocess
import time

import pytest

import saturate

from conftest import DIGITS, HERE, torchrun_env, torchrun_job

WORKER = os.path.join(HERE, "dist_worker.py")
TIMEOUT = 120


def torchrun_cmd(nproc, *worker_args):
    return torchrun_job(nproc, WORKER, *worker_args)


def start(tmp_path, nproc, *worker_args):
    """torchrun in its own process group (so the test can always end all of it),
    its output in a log file; returns (Popen, log path)."""
    log = tmp_path / f"torchrun-{time.monotonic_ns()}.log"
    with open(log, "w") as f:
        proc = subprocess.Popen(torchrun_cmd(nproc, *worker_args), env=torchrun_env(tmp_path),
                                stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
    return proc, log


def finish(proc, timeout=TIMEOUT):
    """Waits for the job; if it overstays, kills its whole process group (ours)."""
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise


def run_job(tmp_path, nproc, *worker_args):
    proc, log = start(tmp_path, nproc, *worker_args)
    try:
        rc = finish(proc)
    finally:
        kill_group(proc)
    assert rc == 0, f"torchrun exit {rc}\n{log.read_text()[-4000:]}"


def kill_group(proc):
    """Nothing of this job outlives the test (torchrun's group, started by us)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def read(out, tag, nproc):
    ranks = [json.loads((out / f"{tag}-rank{r}.json").read_text()) for r in range(nproc)]
    for r, info in enumerate(ranks):
        assert info["rank"] == r and info["world_size"] == nproc
        assert int(info["torch"].split(".")[0]) >= 2, info["torch"]
        env = info["launcher_env"]  # set by torchrun (elastic agent), not by this test
        assert env["RANK"] == str(r) and env["WORLD_SIZE"] == str(nproc), env
        assert env["TORCHELASTIC_RUN_ID"], env
        assert env["MASTER_ADDR"] == "127.0.0.1", env  # loopback only
    return ranks


def epoch_order(dataset, epoch=0):
    """The epoch's shuffled order of all samples (one rank sees it all; the order
    depends on (seed, epoch, N) only, not on the world size)."""
    loader = saturate.Loader(dataset, DIGITS, seed=5, rank=0, world_size=1)
    loader.set_epoch(epoch)
    (batch,) = list(loader)
    return batch["label"].tolist()


def flat(batches):
    return [x for b in batches for x in b]


@pytest.mark.parametrize("nproc", [2, 3])
def test_ranks_get_equal_disjoint_shards_from_torch_distributed(digits, tmp_path, nproc):
    out = tmp_path / "out"
    out.mkdir()
    run_job(tmp_path, nproc, digits, str(out), "shard")
    ranks = read(out, "shard", nproc)
    order = epoch_order(digits)
    assert sorted(order) == list(range(DIGITS))
    per_pad, per_drop = -(-DIGITS // nproc), DIGITS // nproc
    assert DIGITS % nproc != 0

    # Padding (DistributedSampler's default): the order, extended by its own start,
    # dealt round-robin; every sample seen, only the padding seen twice.
    padded = [order[p % DIGITS] for p in range(per_pad * nproc)]
    pads = [flat(r["pad"]["batches"]) for r in ranks]
    for r, info in enumerate(ranks):
        assert info["pad"]["rank"] == r and info["pad"]["world_size"] == nproc
        assert pads[r] == padded[r::nproc]
        assert info["pad"]["len"] == len(info["pad"]["batches"]) == -(-per_pad // 8)
        assert info["pad"]["batch_counts"] == [info["pad"]["len"]] * nproc  # all_gather'd
    assert set(flat(pads)) == set(range(DIGITS))
    repeats = len(flat(pads)) - DIGITS
    assert repeats == per_pad * nproc - DIGITS > 0
    seen_twice = [s for s in range(DIGITS) if flat(pads).count(s) > 1]
    assert seen_twice == sorted(order[:repeats])  # only the padding, once more each

    # drop_uneven: disjoint, and exactly the last N mod W samples of the order are left out.
    drops = [flat(r["drop"]["batches"]) for r in ranks]
    for r, info in enumerate(ranks):
        assert drops[r] == order[:per_drop * nproc][r::nproc]
        assert info["drop"]["len"] == len(info["drop"]["batches"]) == -(-per_drop // 8)
        assert info["drop"]["batch_counts"] == [info["drop"]["len"]] * nproc
    assert len(flat(drops)) == len(set(flat(drops))) == per_drop * nproc
    assert set(range(DIGITS)) - set(flat(drops)) == set(order[per_drop * nproc:])


def wait_for_files(paths, proc, log, timeout=TIMEOUT):
    deadline = time.monotonic() + timeout
    while not all(p.exists() for p in paths):
        assert proc.poll() is None, f"torchrun exit {proc.returncode}\n{log.read_text()[-4000:]}"
        assert time.monotonic() < deadline, f"no {paths} in {timeout} s\n{log.read_text()[-4000:]}"
        time.sleep(0.2)


def test_each_rank_resumes_exactly_after_the_job_is_stopped(digits, tmp_path):
    nproc, stop_after = 2, 4  # 7 batches per rank per epoch; run epochs 0 and 1
    full, part = tmp_path / "full", tmp_path / "part"
    full.mkdir(), part.mkdir()
    run_job(tmp_path, nproc, digits, str(full), "resume")
    uninterrupted = read(full, "full", nproc)
    assert all(len(r["batches"]) == 14 for r in uninterrupted)

    # The first job: every rank saves its state after K batches; then the job is
    # stopped from outside (SIGTERM to torchrun, which ends its ranks), as a
    # preempted job is.
    proc, log = start(tmp_path, nproc, digits, str(part), "resume", "--stop-after", str(stop_after))
    try:
        wait_for_files([part / f"stopped-rank{r}.json" for r in range(nproc)], proc, log)
        proc.send_signal(signal.SIGTERM)
        rc = finish(proc, timeout=60)
    finally:
        kill_group(proc)
    assert rc != 0, "the stopped job cannot have succeeded"
    first = read(part, "stopped", nproc)

    # The second job, same world size: each rank restores its own state.
    run_job(tmp_path, nproc, digits, str(part), "resume", "--restore")
    rest = read(part, "restored", nproc)
    for r in range(nproc):
        assert rest[r]["rank_of_loader"] == r and rest[r]["world_of_loader"] == nproc
        assert len(first[r]["batches"]) == stop_after
        assert first[r]["batches"] + rest[r]["batches"] == uninterrupted[r]["batches"], f"rank {r}"
    # and the ranks together still cover the data disjointly but for the padding
    epoch0 = [flat(u["batches"][:7]) for u in uninterrupted]
    assert set(epoch0[0]) | set(epoch0[1]) == set(range(DIGITS))
