"""state_dict() / load_state_dict(): exact resume, across a process restart."""

import json
import random

import pytest

import saturate

from conftest import HERE, read_labels, run_python

WORKER = f"{HERE}/resume_worker.py"


def run_worker(dataset, out, *args):
    result = run_python([WORKER, dataset, str(out), *args])
    assert result.returncode == 0, result.stderr
    with open(out) as f:
        return json.load(f)


def test_resume_in_a_new_process_gives_the_same_bytes(photos, tmp_path):
    full = run_worker(photos, tmp_path / "full.json")["digests"]
    assert len(full) == 2 * 8  # 36 photos in batches of 5, two epochs
    # Stop points spread over both epochs, including an epoch's last batch.
    for stop in sorted({1, 8, 9, *random.Random(0).sample(range(2, len(full)), 3)}):
        first = run_worker(photos, tmp_path / "first.json", "--stop-after", str(stop))
        state = tmp_path / "state.json"
        state.write_text(json.dumps(first["state"]))
        rest = run_worker(photos, tmp_path / "rest.json", "--state", str(state))["digests"]
        assert first["digests"] + rest == full, f"resume after batch {stop}"


def test_state_dict_is_plain_data(digits):
    loader = saturate.Loader(digits, 10, seed=3)
    it = iter(loader)
    next(it), next(it)
    state = loader.state_dict()
    assert state["epoch"] == 0 and state["batches_done"] == 2
    assert json.loads(json.dumps(state)) == state


def test_state_from_other_options_is_refused(digits):
    state = saturate.Loader(digits, 10, seed=3).state_dict()
    with pytest.raises(saturate.errors.InvalidArgumentError, match="seed"):
        saturate.Loader(digits, 10, seed=4).load_state_dict(state)
    state["batches_done"] = 99  # past the epoch's 11 batches
    with pytest.raises(ValueError, match="past the end"):
        saturate.Loader(digits, 20, seed=3).load_state_dict(state)


def test_elastic_resume_reads_every_sample_once(digits):
    """Saved by 2 ranks at batch 8, resumed by 3 ranks at batch 5 (a job restarted
    on another node count): the epoch's samples are each read once."""
    two = [saturate.Loader(digits, 8, seed=3, rank=r, world_size=2, framework="numpy")
           for r in range(2)]
    seen = sum((read_labels(loader, 3) for loader in two), [])  # 48 of 101
    state = two[1].state_dict()
    three = [saturate.Loader(digits, 5, seed=3, rank=r, world_size=3, framework="numpy")
             for r in range(3)]
    for loader in three:
        loader.load_state_dict(state)
        assert loader.state_dict()["epoch_start_sample"] == 48
    rest = sum((read_labels(loader) for loader in three), [])  # 53, padded to 54
    assert len(rest) == len(set(rest)) == 54
    assert sorted(set(seen + rest)) == list(range(101))
    assert len(set(seen) & set(rest)) == 1  # the padding: the order's first sample again
    assert all(loader.epoch == 1 for loader in three)  # the next epoch is whole again
    assert len(read_labels(three[0])) == 34
