"""saturate.dist_checkpoint: sharded checkpoints from every rank (issue 30).

- pure functions: replicated-tensor ownership, box intersection, DTensor's chunk rule,
  and that re-cutting any N-way split at M ranks covers every element exactly once;
- one process (this interpreter, torch 1.13 or 2): save/load, retention, a rank directory
  committed without its global manifest (a crash between the two phases) and corrupt
  files fall back to the previous checkpoint;
- torchrun (torch >= 2, gloo on CPU): save at 2 ranks (DTensor sharded and replicated,
  ShardedTensor, Shard pieces, plain tensors, numpy, per-rank values), load at 3 ranks and whole in this
  process, every tensor compared; each rank's spans in the run directory; DCP round trips
  with torch's own dcp.load/dcp.save; kill -9 of a random rank at random moments of a
  save loop, after which the newest checkpoint loads and holds exactly its step's values.
"""

import json
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from saturate import dist_checkpoint as dc  # noqa: E402
from saturate.checkpoint import CheckpointWarning  # noqa: E402
from saturate.errors import CorruptionError, InvalidArgumentError  # noqa: E402

from conftest import (HERE, kill_group, saturate_cmd, start_torchrun as start,  # noqa: E402
                      torch2_python, torchrun_env, torchrun_job)

WORKER = os.path.join(HERE, "checkpoint_dist_worker.py")
GUARD_WORKER = os.path.join(HERE, "checkpoint_guard_worker.py")
TIMEOUT = 120
sys.path.insert(0, HERE)
import checkpoint_dist_worker as W  # noqa: E402
import checkpoint_guard_worker as GW  # noqa: E402
from test_checkpoint import slow_copies, torch2  # noqa: E402,F401 (torch2: a fixture)


# ---- pure functions ----


def test_assign_owners_writes_each_replicated_tensor_once_balanced_and_deterministic():
    sizes = [("a", 100), ("b", 60), ("c", 50), ("d", 10), ("e", 0)]
    owners = dc.assign_owners(sizes, 2)
    assert sorted(owners) == ["a", "b", "c", "d", "e"]
    assert owners == dc.assign_owners(list(reversed(sizes)), 2)  # order of discovery is irrelevant
    load = [sum(n for k, n in sizes if owners[k] == r) for r in range(2)]
    assert load == [110, 110]
    assert set(dc.assign_owners(sizes, 1).values()) == {0}
    assert len(set(dc.assign_owners([(str(i), 8) for i in range(4)], 4).values())) == 4
    with pytest.raises(InvalidArgumentError):
        dc.assign_owners(sizes, 0)


def test_intersect_boxes():
    assert dc.intersect([0, 0], [4, 4], [2, 1], [4, 2]) == ((2, 1), (2, 2))
    assert dc.intersect([0], [4], [4], [2]) is None  # touching edges share nothing
    assert dc.intersect([0, 0], [4, 4], [1, 4], [1, 1]) is None
    assert dc.intersect([], [], [], []) == ((), ())  # scalars
    with pytest.raises(InvalidArgumentError):
        dc.intersect([0], [1], [0, 0], [1, 1])


def test_shard_extent_follows_torch_chunk():
    for n, k in [(10, 3), (10, 4), (3, 4), (0, 2), (8, 2)]:
        chunks = torch.arange(n).chunk(k) if n else ()
        for c in range(k):
            off, lens = dc.shard_extent([n, 5], [k], [c], [("shard", 0)])
            want = chunks[c] if c < len(chunks) else torch.arange(0)
            assert lens == [len(want), 5], (n, k, c)
            if len(want):
                assert off == [int(want[0]), 0]
    # 2-D mesh: rows over mesh dim 0, replicated over mesh dim 1; then both on dim 0.
    assert dc.shard_extent([8, 6], [2, 3], [1, 2], [("shard", 0), ("replicate",)]) == ([4, 0], [4, 6])
    assert dc.shard_extent([8], [2, 2], [1, 1], [("shard", 0), ("shard", 0)]) == ([6], [2])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_resharding_any_split_covers_every_element_once(seed):
    rng = random.Random(seed)
    shape = [rng.randint(1, 9) for _ in range(rng.randint(1, 3))]
    n, m = rng.randint(1, 5), rng.randint(1, 5)
    src_dim, dst_dim = rng.randrange(len(shape)), rng.randrange(len(shape))
    saved = [dc.shard_extent(shape, [n], [r], [("shard", src_dim)]) for r in range(n)]
    full = torch.arange(int(np.prod(shape))).reshape(shape)
    for r in range(m):
        off, lens = dc.shard_extent(shape, [m], [r], [("shard", dst_dim)])
        target = torch.full(lens, -1, dtype=full.dtype)
        entry = {"shape": shape, "dtype": "int64", "kind": "tensor",
                 "shards": [{"offsets": o, "lengths": ln, "piece": full[tuple(
                     slice(a, a + b) for a, b in zip(o, ln))]} for o, ln in saved if all(ln)]}

        class Files:
            def piece(self, s, dtype, kind):
                return s["piece"]

        dc._fill(target, off, entry, Files(), "t")
        assert torch.equal(target, full[tuple(slice(a, a + b) for a, b in zip(off, lens))])


# ---- one process ----


def state_at(step):
    return {"w": torch.arange(12, dtype=torch.float32).reshape(3, 4) + step,
            "p": torch.nn.Parameter(torch.ones(2) * step, requires_grad=True),
            "np": np.full(3, step, np.int32), "piece": dc.Shard(torch.full((2, 2), step), [0, 0], [2, 2]),
            "meta": {"step": step, "name": "x"}}


def test_one_process_save_load_retention_and_in_place(tmp_path):
    d = str(tmp_path / "ck")
    assert dc.load(d) is None
    with dc.DistCheckpointer(d, keep=2) as ckpt:
        assert (ckpt.rank, ckpt.world_size) == (0, 1)
        for step in (1, 2, 3):
            assert ckpt.save(state_at(step), step)
        ckpt.wait()
        assert ckpt.stats()["durable_ns"] > 0
    assert [s for s, _ in dc.list_checkpoints(d)] == [3, 2]
    assert sorted(os.listdir(tmp_path / "ck" / "rank-0")) == ["step-2", "step-3"]
    state, info = dc.load(d, info=True)
    assert info["step"] == 3 and info["world_size"] == 1
    assert torch.equal(state["w"], state_at(3)["w"]) and state["meta"] == {"step": 3, "name": "x"}
    assert isinstance(state["p"], torch.nn.Parameter) and state["p"].requires_grad
    assert state["np"].dtype == np.int32 and state["np"].tolist() == [3, 3, 3]
    assert torch.equal(state["piece"], torch.full((2, 2), 3.0))  # a Shard comes back whole
    target = {"w": torch.zeros(3, 4), "np": np.zeros(3, np.int32)}
    out = dc.load(d, target, step=2)
    assert out["w"] is target["w"] and torch.equal(target["w"], state_at(2)["w"])
    assert target["np"].tolist() == [2, 2, 2]
    with pytest.raises(InvalidArgumentError, match="shape"):
        dc.load(d, {"w": torch.zeros(4, 3)})


def test_a_crash_between_the_phases_or_corrupt_files_fall_back(tmp_path):
    d = str(tmp_path / "ck")
    with dc.DistCheckpointer(d, keep=5) as ckpt:
        for step in (1, 2):
            ckpt.save(state_at(step), step)
    # Phase 1 of step 3 done (the rank's files committed), phase 2 not (no manifest).
    os.unlink(dc._manifest_path(d, 2))
    assert dc.load(d, info=True)[1]["step"] == 1
    with dc.DistCheckpointer(d, keep=5) as ckpt:
        ckpt.save(state_at(4), 4)
    tensors = tmp_path / "ck" / "rank-0" / "step-4" / "tensors.bin"
    data = bytearray(tensors.read_bytes())
    data[0] ^= 0xFF
    tensors.write_bytes(bytes(data))
    with pytest.warns(CheckpointWarning, match="step-4"):
        state, info = dc.load(d, info=True)
    assert info["step"] == 1 and torch.equal(state["w"], state_at(1)["w"])
    (tmp_path / "ck" / "step-1.manifest.json").write_text("{}")
    with pytest.warns(CheckpointWarning), pytest.raises(CorruptionError, match="verifies"):
        dc.load(d)


def test_pieces_that_do_not_tile_a_tensor_fail_the_commit_not_the_previous_checkpoint(tmp_path):
    d = str(tmp_path / "ck")
    ckpt = dc.DistCheckpointer(d, keep=3)
    ckpt.save(state_at(1), 1)
    ckpt.wait()
    ckpt.save({"half": dc.Shard(torch.ones(1, 2), [0, 0], [2, 2])}, 2)  # 2 of 4 elements
    with pytest.raises(CorruptionError, match="half: the ranks' pieces hold 2 of 4"):
        ckpt.wait()
    ckpt.close()
    assert [s for s, _ in dc.list_checkpoints(d)] == [1]
    assert dc.load(d, info=True)[1]["step"] == 1


def test_one_process_guarded_save_holds_the_values_before_the_step(tmp_path, monkeypatch, torch2):
    """save(guard=opt): the guarded pieces (a parameter, a Shard of one) are
    copied after save returns; the step right after waits for them; the buffer
    changed after save is saved as it was."""
    if not torch2:
        return
    done = slow_copies(monkeypatch, 0.3)
    w = torch.nn.Parameter(torch.arange(12.0).reshape(3, 4))
    piece = torch.nn.Parameter(torch.ones(2, 2))
    buf = torch.zeros(3)
    opt = torch.optim.SGD([w, piece], lr=1.0)
    d = str(tmp_path / "ck")
    with dc.DistCheckpointer(d) as ckpt:
        state = {"w": w, "piece": dc.Shard(piece, [0, 0], [2, 2]), "buf": buf, "step": 1}
        assert ckpt.save(state, 1, guard=opt)
        assert not done, "save waited for the guarded copy"
        buf.add_(5)
        w.grad, piece.grad = torch.ones_like(w), torch.ones_like(piece)
        opt.step()
        assert done
        s = ckpt.stats()
        assert s["guard_wait_ns"] >= 0.1e9 and s["deferred_bytes"] == (12 + 4) * 4, s
        assert s["blocked_ns"] == s["blocking_ns"] + s["guard_wait_ns"]
    back = dc.load(d)
    assert torch.equal(back["w"], torch.arange(12.0).reshape(3, 4))
    assert torch.equal(back["piece"], torch.ones(2, 2)) and torch.equal(back["buf"], torch.zeros(3))
    assert torch.equal(w.detach(), torch.arange(12.0).reshape(3, 4) - 1)  # the step did run


# ---- torchrun ----


def torchrun_cmd(nproc, *args):
    return torchrun_job(nproc, WORKER, *args)


def run(tmp_path, cmd):
    proc, log = start(tmp_path, cmd)
    try:
        rc = proc.wait(timeout=TIMEOUT)
    finally:
        kill_group(proc)
    assert rc == 0, f"exit {rc}\n{log.read_text()[-4000:]}"


def test_save_at_2_ranks_load_at_3_and_whole_spans_and_dcp_round_trips(tmp_path):
    d, out, runs = tmp_path / "ck", tmp_path / "out", tmp_path / "run"
    out.mkdir()
    run(tmp_path, torchrun_cmd(2, "save", str(d), str(out), "--steps", "3", "--trace", str(runs)))
    assert [s for s, _ in dc.list_checkpoints(str(d))] == [3, 2]  # keep=2
    manifest = json.loads((d / "step-3.manifest.json").read_text())
    shards = {k: [s["rank"] for s in v["shards"]] for k, v in manifest["tensors"].items()}
    assert shards["model/dt"] == [0, 1] and sorted(shards["model/emb"]) == [0, 1]
    assert sorted(shards["model/st"]) == [0, 1]
    for name in ("bias", "half", "param", "np", "model/dt_rep"):
        assert len(shards[name]) == 1, shards  # replicated: written by one rank
    assert {r for v in shards.values() for r in v} == {0, 1}  # and not all by rank 0

    # Resharded to 3 ranks: each rank's pieces compared in the worker.
    run(tmp_path, torchrun_cmd(3, "load", str(d), str(out)))
    loaded = [json.loads((out / f"load-rank{r}.json").read_text()) for r in range(3)]
    assert [x["step"] for x in loaded] == [3, 3, 3] and loaded[0]["saved_world"] == 2
    assert [x["note"] for x in loaded] == ["rank0", "rank1", "rank0"]  # rank 2 gets rank 0's
    assert all(len(x["checked"]) == 8 for x in loaded)

    # Whole, in this process (evaluation): every tensor at its global shape.
    state = dc.load(str(d), rank=1)
    exp = W.expected(3)
    flat = {"model/dt": state["model"]["dt"], "model/dt_rep": state["model"]["dt_rep"],
            "model/emb": state["model"]["emb"], "model/st": state["model"]["st"], "bias": state["bias"], "half": state["half"],
            "param": state["param"], "np": state["np"]}
    for name, want in exp.items():
        got = flat[name]
        if isinstance(want, np.ndarray):
            assert got.dtype == want.dtype and np.array_equal(got, want), name
        else:
            assert got.dtype == want.dtype and torch.equal(got, want), name
    assert state["note"] == "rank1" and state["step"] == 3

    # Spans per rank: rank 0's commit thread shows how long it waited for each rank.
    for r in range(2):
        names = set()
        for f in (runs / f"rank-{r}").glob("spans-*.jsonl"):
            lines = [json.loads(x) for x in f.read_text().splitlines()]
            assert lines[0]["rank"]["rank"] == r
            names |= {x.get("name") for x in lines}
        assert {"checkpoint_save", "checkpoint_snapshot", "checkpoint_write"} <= names, names
        if r == 0:
            assert {"checkpoint_wait_rank0", "checkpoint_wait_rank1", "checkpoint_commit"} <= names

    # DCP: saturate -> DCP read by torch's dcp.load (whole with to_dcp, and sharded: the 3
    # ranks' loaded DTensors passed to dcp.save); dcp.save (1 and 2 ranks) -> saturate.
    assert (out / "dcp-from-load" / ".metadata").exists()
    r = subprocess.run([torch2_python(), WORKER, "dcp", str(d), str(out)], env=torchrun_env(tmp_path),
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert json.loads((out / "dcp.json").read_text()) == {"to_dcp_step": 3, "from_dcp_tensors": 3,
                                                         "from_sharded_dcp": 3}


def wait_for(paths, proc, log, timeout=TIMEOUT):
    deadline = time.monotonic() + timeout
    while not all(os.path.exists(p) for p in paths):
        assert proc.poll() is None, f"exit {proc.returncode}\n{log.read_text()[-4000:]}"
        assert time.monotonic() < deadline, log.read_text()[-4000:]
        time.sleep(0.02)


def test_kill_9_of_a_rank_mid_save_leaves_a_loadable_previous_checkpoint(tmp_path):
    seed = int(os.environ.get("SATURATE_KILL_SEED", random.randrange(1 << 30)))
    print(f"kill seed {seed} (SATURATE_KILL_SEED={seed} repeats it)")
    rng = random.Random(seed)
    scale = 20000  # model/dt: 200000 x 6 float32, 4.8 MB over the ranks per save
    for trial in range(2):
        d, out = tmp_path / f"ck{trial}", tmp_path / f"out{trial}"
        out.mkdir()
        proc, log = start(tmp_path, torchrun_cmd(2, "loop", str(d), str(out), "--scale",
                                                 str(scale)))
        try:
            wait_for([out / "first-rank0.json", out / "first-rank1.json", out / "pid-rank0.json",
                      out / "pid-rank1.json"], proc, log)
            victim = rng.randrange(2)
            delay = rng.uniform(0.0, 0.4)
            time.sleep(delay)
            pid = json.loads((out / f"pid-rank{victim}.json").read_text())["pid"]
            os.kill(pid, signal.SIGKILL)
            proc.wait(timeout=TIMEOUT)
        finally:
            kill_group(proc)
        steps = [s for s, _ in dc.list_checkpoints(str(d))]
        left = sorted(f"{r}/{x}" for r in os.listdir(d) if r.startswith("rank-")
                      for x in os.listdir(d / r) if x != f"step-{steps[0]}")
        print(f"trial {trial}: killed rank {victim} after {delay:.3f} s; manifests {steps}; "
              f"rank directories besides the newest one's: {left}")
        state, info = dc.load(str(d), info=True)  # the newest verifies, whatever was cut
        assert info["step"] == steps[0] >= 1, (trial, victim, delay, steps)
        exp = W.expected(info["step"], scale)
        assert torch.equal(state["model"]["dt"], exp["model/dt"]), (trial, victim, delay)
        assert torch.equal(state["model"]["emb"], exp["model/emb"])
        assert torch.equal(state["half"], exp["half"]) and np.array_equal(state["np"], exp["np"])
        for step in steps[1:]:  # the older kept one verifies too
            assert dc.load(str(d), step=step, info=True)[1]["step"] == step


def test_doctor_names_the_rank_each_save_waited_for(tmp_path):
    """saturate doctor over a 2-rank job whose rank 1 snapshots 300 ms slower:
    its checkpoint finding names rank 1 per save, with rank 0's wait at the
    commit barrier, in findings.json and report.html."""
    run_dir, out = tmp_path / "run", tmp_path / "out"
    out.mkdir()
    job = torchrun_cmd(2, "save", str(tmp_path / "ck"), str(out), "--steps", "3", "--slow-rank",
                       "1", "--slow-ms", "300")
    r = subprocess.run([*saturate_cmd(), "doctor", "--no-gpu", "--out", str(run_dir), "--", *job],
                       env=torchrun_env(tmp_path), capture_output=True, text=True,
                       timeout=TIMEOUT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    report = json.loads((run_dir / "findings.json").read_text())
    (finding,) = [f for f in report["findings"] if any(
        e["key"] == "checkpoint_slowest_rank" for e in f["evidence"])]
    assert finding["cause"] == "checkpoint_stall"
    assert "rank 1 was the slowest in 3 of 3 saves" in finding["title"], finding["title"]
    assert "rank 1 was the slowest" in r.stdout
    evidence = {e["key"]: e for e in finding["evidence"]}
    assert evidence["checkpoint_slowest_rank"]["value"] == 1
    assert 200 <= evidence["checkpoint_others_waited_ms_per_save"]["value"] <= 2000, evidence
    for step in (1, 2, 3):
        line = evidence[f"save_{step}_others_waited_ms"]
        assert line["unit"] == "ms" and line["value"] >= 200, line
        assert line["text"].startswith(f"save {step}: rank 1 snapshotted "), line
        assert "rank 0 waited" in line["text"] and "at the commit barrier" in line["text"]
    html = (run_dir / "report.html").read_text()
    assert evidence["save_2_others_waited_ms"]["text"] in html


def test_torchrun_2_ranks_guarded_saves_hold_each_steps_values(tmp_path):
    """2 ranks, an FSDP2-like DTensor parameter, save(guard=opt) and the step
    right after (the guarded copies delayed 200 ms): every kept checkpoint
    holds its save's values on both ranks' pieces, and each rank's step waited."""
    d, out = tmp_path / "ck", tmp_path / "out"
    out.mkdir()
    run(tmp_path, torchrun_job(2, GUARD_WORKER, str(d), str(out), "--steps", "3"))
    assert [s for s, _ in dc.list_checkpoints(str(d))] == [3, 2, 1]
    for step in (1, 2, 3):
        state = dc.load(str(d), step=step)
        want = GW.expected(step, 2)
        assert torch.equal(state["model"]["w"], want["model/w"]), step
        assert torch.equal(state["model"]["b"], want["model/b"]), step
        assert torch.equal(state["model"]["buf"], want["model/buf"]), step
        assert state["step"] == step
    for r in range(2):
        got = json.loads((out / f"guard-rank{r}.json").read_text())
        assert all(n > 0 for n in got["deferred_bytes"]), got  # each rank's w shard at least
        assert all(ns >= 50e6 for ns in got["guard_wait_ns"]), got
